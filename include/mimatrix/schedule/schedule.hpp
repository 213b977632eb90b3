// The schedule IR: for one rank, a DAG of primitive steps over byte ranges of the
// user's input, output and a scratch buffer. Algorithms generate schedules,
// schedule/verify.hpp proves them, transports execute them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/uneven.hpp"

namespace mimatrix::schedule {

enum class collective : std::uint8_t {
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  reduce,   // to a root
  gather,   // to a root
  scatter,  // from a root
  alltoall,
  p2p,  // a batch of sends and receives (schedule/p2p.hpp): only the ranks it names take part
};
/// The kinds wire::pack carries, in 3 bits: every collective but p2p, whose messages the
/// wire packs its own way (increment 2 of docs/p2p).
inline constexpr int collective_kinds = 8;

constexpr std::string_view to_string(collective c) {
  switch (c) {
    case collective::allreduce: return "allreduce";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::allgather: return "allgather";
    case collective::broadcast: return "broadcast";
    case collective::reduce: return "reduce";
    case collective::gather: return "gather";
    case collective::scatter: return "scatter";
    case collective::alltoall: return "alltoall";
    case collective::p2p: return "p2p";
  }
  return "?";
}

/// Calls with a root, which every rank must name alike.
constexpr bool has_root(collective c) {
  return c == collective::broadcast || c == collective::reduce || c == collective::gather || c == collective::scatter;
}

/// Calls that combine the ranks' contributions with the reduction.
constexpr bool reduces(collective c) {
  return c == collective::allreduce || c == collective::reduce_scatter || c == collective::reduce;
}

/// What one call computes; identical on every rank of the call, but for a v-form's
/// `layout`, which is the call as this rank sees it (schedule::uneven).
/// `count` follows NCCL: elements of the smaller per-rank buffer, a block. Sizes depend
/// on the rank where a call has a root (0: the buffer is not used there):
///   allreduce       input count,            output count
///   reduce_scatter  input size*count,       output count  (rank r gets block r)
///   allgather       input count,            output size*count (block j from rank j)
///   broadcast       input count (read on root only), output count
///   reduce          input count,            output count on root, none elsewhere
///   gather          input count,            output size*count on root (block j from rank j)
///   scatter         input size*count on root (block j to rank j), output count
///   alltoall        input size*count (block j to rank j), output size*count (block j from
///                   rank j); never in place
/// With a `layout` (the v-forms of reduce_scatter, allgather, gather, scatter and
/// alltoall), `count` is 0 and the blocks are the layout's: block j of the buffer with a
/// block per rank is layout->many's, and a one-block buffer holds the rank's own block.
struct descriptor {
  collective kind = collective::allreduce;
  int size = 1;
  std::size_t count = 0;
  std::size_t elem_size = 1;
  int root = 0;  // calls with a root only (has_root)
  std::shared_ptr<const uneven> layout{};  // v-forms only

