// The c10d calls mapped to mimatrix's collectives. Calls that take one tensor a rank run
// on it in place; c10d's list forms stage through one flat tensor (MPI's v-forms where the
// tensors' sizes differ) and copy out once the call ended.
#include "process_group.hpp"

#include <pybind11/pybind11.h>
#include <unistd.h>

#include <cstring>
#include <numeric>

#include "mimatrix/bootstrap/env.hpp"
#include "store_adapter.hpp"
#include "tensors.hpp"

namespace mimatrix::torch_backend {

namespace {

/// This rank's place among the ranks of its host, found through the store: mimatrix
/// takes shared memory (shm) between ranks of one host when all are on one.
bootstrap::identity identity_of(c10d::Store& store, int rank, int size) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  store.set("mimatrix_torch/host/" + std::to_string(rank), std::vector<std::uint8_t>(host, host + std::strlen(host)));
  bootstrap::identity id;
  id.rank = rank;
  id.size = size;
  id.local_size = 0;
  id.launcher = "torch";
  for (int r = 0; r < size; ++r) {
    const auto theirs = store.get("mimatrix_torch/host/" + std::to_string(r));
    if (std::string(theirs.begin(), theirs.end()) != host) continue;
    if (r == rank) id.local_rank = id.local_size;
    ++id.local_size;
  }
  return id;
}

/// `tensors`' byte counts, one a rank.
std::vector<std::size_t> byte_counts(const std::vector<at::Tensor>& tensors) {
  std::vector<std::size_t> counts;
  for (const at::Tensor& t : tensors) counts.push_back(std::size_t(t.numel()) * t.element_size());
  return counts;
}

/// Room for blocks of `counts` bytes back to back.
at::Tensor staging(const std::vector<std::size_t>& counts) {
  return at::empty({std::int64_t(std::accumulate(counts.begin(), counts.end(), std::size_t(0)))}, at::kByte);
}

/// The bytes of `tensors` back to back.
at::Tensor packed(const std::vector<at::Tensor>& tensors) {
  const std::vector<std::size_t> counts = byte_counts(tensors);
  at::Tensor flat = staging(counts);
  auto* at = static_cast<std::uint8_t*>(flat.data_ptr());
  for (std::size_t j = 0; j < tensors.size(); ++j, at += counts[j - 1]) std::memcpy(at, tensors[j].data_ptr(), counts[j]);
  return flat;
}

/// Copies `flat`'s bytes, back to back, into `tensors`.
void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  const auto* at = static_cast<const std::uint8_t*>(flat.data_ptr());
  for (const at::Tensor& t : tensors) {
    const std::size_t n = std::size_t(t.numel()) * t.element_size();
    std::memcpy(t.data_ptr(), at, n);
    at += n;
  }
}

}  // namespace

process_group::process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size),
      timeout_(timeout),
      comm_(identity_of(*store, rank, size), std::make_shared<c10d_store>(store)),
      coll_(comm_) {
  comm_.set_timeout(timeout);
}

process_group::~process_group() {
  // The finisher may drop the last reference to a tensor Python owns, which takes the GIL:
  // the thread destroying the group (Python's, in destroy_process_group) must not hold it
  // while the finisher ends, or both wait for ever.
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release unlocked;
    finisher_.stop();
  } else {
    finisher_.stop();
  }
}

call_options process_group::with(std::chrono::milliseconds timeout) const {
  call_options o;
  o.timeout = timeout == c10d::kUnsetTimeout ? timeout_ : timeout;
  return o;
}

void process_group::refuse(const std::string& call, const std::string& why) const {
  throw error(errc::invalid_argument, "rank " + std::to_string(rank_) + ", " + call + ": " + why);
}

c10::intrusive_ptr<c10d::Work> process_group::launch(c10d::OpType type, request pending,
                                                     std::vector<at::Tensor> outputs, std::function<void()> after) {
  auto w = c10::make_intrusive<work>(rank_, type, std::move(pending), std::move(outputs), std::move(after));
  finisher_.add(w);
  return w;
}

