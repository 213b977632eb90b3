// The verifier's second layer: every send meets one receive, every write or notify the
// one wait that counts its flag (check b of verify()).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "mimatrix/schedule/verify/structure.hpp"

namespace mimatrix::schedule::detail {

class matching_check : public structure_check {
 public:
  using structure_check::structure_check;

 protected:
  using structure_check::where;

  // --- b) matching ---------------------------------------------------------------------
  // Receiver by receiver: a small open-addressing table of its receives, keyed by
  // (sender, tag), that the sends to it then look up. Linear, and the table stays in cache.
  struct message {
    std::uint64_t key = 0;  // sender << 32 | tag
    std::uint32_t send = no_step, recv = no_step;  // global step ids; both unset: an empty slot
  };

  message& find(std::uint64_t key) {
    auto h = key;  // splitmix64's finalizer: every key bit reaches the low bits
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    for (auto slot = h & (messages_.size() - 1);; slot = (slot + 1) & (messages_.size() - 1)) {
      auto& m = messages_[slot];
      if (m.key == key || (m.send == no_step && m.recv == no_step)) {
        m.key = key;
        return m;
      }
    }
  }

  std::string where(std::uint32_t g) const {
    const auto r = int(rank_of_[g]);
    return where(r, g - offsets_[std::size_t(r)]);
  }

  bool match() {
    // Sends grouped by receiver (a counting sort, so each group keeps global order).
    std::vector<std::uint32_t> begin(std::size_t(p_) + 1, 0);
    for (int r = 0; r < p_; ++r)
      for (const auto& st : group_[std::size_t(r)].steps)
        if (st.kind == step_kind::send) ++begin[std::size_t(st.peer) + 1];
    for (std::size_t b = 0; b < std::size_t(p_); ++b) begin[b + 1] += begin[b];
    std::vector<std::uint32_t> sends(begin.back()), fill(begin.begin(), begin.end() - 1);
    for (int r = 0; r < p_; ++r)
      for (std::size_t i = 0; i < group_[std::size_t(r)].steps.size(); ++i)
        if (const auto& st = at(r, i); st.kind == step_kind::send)
          sends[fill[std::size_t(st.peer)]++] = std::uint32_t(offsets_[std::size_t(r)] + i);

    partner_.assign(offsets_.back(), no_step);
    for (int b = 0; b < p_; ++b) {
      const auto& steps = group_[std::size_t(b)].steps;
      std::size_t recvs = 0;
      for (const auto& st : steps) recvs += is_communication(st.kind) && st.kind != step_kind::send ? 1 : 0;
      messages_.assign(std::bit_ceil(2 * recvs + 2), {});
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const auto& st = steps[i];
        if (!is_communication(st.kind) || st.kind == step_kind::send) continue;
        auto& m = find((std::uint64_t(st.peer) << 32) | st.tag);
        const auto g = std::uint32_t(offsets_[std::size_t(b)] + i);
        if (m.recv != no_step)
          return fail("duplicate message: " + where(m.recv) + " and " + where(g) + " use the same peer and tag");
        m.recv = g;
      }
      for (auto k = begin[std::size_t(b)]; k < begin[std::size_t(b) + 1]; ++k) {
        const auto g = sends[k];
        const auto a = rank_of_[g];
        auto& m = find((std::uint64_t(a) << 32) | at(int(a), g - offsets_[a]).tag);
        if (m.send != no_step)
          return fail("duplicate message: " + where(m.send) + " and " + where(g) + " use the same peer and tag");
        m.send = g;
        if (m.recv != no_step) {
          partner_[g] = m.recv;
          partner_[m.recv] = g;
        }
      }
    }
    messages_ = {};

