// Strings as store values and back, for the bootstrap tests.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mimatrix::test {

inline std::vector<std::byte> bytes(const std::string& s) {
  std::vector<std::byte> v;
  for (char c : s) v.push_back(static_cast<std::byte>(c));
  return v;
}

inline std::string text(const std::vector<std::byte>& v) {
  std::string s;
  for (std::byte b : v) s += static_cast<char>(b);
  return s;
}

}  // namespace mimatrix::test
