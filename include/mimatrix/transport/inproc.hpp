// transport::inproc: the ranks of a group are threads of one process. Data moves
// by direct reads of the sender's memory, so tests exercise the real schedules and
// reductions at memory speed.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/core/operation.hpp"
#include "mimatrix/device/port.hpp"
#include "mimatrix/device/rank_streams.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/batch_call.hpp"
#include "mimatrix/transport/detail/inproc_execution.hpp"
#include "mimatrix/transport/detail/inproc_world.hpp"
#include "mimatrix/transport/progress.hpp"

namespace mimatrix::transport {

/// One rank's endpoint in an in-process group.
///
/// @par Thread Safety
/// A `world` is shared by all ranks' threads. Each rank's endpoint (and the
/// communicator over it) is used by one thread at a time, besides its progress thread
/// (progress_mode::thread). A rank may open several endpoints on one world, in turn or
/// at once, as long as every rank opens them in the same order (the k-th of each meet).
class inproc {
 public:
  using world = detail::inproc_world;

  inproc(world& group, int rank) : world_(&group), rank_(rank) {
    if (rank < 0 || rank >= group.size())
      throw error(errc::invalid_argument, "transport::inproc: rank " + std::to_string(rank) +
                                              " is outside a group of " + std::to_string(group.size()));
    engine_ = std::make_shared<progress_engine>(std::make_unique<detail::inproc_port>(group, rank));
    instance_ = group.open(rank);
  }

  int rank() const { return rank_; }
  int size() const { return world_->size(); }
  /// A world has no parent: each rank is its own world rank.
  int world_rank() const { return rank_; }
  /// "inproc<world>/<endpoint>": the world among this process's, and the rank's endpoints
  /// opened on it before this one (alike on its ranks).
  std::string group() const { return "inproc" + std::to_string(world_->id()) + "/" + std::to_string(instance_); }
  static constexpr const char* name = "inproc";
  /// Writes land in the target's buffers; waits count flags.
  static constexpr bool native_one_sided = true;

  /// The calls in flight on this rank, and who advances them.
  progress_engine& progress() { return *engine_; }

  /// Starts executing `plan` on this rank: it joins the call now and runs what it can.
  std::unique_ptr<mimatrix::detail::operation> start(std::shared_ptr<const schedule::schedule> plan,
                                                     const std::byte* input, std::byte* output,
                                                     const signature& sig, const reduce::host_kernels& kernels,
                                                     std::chrono::milliseconds timeout) {
    auto lock = engine_->lock();
    return std::make_unique<detail::inproc_execution>(engine_, *world_, rank_, key(sig), std::move(plan), input, output, sig,
                                                      kernels, timeout);
  }

  /// As above, on device memory of `caller`'s port: the call runs on a stream of this
  /// rank's own after `caller`'s earlier work, and `caller`'s later work waits for it.
  /// Starts the progress thread (as NCCL's proxy thread): a caller that only waits on
  /// its stream never calls test() or wait().
  std::unique_ptr<mimatrix::detail::operation> start(std::shared_ptr<const schedule::schedule> plan,
                                                     const std::byte* input, std::byte* output,
                                                     const signature& sig, const reduce::host_kernels& kernels,
                                                     std::chrono::milliseconds timeout, const device::stream& caller) {
    if (engine_->mode() != progress_mode::thread) engine_->set_mode(progress_mode::thread);
    return streams_->made_outside([&]() -> std::unique_ptr<mimatrix::detail::operation> {
      auto lock = engine_->lock();
      return std::make_unique<detail::inproc_execution>(engine_, *world_, rank_, key(sig), plan, input, output, sig, kernels,
                                                        timeout, &caller, streams_.get());
    });
  }

  /// Threads of one process reach each other's device memory (on several GPUs, through
  /// peer access): GDRAA's collectives on device memory run as one pass a rank, which
  /// algorithm::automatic takes there.
  bool reaches_peers_device_memory(const device::stream&) const { return true; }

  /// Starts this rank's part of p2p batch `call` (transport::runs_batches), on host memory:
  /// it enters each pair-batch on the world's pair board now, and runs what it can.
  std::unique_ptr<mimatrix::detail::operation> start_batch(std::shared_ptr<const schedule::schedule> plan,
                                                           const batch_call& call, std::chrono::milliseconds timeout) {
    auto lock = engine_->lock();
    return std::make_unique<detail::inproc_execution>(engine_, *world_, rank_, instance_, std::move(plan), call,
                                                      timeout);
  }

  /// This rank will not run p2p batch `call`: the peers it names fail their sides with
  /// `code` at once.
  void fail_batch(const batch_call& call, errc code, const std::string& why) {
    for (const auto& [peer, epoch] : call.epochs) {
      const detail::inproc_pair_board::side s{instance_, rank_, peer, epoch, call.sig.sequence};
      world_->pairs().fail(s, {code, why});
      world_->pairs().leave(s);
      world_->notify(peer);
    }
  }

  /// This rank will not take part in call `sig`: its peers fail with `code` at once
  /// instead of waiting for their deadline.
  void fail(const signature& sig, errc code, const std::string& why) {
    world_->fail(key(sig), {code, why});
    world_->leave(key(sig));
  }

 private:
  std::uint64_t key(const signature& sig) const { return world::call_key(instance_, sig.sequence); }

  world* world_;
  int rank_;
  std::uint64_t instance_ = 0;  // this rank's endpoints opened on the world before this one
  std::shared_ptr<device::rank_streams> streams_ = std::make_shared<device::rank_streams>();
  std::shared_ptr<progress_engine> engine_;  // after streams_: its calls end first
};

/// Runs `body(rank, world)` on `ranks` threads of one group and joins them; rethrows
/// the exception of the lowest failing rank.
template <class Body>
void run_inproc(int ranks, Body&& body) {
  inproc::world group(ranks);
  std::vector<std::exception_ptr> errors(ranks);
  std::vector<std::thread> threads;
  threads.reserve(ranks);
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, group);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace mimatrix::transport
