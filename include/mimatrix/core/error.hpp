// mimatrix's one error category and the exception blocking calls throw.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

namespace mimatrix {

enum class errc : int {
  invalid_argument = 1,  // the caller passed something wrong
  mismatch,              // ranks disagree on what collective they are running
  timeout,               // a deadline passed: a peer is slow, stuck or never joined
  peer_lost,             // a peer is known to be gone
  aborted,               // the operation was cancelled, here or on another rank
  transport,             // the network layer failed
  cuda,                  // the CUDA runtime failed
};

}  // namespace mimatrix

template <>
struct std::is_error_code_enum<mimatrix::errc> : std::true_type {};

namespace mimatrix {

}  // namespace mimatrix

namespace mimatrix {

namespace detail {
class error_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "mimatrix"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::invalid_argument: return "invalid argument";
      case errc::mismatch: return "ranks disagree on the collective";
      case errc::timeout: return "timed out";
      case errc::peer_lost: return "peer lost";
      case errc::aborted: return "aborted";
      case errc::transport: return "transport error";
      case errc::cuda: return "CUDA error";
    }
    return "unknown mimatrix error";
  }
};
}  // namespace detail

inline const std::error_category& error_category() noexcept {
  static const detail::error_category_impl instance;
  return instance;
}

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// What every mimatrix failure throws. `code()` compares equal to an `errc`.
class error : public std::system_error {
 public:
  error(errc e, const std::string& what) : std::system_error(make_error_code(e), what) {}
  error(std::error_code ec, const std::string& what) : std::system_error(ec, what) {}

  /// The text it was made with: what() without the ": <code's message>" that
  /// system_error adds, for an error that wraps this one (and adds its own).
  std::string reason() const {
    std::string why = what();
    const std::string suffix = ": " + code().message();
    if (why.ends_with(suffix)) why.resize(why.size() - suffix.size());
    return why;
  }
};

/// Where a failure happened: each field is printed only when it is set.
struct error_context {
  int rank = -1;
  int peer = -1;
  std::string_view operation{};
  std::int64_t sequence = -1;
  std::int64_t step = -1;
  std::int64_t bytes = -1;
};

/// "rank 3, allreduce #12, step 4, peer 2, 4096 bytes: <what>".
inline std::string describe(const error_context& c, std::string_view what) {
  std::string s;
  auto sep = [&] { if (!s.empty()) s += ", "; };
  if (c.rank >= 0) s += "rank " + std::to_string(c.rank);
  if (!c.operation.empty()) { sep(); s += c.operation; }
  if (c.sequence >= 0) {  // "allreduce #12", or "#12" alone when the operation is unnamed
    if (c.operation.empty()) sep(); else s += ' ';
    s += '#';
    s += std::to_string(c.sequence);
  }
  if (c.step >= 0) { sep(); s += "step " + std::to_string(c.step); }
  if (c.peer >= 0) { sep(); s += "peer " + std::to_string(c.peer); }
  if (c.bytes >= 0) { sep(); s += std::to_string(c.bytes) + " bytes"; }
  if (!s.empty()) s += ": ";
  s += what;
  return s;
}

[[noreturn]] inline void throw_error(errc e, const error_context& c, std::string_view what) {
  throw error(e, describe(c, what));
}

}  // namespace mimatrix
