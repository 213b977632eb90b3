// The (dtype, op) -> host kernel table: executors combine through these pointers, so they
// are compiled once for every operation, and runtime-typed calls find theirs by value.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/cpu.hpp"
#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::reduce {

/// One operation's kernels on host memory, over byte counts of its element type.
struct host_kernels {
  dtype type = dtype::float32;
  op_kind op = op_kind::sum;
  std::size_t elem_size = 4;
  /// dst = op(a, b); dst may be a or b.
  void (*combine)(std::byte* dst, const std::byte* a, const std::byte* b, std::size_t bytes) = nullptr;
  /// data = op.finalize(data, ranks): avg's division, nothing for the others.
  void (*finalize)(std::byte* data, std::size_t bytes, int ranks) = nullptr;
};

namespace detail {
template <operation Op>
void combine_bytes(std::byte* dst, const std::byte* a, const std::byte* b, std::size_t bytes) {
  using T = typename Op::value_type;
  cpu::combine(Op{}, reinterpret_cast<T*>(dst), reinterpret_cast<const T*>(a), reinterpret_cast<const T*>(b),
               bytes / sizeof(T));
}
template <operation Op>
void finalize_bytes(std::byte* data, std::size_t bytes, int ranks) {
  using T = typename Op::value_type;
  cpu::finalize(Op{}, reinterpret_cast<T*>(data), bytes / sizeof(T), ranks);
}
}  // namespace detail

/// The kernels of `Op`. Kernels are plain functions, so an operation carries no state.
template <operation Op>
  requires std::is_empty_v<Op> && std::is_default_constructible_v<Op>
inline constexpr host_kernels host_kernels_of{dtype_of<typename Op::value_type>, Op::kind,
                                              sizeof(typename Op::value_type), &detail::combine_bytes<Op>,
                                              &detail::finalize_bytes<Op>};

namespace detail {
inline constexpr std::array every_dtype{dtype::int8,     dtype::uint8,    dtype::int32,   dtype::int64,
                                        dtype::float16,  dtype::bfloat16, dtype::float32, dtype::float64};
inline constexpr std::array every_op{op_kind::sum, op_kind::prod, op_kind::min, op_kind::max, op_kind::avg};

template <element T>
constexpr host_kernels kernels_of_kind(op_kind op) {
  switch (op) {
    case op_kind::sum: return host_kernels_of<sum<T>>;
    case op_kind::prod: return host_kernels_of<prod<T>>;
    case op_kind::min: return host_kernels_of<min<T>>;
    case op_kind::max: return host_kernels_of<max<T>>;
    case op_kind::avg: return host_kernels_of<avg<T>>;
  }
  return {};
}

template <class T>
constexpr void fill_kernels(std::array<host_kernels, every_dtype.size() * every_op.size()>& table) {
  for (std::size_t o = 0; o < every_op.size(); ++o)
    table[static_cast<std::size_t>(dtype_of<T>) * every_op.size() + o] = kernels_of_kind<T>(every_op[o]);
}

inline constexpr auto kernel_table = [] {
  std::array<host_kernels, every_dtype.size() * every_op.size()> table{};
  fill_kernels<std::int8_t>(table);
  fill_kernels<std::uint8_t>(table);
  fill_kernels<std::int32_t>(table);
  fill_kernels<std::int64_t>(table);
  fill_kernels<half>(table);
  fill_kernels<bfloat16>(table);
  fill_kernels<float>(table);
  fill_kernels<double>(table);
  return table;
}();
}  // namespace detail

/// The kernels of (type, op); throws `invalid_argument` naming a value outside the enums
/// (a framework's cast gone wrong).
#if defined(MIMATRIX_SEPARATE_COMPILATION) && !defined(MIMATRIX_COMPILING_LIBRARY)
const host_kernels& host_kernels_for(dtype type, op_kind op);
#else
inline const host_kernels& host_kernels_for(dtype type, op_kind op) {
  const auto t = static_cast<std::size_t>(type), o = static_cast<std::size_t>(op);
  if (t >= detail::every_dtype.size())
    throw error(errc::invalid_argument, "reduce: dtype value " + std::to_string(t) + " is not a mimatrix::dtype");
  if (o >= detail::every_op.size())
    throw error(errc::invalid_argument, "reduce: op value " + std::to_string(o) + " is not a mimatrix::reduce::op_kind");
  return detail::kernel_table[t * detail::every_op.size() + o];
}
#endif

}  // namespace mimatrix::reduce
