// Element types and reduction operations of the perf harness, named as nccl-tests names them.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mimatrix::perf {

enum class dtype { int8, uint8, int32, uint32, int64, uint64, half, float32, float64, bfloat16 };
enum class redop { sum, prod, min, max, avg };

// Software half and bfloat16: storage only, arithmetic goes through float. The harness fills
// them with small integers, which both formats hold exactly.
struct half_t {
  std::uint16_t bits = 0;
  half_t() = default;
  half_t(float f) : bits(from_float(f)) {}  // NOLINT: converts like a built-in type
  operator float() const { return to_float(bits); }

  static std::uint16_t from_float(float f) {
    auto const x = std::bit_cast<std::uint32_t>(f);
    std::uint32_t const sign = (x >> 16) & 0x8000u;
    int const exp = static_cast<int>((x >> 23) & 0xff) - 127 + 15;
    std::uint32_t mant = x & 0x7fffffu;
    if (((x >> 23) & 0xff) == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
    if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);
    if (exp <= 0) {  // subnormal or zero
      if (exp < -10) return static_cast<std::uint16_t>(sign);
      mant |= 0x800000u;
      int const shift = 14 - exp;
      std::uint32_t half_mant = mant >> shift;
      std::uint32_t const rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
      if (rest > mid || (rest == mid && (half_mant & 1u))) ++half_mant;
      return static_cast<std::uint16_t>(sign | half_mant);
    }
    std::uint32_t h = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
    std::uint32_t const rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // round to nearest even
    return static_cast<std::uint16_t>(h);
  }
  static float to_float(std::uint16_t h) {
    std::uint32_t const sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      if (mant == 0) return std::bit_cast<float>(sign);
      exp = 1;
      while (!(mant & 0x400u)) { mant <<= 1; --exp; }
      mant &= 0x3ffu;
    }
    return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (mant << 13));
  }
};

struct bfloat16_t {
  std::uint16_t bits = 0;
  bfloat16_t() = default;
  bfloat16_t(float f) {  // NOLINT: converts like a built-in type
    auto const x = std::bit_cast<std::uint32_t>(f);
    bits = std::isnan(f) ? static_cast<std::uint16_t>((x >> 16) | 0x40u)
                         : static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
  operator float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
};

template <class T> struct type_tag { using type = T; };

// Calls f(type_tag<T>{}) with the C++ type of t; the one place a dtype becomes a type.
template <class F>
decltype(auto) visit(dtype t, F&& f) {
  switch (t) {
    case dtype::int8: return f(type_tag<std::int8_t>{});
    case dtype::uint8: return f(type_tag<std::uint8_t>{});
    case dtype::int32: return f(type_tag<std::int32_t>{});
    case dtype::uint32: return f(type_tag<std::uint32_t>{});
    case dtype::int64: return f(type_tag<std::int64_t>{});
    case dtype::uint64: return f(type_tag<std::uint64_t>{});
    case dtype::half: return f(type_tag<half_t>{});
    case dtype::float32: return f(type_tag<float>{});
    case dtype::float64: return f(type_tag<double>{});
    case dtype::bfloat16: return f(type_tag<bfloat16_t>{});
  }
  return f(type_tag<float>{});
}

inline constexpr std::array<std::string_view, 10> dtype_names{
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"};
inline constexpr std::array<std::string_view, 5> redop_names{"sum", "prod", "min", "max", "avg"};

inline std::string_view name(dtype t) { return dtype_names[static_cast<std::size_t>(t)]; }
inline std::string_view name(redop o) { return redop_names[static_cast<std::size_t>(o)]; }

inline std::size_t size_of(dtype t) {
  return visit(t, []<class T>(type_tag<T>) { return sizeof(T); });
}

inline std::optional<dtype> parse_dtype(std::string_view s) {
  for (std::size_t i = 0; i < dtype_names.size(); ++i)
    if (dtype_names[i] == s) return static_cast<dtype>(i);
  // nccl-tests' older spellings
  if (s == "char") return dtype::int8;
  if (s == "int") return dtype::int32;
  if (s == "float16") return dtype::half;
  return std::nullopt;
}

inline std::optional<redop> parse_redop(std::string_view s) {
  for (std::size_t i = 0; i < redop_names.size(); ++i)
    if (redop_names[i] == s) return static_cast<redop>(i);
  return std::nullopt;
}

}  // namespace mimatrix::perf
