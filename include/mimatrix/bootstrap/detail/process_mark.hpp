// Who a process is, in terms another process on the same host can check without its
// cooperation: a killed peer on this host is then noticed in milliseconds, not at the
// deadline (a shared-memory provider never reports a dead peer by itself).
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
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
    // Hosts emulated on one machine (mimatrix-run --hosts) cannot see each other's
    // processes, as real ones cannot: what a rank on another host relies on is tested here.
    if (const char* host = std::getenv("MIMATRIX_HOST_ID"); host && *host && !m.where.empty()) {
      m.where += "/host:";
      for (const char* c = host; *c; ++c) m.where += std::isspace(static_cast<unsigned char>(*c)) ? '_' : *c;
    }
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
    const auto text = stat_text(pid);
    if (!text) return status::ended;
    const auto s = parse(*text);
    if (!s) return status::running;
    if (s->state == 'Z' || s->state == 'X' || s->state == 'x' || s->started != started) return status::ended;
    return s->state == 'T' || s->state == 't' ? status::stopped : status::running;
  }
  bool ended() const { return state() == status::ended; }

  /// When process `pid` started, in clock ticks after boot (/proc/<pid>/stat field 22);
  /// none when there is no such process (or it cannot be read).
  static std::optional<std::uint64_t> start_of(long pid) {
    const auto text = stat_text(pid);
    const auto s = text ? parse(*text) : std::nullopt;
    return s && s->started ? std::optional(s->started) : std::nullopt;
  }

 private:
  struct stat_fields {
    char state;             // field 3
    std::uint64_t started;  // field 22, starttime
  };
  /// The text of /proc/<pid>/stat; none when the process is gone: the file does not open,
  /// or the process exited between open and read, which then fails with ESRCH (a stream
  /// would throw from its buffer there). Another read error gives empty text.
  static std::optional<std::string> stat_text(long pid) {
    const std::string path = "/proc/" + std::to_string(pid) + "/stat";
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    std::string text;
    std::array<char, 512> buffer{};
    for (;;) {
      const ssize_t n = ::read(fd, buffer.data(), buffer.size());
      if (n > 0) {
        text.append(buffer.data(), std::size_t(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      const int error = n < 0 ? errno : 0;
      ::close(fd);
      if (error == ESRCH) return std::nullopt;
      return error ? std::string() : text;
    }
  }
  /// /proc/<pid>/stat's fields; none when unreadable. The command name (field 2) may
  /// hold spaces and parentheses: the fields start after its last ')'.
  static std::optional<stat_fields> parse(const std::string& line) {
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 > line.size()) return std::nullopt;
    std::istringstream in(line.substr(close + 2));
    stat_fields f{};
    std::string skip;
    in >> f.state;
    for (int field = 4; field < 22; ++field) in >> skip;
    if (!(in >> f.started)) return std::nullopt;
    return f;
  }
};

}  // namespace mimatrix::bootstrap::detail
