// One rank's buffers for any of the eight collectives and the two v-forms, laid out, filled
// and checked the way nccl-tests does it, so that mimatrix's runner and the baselines' share
// one definition.
#pragma once

#include "args.hpp"
#include "data.hpp"
#include "datatype.hpp"
#include "report.hpp"
#include "splits.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace mimatrix::perf {

/// Host buffers of one rank. Out of place, the call reads `input()` and writes `output()`,
/// two buffers of shape.send_count and shape.recv_count elements; in place, the larger one
/// holds both (NCCL's convention): an allgather's and a gather's input is block `rank` of
/// the output, a reduce-scatter's and a scatter's output is block `rank` of the input, and
/// the others' input is their output. Every rank has both buffers, the roots' or not (as
/// nccl-tests allocates them); a rank's part that the call does not use stays unread.
/// A v-form's blocks are layout()'s (splits.hpp, --skew), in place an allgatherv's input
/// its block of the output.
class collective_buffers {
 public:
  collective_buffers(collective c, options const& o, int rank, int nranks)
      : c_(c), type_(o.type), op_(o.op), root_(o.root), rank_(rank), nranks_(nranks), skew_(o.skew) {}

  /// Buffers for `s`, kept across calls while large enough (no page faults inside the
  /// timing), the input filled with the data that makes every result known and the output
  /// with the sentinel.
  void prepare(shape const& s, bool in_place) {
    s_ = s;
    in_place_ = in_place;
    if (is_v_form(c_)) layout_ = layout_of(c_, s.count * static_cast<std::size_t>(nranks_), nranks_, rank_, skew_);
    std::size_t const es = size_of(type_), sends = send_count(), receives = recv_count();
    if (in_.size() < sends * es) in_.resize(sends * es);
    if (out_.size() < receives * es) out_.resize(receives * es);
    // In place the sentinel goes first: the input then overwrites its part of the one buffer.
    if (in_place) bytes::fill_sentinel(type_, one(in_.data(), out_.data()), std::max(sends, receives));
    else bytes::fill_sentinel(type_, output(), receives);
    fill_input(input());
  }

  /// Where the call reads and writes, given where the two buffers are (the host's, or device
  /// copies of them of the same sizes).
  [[nodiscard]] std::byte* input(std::byte* in, std::byte* out) const {
    return in_place_ ? one(in, out) + in_place_offset(gathers()) : in;
  }
  [[nodiscard]] std::byte* output(std::byte* in, std::byte* out) const {
    return in_place_ ? one(in, out) + in_place_offset(c_ == collective::reduce_scatter || c_ == collective::scatter) : out;
  }
  [[nodiscard]] std::byte* input() { return input(in_.data(), out_.data()); }
  [[nodiscard]] std::byte* output() { return output(in_.data(), out_.data()); }

  /// The host buffers themselves, for copies to and from device memory.
  [[nodiscard]] std::vector<std::byte>& in_storage() { return in_; }
  [[nodiscard]] std::vector<std::byte>& out_storage() { return out_; }

  [[nodiscard]] std::size_t count() const { return s_.count; }
  [[nodiscard]] bool in_place() const { return in_place_; }
  /// A v-form's blocks on this rank (empty for the others).
  [[nodiscard]] block_layout const& layout() const { return layout_; }