  std::size_t input_bytes(int rank) const {
    if (layout) [[unlikely]] return uneven_input(rank) * elem_size;
    switch (kind) {
      case collective::reduce_scatter:
      case collective::alltoall: return blocks();
      case collective::scatter: return rank == root ? blocks() : 0;
      default: return block();
    }
  }
  std::size_t output_bytes(int rank) const {
    if (layout) [[unlikely]] return uneven_output(rank) * elem_size;
    switch (kind) {
      case collective::allgather:
      case collective::alltoall: return blocks();
      case collective::gather: return rank == root ? blocks() : 0;
      case collective::reduce: return rank == root ? block() : 0;
      default: return block();
    }
  }
  /// The larger buffer of the rank that holds the most (a root holds the most).
  std::size_t largest_bytes() const { return std::max(input_bytes(root), output_bytes(root)); }
  /// Whether `rank` reads its input (a broadcast's and a scatter's only on the root).
  constexpr bool reads_input(int rank) const {
    return !(kind == collective::broadcast || kind == collective::scatter) || rank == root;
  }
  /// In place, input and output share memory; this is where each starts in it (NCCL's
  /// convention: allgather's and gather's input is block `rank` of the output,
  /// reduce_scatter's and scatter's output is block `rank` of the input).
  std::size_t in_place_input_offset(int rank) const {
    if (kind != collective::allgather && kind != collective::gather) return 0;
    return layout ? layout->many.displ(rank) * elem_size : std::size_t(rank) * block();
  }
  std::size_t in_place_output_offset(int rank) const {
    if (kind != collective::reduce_scatter && kind != collective::scatter) return 0;
    return layout ? layout->many.displ(rank) * elem_size : std::size_t(rank) * block();
  }
  /// Whether a call may run with input and output in one buffer.
  constexpr bool may_run_in_place() const { return kind != collective::alltoall; }
  /// The same call: the layouts compared by what they hold.
  friend bool operator==(const descriptor& a, const descriptor& b) {
    return a.kind == b.kind && a.size == b.size && a.count == b.count && a.elem_size == b.elem_size &&
           a.root == b.root && (a.layout == b.layout || (a.layout && b.layout && *a.layout == *b.layout));
  }

 private:
  constexpr std::size_t block() const { return count * elem_size; }
  constexpr std::size_t blocks() const { return std::size_t(size) * count * elem_size; }
  // Out of line: the uniform calls' sizes stay small enough to inline on the call path.
  [[gnu::cold, gnu::noinline]] std::size_t uneven_input(int rank) const {
    switch (kind) {
      case collective::reduce_scatter:
      case collective::alltoall: return layout->many.extent();
      case collective::scatter: return rank == root ? layout->many.extent() : 0;
      default: return layout->many.count(rank);
    }
  }
  [[gnu::cold, gnu::noinline]] std::size_t uneven_output(int rank) const {
    switch (kind) {
      case collective::allgather: return layout->many.extent();
      case collective::alltoall: return layout->received.extent();
      case collective::gather: return rank == root ? layout->many.extent() : 0;
      default: return layout->many.count(rank);
    }
  }
};

/// "allgatherv", "reduce_scatter_v" for calls with a layout, "p2p batch" for a batch; the
/// kind's name otherwise.
constexpr std::string_view call_name(collective kind, bool uneven) {
  if (kind == collective::p2p) return "p2p batch";  // "rank 1, p2p batch #4, step 0, peer 0: ..."
  if (!uneven) return to_string(kind);
  switch (kind) {
    case collective::reduce_scatter: return "reduce_scatter_v";
    case collective::allgather: return "allgatherv";
    case collective::gather: return "gatherv";
    case collective::scatter: return "scatterv";
    case collective::alltoall: return "alltoallv";
    default: return to_string(kind);  // no v-form
  }
}
inline std::string call_name(const descriptor& d) { return std::string(call_name(d.kind, d.layout != nullptr)); }

/// The buffers a region names: a collective's input, output and scratch, or entry k of a
/// schedule's buffer table (a p2p batch's op k), values 3 to 255.
enum class buffer : std::uint8_t { input, output, scratch };
inline constexpr std::size_t max_entries = 253;
constexpr buffer entry(std::size_t k) { return static_cast<buffer>(3 + k); }
constexpr bool is_entry(buffer b) { return static_cast<std::uint8_t>(b) >= 3; }
constexpr std::size_t entry_index(buffer b) { return static_cast<std::uint8_t>(b) - 3u; }

/// A byte range of one buffer, in 16 bytes: the buffer and a 56-bit offset share one
/// word (64 PiB of offsets; the builder refuses anything larger).
struct region {
  static constexpr int offset_bits = 56;
  static constexpr std::uint64_t offset_limit = std::uint64_t(1) << offset_bits;  // offsets are below this