c10::intrusive_ptr<c10d::Work> process_group::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  const buffer b = moved(single(tensors, rank_, "broadcast"), rank_, "broadcast");
  return launch(c10d::OpType::BROADCAST,
                coll_.broadcast(b.data, b.data, b.count, b.type, int(opts.rootRank), with(opts.timeout)), tensors);
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, rank_, "allreduce");
  const buffer b = reduced(t, rank_, "allreduce");
  const auto op = op_of(opts.reduceOp, t.scalar_type(), rank_, "allreduce");
  return launch(c10d::OpType::ALLREDUCE, coll_.allreduce(b.data, b.data, b.count, b.type, op, with(opts.timeout)),
                tensors);
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  const std::string call = "allreduce_coalesced";
  if (tensors.empty()) refuse(call, "no tensors");
  for (const at::Tensor& t : tensors) {
    check_tensor(t, rank_, call);
    if (t.scalar_type() != tensors.front().scalar_type())
      refuse(call, "tensors of " + std::string(c10::toString(tensors.front().scalar_type())) + " and " +
                       std::string(c10::toString(t.scalar_type())) + "; one call reduces one dtype");
  }
  std::vector<at::Tensor> flat_parts;
  for (const at::Tensor& t : tensors) flat_parts.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(flat_parts);
  const buffer b = reduced(flat, rank_, call);
  const auto op = op_of(opts.reduceOp, flat.scalar_type(), rank_, call);
  request pending = coll_.allreduce(b.data, b.data, b.count, b.type, op, with(opts.timeout));
  return launch(c10d::OpType::ALLREDUCE_COALESCED, std::move(pending), tensors, [flat, tensors] {
    std::int64_t at = 0;
    for (const at::Tensor& t : tensors) {
      t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
      at += t.numel();
    }
  });
}

c10::intrusive_ptr<c10d::Work> process_group::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, rank_, "reduce");
  const buffer b = reduced(t, rank_, "reduce");
  const auto op = op_of(opts.reduceOp, t.scalar_type(), rank_, "reduce");
  return launch(c10d::OpType::REDUCE,
                coll_.reduce(b.data, b.data, b.count, b.type, op, int(opts.rootRank), with(opts.timeout)), tensors);
}

c10::intrusive_ptr<c10d::Work> process_group::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions& opts) {
  const buffer in = moved(single(inputs, rank_, "allgather"), rank_, "allgather");
  if (outputs.size() != 1 || outputs.front().size() != std::size_t(size_))
    refuse("allgather", "the output list must hold one list of " + std::to_string(size_) + " tensors");
  const std::vector<at::Tensor>& out = outputs.front();
  for (const at::Tensor& t : out) check_tensor(t, rank_, "allgather");
  const std::vector<std::size_t> counts = byte_counts(out);
  at::Tensor flat = staging(counts);
  request pending = coll_.allgatherv(in.data, in.count, flat.data_ptr(), counts, {}, dtype::uint8, with(opts.timeout));
  return launch(c10d::OpType::ALLGATHER, std::move(pending), out, [flat, out] { unpack(flat, out); });
}

c10::intrusive_ptr<c10d::Work> process_group::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  const buffer in = moved(input, rank_, "_allgather_base"), out = moved(output, rank_, "_allgather_base");
  if (out.count != in.count * std::size_t(size_))
    refuse("_allgather_base", "the output holds " + std::to_string(out.count) + " bytes where " +
                                  std::to_string(size_) + " inputs of " + std::to_string(in.count) + " need " +
                                  std::to_string(in.count * std::size_t(size_)));
  return launch(c10d::OpType::_ALLGATHER_BASE,
                coll_.allgather(in.data, out.data, in.count, dtype::uint8, with(opts.timeout)), {output});
}

c10::intrusive_ptr<c10d::Work> process_group::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions& opts) {
  // outputs[j] holds rank j's tensors, shaped as the inputs: one allgatherv of each rank's
  // tensors back to back.
  if (outputs.size() != std::size_t(size_))
    refuse("allgather_coalesced", "the output must hold one list of tensors for each of " + std::to_string(size_) +
                                      " ranks");
  for (const at::Tensor& t : inputs) check_tensor(t, rank_, "allgather_coalesced");
  std::vector<at::Tensor> every;
  std::vector<std::size_t> counts;
  for (const std::vector<at::Tensor>& rank_tensors : outputs) {
    std::size_t bytes = 0;
    for (const at::Tensor& t : rank_tensors) {
      check_tensor(t, rank_, "allgather_coalesced");
      bytes += std::size_t(t.numel()) * t.element_size();
      every.push_back(t);
    }
    counts.push_back(bytes);
  }
  at::Tensor flat_in = packed(inputs);
  at::Tensor flat = staging(counts);
  request pending = coll_.allgatherv(flat_in.data_ptr(), std::size_t(flat_in.numel()), flat.data_ptr(), counts, {},
                                     dtype::uint8, with(opts.timeout));
  return launch(c10d::OpType::ALLGATHER_COALESCED, std::move(pending), every,
                [flat_in, flat, every] { unpack(flat, every); });
}

