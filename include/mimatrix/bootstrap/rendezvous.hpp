// Opening the job's rendezvous store from the environment, and what ranks do through it at
// start-up: claim their rank, all-gather a blob (an address, a memory key) and wait for all.
#pragma once

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/detail/job_server.hpp"
#include "mimatrix/bootstrap/file_store.hpp"
#include "mimatrix/bootstrap/memory_store.hpp"
#include "mimatrix/bootstrap/socket_interface.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/bootstrap/tcp_store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"

namespace mimatrix::bootstrap {

namespace detail {

/// "host:port" or "[v6]:port" into its parts; throws naming `what` (the variable) otherwise.
inline std::pair<std::string, int> split_host_port(std::string_view text, const std::string& what) {
  auto bad = [&] {
    return error(errc::invalid_argument, what + "='" + std::string(text) + "' is not tcp://host:port");
  };
  std::string_view host, port;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos || text.substr(close + 1, 1) != ":") throw bad();
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) throw bad();
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  int p = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (host.empty() || port.empty() || ec != std::errc{} || end != port.data() + port.size() || p < 1 || p > 65535)
    throw bad();
  return {std::string(host), p};
}

/// The job's tcp store: rank 0's process serves it from the first one it opens until it
/// exits, so that every communicator it makes, one after another or at once, meets there.
/// The server listens on `host`'s address alone, or MIMATRIX_SOCKET_IFNAME's interface's
/// (store_listen_address), where rank 0 reaches it too; the other ranks connect to `host`.
inline std::unique_ptr<store> job_tcp_store(const identity& self, std::string host, int port,
                                            std::chrono::milliseconds timeout, const env_lookup& get) {
  const std::string listen = store_listen_address(self.rank, host, get);  // checked on every rank
  if (self.rank != 0) return std::make_unique<tcp_store>(std::move(host), port, false, timeout);
  return std::make_unique<tcp_store>(listen, job_server(listen, port), timeout);
}

}  // namespace detail

/// The job's store, chosen by the environment `get` reads:
///   MIMATRIX_STORE=file:/shared/dir      a file_store there
///   MIMATRIX_STORE=tcp://host:port       a tcp_store, served by rank 0
///   MASTER_ADDR and MASTER_PORT          a tcp_store, served by rank 0 (torchrun, mimatrix-run)
/// Rank 0's server listens on the store's host's address alone, or on the interface
/// MIMATRIX_SOCKET_IFNAME names (socket_interface.hpp), never on every address.
///   nothing, and `self.size` is 1        a memory_store
/// Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) torchrun itself serves
/// MASTER_PORT, so rank 0 serves on MASTER_PORT + 1 instead. `timeout` bounds connecting.
/// Rank 0's process serves a tcp store from its first open_store until it exits: every
/// store it opens on that port meets there, so communicators may be made one after another
/// (a destroyed one's peers may already wait in the next) or several at once.
/// Throws errc::invalid_argument saying what to set when there is more than one rank and
/// nothing is set, or when a value is malformed.
inline std::unique_ptr<store> open_store(const identity& self, std::chrono::milliseconds timeout,
                                         const env_lookup& get) try {
  if (const char* spec = get("MIMATRIX_STORE"); spec && *spec) {
    const std::string_view text(spec);
    if (text.starts_with("file:")) {
      if (text.size() == 5) throw error(errc::invalid_argument, "MIMATRIX_STORE='" + std::string(text) + "' names no directory");
      return std::make_unique<file_store>(std::string(text.substr(5)));
    }
    if (text.starts_with("tcp://")) {
      auto [host, port] = detail::split_host_port(text.substr(6), "MIMATRIX_STORE");
      return detail::job_tcp_store(self, host, port, timeout, get);
    }
    if (text == "memory:" && self.size == 1) return std::make_unique<memory_store>();
    throw error(errc::invalid_argument, "MIMATRIX_STORE='" + std::string(text) +
                                            "' is neither file:/shared/dir nor tcp://host:port");
  }
  const char* addr = get("MASTER_ADDR");
  const char* port_text = get("MASTER_PORT");
  if (addr || port_text) {
    if (!addr || !*addr || !port_text)
      throw error(errc::invalid_argument, std::string(addr ? "MASTER_ADDR" : "MASTER_PORT") + " is set but " +
                                              (addr ? "MASTER_PORT" : "MASTER_ADDR") + " is not (or is empty): set both");
    int port = detail::parse_env_int("MASTER_PORT", port_text);
    if (port < 1 || port > 65535)
      throw error(errc::invalid_argument, "MASTER_PORT='" + std::string(port_text) + "' is not a port in [1, 65535]");
    if (const char* agent = get("TORCHELASTIC_USE_AGENT_STORE"); agent && std::string_view(agent) == "True") {
      if (port == 65535) throw error(errc::invalid_argument, "MASTER_PORT=65535 leaves no port for mimatrix's store under torchrun");
      ++port;
    }
    return detail::job_tcp_store(self, addr, port, timeout, get);
  }
  if (self.size == 1) return std::make_unique<memory_store>();
  throw error(errc::invalid_argument,
              "rank " + std::to_string(self.rank) + " of " + std::to_string(self.size) + " (" + self.launcher +
                  " launcher) has no rendezvous store: set MASTER_ADDR and MASTER_PORT (torchrun, mimatrix-run), "
                  "or MIMATRIX_STORE=file:/shared/dir (a directory every rank sees) or MIMATRIX_STORE=tcp://host:port "
                  "(rank 0's host)");
} catch (const error& e) {  // a malformed setting: say which rank read it
  if (e.code() != errc::invalid_argument || e.reason().starts_with("rank ")) throw;
  throw error(errc::invalid_argument, "rank " + std::to_string(self.rank) + ": " + e.reason());
}