  buffer where : 8 = buffer::output;
  std::uint64_t offset : offset_bits = 0;
  std::uint64_t bytes = 0;
  friend bool operator==(const region&, const region&) = default;
};
static_assert(sizeof(region) == 16, "region: buffer and offset share one 64-bit word");

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
/// tag t counts; each (writer, target, tag) occurs once a call. Its dependencies live
/// in the schedule (`schedule::deps`), so a step is 48 plain bytes. Initialize one by
/// designators (`{.kind = step_kind::recv, .peer = 1, .dst = r}`): count sits before
/// the regions, where it costs no padding.
struct step {
  step_kind kind = step_kind::copy;
  int peer = -1;            // communication and one-sided steps only
  std::uint32_t tag = 0;    // communication, one-sided and wait steps only
  std::uint32_t count = 0;  // wait only: flags to wait for
  region src{};             // read: send, recv_reduce, reduce, copy, write, reduce_slots
  region dst{};             // written: recv, recv_reduce, reduce, copy, finalize, reduce_slots;
                            // write: a region of the PEER's output or scratch

  std::uint64_t bytes() const {
    return kind == step_kind::send || kind == step_kind::write || kind == step_kind::reduce_slots ? src.bytes
                                                                                                  : dst.bytes;
  }
};
static_assert(sizeof(step) == 48, "step: kind, peer, tag, count and two 16-byte regions");

/// One rank's part of one collective call: the steps, and two CSR adjacency lists over
/// them (one flat array each, no allocation per step).
///
/// @par Thread Safety
/// A plain value: concurrent reads are safe, writes need exclusive access.
struct schedule {
  descriptor desc{};
  int rank = 0;
  std::string algorithm;
  /// What every rank's schedule of the call must agree on beyond its name: a digest of
  /// the topology's and the algorithm's parameters (ring order, node size, chunk), set by
  /// the engine; 0 where nobody set one. Transports compare it as they compare names.
  std::uint64_t agreement = 0;
  std::size_t scratch_bytes = 0;
  /// The bytes of each entry of the buffer table (buffer::entry); empty for collectives.
  std::vector<std::uint64_t> entry_bytes;
  std::vector<step> steps;
  // What must complete before step i starts: dep_ids[dep_begin[i] .. dep_begin[i+1]).
  std::vector<step_id> dep_ids;
  std::vector<std::uint32_t> dep_begin;
  // The steps that depend on step i: successor_ids[successor_begin[i] .. successor_begin[i+1]),
  // precomputed so executors release dependents without searching.
  std::vector<step_id> successor_ids;
  std::vector<std::uint32_t> successor_begin;

