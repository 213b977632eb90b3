// The verifier's last layer: runs the group on sets of contributions under rendezvous
// semantics, then checks what every output element holds (checks d and e of verify()).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mimatrix/schedule/verify/races.hpp"

namespace mimatrix::schedule::detail {

class simulation_check : public race_check {
 public:
  using race_check::race_check;

 protected:
  std::vector<value>& array_of(int rank, buffer b) {
    return memory_[std::size_t(rank) * 3 + std::size_t(layouts_[std::size_t(rank)].array[std::size_t(b)])];
  }

  // --- d) symbolic execution -----------------------------------------------------------
  bool load(int r, const region& rg, std::size_t i, std::vector<value>& into) {
    const auto& a = array_of(r, rg.where);
    const auto first = first_elem(r, rg), n = rg.bytes / es_;
    into.assign(a.begin() + std::ptrdiff_t(first), a.begin() + std::ptrdiff_t(first + n));
    for (std::size_t k = 0; k < n; ++k)
      if (!into[k].defined)
        return fail(where(r, i) + ": reads data before it is produced (" + byte_at(rg, k) + " was never written)");
    return true;
  }

  /// into[k] = combine(into[k], other[k]) for the step `i` of rank `r` writing `dst`.
  bool combine(int r, std::size_t i, const region& dst, std::vector<value>& into, const std::vector<value>& other) {
    // Neighbouring elements of a chunk usually pair the same sets: skip the map then.
    std::uint32_t last_a = no_step, last_b = no_step;
    std::int64_t last_u = 0;
    for (std::size_t k = 0; k < into.size(); ++k) {
      auto &a = into[k];
      const auto& b = other[k];
      if (a.origin != b.origin)
        return fail(where(r, i) + ": combines values of different elements at " + byte_at(dst, k) + ": origin " +
                    std::to_string(a.origin) + " with origin " + std::to_string(b.origin));
      if (a.finalized || b.finalized)
        return fail(where(r, i) + ": reduces data that is already finalized at " + byte_at(dst, k));
      if (a.set != last_a || b.set != last_b) last_u = sets_->unite(last_a = a.set, last_b = b.set);
      const auto u = last_u;
      if (u < 0)
        return fail(where(r, i) + ": counts rank " + std::to_string(-1 - u) + " twice at " + byte_at(dst, k) +
                    " (" + sets_->describe(a.set) + " + " + sets_->describe(b.set) + ")");
      a.set = std::uint32_t(u);
    }
    return true;
  }

  void store(int r, const region& rg, const std::vector<value>& from) {
    std::copy(from.begin(), from.end(), array_of(r, rg.where).begin() + std::ptrdiff_t(first_elem(r, rg)));
  }

  /// Applies step i of rank r (a local step, or the receiving side of a matched pair).
  bool execute(int r, std::size_t i) {
    const auto& st = at(r, i);
    switch (st.kind) {
      case step_kind::send: return true;
      case step_kind::copy:
        if (!load(r, st.src, i, a_)) return false;
        store(r, st.dst, a_);
        return true;
      case step_kind::reduce:
        if (!load(r, st.dst, i, a_) || !load(r, st.src, i, b_) || !combine(r, i, st.dst, a_, b_)) return false;
        store(r, st.dst, a_);
        return true;
      case step_kind::finalize:
        if (!load(r, st.dst, i, a_)) return false;
        for (auto& v : a_) ++v.finalized;
        store(r, st.dst, a_);
        return true;
      case step_kind::reduce_slots: {
        if (!load(r, st.dst, i, a_)) return false;
        for (std::size_t k = 0; st.dst.bytes && k < st.src.bytes / st.dst.bytes; ++k) {
          const region slot{st.src.where, st.src.offset + k * st.dst.bytes, st.dst.bytes};
          if (!load(r, slot, i, b_) || !combine(r, i, st.dst, a_, b_)) return false;
        }
        store(r, st.dst, a_);
        return true;
      }
      case step_kind::write:
        // The data lands when the write completes, before the target's wait can.
        if (!load(r, st.src, i, a_)) return false;
        store(st.peer, st.dst, a_);
        return true;
      case step_kind::notify:
      case step_kind::wait:
        return true;
      case step_kind::recv:
      case step_kind::recv_reduce: {
        const auto sender = st.peer;
        const auto send_step = partner_[offsets_[std::size_t(r)] + i] - offsets_[std::size_t(sender)];
        if (!load(sender, at(sender, send_step).src, send_step, b_)) return false;
        if (st.kind == step_kind::recv_reduce) {
          if (!load(r, st.src, i, a_) || !combine(r, i, st.dst, a_, b_)) return false;
          store(r, st.dst, a_);
        } else {
          store(r, st.dst, b_);
        }
        return true;
      }
    }
    return true;
  }

