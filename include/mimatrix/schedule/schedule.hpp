// The schedule IR: for one rank, a DAG of primitive steps over byte ranges of the
// user's input, output and a scratch buffer. Algorithms generate schedules,
// schedule/verify.hpp proves them, transports execute them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mimatrix::schedule {

enum class collective : std::uint8_t { allreduce, reduce_scatter, allgather, broadcast };

constexpr std::string_view to_string(collective c) {
  switch (c) {
    case collective::allreduce: return "allreduce";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::allgather: return "allgather";
    case collective::broadcast: return "broadcast";
  }
  return "?";
}

/// What one call computes; identical on every rank of the call.
/// `count` follows NCCL: elements of the smaller per-rank buffer.
///   allreduce       input count,     output count
///   reduce_scatter  input size*count, output count  (rank r gets block r)
///   allgather       input count,     output size*count (block j from rank j)
///   broadcast       input count (read on root only), output count
struct descriptor {
  collective kind = collective::allreduce;
  int size = 1;
  std::size_t count = 0;
  std::size_t elem_size = 1;
  int root = 0;  // broadcast only

  constexpr std::size_t input_bytes() const {
    return (kind == collective::reduce_scatter ? std::size_t(size) : 1u) * count * elem_size;
  }
  constexpr std::size_t output_bytes() const {
    return (kind == collective::allgather ? std::size_t(size) : 1u) * count * elem_size;
  }
  /// In place, input and output share memory; this is where each starts in it (NCCL's
  /// convention: allgather's input is block `rank` of the output, reduce_scatter's
  /// output is block `rank` of the input).
  constexpr std::size_t in_place_input_offset(int rank) const {
    return kind == collective::allgather ? std::size_t(rank) * count * elem_size : 0;
  }
  constexpr std::size_t in_place_output_offset(int rank) const {
    return kind == collective::reduce_scatter ? std::size_t(rank) * count * elem_size : 0;
  }
  friend bool operator==(const descriptor&, const descriptor&) = default;
};

enum class buffer : std::uint8_t { input, output, scratch };

/// A byte range of one buffer.
struct region {
  buffer where = buffer::output;
  std::size_t offset = 0;
  std::size_t bytes = 0;
  friend bool operator==(const region&, const region&) = default;
};

enum class step_kind : std::uint8_t {
  send,         // src -> peer; completes once the data has left src (src may be reused)
  recv,         // peer -> dst
  recv_reduce,  // dst = op(src, data from peer); src may be dst
  reduce,       // dst = op(dst, src), locally
  copy,         // dst = src, locally
  finalize,     // dst = op.finalize(dst, size): applied exactly once to every result element
  // One-sided steps (write-with-immediate, like FI_REMOTE_CQ_DATA). A flag is
  // (writer, tag, call sequence number): a flag of call k never satisfies a wait of call
  // k+1, so flags never need resetting.
  write,         // src -> dst in the PEER's output or scratch, then raises flag `tag` at
                 // the peer; completes once the data has landed (src may be reused)
  notify,        // raises flag `tag` at the peer without data; completes once raised
  wait,          // completes once `count` flags with `tag` have arrived for this call
                 // (one from each of `count` peers); count 0 is a pure join of its deps
  reduce_slots,  // dst = op(dst, slot 0, ..., slot k-1): src is k back-to-back slots of
                 // dst.bytes each, combined in one pass over memory
};

constexpr std::string_view to_string(step_kind k) {
  switch (k) {
    case step_kind::send: return "send";
    case step_kind::recv: return "recv";
    case step_kind::recv_reduce: return "recv_reduce";
    case step_kind::reduce: return "reduce";
    case step_kind::copy: return "copy";
    case step_kind::finalize: return "finalize";
    case step_kind::write: return "write";
    case step_kind::notify: return "notify";
    case step_kind::wait: return "wait";
    case step_kind::reduce_slots: return "reduce_slots";
  }
  return "?";
}

/// Two-sided message steps: a send meets one recv or recv_reduce.
constexpr bool is_communication(step_kind k) {
  return k == step_kind::send || k == step_kind::recv || k == step_kind::recv_reduce;
}

/// Steps that raise a flag at a peer (and, for write, land data in its buffers).
constexpr bool is_one_sided(step_kind k) { return k == step_kind::write || k == step_kind::notify; }

/// Steps that name a peer.
constexpr bool has_peer(step_kind k) { return is_communication(k) || is_one_sided(k); }

using step_id = std::uint32_t;

/// One primitive. A send from rank a to b with tag t meets the recv or recv_reduce on b
/// from a with tag t; each (sender, receiver, tag) occurs once a call, with equal bytes.
/// A write or notify from a to b with tag t raises a flag that the one wait on b with
/// tag t counts; each (writer, target, tag) occurs once a call.
struct step {
  step_kind kind = step_kind::copy;
  int peer = -1;          // communication and one-sided steps only
  std::uint32_t tag = 0;  // communication, one-sided and wait steps only
  region src{};           // read: send, recv_reduce, reduce, copy, write, reduce_slots
  region dst{};           // written: recv, recv_reduce, reduce, copy, finalize, reduce_slots;
                          // write: a region of the PEER's output or scratch
  std::vector<step_id> deps;  // must complete before this step starts
  std::uint32_t count = 0;    // wait only: flags to wait for

  std::size_t bytes() const {
    return kind == step_kind::send || kind == step_kind::write || kind == step_kind::reduce_slots ? src.bytes
                                                                                                  : dst.bytes;
  }
};