c10::intrusive_ptr<c10d::Work> process_group::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  const buffer in = moved(single(inputs, rank_, "gather"), rank_, "gather");
  const int root = int(opts.rootRank);
  if (rank_ != root) {
    request pending = coll_.gatherv(in.data, in.count, nullptr, {}, {}, dtype::uint8, root, with(opts.timeout));
    return launch(c10d::OpType::GATHER, std::move(pending), {});
  }
  if (outputs.size() != 1 || outputs.front().size() != std::size_t(size_))
    refuse("gather", "the root's output list must hold one list of " + std::to_string(size_) + " tensors");
  const std::vector<at::Tensor>& out = outputs.front();
  for (const at::Tensor& t : out) check_tensor(t, rank_, "gather");
  const std::vector<std::size_t> counts = byte_counts(out);
  at::Tensor flat = staging(counts);
  request pending =
      coll_.gatherv(in.data, in.count, flat.data_ptr(), counts, {}, dtype::uint8, root, with(opts.timeout));
  return launch(c10d::OpType::GATHER, std::move(pending), out, [flat, out] { unpack(flat, out); });
}

c10::intrusive_ptr<c10d::Work> process_group::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  const buffer out = moved(single(outputs, rank_, "scatter"), rank_, "scatter");
  const int root = int(opts.rootRank);
  if (rank_ != root)
    return launch(c10d::OpType::SCATTER,
                  coll_.scatterv(nullptr, {}, {}, out.data, out.count, dtype::uint8, root, with(opts.timeout)),
                  outputs);
  if (inputs.size() != 1 || inputs.front().size() != std::size_t(size_))
    refuse("scatter", "the root's input list must hold one list of " + std::to_string(size_) + " tensors");
  for (const at::Tensor& t : inputs.front()) check_tensor(t, rank_, "scatter");
  at::Tensor flat = packed(inputs.front());
  request pending = coll_.scatterv(flat.data_ptr(), byte_counts(inputs.front()), {}, out.data, out.count,
                                   dtype::uint8, root, with(opts.timeout));
  return launch(c10d::OpType::SCATTER, std::move(pending), outputs, [flat] {});  // flat lives until the end
}

c10::intrusive_ptr<c10d::Work> process_group::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, rank_, "reduce_scatter");
  const buffer b = reduced(out, rank_, "reduce_scatter");
  if (inputs.size() != 1 || inputs.front().size() != std::size_t(size_))
    refuse("reduce_scatter", "the input list must hold one list of " + std::to_string(size_) + " tensors");
  std::vector<std::size_t> counts;
  for (const at::Tensor& t : inputs.front()) {
    check_tensor(t, rank_, "reduce_scatter");
    if (t.scalar_type() != out.scalar_type()) refuse("reduce_scatter", "inputs and output of different dtypes");
    counts.push_back(std::size_t(t.numel()));
  }
  at::Tensor flat = packed(inputs.front());
  const auto op = op_of(opts.reduceOp, out.scalar_type(), rank_, "reduce_scatter");
  request pending = coll_.reduce_scatter_v(flat.data_ptr(), b.data, counts, b.type, op, with(opts.timeout));
  return launch(c10d::OpType::REDUCE_SCATTER, std::move(pending), outputs, [flat] {});
}

