// algorithm::uneven_exchange: the v-forms (per-rank counts, schedule::uneven) as direct
// exchanges, one message a pair of ranks: gatherv, scatterv, allgatherv and
// reduce_scatter_v linearly, alltoallv pairwise.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::algorithm {

/// Every v-form as one message between each pair of ranks that exchange a block, a block
/// of no elements included: a rank that counts another length than its peer then fails on
/// the message's length (the transports compare it with the receive's), where
/// a count disagreement would otherwise pass unseen wherever a block was empty. No chunks,
/// for the same reason: their number depends on the count.
///
///  - gatherv, scatterv ("linear"): the root receives from (sends to) each rank in turn
///    after it, as algorithm::linear does; off the root a rank knows only its own count.
///  - allgatherv ("linear"): each rank sends its block to every other and receives theirs.
///  - reduce_scatter_v ("linear"): each rank sends block j of its input to rank j and
///    reduces the blocks it receives into its output one after another, in the order
///    r-1, r-2, ...: every element of a block is combined in one order.
///  - alltoallv ("pairwise"): algorithm::pairwise's order of partners, a block each.
///
/// At most `window` sends and `window` receives of a rank are in flight (message i waits
/// for message i - window of its kind, numbered alike on every rank), which bounds the
/// senders one receiver sees at once. The ranks' steps are the same as the uniform
/// calls' linear and pairwise schedules, so their costs are too (algorithm::linear,
/// algorithm::pairwise).
///
/// @par Thread Safety
/// Immutable: `build` may be called from any number of threads.
class uneven_exchange {
 public:
  static constexpr std::size_t default_window = 8;

  uneven_exchange() = default;
  explicit uneven_exchange(std::size_t window) : window_(window) {}

  /// The name a v-form's schedule carries.
  static constexpr std::string_view name_for(schedule::collective k) {
    return k == schedule::collective::alltoall ? "pairwise" : "linear";
  }
  static constexpr bool runs(schedule::collective k) {
    return k == schedule::collective::gather || k == schedule::collective::scatter ||
           k == schedule::collective::allgather || k == schedule::collective::reduce_scatter ||
           k == schedule::collective::alltoall;
  }

  /// Rank `rank`'s schedule of `desc`, which must have a layout.
  schedule::schedule build(const schedule::descriptor& desc, int rank) const {
    schedule::builder b(desc, rank, name_for(desc.kind));
    if (!desc.layout || !runs(desc.kind))
      throw error(errc::invalid_argument, "rank " + std::to_string(rank) + ": uneven_exchange runs the v-forms of "
                                          "gather, scatter, allgather, reduce_scatter and alltoall, not " +
                                          schedule::call_name(desc));
    switch (desc.kind) {
      case schedule::collective::gather: gather(b); break;
      case schedule::collective::scatter: scatter(b); break;
      case schedule::collective::allgather: allgather(b); break;
      case schedule::collective::reduce_scatter: reduce_scatter(b); break;
      default: alltoall(b); break;
    }
    return std::move(b).build();
  }

  std::size_t window() const { return window_; }

 private:
  using buffer = schedule::buffer;
  using region = schedule::region;
  using step_id = schedule::step_id;

  /// Block j of `side` in buffer `where`, in bytes.
  static region block(const schedule::builder& b, buffer where, const schedule::blocks& side, int j) {
    const std::size_t es = b.desc().elem_size;
    return region{where, side.displ(j) * es, side.count(j) * es};
  }
  /// The rank's one-block buffer `where` (its own count).
  static region own(const schedule::builder& b, buffer where) {
    return region{where, 0, b.desc().layout->many.count(b.rank()) * b.desc().elem_size};
  }

  /// Sends and receives numbered alike on every rank, each waiting for the one `window`
  /// before it of its kind.
  struct windowed {
    schedule::builder& b;
    std::size_t w;
    std::vector<step_id> sends{}, recvs{};
    std::size_t sent = 0, received = 0;