  std::span<const step_id> deps(step_id i) const {
    return {dep_ids.data() + dep_begin[i], dep_begin[i + 1] - dep_begin[i]};
  }
  std::span<const step_id> successors(step_id i) const {
    return {successor_ids.data() + successor_begin[i], successor_begin[i + 1] - successor_begin[i]};
  }
  /// Heap bytes the arrays hold (their capacities), the measure of a schedule's size.
  std::size_t memory_bytes() const {
    return steps.capacity() * sizeof(step) +
           (dep_ids.capacity() + dep_begin.capacity() + successor_ids.capacity() + successor_begin.capacity()) *
               sizeof(std::uint32_t);
  }
};

/// Marks step `id` of `s` done for an executor: decrements the unfinished-dependency
/// count of each successor (`pending[k]`, a vector or a transport's column) and appends
/// those that reach zero to `ready`.
template <class Counts>
void release_successors(const schedule& s, step_id id, Counts& pending, std::vector<step_id>& ready) {
  for (step_id k : s.successors(id))
    if (--pending[k] == 0) ready.push_back(k);
}

/// Builds a schedule step by step; every step may only depend on earlier ones, so a
/// built schedule is acyclic by construction. Dependencies are appended to one flat
/// array; `build` adds the successor lists.
///
/// Throws mimatrix::error(invalid_argument) for a buffer, scratch space or region that
/// reaches past region::offset_limit (2^56 bytes), and std::logic_error for a step that
/// depends on itself or a later step.
///
/// @par Thread Safety
/// One builder, one thread.
class builder {
 public:
  /// Throws invalid_argument, naming the rank and the call, for a descriptor no schedule
  /// can have: a group of no ranks, a rank outside it, elements of 0 bytes, or a root
  /// outside the group (a generator divides by the element size and the group).
  builder(const descriptor& desc, int rank, std::string_view algorithm) {
    s_.desc = desc;
    s_.rank = rank;
    s_.algorithm = algorithm;
    s_.dep_begin.push_back(0);
    const std::string p = std::to_string(desc.size);
    if (desc.size < 1) refuse("a group of " + p + " ranks");
    if (rank < 0 || rank >= desc.size) refuse("rank " + std::to_string(rank) + " is outside a group of " + p);
    if (desc.elem_size == 0) refuse("elements of 0 bytes");
    if (has_root(desc.kind) && (desc.root < 0 || desc.root >= desc.size))
      refuse("root " + std::to_string(desc.root) + " is outside a group of " + p);
    // Compared before multiplying: count x elem_size (x the group) may wrap around.
    const bool blocks = desc.kind == collective::reduce_scatter || desc.kind == collective::allgather ||
                        desc.kind == collective::gather || desc.kind == collective::scatter ||
                        desc.kind == collective::alltoall;
    if (desc.layout) {
      const auto& l = *desc.layout;
      for (const auto* side : {&l.many, &l.received})
        if (side->extent() > (region::offset_limit - 1) / desc.elem_size)
          too_far("a buffer (" + std::to_string(side->extent()) + " elements of " + std::to_string(desc.elem_size) +
                  " bytes)");
    }
    if (desc.count > (region::offset_limit - 1) / desc.elem_size / (blocks ? std::size_t(desc.size) : 1))
      too_far("a buffer (" + std::to_string(desc.count) + " elements of " + std::to_string(desc.elem_size) +
              " bytes" + (blocks ? ", times " + p + " blocks)" : ")"));
  }

  const descriptor& desc() const { return s_.desc; }
  int rank() const { return s_.rank; }
  int size() const { return s_.desc.size; }

  /// Room for `steps` steps and `deps` dependencies in all, for a generator that knows
  /// them. The arrays then never grow: growing by doubling touches about twice their
  /// final size in fresh pages, and page faults are most of a first build's time.
  void reserve(std::size_t steps, std::size_t deps) {
    s_.steps.reserve(steps);
    s_.dep_begin.reserve(steps + 1);
    s_.dep_ids.reserve(deps);
  }

