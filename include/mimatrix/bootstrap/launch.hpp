// Runs N ranks of a program on this machine, the way torchrun does on one node: each child
// gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, its
// output lines are prefixed with "[rank] ", and one failing rank brings the others down.
// What `mimatrix-run` is made of.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/bootstrap/detail/launch_guardian.hpp"
#include "mimatrix/bootstrap/detail/process_mark.hpp"
#include "mimatrix/bootstrap/detail/shm_files.hpp"
#include "mimatrix/bootstrap/detail/shm_owners.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::bootstrap {

/// What to run and how.
///
/// @par Thread Safety
/// A plain value.
struct launch_options {
  int ranks = 1;
  std::vector<std::string> argv{};  // the program (looked up on PATH) and its arguments
  std::vector<std::pair<std::string, std::string>> env{};  // extra variables; they win over ours
  bool capture = false;  // keep each rank's output in launch_result::output instead of printing it
  bool prefix = true;    // "[rank] " before every line (stdout lines to stdout, stderr to stderr)
  std::chrono::milliseconds grace{10000};  // after the first rank fails, how long the others get before SIGTERM
  std::chrono::milliseconds timeout{0};    // 0: none; else SIGTERM every rank when it passes, and fail
  std::chrono::milliseconds kill_after{3000};  // after a SIGTERM, how long before SIGKILL
  /// 0: one host. Else the ranks act as ranks of this many hosts, in rank order (ranks
  /// must divide evenly): each gets MIMATRIX_HOST_ID, LOCAL_RANK and LOCAL_WORLD_SIZE of
  /// its emulated host, which shares no memory with the others (jobs across hosts, on one machine).
  int hosts = 0;
};

/// How the ranks ended.
///
/// @par Thread Safety
/// A plain value.
struct launch_result {
  int exit_code = 0;             // 0 when every rank exited 0; else the status of the first rank that failed
                                 // (124 when the timeout passed before any rank failed)
  std::vector<int> status;       // per rank: its exit code, or 128 + the signal that killed it
  std::vector<std::string> output;  // per rank, when capturing: what would have been printed, in order
  int failed_rank = -1;          // the rank exit_code came from; -1 when none failed
  bool timed_out = false;        // the timeout passed and the ranks were killed
};

namespace detail {

// The signal handler's only way out: one byte a signal into this pipe.
inline std::atomic<int> launch_signal_fd{-1};

inline void launch_on_signal(int signal_number) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(signal_number);
  const int fd = launch_signal_fd.load(std::memory_order_relaxed);
  if (fd >= 0) (void)!::write(fd, &byte, 1);
  errno = saved;
}

/// A port nobody listens on now: bind port 0, read what the kernel chose, close it.
inline int pick_free_port() {
  unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw error(std::error_code(errno, std::system_category()), "launch_local: could not pick a free MASTER_PORT");
  return ntohs(a.sin_port);
}

/// Installs the forwarding handlers for SIGINT, SIGTERM, SIGHUP and SIGCHLD, and puts back
/// what was there before when it goes.
class launch_signals {
 public:
  launch_signals() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      throw error(std::error_code(errno, std::system_category()), "launch_local: could not make a signal pipe");
    read_.reset(fds[0]);
    write_.reset(fds[1]);
    launch_signal_fd.store(write_.get());
    struct sigaction action {};
    action.sa_handler = &launch_on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (std::size_t i = 0; i < std::size(signals); ++i) ::sigaction(signals[i], &action, &old_[i]);
  }
  launch_signals(const launch_signals&) = delete;
  launch_signals& operator=(const launch_signals&) = delete;
  ~launch_signals() {
    for (std::size_t i = 0; i < std::size(signals); ++i) ::sigaction(signals[i], &old_[i], nullptr);
    launch_signal_fd.store(-1);
  }

  int fd() const noexcept { return read_.get(); }

  // SIGHUP too: a closed terminal left the ranks running (a black-box test).
  static constexpr int signals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};

 private:
  unique_fd read_, write_;
  struct sigaction old_[std::size(signals)] {};
};

