// digest: a 64-bit FNV-1a over words and strings, for what every rank must compute
// alike (a topology's and an algorithm's parameters), so that ranks can compare them.
#pragma once

#include <cstdint>
#include <string_view>

namespace mimatrix {

/// Feeds values in a fixed order; equal sequences give equal values on every rank.
///
/// @par Thread Safety
/// A plain value.
class digest {
 public:
  constexpr digest& mix(std::uint64_t v) {
    for (int k = 0; k < 8; ++k) byte(static_cast<unsigned char>(v >> (8 * k)));
    return *this;
  }
  constexpr digest& mix(std::string_view s) {
    mix(s.size());
    for (char c : s) byte(static_cast<unsigned char>(c));
    return *this;
  }
  constexpr std::uint64_t value() const { return h_; }

 private:
  constexpr void byte(unsigned char c) { h_ = (h_ ^ c) * 1099511628211ull; }
  std::uint64_t h_ = 14695981039346656037ull;
};

}  // namespace mimatrix
