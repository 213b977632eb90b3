// The (dtype, op) table behind host_kernels_for: its 40 kernels are compiled where this
// is (every unit when header-only, once with separate compilation).
#pragma once

#include <array>
#include <string>

#include "mimatrix/core/error.hpp"
#include "mimatrix/reduce/host_kernels.hpp"

namespace mimatrix::reduce {

namespace detail {
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

MIMATRIX_DECL const host_kernels& host_kernels_for(dtype type, op_kind op) {
  const auto t = static_cast<std::size_t>(type), o = static_cast<std::size_t>(op);
  if (t >= detail::every_dtype.size())
    throw error(errc::invalid_argument, "reduce: dtype value " + std::to_string(t) + " is not a mimatrix::dtype");
  if (o >= detail::every_op.size())
    throw error(errc::invalid_argument, "reduce: op value " + std::to_string(o) + " is not a mimatrix::reduce::op_kind");
  return detail::kernel_table[t * detail::every_op.size() + o];
}

}  // namespace mimatrix::reduce