/// One rank's child process and the read ends of its output pipes.
struct launched_rank {
  pid_t pid = -1;
  bool running = false;
  bool terminated = false;  // its group was signalled to end
  unique_fd out[2];         // stdout, stderr (empty when not piped)
  std::string partial[2];   // a line not yet ended
};

class launcher {
 public:
  explicit launcher(const launch_options& o) : options_(o), ranks_(static_cast<std::size_t>(o.ranks)) {
    result_.status.assign(ranks_.size(), 0);
    if (o.capture) result_.output.assign(ranks_.size(), {});
  }

  launch_result run() {
    const auto environments = build_environments();
    piped_ = options_.capture || options_.prefix;
    launch_guardian guardian(ranks_.size(), options_.kill_after);  // before our handlers: it has none
    launch_signals signals;
    try {
      for (std::size_t r = 0; r < ranks_.size(); ++r) {
        start(static_cast<int>(r), environments[r]);
        guardian.add(ranks_[r].pid);
      }
    } catch (...) {
      signal_all(SIGKILL);
      for (auto& rank : ranks_)
        if (rank.running) ::waitpid(rank.pid, nullptr, 0);
      throw;
    }
    supervise(signals.fd());
    if (result_.timed_out && result_.failed_rank < 0) result_.exit_code = 124;
    return std::move(result_);
  }

 private:
  using clock = std::chrono::steady_clock;

  std::vector<std::vector<std::string>> build_environments() const {
    auto given = [&](std::string_view name) -> const char* {
      for (const auto& [k, v] : options_.env)
        if (k == name) return v.c_str();
      return std::getenv(std::string(name).c_str());
    };
    std::string addr = given("MASTER_ADDR") ? given("MASTER_ADDR") : "127.0.0.1";
    std::string port = given("MASTER_PORT") ? given("MASTER_PORT") : std::to_string(pick_free_port());
    const std::string n = std::to_string(options_.ranks);
    const int per_host = options_.hosts > 0 ? options_.ranks / options_.hosts : options_.ranks;
    std::vector<std::pair<std::string, std::string>> common = {
        {"WORLD_SIZE", n}, {"LOCAL_WORLD_SIZE", std::to_string(per_host)}, {"MASTER_ADDR", addr}, {"MASTER_PORT", port}};
    auto overridden = [&](std::string_view entry) {
      const std::string_view name = entry.substr(0, entry.find('='));
      if (name == "RANK" || name == "LOCAL_RANK" || (options_.hosts > 0 && name == "MIMATRIX_HOST_ID")) return true;
      for (const auto& [k, v] : common)
        if (k == name) return true;
      for (const auto& [k, v] : options_.env)
        if (k == name) return true;
      return false;
    };
    std::vector<std::string> base;
    for (char** e = environ; *e; ++e)
      if (!overridden(*e)) base.emplace_back(*e);
    for (const auto& [k, v] : common) base.push_back(k + "=" + v);
    std::vector<std::vector<std::string>> all;
    for (int r = 0; r < options_.ranks; ++r) {
      auto env = base;
      const auto unset = [&](const char* name) {
        return std::none_of(options_.env.begin(), options_.env.end(), [&](const auto& kv) { return kv.first == name; });
      };
      if (unset("RANK")) env.push_back("RANK=" + std::to_string(r));
      if (unset("LOCAL_RANK")) env.push_back("LOCAL_RANK=" + std::to_string(r % per_host));
      if (options_.hosts > 0 && unset("MIMATRIX_HOST_ID"))
        env.push_back("MIMATRIX_HOST_ID=emulated-host-" + std::to_string(r / per_host));
      for (const auto& [k, v] : options_.env) env.push_back(k + "=" + v);
      all.push_back(std::move(env));
    }
    return all;
  }

