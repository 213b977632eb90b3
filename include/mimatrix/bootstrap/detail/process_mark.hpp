// Who a process is, in terms another process on the same host can check without its
// cooperation: a killed peer on this host is then noticed in milliseconds, not at the
// deadline (a shared-memory provider never reports a dead peer by itself).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace mimatrix::bootstrap::detail {

struct process_mark {
  /// The boot and the pid namespace: a pid names the same process only where both match.
  std::string where;
  long pid = 0;
  /// Clock ticks after boot at which the process started: a recycled pid has another.
  std::uint64_t started = 0;

  static process_mark self() {
    process_mark m;
    m.pid = static_cast<long>(::getpid());
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    std::array<char, 128> ns{};
    const ssize_t n = ::readlink("/proc/self/ns/pid", ns.data(), ns.size() - 1);
    if (!boot.empty() && n > 0) m.where = boot + "/" + std::string(ns.data(), std::size_t(n));
    if (const auto s = start_of(m.pid)) m.started = *s;
    return m;
  }

  /// One line without newlines; "" where this process cannot be checked.
  std::string encode() const {
    if (where.empty() || started == 0) return {};
    return where + " " + std::to_string(pid) + " " + std::to_string(started);
  }
  static std::optional<process_mark> decode(std::string_view text) {
    std::istringstream in{std::string(text)};
    process_mark m;
    if (!(in >> m.where >> m.pid >> m.started) || m.pid <= 0) return std::nullopt;
    return m;
  }

  /// Whether `other` can be checked from this process: same boot, same pid namespace.
  bool can_check(const process_mark& other) const { return !where.empty() && where == other.where; }

  enum class status { running, stopped, ended };

  /// Whether the process has ended (its pid is gone, a zombie, or another process's now),
  /// is stopped (SIGSTOP, a debugger), or runs (or cannot be read: the deadline holds).
  status state() const {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    if (!stat) return status::ended;
    const std::string line((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto fields = after_name(line);
    if (!fields) return status::running;
    std::istringstream in{std::string(*fields)};
    char state = 0;
    in >> state;
    if (state == 'Z' || state == 'X' || state == 'x') return status::ended;
    if (start_in(in) != started) return status::ended;
    return state == 'T' || state == 't' ? status::stopped : status::running;
  }
  bool ended() const { return state() == status::ended; }

 private:
  /// The text after "pid (comm) ": a command name may hold spaces and parentheses.
  static std::optional<std::string_view> after_name(std::string_view line) {
    const auto close = line.rfind(')');
    if (close == std::string_view::npos || close + 2 > line.size()) return std::nullopt;
    return line.substr(close + 2);
  }
  /// Field 22 (starttime) from a stream positioned after field 3 (state).
  static std::uint64_t start_in(std::istringstream& in) {
    std::string skip;
    for (int field = 4; field < 22; ++field) in >> skip;
    std::uint64_t ticks = 0;
    in >> ticks;
    return ticks;
  }
  static std::optional<std::uint64_t> start_of(long pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    const std::string line((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto fields = after_name(line);
    if (!fields) return std::nullopt;
    std::istringstream in{std::string(*fields)};
    char state = 0;
    in >> state;
    const std::uint64_t ticks = start_in(in);
    return ticks ? std::optional(ticks) : std::nullopt;
  }
};

}  // namespace mimatrix::bootstrap::detail