  step_id send(int peer, std::uint32_t tag, region src, std::initializer_list<step_id> deps = {}) {
    return add({.kind = step_kind::send, .peer = peer, .tag = tag, .src = src}, deps);
  }
  step_id recv(int peer, std::uint32_t tag, region dst, std::initializer_list<step_id> deps = {}) {
    return add({.kind = step_kind::recv, .peer = peer, .tag = tag, .dst = dst}, deps);
  }
  step_id recv_reduce(int peer, std::uint32_t tag, region src, region dst,
                      std::initializer_list<step_id> deps = {}) {
    return add({.kind = step_kind::recv_reduce, .peer = peer, .tag = tag, .src = src, .dst = dst}, deps);
  }
  step_id reduce(region src, region dst, std::initializer_list<step_id> deps = {}) {
    return add({.kind = step_kind::reduce, .src = src, .dst = dst}, deps);
  }
  step_id copy(region src, region dst, std::initializer_list<step_id> deps = {}) {
    return add({.kind = step_kind::copy, .src = src, .dst = dst}, deps);
  }
  step_id finalize(region dst, std::initializer_list<step_id> deps = {}) {
    return add({.kind = step_kind::finalize, .dst = dst}, deps);
  }
  /// Lands `src` in `remote_dst` of `peer`'s buffers (output or scratch) and raises flag
  /// `tag` there.
  step_id write(int peer, std::uint32_t tag, region src, region remote_dst, std::initializer_list<step_id> deps = {}) {
    return add({.kind = step_kind::write, .peer = peer, .tag = tag, .src = src, .dst = remote_dst}, deps);
  }
  /// Raises flag `tag` at `peer`, without data.
  step_id notify(int peer, std::uint32_t tag, std::initializer_list<step_id> deps = {}) {
    return add({.kind = step_kind::notify, .peer = peer, .tag = tag}, deps);
  }
  /// Completes once `count` peers' flags with `tag` have arrived for this call.
  template <class Deps = std::initializer_list<step_id>>
  step_id wait(std::uint32_t tag, std::uint32_t count, const Deps& deps = {}) {
    return add({.kind = step_kind::wait, .tag = tag, .count = count}, deps);
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
    return add({.kind = kind, .peer = peer, .tag = tag, .count = count, .src = src, .dst = dst}, deps);
  }
  /// Adds a copy of `st`, after `deps` (earlier steps, in any container of step_id).
  template <class Deps = std::initializer_list<step_id>>
  step_id add(const step& st, const Deps& deps = {}) {
    const auto id = static_cast<step_id>(s_.steps.size());
    for (step_id d : deps)
      if (d >= id)
        throw std::logic_error("schedule::builder: step " + std::to_string(id) + " depends on step " +
                               std::to_string(d) + "; a step may only depend on earlier steps");
    // A region ends at most at region::offset_limit, so its offset fits in 56 bits.
    const auto check = [&](const region& r, const char* name) {
      if (r.bytes > region::offset_limit - r.offset)
        too_far("step " + std::to_string(id) + "'s " + name + " (offset " + std::to_string(r.offset) + ", " +
                std::to_string(r.bytes) + " bytes)");
    };
    check(st.src, "src");
    check(st.dst, "dst");
    s_.dep_ids.insert(s_.dep_ids.end(), deps.begin(), deps.end());
    s_.dep_begin.push_back(static_cast<std::uint32_t>(s_.dep_ids.size()));
    s_.steps.push_back(st);
    return id;
  }

  /// Scratch space for this schedule, `bytes` long.
  region scratch(std::size_t bytes) {
    if (bytes >= region::offset_limit - s_.scratch_bytes)
      too_far("scratch (" + std::to_string(s_.scratch_bytes) + " + " + std::to_string(bytes) + " bytes)");
    region r{buffer::scratch, s_.scratch_bytes, bytes};
    s_.scratch_bytes += bytes;
    return r;
  }

  schedule build() && {
    // Successor lists by counting sort: begin[d] counts d's successors, then its end;
    // placing edges from the last step back leaves begin[d] at d's start and each list
    // in ascending order.
    const auto n = s_.steps.size();
    auto& begin = s_.successor_begin;
    begin.assign(n + 1, 0);
    for (step_id d : s_.dep_ids) ++begin[d];
    for (std::size_t i = 0; i < n; ++i) begin[i + 1] += begin[i];
    s_.successor_ids.resize(s_.dep_ids.size());
    for (auto i = static_cast<step_id>(n); i-- > 0;)
      for (step_id d : s_.deps(i)) s_.successor_ids[--begin[d]] = i;
    trim(s_.steps);
    trim(s_.dep_ids);
    trim(s_.dep_begin);
    return std::move(s_);
  }

 private:
  /// Growth by doubling can leave half of an array unused, and a schedule is kept (in
  /// a plan cache). Copying to size touches fresh pages, most of a first build's time,
  /// so only an array with a quarter or more unused is trimmed.
  template <class T>
  static void trim(std::vector<T>& v) {
    if (v.capacity() - v.size() >= v.capacity() / 4) v.shrink_to_fit();
  }

  [[noreturn]] void refuse(const std::string& what) const {
    throw error(errc::invalid_argument, "schedule::builder: rank " + std::to_string(s_.rank) + ", " + s_.algorithm +
                                            " " + std::string(to_string(s_.desc.kind)) + ": " + what);
  }

  [[noreturn]] void too_far(const std::string& what) const {
    refuse(what + " reaches past 2^56 bytes, the limit of region offsets");
  }

  schedule s_;
};

}  // namespace mimatrix::schedule
