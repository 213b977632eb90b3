// What a c10d call's tensors are to mimatrix: a dtype and a count, or the reason the
// library cannot take them, named by the call.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::torch_backend {

/// The mimatrix dtype that reduces `t` (none: the library has no such arithmetic).
inline std::optional<dtype> reducing_dtype(at::ScalarType t) {
  switch (t) {
    case at::kChar: return dtype::int8;
    case at::kByte: return dtype::uint8;
    case at::kBool: return dtype::uint8;  // 0 and 1: min, max and prod stay bools
    case at::kInt: return dtype::int32;
    case at::kLong: return dtype::int64;
    case at::kHalf: return dtype::float16;
    case at::kBFloat16: return dtype::bfloat16;
    case at::kFloat: return dtype::float32;
    case at::kDouble: return dtype::float64;
    default: return std::nullopt;
  }
}

/// c10d's reduction as mimatrix's; `call` names the call in the error.
inline reduce::op_kind op_of(const c10d::ReduceOp& op, at::ScalarType type, int rank, const std::string& call) {
  const auto refuse = [&](const std::string& what) -> reduce::op_kind {
    throw error(errc::invalid_argument, "rank " + std::to_string(rank) + ", " + call + ": " + what);
  };
  if (type == at::kBool && (op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG))
    return refuse("SUM and AVG of bool tensors are not bools; use MIN (all), MAX (any) or PRODUCT");
  switch (op) {
    case c10d::ReduceOp::SUM: return reduce::op_kind::sum;
    case c10d::ReduceOp::AVG: return reduce::op_kind::avg;
    case c10d::ReduceOp::PRODUCT: return reduce::op_kind::prod;
    case c10d::ReduceOp::MIN: return reduce::op_kind::min;
    case c10d::ReduceOp::MAX: return reduce::op_kind::max;
    case c10d::ReduceOp::BAND: return refuse("mimatrix has no ReduceOp.BAND");
    case c10d::ReduceOp::BOR: return refuse("mimatrix has no ReduceOp.BOR");
    case c10d::ReduceOp::BXOR: return refuse("mimatrix has no ReduceOp.BXOR");
    case c10d::ReduceOp::PREMUL_SUM: return refuse("mimatrix has no ReduceOp.PREMUL_SUM");
    default: return refuse("an unknown ReduceOp");
  }
}

/// A tensor as a call reads or writes it: where, how many elements and which dtype.
struct buffer {
  void* data = nullptr;
  std::size_t count = 0;
  dtype type = dtype::uint8;
};

/// Why `t` cannot serve `call` on `rank`, as Gloo refuses: not on the CPU, not dense or not
/// contiguous.
inline void check_tensor(const at::Tensor& t, int rank, const std::string& call) {
  const auto refuse = [&](const std::string& what) {
    throw error(errc::invalid_argument, "rank " + std::to_string(rank) + ", " + call + ": " + what);
  };
  if (!t.device().is_cpu())
    refuse("a tensor on " + t.device().str() + "; this build of the mimatrix backend takes CPU tensors");
  if (t.is_sparse()) refuse("a sparse tensor; mimatrix takes dense tensors");
  if (!t.is_contiguous()) refuse("a tensor that is not contiguous; call .contiguous() first (as Gloo requires)");
}

/// `t` for a call that reduces it: its dtype must be one the library reduces.
inline buffer reduced(const at::Tensor& t, int rank, const std::string& call) {
  check_tensor(t, rank, call);
  const auto type = reducing_dtype(t.scalar_type());
  if (!type)
    throw error(errc::invalid_argument, "rank " + std::to_string(rank) + ", " + call + ": " +
                                            std::string(c10::toString(t.scalar_type())) +
                                            " tensors; mimatrix reduces int8, uint8, bool, int32, int64, float16, "
                                            "bfloat16, float32 and float64");
  return {t.data_ptr(), std::size_t(t.numel()), *type};
}

/// `t` for a call that only moves it: its bytes, whatever its dtype.
inline buffer moved(const at::Tensor& t, int rank, const std::string& call) {
  check_tensor(t, rank, call);
  return {t.data_ptr(), std::size_t(t.numel()) * t.element_size(), dtype::uint8};
}

/// The one tensor of c10d's list form (one per device; CPU: exactly one).
inline const at::Tensor& single(const std::vector<at::Tensor>& list, int rank, const std::string& call) {
  if (list.size() != 1)
    throw error(errc::invalid_argument, "rank " + std::to_string(rank) + ", " + call + ": " +
                                            std::to_string(list.size()) +
                                            " tensors; the mimatrix backend takes one tensor per call (one device)");
  return list.front();
}

}  // namespace mimatrix::torch_backend