  void start(int r, const std::vector<std::string>& environment) {
    auto& rank = ranks_[static_cast<std::size_t>(r)];
    unique_fd write_ends[2];
    if (piped_) {
      for (int s = 0; s < 2; ++s) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0)
          throw error(std::error_code(errno, std::system_category()),
                      "launch_local: could not make an output pipe for rank " + std::to_string(r));
        rank.out[s].reset(fds[0]);
        write_ends[s].reset(fds[1]);
      }
    }
    // Everything the child needs is built before fork: after it, only async-signal-safe calls.
    std::vector<char*> argv, envp;
    for (const auto& a : options_.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const std::string failed = "cannot execute '" + options_.argv[0] + "': ";
    const pid_t parent = ::getpid();

    // Signals stay blocked across fork so that the child never runs our handler.
    sigset_t block, old;
    sigemptyset(&block);
    for (int s : launch_signals::signals) sigaddset(&block, s);
    ::sigprocmask(SIG_BLOCK, &block, &old);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);  // its own group: signals reach the rank's whole process tree
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and it does not outlive a killed launcher
      if (::getppid() != parent) ::_exit(129);
      for (int s : launch_signals::signals) ::signal(s, SIG_DFL);
      ::sigprocmask(SIG_SETMASK, &old, nullptr);
      const int null = ::open("/dev/null", O_RDONLY);
      if (null >= 0) ::dup2(null, 0);
      if (piped_) {
        ::dup2(write_ends[0].get(), 1);
        ::dup2(write_ends[1].get(), 2);
      }
      ::execvpe(argv[0], argv.data(), envp.data());
      const char* why = ::strerror(errno);
      (void)!::write(2, failed.data(), failed.size());
      (void)!::write(2, why, std::strlen(why));
      (void)!::write(2, "\n", 1);
      ::_exit(127);
    }
    const int fork_errno = errno;
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0)
      throw error(std::error_code(fork_errno, std::system_category()),
                  "launch_local: could not fork rank " + std::to_string(r));
    ::setpgid(pid, pid);  // as the child does: whichever runs first, the group exists
    rank.pid = pid;
    rank.running = true;
  }

  void supervise(int signal_fd) {
    const auto started = clock::now();
    // time_point::max() stands for "not set" (std::optional trips GCC 12's -Wmaybe-uninitialized).
    constexpr auto never = clock::time_point::max();
    const auto deadline = options_.timeout.count() > 0 ? started + options_.timeout : never;
    auto term_at = never, kill_at = never, close_at = never;
    int interrupts = 0;
    bool ending = false;  // every rank's own process has exited: what is left of their groups goes
    std::size_t live = ranks_.size();
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, int>> which;  // (rank, stream) of fds[1...]
    while (live > 0 || open_pipes()) {
      fds.assign(1, pollfd{signal_fd, POLLIN, 0});
      which.clear();
      for (std::size_t r = 0; r < ranks_.size(); ++r)
        for (int s = 0; s < 2; ++s)
          if (ranks_[r].out[s]) {
            fds.push_back({ranks_[r].out[s].get(), POLLIN, 0});
            which.emplace_back(r, s);
          }
      // Sleep until output, a signal (SIGCHLD included) or the next deadline.
      auto next = clock::now() + std::chrono::seconds(1);
      if (!result_.timed_out) next = std::min(next, deadline);
      next = std::min({next, term_at, kill_at, close_at});
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - clock::now()).count();
      ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(wait, 0)));

      if (fds[0].revents & POLLIN) {
        unsigned char got[64];
        ssize_t n;
        while ((n = ::read(signal_fd, got, sizeof got)) > 0)
          for (ssize_t i = 0; i < n; ++i) {
            if (got[i] == SIGCHLD) continue;
            // The first interrupt is passed on; a second one kills.
            if (++interrupts == 1) {
              signal_all(got[i]);
              if (kill_at == never) kill_at = clock::now() + options_.kill_after;
            } else {
              signal_all(SIGKILL);
            }
          }
      }
      for (std::size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents) read_output(which[i - 1].first, which[i - 1].second, false);

      for (std::size_t r = 0; r < ranks_.size(); ++r) {
        auto& rank = ranks_[r];
        int status = 0;
        if (!rank.running || ::waitpid(rank.pid, &status, WNOHANG) != rank.pid) continue;
        rank.running = false;
        --live;
        // Whatever it wrote before exiting is in the pipe now. What it started (a wrapper
        // script's program) may still write: its pipes stay open while its group lives (a
        // black-box test lost a wrapped rank's last lines); they end with the launch below.
        if (!group_alive(rank.pid))
          for (int s = 0; s < 2; ++s) read_output(r, s, true);
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        // A rank killed by a signal could not remove its shared-memory files: we do. Behind
        // a wrapper (or killed in a child of its own) its files are under another pid: the
        // marked owners' (shm_owners.hpp) that ended go too, after any failed rank.
        if (WIFSIGNALED(status)) remove_shm_files_of(rank.pid);
        if (code != 0) remove_shm_files_of_ended_owners(self_);
        result_.status[r] = code;
        if (code != 0 && result_.failed_rank < 0 && !result_.timed_out) {
          result_.failed_rank = static_cast<int>(r);
          result_.exit_code = code;
          if (term_at == never && kill_at == never) term_at = clock::now() + options_.grace;
        }
      }

      const auto now = clock::now();
      if (live > 0 && !result_.timed_out && now >= deadline) {
        result_.timed_out = true;
        signal_all(SIGTERM);
        kill_at = now + options_.kill_after;
        term_at = never;
      }
      if (live > 0 && now >= term_at) {
        signal_all(SIGTERM);
        term_at = never;
        kill_at = now + options_.kill_after;
      }
      if (live > 0 && now >= kill_at) {
        signal_all(SIGKILL);
        kill_at = never;
      }
      if (live == 0) end_groups(ending, kill_at, close_at, now);
    }
  }

  static bool group_alive(pid_t group) { return ::kill(-group, 0) == 0; }

  bool open_pipes() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const launched_rank& r) { return r.out[0] || r.out[1]; });
  }

  /// After every rank's own process exited: what is left of their process groups (a
  /// wrapper's program, a rank's background work) gets SIGTERM (unless it had one), then
  /// SIGKILL after kill_after; a group gone has its pipes read to the end and closed, and a second after
  /// the SIGKILL every pipe is (a process that left its group may hold one).
  void end_groups(bool& ending, clock::time_point& kill_at, clock::time_point& close_at, clock::time_point now) {
    constexpr auto never = clock::time_point::max();
    if (!ending) {
      ending = true;
      kill_at = close_at = never;
      bool lingering = false;
      for (const auto& rank : ranks_) {
        if (!group_alive(rank.pid)) continue;
        lingering = true;
        // A group already told to end (a timeout, an interrupt) gets the time to finish
        // (its last lines); a second SIGTERM could cut that short.
        if (!rank.terminated) ::kill(-rank.pid, SIGTERM);
      }
      if (lingering) kill_at = now + options_.kill_after;
    }
    if (now >= kill_at) {
      for (const auto& rank : ranks_) ::kill(-rank.pid, SIGKILL);
      kill_at = never;
      close_at = now + std::chrono::seconds(1);
    }
    for (std::size_t r = 0; r < ranks_.size(); ++r)
      if ((ranks_[r].out[0] || ranks_[r].out[1]) && (now >= close_at || !group_alive(ranks_[r].pid)))
        for (int s = 0; s < 2; ++s) read_output(r, s, true);
  }

  void signal_all(int signal_number) {
    for (auto& rank : ranks_) {
      if (!rank.running) continue;
      if (::kill(-rank.pid, signal_number) != 0) ::kill(rank.pid, signal_number);
      rank.terminated = true;
    }
  }

  /// Reads what rank `r`'s stream `s` has; with `final`, everything up to EOF or what would
  /// block, then closes it.
  void read_output(std::size_t r, int s, bool final) {
    auto& rank = ranks_[r];
    if (!rank.out[s]) return;
    if (final) set_nonblocking(rank.out[s].get(), true);
    char buffer[16 * 1024];
    for (;;) {
      const ssize_t n = ::read(rank.out[s].get(), buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        emit(r, s, std::string_view(buffer, static_cast<std::size_t>(n)));
        if (final) continue;
        return;
      }
      break;  // EOF, or nothing more without blocking
    }
    if (!rank.partial[s].empty()) emit(r, s, "\n");  // the last line had no end
    rank.out[s].reset();
  }

  void emit(std::size_t r, int s, std::string_view data) {
    if (!options_.prefix) return print(r, s, data);
    auto& partial = ranks_[r].partial[s];
    std::string lines;
    std::string tag(1, '[');  // not "[" + to_string(r): GCC 12 -Wrestrict false positive at -O3
    tag += std::to_string(r);
    tag += "] ";
    for (std::size_t at = 0; at < data.size();) {
      const auto end = data.find('\n', at);
      if (end == std::string_view::npos) { partial.append(data.substr(at)); break; }
      lines += tag;
      lines += partial;
      lines.append(data.substr(at, end + 1 - at));
      partial.clear();
      at = end + 1;
    }
    if (!lines.empty()) print(r, s, lines);
  }

  void print(std::size_t r, int s, std::string_view text) {
    if (options_.capture) result_.output[r].append(text);
    else write_all(s == 0 ? 1 : 2, text.data(), text.size());
  }

  const launch_options& options_;
  const process_mark self_ = process_mark::self();  // which marked owners this process can check
  std::vector<launched_rank> ranks_;
  launch_result result_;
  bool piped_ = false;
};

}  // namespace detail