  void complete(std::uint32_t g, std::vector<std::uint32_t>& work) {
    done_[g] = 1;
    ++completed_;
    for (auto k = succ_begin_[g]; k < succ_begin_[g + 1]; ++k)
      if (--pending_[succ_[k]] == 0) work.push_back(succ_[k]);
    if (const auto w = flag_wait_[g]; w != no_step && --pending_[w] == 0) work.push_back(w);
  }

  bool simulate() {
    const auto total = offsets_.back();
    sets_.emplace(p_);
    // Global step g of rank r is offsets_[r] + i; successor lists over global ids.
    pending_.assign(total, 0);
    succ_begin_.assign(total + 1, 0);
    for (int r = 0; r < p_; ++r) {
      const auto& steps = group_[std::size_t(r)].steps;
      for (std::size_t i = 0; i < steps.size(); ++i) {
        const auto g = offsets_[std::size_t(r)] + i;
        // A wait also needs every flag it counts: writes and notifies complete (and
        // land their data) as soon as their deps have.
        const auto deps = deps_of(r, i);
        pending_[g] = std::uint32_t(deps.size()) + incoming_[g];
        for (step_id d : deps) ++succ_begin_[offsets_[std::size_t(r)] + d + 1];
      }
    }
    for (std::size_t g = 0; g < total; ++g) succ_begin_[g + 1] += succ_begin_[g];
    succ_.resize(succ_begin_[total]);
    {
      std::vector<std::size_t> fill(succ_begin_.begin(), succ_begin_.end() - 1);
      for (int r = 0; r < p_; ++r) {
        const auto& steps = group_[std::size_t(r)].steps;
        for (std::size_t i = 0; i < steps.size(); ++i)
          for (step_id d : deps_of(r, i))
            succ_[fill[offsets_[std::size_t(r)] + d]++] = std::uint32_t(offsets_[std::size_t(r)] + i);
      }
    }

    // Input elements carry their own index and their rank; output and scratch start
    // undefined (in place, output shows the input where they overlap).
    memory_.assign(std::size_t(p_) * 3, {});
    for (int r = 0; r < p_; ++r) {
      const auto& l = layouts_[std::size_t(r)];
      for (int a = 0; a < 3; ++a) memory_[std::size_t(r) * 3 + std::size_t(a)].resize(l.elems[a]);
      if (!desc_.reads_input(r)) continue;  // a broadcast's input is read on its root only
      auto& in = array_of(r, buffer::input);
      for (std::size_t e = 0; e < desc_of(r).input_bytes(r) / es_; ++e)
        in[l.base[0] + e] = {std::uint32_t(e), rank_sets::singleton(r), 0, true};
    }

    done_.assign(total, 0);
    ready_.assign(total, 0);
    completed_ = 0;
    std::vector<std::uint32_t> work;
    for (std::uint32_t g = 0; g < total; ++g)
      if (pending_[g] == 0) work.push_back(g);
    while (!work.empty()) {
      const auto g = work.back();
      work.pop_back();
      const auto r = int(rank_of_[g]);
      const auto i = g - offsets_[std::size_t(r)];
      const auto kind = at(r, i).kind;
      if (!is_communication(kind)) {
        if (!execute(r, i)) return false;
        complete(g, work);
        continue;
      }
      // Rendezvous: a send is posted once its deps are done; the receive completes when
      // its own deps are done and the send is posted, and the send completes with it.
      ready_[g] = 1;
      const auto other = partner_[g];
      if (!ready_[other]) continue;
      const auto recv_g = kind == step_kind::send ? other : g;
      const auto rr = int(rank_of_[recv_g]);
      if (!execute(rr, recv_g - offsets_[std::size_t(rr)])) return false;
      complete(g, work);
      complete(other, work);
    }
    return completed_ == total || deadlock();
  }

  bool deadlock() {
    const auto total = offsets_.back();
    std::string blocked;
    std::size_t listed = 0, frontier = 0;
    for (std::uint32_t g = 0; g < total; ++g) {
      if (done_[g] || !ready_[g]) continue;
      ++frontier;
      if (listed == 8) continue;
      ++listed;
      const auto r = int(rank_of_[g]), pr = int(rank_of_[partner_[g]]);
      const auto i = g - offsets_[std::size_t(r)], pi = partner_[g] - offsets_[std::size_t(pr)];
      blocked += "\n  " + where(r, i) + " waits for " + where(pr, pi) + ", which waits for its deps";
    }
    for (std::uint32_t g = 0; g < total; ++g) {
      if (done_[g] || incoming_[g] == 0) continue;
      const auto r = int(rank_of_[g]);
      const auto i = g - offsets_[std::size_t(r)];
      std::uint32_t deps_left = 0;
      for (step_id d : deps_of(r, i)) deps_left += done_[offsets_[std::size_t(r)] + d] ? 0 : 1;
      if (deps_left) continue;  // blocked by its own rank, listed through the steps before it
      ++frontier;
      if (listed == 8) continue;
      ++listed;
      std::string missing;
      for (std::uint32_t w = 0; w < total; ++w)
        if (flag_wait_[w] == g && !done_[w]) missing += (missing.empty() ? "" : "; ") + where(w);
      blocked += "\n  " + where(r, i) + " waits for flags of " + missing + ", which wait(s) for their deps";
    }
    if (frontier > listed) blocked += "\n  ... and " + std::to_string(frontier - listed) + " more";
    return fail("deadlock: " + std::to_string(total - completed_) + " of " + std::to_string(total) +
                " steps can never complete; blocked:" + blocked);
  }