    /// A send of `src` to `peer`, after `after` too where it is set.
    void send(int peer, region src, std::optional<step_id> after = std::nullopt) {
      sends.push_back(next(sent, sends, after, [&](const std::vector<step_id>& deps) {
        return b.add(schedule::step_kind::send, peer, 0, src, {}, deps);
      }));
    }
    void recv(int peer, region dst) {
      recvs.push_back(next(received, recvs, std::nullopt, [&](const std::vector<step_id>& deps) {
        return b.add(schedule::step_kind::recv, peer, 0, {}, dst, deps);
      }));
    }

   private:
    template <class Add>
    step_id next(std::size_t& n, const std::vector<step_id>& made, std::optional<step_id> after, Add add) {
      std::vector<step_id> deps;
      if (after) deps.push_back(*after);
      if (w && n >= w) deps.push_back(made[n - w]);
      ++n;
      return add(deps);
    }
  };

  void gather(schedule::builder& b) const {
    const int p = b.size(), r = b.rank(), root = b.desc().root;
    const auto& many = b.desc().layout->many;
    if (r != root) {
      b.send(root, 0, own(b, buffer::input));
      return;
    }
    b.copy(own(b, buffer::input), block(b, buffer::output, many, root));  // in place: the same bytes
    windowed ex{b, window_};
    for (int k = 1; k < p; ++k) ex.recv((root + k) % p, block(b, buffer::output, many, (root + k) % p));
  }

  void scatter(schedule::builder& b) const {
    const int p = b.size(), r = b.rank(), root = b.desc().root;
    const auto& many = b.desc().layout->many;
    if (r != root) {
      b.recv(root, 0, own(b, buffer::output));
      return;
    }
    windowed ex{b, window_};
    for (int k = 1; k < p; ++k) ex.send((root + k) % p, block(b, buffer::input, many, (root + k) % p));
    b.copy(block(b, buffer::input, many, root), own(b, buffer::output));  // in place: the same bytes
  }

  void allgather(schedule::builder& b) const {
    const int p = b.size(), r = b.rank();
    const auto& many = b.desc().layout->many;
    // In place the copy writes the bytes it reads: the sends read the output after it.
    const region mine = block(b, buffer::output, many, r);
    const step_id copied = b.copy(own(b, buffer::input), mine);
    windowed ex{b, window_};
    for (int k = 1; k < p; ++k) {
      ex.send((r + k) % p, mine, copied);
      ex.recv((r - k + p) % p, block(b, buffer::output, many, (r - k + p) % p));
    }
  }

  void reduce_scatter(schedule::builder& b) const {
    const int p = b.size(), r = b.rank();
    const auto& many = b.desc().layout->many;
    const region out = own(b, buffer::output);
    windowed ex{b, window_};
    for (int k = 1; k < p; ++k) ex.send((r + k) % p, block(b, buffer::input, many, (r + k) % p));
    // In place the output is block r of the input: recv_reduce reads and writes it.
    region src = block(b, buffer::input, many, r);
    std::vector<step_id> last;
    if (p == 1) last.assign(1, b.copy(src, out));
    for (int k = 1; k < p; ++k) {
      last.assign(1, b.add(schedule::step_kind::recv_reduce, (r - k + p) % p, 0, src, out, last));
      src = out;
    }
    b.add(schedule::step_kind::finalize, -1, 0, {}, out, last);
  }

  void alltoall(schedule::builder& b) const {
    const int p = b.size(), r = b.rank();
    const auto& l = *b.desc().layout;
    b.copy(block(b, buffer::input, l.many, r), block(b, buffer::output, l.received, r));
    const bool xor_pairs = std::has_single_bit(static_cast<unsigned>(p));
    windowed ex{b, window_};
    for (int k = 1; k < p; ++k) {
      const int to = xor_pairs ? r ^ k : (r + k) % p, from = xor_pairs ? r ^ k : (r - k + p) % p;
      ex.send(to, block(b, buffer::input, l.many, to));
      ex.recv(from, block(b, buffer::output, l.received, from));
    }
  }

  std::size_t window_ = default_window;
};

}  // namespace mimatrix::algorithm