/// The most ranks one launch starts on one machine (each a process and two pipes; a
/// number past it grew the launcher to gigabytes before any rank started).
inline constexpr int max_local_ranks = 4096;

/// Runs `options.ranks` copies of `options.argv` on this machine and waits for all of them.
///
/// Each rank runs in its own process group with stdin from /dev/null, and gets RANK,
/// LOCAL_RANK (its index), WORLD_SIZE, LOCAL_WORLD_SIZE (the count), MASTER_ADDR
/// (127.0.0.1) and MASTER_PORT (a free port) unless options.env or this process's
/// environment already gives MASTER_ADDR/MASTER_PORT; options.env is applied last. When a
/// rank fails, the others get `grace`, then SIGTERM, then `kill_after`, then SIGKILL.
/// SIGINT, SIGTERM and SIGHUP sent to this process are passed on to every rank (a second
/// one kills them); the handlers are put back before returning. A program that cannot be
/// executed makes its rank exit 127 with a message on its stderr. What is left of a rank's
/// process group when its own process exits (a wrapper's program, background work) is
/// read from until the launch ends, and then ended (SIGTERM, kill_after, SIGKILL); if
/// this process dies first (even by SIGKILL), a guardian process ends those groups.
///
/// Throws errc::invalid_argument for bad options, and a system error code when a pipe or
/// fork fails (after killing the ranks already started).
///
/// @par Thread Safety
/// One call at a time in a process (it owns the process's SIGINT, SIGTERM and SIGCHLD
/// handlers while it runs); a concurrent call throws errc::invalid_argument.
inline launch_result launch_local(const launch_options& options) {
  if (options.ranks < 1 || options.ranks > max_local_ranks)
    throw error(errc::invalid_argument, "launch_local: ranks is " + std::to_string(options.ranks) + ", must be in [1, " +
                                            std::to_string(max_local_ranks) + "]");
  if (options.argv.empty() || options.argv[0].empty())
    throw error(errc::invalid_argument, "launch_local: no program to run (argv is empty)");
  if (options.hosts < 0 || (options.hosts > 0 && options.ranks % options.hosts != 0))
    throw error(errc::invalid_argument, "launch_local: " + std::to_string(options.ranks) + " ranks cannot be spread evenly over " +
                                            std::to_string(options.hosts) + " hosts");
  for (const auto& [name, value] : options.env)
    if (name.empty() || name.find('=') != std::string::npos)
      throw error(errc::invalid_argument, "launch_local: '" + name + "' is not an environment variable name");
  static std::atomic<bool> busy{false};
  if (busy.exchange(true))
    throw error(errc::invalid_argument, "launch_local: another launch_local is already running in this process");
  struct release {
    ~release() { busy.store(false); }
  } on_exit;
  return detail::launcher(options).run();
}

}  // namespace mimatrix::bootstrap