/// open_store() reading this process's environment.
inline std::unique_ptr<store> open_store(const identity& self, std::chrono::milliseconds timeout) {
  return open_store(self, timeout, [](const char* name) -> const char* { return std::getenv(name); });
}

/// "host <hostname> pid <pid>": who this process is, for claim_rank's message.
inline std::string this_process() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string("host ") + host + " pid " + std::to_string(::getpid());
}

/// Claims `rank` under `prefix` (one generation of a group: claim each rank once in it) for
/// `holder` (who this process is, as this_process() says). Exactly one claim of a rank
/// succeeds, atomically across processes: an add() to "<prefix>/<rank>/claims" counts
/// them, and the first claimer writes `holder` to "<prefix>/<rank>". Every later claim
/// throws errc::invalid_argument naming both holders: "rank 1 is claimed twice: by host a
/// pid 10 and host b pid 11" (two processes were started with the same rank). A later
/// claimer waits up to `timeout` for the first to say who it is.
inline void claim_rank(store& s, const std::string& prefix, int rank, std::chrono::milliseconds timeout,
                       const std::string& holder = this_process()) {
  const std::string key = prefix + "/" + std::to_string(rank);
  const std::int64_t claims = s.add(key + "/claims", 1);
  if (claims == 1) {
    s.set(key, bytes_of(holder));
    return;
  }
  std::string first = "a process that did not say who it is";
  try {
    first = text_of(s.get(key, timeout));
  } catch (const error& e) {
    if (e.code() != errc::timeout) throw;
  }
  const std::string times = claims == 2 ? "twice" : std::to_string(claims) + " times";
  throw error(errc::invalid_argument, "rank " + std::to_string(rank) + " is claimed " + times + ": by " + first +
                                          " and " + holder + " ('" + prefix + "' at " + s.where() +
                                          "); two processes were started with the same rank: check RANK (or the "
                                          "launcher's rank variable) of each");
}

/// `s.get(key, timeout)` in slices of a quarter second, calling `check()` (which may
/// throw) after each slice that ends empty.
template <class Check>
std::vector<std::byte> get_unless_gone(store& s, const std::string& key, std::chrono::milliseconds timeout,
                                       Check&& check) {
  const auto deadline = deadline_after(timeout);  // saturated: never overflows
  for (;;) {
    const auto left = std::max(
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
        std::chrono::milliseconds(0));
    try {
      return s.get(key, std::min(left, std::chrono::milliseconds(250)));
    } catch (const error& e) {
      if (e.code() != errc::timeout || left <= std::chrono::milliseconds(250)) throw;
    }
    check();
  }
}

/// Every rank's `mine`, in rank order: rank r publishes "<prefix>/<r>" and reads the
/// others'. Use a fresh prefix for each exchange. Throws errc::timeout naming the ranks
/// still missing when `timeout` (for the whole exchange) passes. With `gone`, asked every
/// quarter second of a wait for rank r: what it says ("(pid 42) exited") ends the
/// exchange at once with errc::peer_lost, rather than at the deadline.
inline std::vector<std::vector<std::byte>> all_gather(store& s, const std::string& prefix, int rank, int size,
                                                      const std::vector<std::byte>& mine,
                                                      std::chrono::milliseconds timeout,
                                                      const std::function<std::string(int)>& gone = {}) {
  if (size < 1 || rank < 0 || rank >= size)
    throw error(errc::invalid_argument, "all_gather '" + prefix + "': rank " + std::to_string(rank) +
                                            " is not in a group of " + std::to_string(size));
  const auto deadline = deadline_after(timeout);  // saturated: never overflows
  s.set(prefix + "/" + std::to_string(rank), mine);
  std::vector<std::vector<std::byte>> all(static_cast<std::size_t>(size));
  all[static_cast<std::size_t>(rank)] = mine;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const auto left = std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                               std::chrono::milliseconds(0));
    try {
      const std::string key = prefix + "/" + std::to_string(r);
      all[static_cast<std::size_t>(r)] = !gone ? s.get(key, left) : get_unless_gone(s, key, left, [&] {
        const std::string why = gone(r);
        if (!why.empty())
          throw error(errc::peer_lost, describe({.rank = rank, .operation = "all_gather"},
                                                "'" + prefix + "' at " + s.where() + ": rank " + std::to_string(r) +
                                                    " " + why + " before it published"));
      });
    } catch (const error& e) {
      if (e.code() == errc::transport) {
        // The store is gone: over tcp, rank 0 serves it and may have given up on the rank
        // this one waits for. Name that rank, not only the lost connection.
        std::string unseen;
        for (int m = r; m < size; ++m)
          if (m != rank) unseen += (unseen.empty() ? "" : ", ") + std::to_string(m);
        throw error(errc::transport,
                    describe({.rank = rank, .operation = "all_gather"},
                             "'" + prefix + "' at " + s.where() + ": waiting for rank " + std::to_string(r) +
                                 " to publish (not yet seen: rank(s) " + unseen + "), the store failed: " + e.what()));
      }
      if (e.code() != errc::timeout) throw;
      std::string missing;
      for (int m = r; m < size; ++m) {
        if (m == rank) continue;
        if (m != r) {  // a zero-wait look: is it there now?
          try { s.get(prefix + "/" + std::to_string(m), std::chrono::milliseconds(0)); continue; } catch (const error&) {}
        }
        missing += (missing.empty() ? "" : ", ") + std::to_string(m);
      }
      throw error(errc::timeout, describe({.rank = rank, .operation = "all_gather"},
                                          "'" + prefix + "' at " + s.where() + ": rank(s) " + missing +
                                              " did not publish within " + std::to_string(timeout.count()) + " ms"));
    }
  }
  return all;
}