c10::intrusive_ptr<c10d::Work> process_group::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  const buffer out = reduced(output, rank_, "_reduce_scatter_base"), in = reduced(input, rank_, "_reduce_scatter_base");
  if (input.scalar_type() != output.scalar_type()) refuse("_reduce_scatter_base", "input and output of different dtypes");
  if (in.count != out.count * std::size_t(size_))
    refuse("_reduce_scatter_base", "the input holds " + std::to_string(in.count) + " elements where " +
                                       std::to_string(size_) + " outputs of " + std::to_string(out.count) + " need " +
                                       std::to_string(out.count * std::size_t(size_)));
  const auto op = op_of(opts.reduceOp, output.scalar_type(), rank_, "_reduce_scatter_base");
  return launch(c10d::OpType::_REDUCE_SCATTER_BASE,
                coll_.reduce_scatter(in.data, out.data, out.count, out.type, op, with(opts.timeout)), {output});
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& output_splits,
                                                            std::vector<int64_t>& input_splits,
                                                            const c10d::AllToAllOptions& opts) {
  const std::string call = "alltoall_base";
  const buffer in = moved(input, rank_, call), out = moved(output, rank_, call);
  // Split sizes count rows (the first dimension); none: equal blocks.
  const auto bytes_of = [&](const std::vector<int64_t>& splits, const at::Tensor& t, const buffer& b,
                            const char* name) {
    std::vector<std::size_t> counts(static_cast<std::size_t>(size_), b.count / std::size_t(size_));
    if (splits.empty()) {
      if (b.count % std::size_t(size_)) refuse(call, std::string(name) + " bytes do not split into equal blocks");
      return counts;
    }
    if (splits.size() != std::size_t(size_))
      refuse(call, std::string(name) + " split sizes hold " + std::to_string(splits.size()) + " entries for a group of " +
                       std::to_string(size_));
    const std::size_t row = t.dim() == 0 || t.size(0) == 0 ? 0 : b.count / std::size_t(t.size(0));
    for (std::size_t j = 0; j < counts.size(); ++j) {
      if (splits[j] < 0) refuse(call, std::string(name) + " split size " + std::to_string(splits[j]) + " is negative");
      counts[j] = std::size_t(splits[j]) * row;
    }
    return counts;
  };
  const std::vector<std::size_t> send = bytes_of(input_splits, input, in, "the input's"),
                                 receive = bytes_of(output_splits, output, out, "the output's");
  return launch(c10d::OpType::ALLTOALL_BASE,
                coll_.alltoallv(in.data, send, {}, out.data, receive, {}, dtype::uint8, with(opts.timeout)), {output});
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  if (inputs.size() != std::size_t(size_) || outputs.size() != std::size_t(size_))
    refuse("alltoall", "the input and output lists must hold " + std::to_string(size_) + " tensors each");
  for (const at::Tensor& t : inputs) check_tensor(t, rank_, "alltoall");
  for (const at::Tensor& t : outputs) check_tensor(t, rank_, "alltoall");
  at::Tensor flat_in = packed(inputs);
  const std::vector<std::size_t> receive = byte_counts(outputs);
  at::Tensor flat_out = staging(receive);
  request pending = coll_.alltoallv(flat_in.data_ptr(), byte_counts(inputs), {}, flat_out.data_ptr(), receive, {},
                                    dtype::uint8, with(opts.timeout));
  return launch(c10d::OpType::ALLTOALL, std::move(pending), outputs,
                [flat_in, flat_out, outputs] { unpack(flat_out, outputs); });
}

c10::intrusive_ptr<c10d::Work> process_group::barrier(const c10d::BarrierOptions& opts) {
  // An allreduce of one byte, as collectives::barrier, but not waited for here.
  auto bytes = std::make_shared<std::array<std::uint8_t, 2>>();
  request pending = coll_.allreduce(&(*bytes)[0], &(*bytes)[1], 1, dtype::uint8, reduce::op_kind::max,
                                    with(opts.timeout));
  return launch(c10d::OpType::BARRIER, std::move(pending), {}, [bytes] {});
}

void process_group::monitoredBarrier(const c10d::BarrierOptions& opts, bool) {
  try {
    barrier(opts)->wait();
  } catch (const std::exception& e) {  // the library's error names the rank it waited on
    throw error(errc::timeout, "rank " + std::to_string(rank_) + ", monitoredBarrier: " + e.what());
  }
}

c10::intrusive_ptr<c10d::Work> process_group::send(std::vector<at::Tensor>&, int, int) {
  refuse("send", "the mimatrix backend has no point-to-point calls yet");
}
c10::intrusive_ptr<c10d::Work> process_group::recv(std::vector<at::Tensor>&, int, int) {
  refuse("recv", "the mimatrix backend has no point-to-point calls yet");
}
c10::intrusive_ptr<c10d::Work> process_group::recvAnysource(std::vector<at::Tensor>&, int) {
  refuse("recvAnysource", "mimatrix receives from a named rank only (docs/integration.md)");
}

c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                          int size, std::chrono::milliseconds timeout) {
  return c10::make_intrusive<process_group>(store, rank, size, timeout);
}

}  // namespace mimatrix::torch_backend
