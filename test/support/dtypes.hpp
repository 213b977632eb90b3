// Runs a generic callable with the C++ type of a runtime dtype, for tests that are
// parameterized over element types.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>

#include "mimatrix/core/dtype.hpp"

namespace mimatrix {

/// gtest prints dtype parameters with this (found by ADL) instead of their bytes.
inline void PrintTo(dtype t, std::ostream* os) { *os << to_string(t); }

}  // namespace mimatrix

namespace mimatrix::test {

inline constexpr dtype all_dtypes[] = {dtype::int8,     dtype::uint8,    dtype::int32,   dtype::int64,
                                       dtype::float16, dtype::bfloat16, dtype::float32, dtype::float64};

template <class T> struct type_tag { using type = T; };

template <class F>
decltype(auto) with_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::int8: return f(type_tag<std::int8_t>{});
    case dtype::uint8: return f(type_tag<std::uint8_t>{});
    case dtype::int32: return f(type_tag<std::int32_t>{});
    case dtype::int64: return f(type_tag<std::int64_t>{});
    case dtype::float16: return f(type_tag<half>{});
    case dtype::bfloat16: return f(type_tag<bfloat16>{});
    case dtype::float32: return f(type_tag<float>{});
    case dtype::float64: return f(type_tag<double>{});
  }
  return f(type_tag<float>{});
}

/// "p3_float": a test-name suffix for (world size, dtype).
inline std::string grid_name(int p, dtype t) {
  std::string name = "p";  // appended, not concatenated: g++ 12 -O3 warns (-Wrestrict) on a temporary chain
  name += std::to_string(p);
  name += '_';
  name += to_string(t);
  return name;
}

}  // namespace mimatrix::test
