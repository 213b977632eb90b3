// The GPU backend's session (resnet_train --device cuda): the model over the GPU layers, the
// one-launch optimizer, and the hooks train_group (run.hpp) runs a group through, so the run
// is the CPU's, step for step. State moves between ranks in device memory, on the stream.
#pragma once

#include "nn_cuda/collective_port.hpp"
#include "train/device_data_parallel.hpp"
#include "train/run.hpp"
#include "train/state.hpp"

#include <mimatrix/bootstrap/env.hpp>
#include <mimatrix/collectives.hpp>
#include <mimatrix/device/port.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimatrix::resnet::train {

/// The GPU of this rank: its local rank as its launcher says it (bootstrap's reading of
/// torchrun's, Open MPI's, Slurm's or PMI's variables) modulo the GPUs here, made current.
inline int use_local_device() {
  int devices = 0;
  MIMATRIX_NN_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const int device = bootstrap::identity_from_environment().local_rank % std::max(devices, 1);
  MIMATRIX_NN_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

/// What the GPU backend does not do yet, named before anything starts.
inline void check_cuda_options(const options& opt) {
  const auto refuse = [](const std::string& what) {
    throw std::invalid_argument(what + " is not on the GPU backend yet (--device cuda); run it with --device cpu");
  };
  if (opt.sync_bn) refuse("--sync-bn");
  if (opt.sfb == "on") refuse("--sfb on");
}

/// @par Thread Safety
/// One thread, the one that made it (its context's).
struct cuda_session {
  options opt;
  data::dataset train_set, test_set;
  std::int64_t classes = 10;
  int device = 0;
  nn_cuda::context ctx;
  std::mt19937 rng;
  cuda_resnet net;
  nn_cuda::sgd optimizer;
  std::int64_t steps_per_epoch = 0, total_steps = 0;
  optim::lr_schedule schedule;
  std::int64_t step = 0;
  std::int64_t epochs_ended = 0, epoch_ended_at = 0;  // as session's

 private:
  nn_cuda::detail::pinned_buffer upload_;  // the batch on its way to the device

 public:
  cuda_session(options o, data::dataset train, data::dataset test, std::int64_t class_count)
      : opt((check_cuda_options(o), std::move(o))), train_set(std::move(train)), test_set(std::move(test)),
        classes(class_count), device(use_local_device()), ctx(opt.tf32), rng(static_cast<std::uint32_t>(opt.seed)),
        net(ctx, model::architecture_named(opt.model), std::int64_t(train_set.channels), classes, rng),
        optimizer(ctx, net.parameters(), {opt.momentum, 0.0f, opt.weight_decay, opt.nesterov}),
        steps_per_epoch(steps_per_epoch_for(opt, train_set.count)), total_steps(steps_per_epoch * opt.epochs),
        schedule(schedule_for(opt, steps_per_epoch)) {
    check_training_set(opt, train_set);
  }

  // ---- what train_group asks of a backend's session (see session in run.hpp) -----------
  static constexpr bool sufficient_factors = false;

  template <class Transport>
  device_data_parallel<Transport> make_step(collectives<Transport>& coll, const data_parallel_settings& settings,
                                            std::int64_t) {
    return device_data_parallel<Transport>(coll, ctx, net, optimizer, settings.wait_free,
                                           nn_cuda::collective_port());
  }
  /// f(images) on the batch's images, uploaded without a host wait: through page-locked
  /// memory, which the next upload reuses only after f has read the loss (a wait for the
  /// stream behind this copy), so batch N+1 is assembled while step N's backward runs.
  template <class F>
  auto with_images(data::batch& b, F&& f) {
    nn_cuda::device_tensor x(
        {std::int64_t(b.size), std::int64_t(b.channels), std::int64_t(b.height), std::int64_t(b.width)});
    upload_.reserve(b.images.size() * sizeof(float));
    std::copy(b.images.begin(), b.images.end(), static_cast<float*>(upload_.data()));
    x.copy_from_host_async({static_cast<const float*>(upload_.data()), b.images.size()}, ctx.stream());
    return f(x);
  }
  /// Every rank takes the parameters, batch-norm statistics and momentum of the rank with
  /// the most steps (the lowest such), broadcast in device memory; returns its step count.
  template <class Collectives>
  std::int64_t take_most_advanced(Collectives& coll) {
    std::vector<std::int64_t> all(std::size_t(coll.comm().size()), 0);
    coll.allgather(&step, all.data(), 1, dtype::int64).wait();
    const auto most = std::max_element(all.begin(), all.end());
    const int root = int(most - all.begin());
    on_every_state_tensor(coll, [&](nn_cuda::device_tensor& t, const call_options& on) {
      return coll.broadcast(t.data(), t.data(), t.size(), dtype::float32, root, on);
    });
    optimizer.resume_at(*most);
    return *most;
  }
  /// Averages the batch norms' running statistics over the ranks (see run.hpp's).
  template <class Collectives>
  void average_statistics(Collectives& coll) {
    std::vector<request> pending;
    const call_options on = on_stream();
    for (nn_cuda::batch_norm* bn : net.norms())
      for (nn_cuda::device_tensor* t : {&bn->running_mean(), &bn->running_var()})
        pending.push_back(coll.allreduce(t->data(), t->data(), t->size(), dtype::float32, reduce::op_kind::avg, on));
    for (auto& r : pending) r.wait();
  }
  /// As session's, through host copies: the same file, names and counters, so a run
  /// checkpointed on either backend resumes on the other.
  bool resume_from_checkpoint() {
    if (!opt.resume) return false;
    const checkpoint ck = checkpoint_to_resume(opt, total_steps);
    std::vector<float> host;
    for_each_state(net, optimizer, [&](const std::string& name, nn_cuda::device_tensor& t) {
      host.resize(t.size());
      restore(ck, name, host);
      t.copy_from_host(host, ctx.stream());
    });
    step = ck.counters.at("step");
    optimizer.resume_at(step);
    epoch_ended_at = step;  // saved at an epoch's end, which is done
    return true;
  }
  void save_checkpoint_now() {
    std::vector<std::string> names;
    std::vector<std::vector<float>> copies;
    for_each_state(net, optimizer, [&](std::string name, nn_cuda::device_tensor& t) {
      names.push_back(std::move(name));
      copies.push_back(t.to_host(ctx.stream()));
    });
    std::vector<tensor_view> tensors;
    for (std::size_t i = 0; i < names.size(); ++i) tensors.push_back({names[i], copies[i]});
    save_checkpoint(opt.checkpoint, tensors, run_counters(opt, step, steps_per_epoch));
  }

 private:
  call_options on_stream() {
    return {.algorithm = {}, .timeout = {}, .stream = device::stream{&nn_cuda::collective_port(), ctx.stream()},
            .tag = 0};
  }
  // call(tensor, options) -> request for every tensor the run carries from step to step.
  template <class Collectives, class Call>
  void on_every_state_tensor(Collectives&, Call&& call) {
    std::vector<request> pending;
    const call_options on = on_stream();
    for_each_state(net, optimizer,
                   [&](const std::string&, nn_cuda::device_tensor& t) { pending.push_back(call(t, on)); });
    for (auto& r : pending) r.wait();
  }
};

}  // namespace mimatrix::resnet::train
