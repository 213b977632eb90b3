// Counters in the rendezvous stores: add() keeps them as decimal text, so that get() of a
// counter reads like any other value (torch's stores do the same).
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

namespace mimatrix::bootstrap {

namespace detail {

inline std::vector<std::byte> counter_bytes(std::int64_t v) {
  const std::string s = std::to_string(v);
  std::vector<std::byte> out(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

/// The counter in `value` (empty: 0), or false when it is not a decimal int64.
inline bool parse_counter(const std::vector<std::byte>& value, std::int64_t& out) {
  out = 0;
  if (value.empty()) return true;
  std::string s(value.size(), '\0');
  for (std::size_t i = 0; i < value.size(); ++i) s[i] = static_cast<char>(value[i]);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

}  // namespace detail

}  // namespace mimatrix::bootstrap
