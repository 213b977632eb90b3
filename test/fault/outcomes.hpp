// How the failure tests' scenarios report a call's end and how the tests read it back:
// a labelled line a call ("FIRST OK", "NEXT <code> <ms>: <message>").
#pragma once

#include <chrono>
#include <string>

#include "mimatrix/bootstrap/launch.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::test {

/// "OK", or the error's code, the milliseconds the call took and its text.
template <class Call>
std::string outcome(const Call& call) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    call();
    return "OK";
  } catch (const error& e) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    return e.code().message() + " " + std::to_string(ms) + ": " + e.what();
  }
}

/// The line rank `rank` printed after `label` ("FIRST ", "NEXT ", "ASYNC "), or "".
inline std::string printed(const bootstrap::launch_result& r, int rank, const std::string& label) {
  const std::string& out = r.output[std::size_t(rank)];
  const auto at = out.find(label);
  return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
}

/// The milliseconds in "<label> <code words> <ms>: <message>".
inline long long caught_ms(const std::string& line) {
  return std::stoll(line.substr(line.find_last_of(' ', line.find(':')) + 1));
}

}  // namespace mimatrix::test