  // --- e) result -----------------------------------------------------------------------
  bool check_result() {
    const auto count = desc_.count;
    const bool reduced = reduces(desc_.kind);
    for (int r = 0; r < p_; ++r) {
      const auto& a = array_of(r, buffer::output);
      const auto base = layouts_[std::size_t(r)].base[std::size_t(buffer::output)];
      const auto out_elems = desc_of(r).output_bytes(r) / es_;
      for (std::size_t e = 0; e < out_elems; ++e) {
        const auto& v = a[base + e];
        const auto what = [&] {
          return "rank " + std::to_string(r) + " output element " + std::to_string(e) + " (output byte " +
                 std::to_string(e * es_) + ")";
        };
        std::size_t origin = e;
        int only = -1;  // the one rank expected, or -1 for all ranks
        const auto uneven_want = desc_.layout ? uneven_origin(r, e) : std::nullopt;
        if (desc_.layout && !uneven_want) continue;  // between a v-form's blocks: no call writes there
        if (!v.defined) return fail(what() + " is never written");
        if (uneven_want) std::tie(origin, only) = *uneven_want;
        else switch (desc_.kind) {
          case collective::allreduce:
          case collective::reduce: break;
          case collective::reduce_scatter: origin = std::size_t(r) * count + e; break;
          case collective::allgather:
          case collective::gather:
            origin = e % count;
            only = int(e / count);
            break;
          case collective::broadcast: only = desc_.root; break;
          case collective::scatter:
            origin = std::size_t(r) * count + e;
            only = desc_.root;
            break;
          case collective::alltoall:
            origin = std::size_t(r) * count + e % count;
            only = int(e / count);
            break;
          case collective::p2p: break;  // no output: verify_matching() is a batch's check
        }
        const int want_final = reduced ? 1 : 0;
        const bool set_ok = only < 0 ? sets_->count(v.set) == p_
                                     : sets_->count(v.set) == 1 && sets_->contains(v.set, only);
        if (v.origin == origin && set_ok && v.finalized == want_final) continue;
        return fail(what() + ": " + std::string(to_string(desc_.kind)) + " expects origin " + std::to_string(origin) +
                    ", ranks " + (only < 0 ? "all " + std::to_string(p_) : "{" + std::to_string(only) + "}") +
                    ", finalized " + (reduced ? "once" : "0 times") + "; got origin " +
                    std::to_string(v.origin) + ", ranks " + sets_->describe(v.set) + ", finalized " +
                    std::to_string(v.finalized) + " times");
      }
    }
    return true;
  }

  /// Where element `e` of a v-form's output on rank `r` comes from: (input element, the
  /// one rank, or -1 for all); none for an element between blocks.
  std::optional<std::pair<std::size_t, int>> uneven_origin(int r, std::size_t e) const {
    const uneven& mine = *desc_of(r).layout;
    const auto block_of = [&](const blocks& b) -> int {
      for (int j = 0; j < p_; ++j)
        if (e >= b.displ(j) && e < b.displ(j) + b.count(j)) return j;
      return -1;
    };
    switch (desc_.kind) {
      case collective::allgather:
      case collective::gather: {
        const int j = block_of(mine.many);
        if (j < 0) return std::nullopt;
        return std::pair{e - mine.many.displ(j), j};
      }
      case collective::reduce_scatter: return std::pair{mine.many.displ(r) + e, -1};
      case collective::scatter: return std::pair{desc_of(desc_.root).layout->many.displ(r) + e, desc_.root};
      case collective::alltoall: {
        const int j = block_of(mine.received);
        if (j < 0) return std::nullopt;
        return std::pair{desc_of(j).layout->many.displ(r) + (e - mine.received.displ(j)), j};
      }
      default: return std::nullopt;
    }
  }

  std::optional<rank_sets> sets_;
  std::vector<std::vector<value>> memory_;  // rank r's arrays at [3r, 3r+3)
  std::vector<std::uint32_t> pending_, succ_;
  std::vector<std::size_t> succ_begin_;
  std::vector<std::uint8_t> done_, ready_;
  std::size_t completed_ = 0;
  std::vector<value> a_, b_;
};

}  // namespace mimatrix::schedule::detail