  /// This rank's wrong output elements after the last call (0 where it has no output).
  [[nodiscard]] std::size_t check() {
    void const* out = output();
    std::size_t const n = s_.count, ranks = static_cast<std::size_t>(nranks_);
    int const rank = rank_, root = root_;
    auto const received = [this](std::size_t b) { return layout_.recv.extent(b); };
    switch (c_) {
      case collective::allreduce: return bytes::check_allreduce(type_, out, n, op_, nranks_);
      case collective::reduce_scatter: return bytes::check_reduce_scatter(type_, out, n, op_, nranks_, rank);
      case collective::allgather:
        return bytes::check_blocks(type_, out, n, ranks, [&](std::size_t b) { return std::pair{int(b), 0}; });
      case collective::broadcast: return bytes::check_broadcast(type_, out, n, op_, root);
      case collective::reduce: return bytes::check_reduce(type_, out, n, op_, nranks_, rank, root);
      case collective::gather:
        if (rank != root) return 0;
        return bytes::check_blocks(type_, out, n, ranks, [&](std::size_t b) { return std::pair{int(b), root}; });
      case collective::scatter:
        return bytes::check_blocks(type_, out, n, 1, [&](std::size_t) { return std::pair{root, rank}; });
      case collective::alltoall:
        return bytes::check_blocks(type_, out, n, ranks, [&](std::size_t b) { return std::pair{int(b), rank}; });
      case collective::allgatherv:
        return bytes::check_blocks_at(type_, out, ranks, received, [](std::size_t b) { return std::pair{int(b), 0}; });
      case collective::alltoallv:
        return bytes::check_blocks_at(type_, out, ranks, received, [&](std::size_t b) { return std::pair{int(b), rank}; });
    }
    return 0;
  }

 private:
  // In place, the one buffer: the output where it is the larger, else the input.
  [[nodiscard]] bool gathers() const {
    return c_ == collective::allgather || c_ == collective::gather || c_ == collective::allgatherv;
  }
  [[nodiscard]] std::byte* one(std::byte* in, std::byte* out) const { return gathers() ? out : in; }

  [[nodiscard]] std::size_t in_place_offset(bool at_block) const {
    if (!at_block) return 0;
    auto const r = static_cast<std::size_t>(rank_);
    return (is_v_form(c_) ? layout_.recv.displs[r] : s_.count * r) * size_of(type_);
  }

  // Elements the buffers hold: a v-form's by its layout.
  [[nodiscard]] std::size_t send_count() const { return is_v_form(c_) ? layout_.send.total() : s_.send_count; }
  [[nodiscard]] std::size_t recv_count() const { return is_v_form(c_) ? layout_.recv.total() : s_.recv_count; }

  // The data of nccl-tests' InitData, mimatrix's closed forms (data.hpp): a reduction's and
  // a broadcast's input_value, a moved block's block_value (an allgather's as a gather to
  // 0); only the root's input where only the root reads it.
  void fill_input(std::byte* in) {
    std::size_t const n = s_.count, ranks = static_cast<std::size_t>(nranks_);
    int const rank = rank_, root = root_;
    auto const sent = [this](std::size_t b) { return layout_.send.extent(b); };
    switch (c_) {
      case collective::allreduce:
      case collective::reduce_scatter:
      case collective::reduce: bytes::fill_input(type_, in, s_.send_count, op_, rank); return;
      case collective::allgather: bytes::fill_blocks(type_, in, n, 1, [&](std::size_t) { return std::pair{rank, 0}; }); return;
      case collective::broadcast:
        if (rank == root) bytes::fill_input(type_, in, n, op_, rank);
        return;
      case collective::gather: bytes::fill_blocks(type_, in, n, 1, [&](std::size_t) { return std::pair{rank, root}; }); return;
      case collective::scatter:
        if (rank == root)
          bytes::fill_blocks(type_, in, n, ranks, [&](std::size_t b) { return std::pair{root, int(b)}; });
        return;
      case collective::alltoall:
        bytes::fill_blocks(type_, in, n, ranks, [&](std::size_t b) { return std::pair{rank, int(b)}; });
        return;
      case collective::allgatherv:
        bytes::fill_blocks_at(type_, in, 1, sent, [&](std::size_t) { return std::pair{rank, 0}; });
        return;
      case collective::alltoallv:
        bytes::fill_blocks_at(type_, in, ranks, sent, [&](std::size_t b) { return std::pair{rank, int(b)}; });
        return;
    }
  }

  collective c_;
  dtype type_;
  redop op_;
  int root_, rank_, nranks_;
  double skew_;
  shape s_{};
  block_layout layout_;
  bool in_place_ = false;
  std::vector<std::byte> in_, out_;
};

}  // namespace mimatrix::perf