/// One rank's part of one collective call.
struct schedule {
  descriptor desc{};
  int rank = 0;
  std::string algorithm;
  std::size_t scratch_bytes = 0;
  std::vector<step> steps;
  // Successors of step i are successors[successor_begin[i] .. successor_begin[i+1]),
  // precomputed so executors release dependents without searching.
  std::vector<step_id> successors;
  std::vector<std::uint32_t> successor_begin;
};

/// Marks step `id` of `s` done for an executor: decrements the unfinished-dependency
/// count of each successor and appends those that reach zero to `ready`.
inline void release_successors(const schedule& s, step_id id, std::vector<std::uint32_t>& pending,
                               std::vector<step_id>& ready) {
  for (auto k = s.successor_begin[id]; k < s.successor_begin[id + 1]; ++k)
    if (--pending[s.successors[k]] == 0) ready.push_back(s.successors[k]);
}

/// Builds a schedule step by step; every step may only depend on earlier ones, so a
/// built schedule is acyclic by construction.
class builder {
 public:
  builder(const descriptor& desc, int rank, std::string_view algorithm) {
    s_.desc = desc;
    s_.rank = rank;
    s_.algorithm = algorithm;
  }

  const descriptor& desc() const { return s_.desc; }
  int rank() const { return s_.rank; }
  int size() const { return s_.desc.size; }

  step_id send(int peer, std::uint32_t tag, region src, std::initializer_list<step_id> deps = {}) {
    return add({step_kind::send, peer, tag, src, {}, deps});
  }
  step_id recv(int peer, std::uint32_t tag, region dst, std::initializer_list<step_id> deps = {}) {
    return add({step_kind::recv, peer, tag, {}, dst, deps});
  }
  step_id recv_reduce(int peer, std::uint32_t tag, region src, region dst,
                      std::initializer_list<step_id> deps = {}) {
    return add({step_kind::recv_reduce, peer, tag, src, dst, deps});
  }
  step_id reduce(region src, region dst, std::initializer_list<step_id> deps = {}) {
    return add({step_kind::reduce, -1, 0, src, dst, deps});
  }
  step_id copy(region src, region dst, std::initializer_list<step_id> deps = {}) {
    return add({step_kind::copy, -1, 0, src, dst, deps});
  }
  step_id finalize(region dst, std::initializer_list<step_id> deps = {}) {
    return add({step_kind::finalize, -1, 0, {}, dst, deps});
  }
  /// Lands `src` in `remote_dst` of `peer`'s buffers (output or scratch) and raises flag
  /// `tag` there.
  step_id write(int peer, std::uint32_t tag, region src, region remote_dst, std::initializer_list<step_id> deps = {}) {
    return add({step_kind::write, peer, tag, src, remote_dst, deps});
  }
  /// Raises flag `tag` at `peer`, without data.
  step_id notify(int peer, std::uint32_t tag, std::initializer_list<step_id> deps = {}) {
    return add({step_kind::notify, peer, tag, {}, {}, deps});
  }
  /// Completes once `count` peers' flags with `tag` have arrived for this call.
  template <class Deps = std::initializer_list<step_id>>
  step_id wait(std::uint32_t tag, std::uint32_t count, const Deps& deps = {}) {
    step st{step_kind::wait, -1, tag, {}, {}, {}, count};
    st.deps.assign(deps.begin(), deps.end());
    return add(std::move(st));
  }
  /// dst = op(dst, slot 0, ..., slot k-1), where `slots` is k back-to-back regions of
  /// dst.bytes each: one pass over memory however many slots there are.
  template <class Deps = std::initializer_list<step_id>>
  step_id reduce_slots(region slots, region dst, const Deps& deps = {}) {
    return add(step_kind::reduce_slots, -1, 0, slots, dst, deps);
  }
  /// Adds a step whose dependencies are in a container (for a variable number).
  template <class Deps>
  step_id add(step_kind kind, int peer, std::uint32_t tag, region src, region dst, const Deps& deps,
              std::uint32_t count = 0) {
    step st{kind, peer, tag, src, dst, {}, count};
    st.deps.assign(deps.begin(), deps.end());
    return add(std::move(st));
  }
  /// Adds a copy of `st` (its deps must be earlier steps).
  step_id add(step st) {
    const auto id = static_cast<step_id>(s_.steps.size());
    for (step_id d : st.deps)
      if (d >= id) throw std::logic_error("schedule::builder: a step may only depend on earlier steps");
    s_.steps.push_back(std::move(st));
    return id;
  }

  /// Scratch space for this schedule, `bytes` long.
  region scratch(std::size_t bytes) {
    region r{buffer::scratch, s_.scratch_bytes, bytes};
    s_.scratch_bytes += bytes;
    return r;
  }

  schedule build() && {
    const auto n = s_.steps.size();
    s_.successor_begin.assign(n + 1, 0);
    for (const auto& st : s_.steps)
      for (step_id d : st.deps) ++s_.successor_begin[d + 1];
    for (std::size_t i = 0; i < n; ++i) s_.successor_begin[i + 1] += s_.successor_begin[i];
    s_.successors.resize(s_.successor_begin[n]);
    std::vector<std::uint32_t> fill(s_.successor_begin.begin(), s_.successor_begin.end() - 1);
    for (step_id i = 0; i < n; ++i)
      for (step_id d : s_.steps[i].deps) s_.successors[fill[d]++] = i;
    return std::move(s_);
  }

 private:
  schedule s_;
};

}  // namespace mimatrix::schedule