    for (int r = 0; r < p_; ++r)
      for (std::size_t i = 0; i < group_[std::size_t(r)].steps.size(); ++i) {
        const auto& st = at(r, i);
        if (!is_communication(st.kind)) continue;
        const auto other = partner_[offsets_[std::size_t(r)] + i];
        if (st.kind != step_kind::send) {
          if (other == no_step)
            return fail(where(r, i) + " has no matching send on rank " + std::to_string(st.peer) + " to peer " +
                        std::to_string(r) + " with tag " + std::to_string(st.tag));
          continue;
        }
        if (other == no_step)
          return fail(where(r, i) + " has no matching recv or recv_reduce on rank " + std::to_string(st.peer) +
                      " from peer " + std::to_string(r) + " with tag " + std::to_string(st.tag));
        const auto& theirs = at(st.peer, other - offsets_[std::size_t(st.peer)]);
        if (st.src.bytes != theirs.dst.bytes)
          return fail(where(r, i) + " sends " + std::to_string(st.src.bytes) + " bytes but " + where(other) +
                      " receives " + std::to_string(theirs.dst.bytes) + " bytes");
      }
    return true;
  }

  // --- b2) flags --------------------------------------------------------------------------
  // Every write or notify from a to b with tag t is counted by the one wait on b with tag
  // t, each (writer, target, tag) once a call, and that wait's count is the number of
  // flags it gets: more would never complete, fewer would let it start before data landed.
  bool match_flags() {
    const auto total = offsets_.back();
    flag_wait_.assign(total, no_step);
    incoming_.assign(total, 0);
    std::unordered_map<std::uint64_t, std::uint32_t> waits;  // rank << 32 | tag -> wait
    for (int r = 0; r < p_; ++r)
      for (std::size_t i = 0; i < group_[std::size_t(r)].steps.size(); ++i)
        if (const auto& st = at(r, i); st.kind == step_kind::wait) {
          const auto g = std::uint32_t(offsets_[std::size_t(r)] + i);
          const auto [it, fresh] = waits.try_emplace((std::uint64_t(r) << 32) | st.tag, g);
          if (!fresh) return fail("duplicate wait: " + where(it->second) + " and " + where(g) + " count the same tag");
        }
    if (!one_sided_) {
      for (const auto& [key, g] : waits)
        if (const auto& st = at(int(rank_of_[g]), g - offsets_[rank_of_[g]]); st.count != 0)
          return fail(where(g) + " waits for " + std::to_string(st.count) + " flags but no write or notify raises tag " +
                      std::to_string(st.tag) + " at rank " + std::to_string(rank_of_[g]));
      return true;
    }
    std::set<std::tuple<int, int, std::uint32_t>> seen;  // (writer, target, tag)
    for (int r = 0; r < p_; ++r)
      for (std::size_t i = 0; i < group_[std::size_t(r)].steps.size(); ++i) {
        const auto& st = at(r, i);
        if (!is_one_sided(st.kind)) continue;
        const auto g = std::uint32_t(offsets_[std::size_t(r)] + i);
        const auto it = waits.find((std::uint64_t(st.peer) << 32) | st.tag);
        if (it == waits.end())
          return fail(where(r, i) + " has no matching wait on rank " + std::to_string(st.peer) + " with tag " +
                      std::to_string(st.tag));
        if (!seen.emplace(r, st.peer, st.tag).second)
          return fail("duplicate flag: " + where(r, i) + " raises tag " + std::to_string(st.tag) + " at rank " +
                      std::to_string(st.peer) + " a second time in one call");
        flag_wait_[g] = it->second;
        ++incoming_[it->second];
      }
    for (const auto& [key, g] : waits)
      if (const auto& st = at(int(rank_of_[g]), g - offsets_[rank_of_[g]]); st.count != incoming_[g])
        return fail(where(g) + " waits for " + std::to_string(st.count) + " flags but " +
                    std::to_string(incoming_[g]) + " writes/notifies raise tag " + std::to_string(st.tag) +
                    " at rank " + std::to_string(rank_of_[g]));
    return true;
  }

  std::vector<message> messages_;
  std::vector<std::uint32_t> partner_;  // global id of the matching send/recv
  std::vector<std::uint32_t> flag_wait_;  // of a write/notify: the global id of the wait counting its flag
  std::vector<std::uint32_t> incoming_;   // of a wait: how many flags it counts
};

}  // namespace mimatrix::schedule::detail