/// Waits until `size` ranks have entered the barrier `name`. A name may be reused: each
/// `size` arrivals complete one round. Throws errc::timeout saying how many of how many
/// ranks arrived when `timeout` passes.
inline void barrier(store& s, const std::string& name, int size, std::chrono::milliseconds timeout) {
  if (size < 1) throw error(errc::invalid_argument, "barrier '" + name + "': size " + std::to_string(size) + " < 1");
  const std::int64_t arrival = s.add(name + "/arrived", 1);  // 1-based, counting every round
  const std::int64_t round = (arrival - 1) / size;
  const std::string done = name + "/done/" + std::to_string(round);
  if (arrival % size == 0) {
    s.set(done, {});
    return;
  }
  try {
    s.get(done, timeout);
  } catch (const error& e) {
    if (e.code() != errc::timeout) throw;
    const std::int64_t arrived = std::min<std::int64_t>(s.add(name + "/arrived", 0) - round * size, size);
    throw error(errc::timeout, "barrier '" + name + "' at " + s.where() + ": " + std::to_string(arrived) + " of " +
                                   std::to_string(size) + " ranks arrived within " + std::to_string(timeout.count()) +
                                   " ms");
  }
}

/// Joins the group `name` of `size` ranks, whoever comes: a new group without restarting
/// processes, such as the survivors of a failure, or they and a late joiner. Ranks go by
/// arrival (an add() to "<name>/ticket"); local ranks by host (hostname and boot id).
/// Every member passes the same name and size, then opens its transport with that
/// identity and, as the group's name, `name` (transport::fabric_options::group). Use a
/// new name for each generation. Throws errc::invalid_argument when `size` ranks have
/// joined already, errc::timeout naming how many came when `timeout` passes.
inline identity join(store& s, const std::string& name, int size, std::chrono::milliseconds timeout) {
  if (size < 1) throw error(errc::invalid_argument, "join '" + name + "': size " + std::to_string(size) + " < 1");
  const std::int64_t ticket = s.add(name + "/ticket", 1);
  if (ticket > size)
    throw error(errc::invalid_argument, "join '" + name + "' at " + s.where() + ": " + std::to_string(size) +
                                            " ranks joined already (this is arrival " + std::to_string(ticket) +
                                            "); a later process joins the next generation, under a new name");
  identity id;
  id.rank = static_cast<int>(ticket - 1);
  id.size = size;
  id.launcher = "join";
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string boot;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char line[64] = {};
    if (std::fgets(line, sizeof line, f)) boot = line;
    std::fclose(f);
  }
  const std::string mine = std::string(host) + " " + boot;
  std::vector<std::vector<std::byte>> hosts;
  try {
    hosts = all_gather(s, name + "/host", id.rank, size, bytes_of(mine), timeout);
  } catch (const error& e) {
    if (e.code() != errc::timeout) throw;
    const std::int64_t came = std::min<std::int64_t>(s.add(name + "/ticket", 0), size);
    throw error(errc::timeout, "join '" + name + "' at " + s.where() + ": " + std::to_string(came) + " of " +
                                   std::to_string(size) + " ranks joined within " + std::to_string(timeout.count()) +
                                   " ms");
  }
  id.local_size = 0;
  for (int r = 0; r < size; ++r) {
    if (text_of(hosts[std::size_t(r)]) != mine) continue;
    if (r == id.rank) id.local_rank = id.local_size;
    ++id.local_size;
  }
  return id;
}

}  // namespace mimatrix::bootstrap
