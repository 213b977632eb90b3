// mimatrix as a c10d process group (PyTorch 1.13): each c10d call maps to one call of the
// runtime-typed collectives over transport::fabric, started at once and concluded by the
// group's finisher thread, which completes its Work and future.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "work.hpp"

namespace mimatrix::torch_backend {

/// @par Thread Safety
/// As c10d's: one thread starts the group's calls, in the same order on every rank.
class process_group final : public c10d::ProcessGroup {
 public:
  /// Meets the group's other ranks through `store` (c10d's, prefixed for this group). Each
  /// call's deadline is `timeout` unless its options set one.
  process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  ~process_group() override;

  const std::string getBackendName() const override { return "mimatrix"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void setSequenceNumberForGroup() override {}  // mimatrix numbers every group's calls from 0
  uint64_t getSequenceNumberForGroup() override { return comm_.next_sequence(); }

 private:
  /// Hands `pending` to the finisher; `after` runs once it ended well.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, request pending, std::vector<at::Tensor> outputs,
                                        std::function<void()> after = {});
  /// A call's options: its own deadline, else the group's.
  call_options with(std::chrono::milliseconds timeout) const;
  [[noreturn]] void refuse(const std::string& call, const std::string& why) const;

  std::chrono::milliseconds timeout_;
  communicator<transport::fabric> comm_;
  collectives<transport::fabric> coll_;
  finisher finisher_;  // last: concludes the calls in flight before the collectives go
};

/// What torch.distributed.Backend.register_backend calls.
c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                          int size, std::chrono::milliseconds timeout);

}  // namespace mimatrix::torch_backend
