// Element types: the runtime tag `dtype`, IEEE `half` and `bfloat16`, and the
// accumulator each type reduces in (16-bit floats accumulate in float).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "mimatrix/core/config.hpp"

namespace mimatrix {

enum class dtype : std::uint8_t { int8, uint8, int32, int64, float16, bfloat16, float32, float64 };

namespace detail {
MIMATRIX_HOST_DEVICE inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
MIMATRIX_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Round-to-nearest-even float -> binary16, with subnormals, infinities and NaN.
MIMATRIX_HOST_DEVICE inline std::uint16_t float_to_half_bits(float f) {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u)  // inf stays inf, NaN stays a quiet NaN
    return static_cast<std::uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                                                      // half subnormal or zero
    if (ax < 0x33000000u) return static_cast<std::uint16_t>(sign);             // below half the smallest
    const std::uint32_t shift = 126u - (ax >> 23);
    const std::uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    std::uint32_t r = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
    if (rem > tie || (rem == tie && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = (ax - 0x38000000u) >> 13;  // rebias exponent 127 -> 15
  const std::uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // a carry into the exponent is correct
  return static_cast<std::uint16_t>(sign | r);
}

MIMATRIX_HOST_DEVICE inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return bits_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    std::uint32_t shift = 0;
    while (!(m & 0x400u)) { m <<= 1; ++shift; }
    return bits_float(sign | ((113u - shift) << 23) | ((m & 0x3ffu) << 13));
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

MIMATRIX_HOST_DEVICE inline std::uint16_t float_to_bfloat16_bits(float f) {
  std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

MIMATRIX_HOST_DEVICE inline float bfloat16_bits_to_float(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}
}  // namespace detail

/// IEEE 754 binary16. Storage only: arithmetic goes through float.
struct half {
  std::uint16_t bits = 0;
  half() = default;
  MIMATRIX_HOST_DEVICE explicit half(float f) : bits(detail::float_to_half_bits(f)) {}
  MIMATRIX_HOST_DEVICE explicit operator float() const { return detail::half_bits_to_float(bits); }
  friend bool operator==(half a, half b) { return a.bits == b.bits; }
};

/// bfloat16: the upper half of a float. Storage only: arithmetic goes through float.
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  MIMATRIX_HOST_DEVICE explicit bfloat16(float f) : bits(detail::float_to_bfloat16_bits(f)) {}
  MIMATRIX_HOST_DEVICE explicit operator float() const { return detail::bfloat16_bits_to_float(bits); }
  friend bool operator==(bfloat16 a, bfloat16 b) { return a.bits == b.bits; }
};

template <class T> struct dtype_traits;  // specialized below for each supported element

#define MIMATRIX_DTYPE(Type, Tag, Accumulator)  \
  template <> struct dtype_traits<Type> {       \
    static constexpr dtype value = dtype::Tag;  \
    using accumulator = Accumulator;            \
  };
MIMATRIX_DTYPE(std::int8_t, int8, std::int8_t)
MIMATRIX_DTYPE(std::uint8_t, uint8, std::uint8_t)
MIMATRIX_DTYPE(std::int32_t, int32, std::int32_t)
MIMATRIX_DTYPE(std::int64_t, int64, std::int64_t)
MIMATRIX_DTYPE(half, float16, float)
MIMATRIX_DTYPE(bfloat16, bfloat16, float)
MIMATRIX_DTYPE(float, float32, float)
MIMATRIX_DTYPE(double, float64, double)
#undef MIMATRIX_DTYPE

/// A type mimatrix can reduce and move.
template <class T>
concept element = requires { dtype_traits<T>::value; };

template <element T> inline constexpr dtype dtype_of = dtype_traits<T>::value;
template <element T> using accumulator_t = typename dtype_traits<T>::accumulator;

/// Element -> the type it is reduced in, and back.
template <element T> MIMATRIX_HOST_DEVICE inline accumulator_t<T> widen(T v) {
  return static_cast<accumulator_t<T>>(v);
}
template <element T> MIMATRIX_HOST_DEVICE inline T narrow(accumulator_t<T> v) {
  return static_cast<T>(v);
}

constexpr std::size_t size_of(dtype t) {
  switch (t) {
    case dtype::int8: case dtype::uint8: return 1;
    case dtype::float16: case dtype::bfloat16: return 2;
    case dtype::int32: case dtype::float32: return 4;
    case dtype::int64: case dtype::float64: return 8;
  }
  return 0;
}

/// nccl-tests' names: int8 uint8 int32 int64 half bfloat16 float double.
constexpr std::string_view to_string(dtype t) {
  switch (t) {
    case dtype::int8: return "int8";
    case dtype::uint8: return "uint8";
    case dtype::int32: return "int32";
    case dtype::int64: return "int64";
    case dtype::float16: return "half";
    case dtype::bfloat16: return "bfloat16";
    case dtype::float32: return "float";
    case dtype::float64: return "double";
  }
  return "?";
}

}  // namespace mimatrix
