// The simulation's connections: one a pair of ranks, each sending its messages in order.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace mimatrix::transport::simulated::detail {

inline constexpr std::uint32_t no_index = 0xFFFFFFFFu;

/// The messages from one rank to one other go on the wire one at a time, oldest first (a
/// TCP stream, an RDMA queue pair). A channel is found by a hash of the pair (thousands of
/// ranks, few peers each), or faster as the one its rank used last (a ring's only one),
/// and queues its messages in a list threaded through their ids. It also keeps the pair's
/// route, which is fixed: found once, not once a message.
class channels {
 public:
  void clear(std::size_t ranks) {
    slots_.assign(slots_.empty() ? 1024 : slots_.size(), slot{});
    state_.clear();
    routes_.clear();
    links_.clear();
    last_.assign(ranks, {});
  }

  /// The route of channel `c`: its links and their latency, once set_route() gave them.
  bool routed(std::uint32_t c) const { return routes_[c].latency >= 0; }
  void set_route(std::uint32_t c, std::span<const std::uint32_t> links, double latency) {
    routes_[c] = {static_cast<std::uint32_t>(links_.size()), static_cast<std::uint32_t>(links.size()), latency};
    links_.insert(links_.end(), links.begin(), links.end());
  }
  std::span<const std::uint32_t> path(std::uint32_t c) const { return {links_.data() + routes_[c].first, routes_[c].count}; }
  double latency(std::uint32_t c) const { return routes_[c].latency; }

  /// The channel from `from` to `to`, made on first use.
  std::uint32_t of(int from, int to) {
    last_used& last = last_[std::size_t(from)];
    if (last.to != to) last = {to, find(from, to)};
    return last.channel;
  }

  /// Message `m` asks for channel `c`: true if it may go now, else it waits its turn.
  bool acquire(std::uint32_t c, std::uint32_t m) {
    state& s = state_[c];
    if (!s.busy) return s.busy = true;
    if (next_.size() <= m) next_.resize(std::size_t(m) + 1);
    next_[m] = no_index;
    (s.head == no_index ? s.head : next_[s.tail]) = m;
    s.tail = m;
    return false;
  }

  /// The message on `c` has left: the next one to send, or no_index (the channel idles).
  std::uint32_t release(std::uint32_t c) {
    state& s = state_[c];
    const std::uint32_t m = s.head;
    if (m == no_index) {
      s.busy = false;
      return m;
    }
    s.head = next_[m];
    return m;
  }

 private:
  std::uint32_t find(int from, int to) {
    const std::uint64_t key = std::uint64_t(std::uint32_t(from)) << 32 | std::uint32_t(to);
    if (2 * (state_.size() + 1) > slots_.size()) grow();
    for (std::size_t i = hash(key);; i = (i + 1) & (slots_.size() - 1)) {
      slot& s = slots_[i];
      if (s.channel == no_index) {
        s = {key, static_cast<std::uint32_t>(state_.size())};
        state_.push_back({});
        routes_.push_back({});
        return s.channel;
      }
      if (s.key == key) return s.channel;
    }
  }

  struct route {
    std::uint32_t first = 0, count = 0;  // in links_
    double latency = -1;                 // < 0: not routed yet
  };
  struct last_used {
    int to = -1;
    std::uint32_t channel = no_index;
  };
  struct slot {
    std::uint64_t key = 0;
    std::uint32_t channel = no_index;
  };
  struct state {
    std::uint32_t head = no_index, tail = no_index;  // waiting, oldest first
    bool busy = false;
  };

  std::size_t hash(std::uint64_t key) const {
    return std::size_t((key * 0x9e3779b97f4a7c15ULL) >> (64 - std::countr_zero(slots_.size())));
  }
  void grow() {
    std::vector<slot> old(slots_.empty() ? 1024 : 2 * slots_.size());
    old.swap(slots_);
    for (const slot& s : old) {
      if (s.channel == no_index) continue;
      std::size_t i = hash(s.key);
      while (slots_[i].channel != no_index) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = s;
    }
  }

  std::vector<slot> slots_;  // open addressing, a power of two, at most half full
  std::vector<state> state_;
  std::vector<route> routes_;
  std::vector<std::uint32_t> links_;
  std::vector<std::uint32_t> next_;  // by message: the one queued after it
  std::vector<last_used> last_;      // by rank
};

}  // namespace mimatrix::transport::simulated::detail
