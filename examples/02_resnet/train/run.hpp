// A training run across a group: the process's session (data, model, optimizer, steps
// done) outlives any one group, so after a failure the survivors' next group goes on from
// the most advanced rank's state. Step g of the run takes positions [s*B, (s+1)*B) of its
// epoch's shuffled order (s = g mod steps an epoch), each rank the slice its local batch
// gives: the samples of a step do not depend on how many ranks share it or how they split it.
#pragma once

#include "data/batches.hpp"
#include "data/fashion_mnist.hpp"
#include "model/resnet.hpp"
#include "optim/schedule.hpp"
#include "optim/sgd.hpp"
#include "train/checkpoint.hpp"
#include "train/data_parallel.hpp"
#include "train/flags_agree.hpp"
#include "train/options.hpp"
#include "train/state.hpp"
#include "train/step_statistics.hpp"
#include "../../writable_path.hpp"

#include <mimatrix/collectives.hpp>
#include <mimatrix/communicator.hpp>
#include <mimatrix/sufficient_factor.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <system_error>
#include <string>
#include <tuple>
#include <vector>

namespace mimatrix::resnet::train {

/// ImageNet-shaped random images and labels (ResNet-50's throughput runs): labels below 256,
/// as the pipeline's bytes hold them, of a 1000-way classifier.
inline data::dataset synthetic_set(std::size_t count, std::size_t side, std::uint64_t seed) {
  data::dataset d;
  d.count = count;
  d.channels = 3;
  d.height = d.width = side;
  d.images.resize(count * d.image_size());
  d.labels.resize(count);
  std::mt19937 rng(static_cast<std::uint32_t>(seed));
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  for (float& x : d.images) x = pixel(rng);
  for (auto& l : d.labels) l = static_cast<std::uint8_t>(rng() % 256);
  return d;
}

/// Steps an epoch: the training set's batches, capped by --steps.
inline std::int64_t steps_per_epoch_for(const options& opt, std::size_t train_count) {
  const auto batches = std::int64_t(train_count) / opt.batch;
  return std::max<std::int64_t>(1, opt.steps ? std::min<std::int64_t>(opt.steps, batches) : batches);
}

/// The run's learning rate by step: the recipe's schedule at the linearly scaled peak.
inline optim::lr_schedule schedule_for(const options& opt, std::int64_t steps_per_epoch) {
  return optim::make_schedule(opt.schedule, optim::linear_scaled_lr(opt.lr, opt.batch, opt.lr_reference_batch),
                              steps_per_epoch, opt.epochs, opt.warmup_epochs);
}

/// What a checkpoint says of the run besides its tensors.
inline std::map<std::string, std::int64_t> run_counters(const options& opt, std::int64_t step,
                                                        std::int64_t steps_per_epoch) {
  return {{"step", step}, {"epoch", step / steps_per_epoch}, {"seed", std::int64_t(opt.seed)},
          {"global_batch", opt.batch}};
}

/// --resume's checkpoint. A missing file, or one of another seed or global batch (whose data
/// order and epoch boundaries differ), is an error rather than a silently different run.
inline checkpoint checkpoint_to_resume(const options& opt, std::int64_t total_steps) {
  if (!std::filesystem::exists(opt.checkpoint))
    throw std::runtime_error("--resume: checkpoint " + opt.checkpoint + " does not exist (drop --resume to start fresh)");
  checkpoint ck = load_checkpoint(opt.checkpoint);
  const std::tuple<const char*, const char*, std::int64_t> saved[] = {{"seed", "--seed", std::int64_t(opt.seed)},
                                                                      {"global_batch", "--batch", opt.batch}};
  for (const auto& [name, flag, given] : saved)
    if (const auto it = ck.counters.find(name); it != ck.counters.end() && it->second != given)
      throw std::invalid_argument("--resume: checkpoint " + opt.checkpoint + " was saved with " + flag + " " +
                                  std::to_string(it->second) + ", this run has " + flag + " " + std::to_string(given));
  // Past the run's end it would train nothing and report "step 15 of 9" (a black-box test).
  if (const auto it = ck.counters.find("step"); it != ck.counters.end() && it->second > total_steps)
    throw std::invalid_argument("--resume: checkpoint " + opt.checkpoint + " is at step " + std::to_string(it->second) +
                                ", past this run's " + std::to_string(total_steps) + " steps (--epochs " +
                                std::to_string(opt.epochs) + ", --steps " + std::to_string(opt.steps) + ")");
  return ck;
}

/// Rank 0 tries --checkpoint's temporary file before training: a directory it cannot write
/// fails at start-up, not at the first epoch's end.
inline void check_checkpoint_writable(const options& opt) {
  if (opt.checkpoint.empty()) return;
  const std::string why = examples::why_unwritable(opt.checkpoint, examples::write_mode::through_temporary);
  if (!why.empty())  // save_checkpoint writes its .tmp and renames it over
    throw std::runtime_error("--checkpoint " + opt.checkpoint + ": cannot create " + opt.checkpoint + ".tmp: " + why);
}

inline void check_training_set(const options& opt, const data::dataset& train) {
  if (std::int64_t(train.count) < opt.batch)
    throw std::invalid_argument("the global batch " + std::to_string(opt.batch) + " is larger than the " +
                                std::to_string(train.count) + " training samples");
}

/// What a process keeps across groups: the CPU backend's (oneDNN). The GPU's is
/// cuda_session (cuda_session.hpp); train_group runs either through the same hooks.
/// @par Thread Safety
/// One thread.
struct session {
  options opt;
  data::dataset train_set, test_set;
  std::int64_t classes = 10;
  nn::context ctx;
  std::mt19937 rng;
  model::resnet net;
  optim::sgd optimizer;
  std::int64_t steps_per_epoch = 0, total_steps = 0;
  optim::lr_schedule schedule;
  std::int64_t step = 0;  // steps this process has completed
  std::int64_t epochs_ended = 0;  // epoch ends this process took part in: --stop-after counts them
  std::int64_t epoch_ended_at = 0;  // the step of the last epoch end it finished

  explicit session(options o, data::dataset train, data::dataset test, std::int64_t class_count)
      : opt(std::move(o)), train_set(std::move(train)), test_set(std::move(test)), classes(class_count),
        rng(static_cast<std::uint32_t>(opt.seed)),
        net(ctx, model::architecture_named(opt.model), std::int64_t(train_set.channels), classes, rng),
        optimizer(net.parameters(), {opt.momentum, 0.0f, opt.weight_decay, opt.nesterov}),
        steps_per_epoch(steps_per_epoch_for(opt, train_set.count)),
        total_steps(steps_per_epoch * opt.epochs),
        schedule(schedule_for(opt, steps_per_epoch)) {
    check_training_set(opt, train_set);
  }

  /// Restores the checkpoint when --resume; true if it did.
  bool resume_from_checkpoint() {
    if (!opt.resume) return false;
    const checkpoint ck = checkpoint_to_resume(opt, total_steps);
    for (auto& [name, view] : state_of(net, optimizer)) restore(ck, name, view);
    step = ck.counters.at("step");
    optimizer.resume_at(step);
    epoch_ended_at = step;  // saved at an epoch's end, which is done
    return true;
  }

  // ---- what train_group asks of a backend's session -------------------------------------
  static constexpr bool sufficient_factors = true;  // the classifier's gradient as factors

  template <class Transport>
  data_parallel<Transport> make_step(collectives<Transport>& coll, const data_parallel_settings& settings,
                                     std::int64_t local_batch) {
    return data_parallel<Transport>(coll, net, optimizer, settings, local_batch);
  }
  /// f(images) on a batch's images as the layers take them (the batch's buffer, lent).
  template <class F>
  auto with_images(data::batch& b, F&& f) {
    nn::tensor images(
        {std::int64_t(b.size), std::int64_t(b.channels), std::int64_t(b.height), std::int64_t(b.width)});
    images.data.swap(b.images);
    struct give_back {  // also when f throws: the buffer serves the next batch
      nn::tensor& t;
      data::batch& b;
      ~give_back() { t.data.swap(b.images); }
    } lent{images, b};
    return f(static_cast<const nn::tensor&>(images));
  }
  /// A new group starts from its most advanced rank's state; returns its step count.
  template <class Collectives>
  std::int64_t take_most_advanced(Collectives& coll) {
    return take_most_advanced_state(coll, net, optimizer, step);
  }
  template <class Collectives>
  void average_statistics(Collectives& coll) {
    average_running_statistics(coll, net);
  }

  void save_checkpoint_now() {
    auto views = state_of(net, optimizer);
    std::vector<tensor_view> tensors;
    for (const auto& [name, v] : views) tensors.push_back({name, v});
    save_checkpoint(opt.checkpoint, tensors, run_counters(opt, step, steps_per_epoch));
  }
};

/// A step's loss over the whole group: every rank's loss sum over every rank's samples, as
/// the epoch line measures it (rank 0's own would show only its slice). Every rank calls it.
template <class Collectives>
double group_mean_loss(Collectives& coll, const step_statistics& st) {
  double sums[2] = {st.loss_sum, double(st.samples)};
  coll.allreduce(sums, sums, 2, dtype::float64, reduce::op_kind::sum).wait();
  return sums[0] / sums[1];
}

/// What a step tells the caller (the job server's heartbeat).
struct step_report {
  std::int64_t step = 0;
  std::int64_t local_batch = 0;
  step_statistics stats;
  double busbw_gbps = 0;  // of the gradients' allreduce, on a step that waited for all of it; else 0
};

/// nccl-tests' bus bandwidth of allreducing `bytes` over `ranks` in `ms`.
inline double allreduce_busbw_gbps(double bytes, int ranks, double ms) {
  return ms > 0 && ranks > 1 ? bytes * 2.0 * (ranks - 1) / ranks / (ms * 1e6) : 0.0;
}

/// Trains `s` (session or cuda_session) on `comm` with this rank's `local_batch` until the
/// run's last step; throws mimatrix::error when the group fails (the caller forms the next one).
template <class Session, class Transport>
void train_group(Session& s, communicator<Transport>& comm, std::int64_t local_batch,
                 const std::function<void(const step_report&)>& on_step = {}) {
  const options& opt = s.opt;
  collectives<Transport> coll(comm);
  const int rank = comm.rank(), ranks = comm.size();

  // Every rank's share: the global batch and where this rank's slice starts.
  std::vector<std::int64_t> batches(std::size_t(ranks), 0);
  coll.allgather(&local_batch, batches.data(), 1, dtype::int64).wait();
  const std::int64_t global = std::accumulate(batches.begin(), batches.end(), std::int64_t{0});
  const std::int64_t offset = std::accumulate(batches.begin(), batches.begin() + rank, std::int64_t{0});
  // Flags first: ranks given different --batch would otherwise hear only that the shares
  // do not sum to it (a black-box test).
  check_flags_agree(coll, opt, rank, ranks);
  // Every rank sees every share, so all refuse together (an empty share divided by zero).
  for (int i = 0; i < ranks; ++i)
    if (batches[std::size_t(i)] <= 0)
      throw std::invalid_argument("rank " + std::to_string(i) + " of " + std::to_string(ranks) + " has local batch " +
                                  std::to_string(batches[std::size_t(i)]) + "; every rank needs at least one sample");
  if (global != opt.batch)
    throw std::invalid_argument("the ranks' local batches sum to " + std::to_string(global) + ", not --batch " +
                                std::to_string(opt.batch) + " (under a job server: give it and its workers the same --batch)");
  s.step = s.take_most_advanced(coll);

  const bool equal_batches = std::all_of(batches.begin(), batches.end(), [&](auto b) { return b == batches[0]; });
  const auto& w = s.net.head().weight().value;
  data_parallel_settings settings;
  // Buckets small enough that the first ones start early in backward (a 16th of the
  // gradients: ResNet-20's 1 MiB in 66 KiB buckets, ResNet-50's 100 MiB in 6 MiB), large
  // enough that per-call latency stays small; --bucket-kib fixes it.
  const std::size_t gradient_bytes = s.net.parameter_count() * sizeof(float);
  const std::size_t bucket_bytes =
      opt.bucket_kib ? opt.bucket_kib * 1024 : std::max<std::size_t>(64 * 1024, gradient_bytes / 16);
  settings.wait_free = {bucket_bytes, opt.overlap};
  settings.synchronized_batch_norm = opt.sync_bn;
  settings.sufficient_factors =
      Session::sufficient_factors && ranks > 1 && equal_batches &&
      (opt.sfb == "on" || (opt.sfb == "auto" && sufficient_factors_pay(ranks, std::size_t(local_batch),
                                                                       std::size_t(w.dim(0)), std::size_t(w.dim(1)))));
  if (opt.sfb == "on" && !settings.sufficient_factors && rank == 0)
    std::printf("resnet_train: --sfb on %s; the classifier's gradient is allreduced\n",
                !Session::sufficient_factors ? "is not on this backend"
                : ranks == 1                 ? "has nothing to send on one rank"
                                             : "needs equal local batches");
  auto dp = s.make_step(coll, settings, local_batch);
  if (rank == 0)
    std::printf("resnet_train: %s, %zu parameters, %d rank(s), global batch %lld (this rank %lld), step %lld of %lld, "
                "%s (%zu KiB buckets), classifier gradient by %s\n",
                opt.model.c_str(), s.net.parameter_count(), ranks, static_cast<long long>(global),
                static_cast<long long>(local_batch), static_cast<long long>(s.step),
                static_cast<long long>(s.total_steps), opt.overlap ? "wait-free backpropagation" : "allreduce after backward",
                bucket_bytes / 1024, settings.sufficient_factors ? "sufficient factors" : "allreduce");
  std::fflush(stdout);  // a pipe (mimatrix-run's) holds it until the first epoch's line: minutes

  const data::augmentation augment{opt.augment, 4, data::fashion_mnist_constants::black};
  data::batch batch;
  std::vector<std::uint32_t> order;
  std::int64_t order_epoch = -1;

  // An epoch's figures, from its first step in this group.
  double loss_sum = 0, correct = 0, samples = 0, train_seconds = 0;
  double wait_overlapped = 0, wait_serial = 0;
  bool waits_measured = true;  // false on a stream: the host never waits for gradients
  std::int64_t overlapped_steps = 0, serial_steps = 0, steps_done = 0, group_steps = 0;
  auto epoch_start = std::chrono::steady_clock::now();

  // The epoch's end (`epoch` counted from 0); true when --stop-after ends the run here.
  const auto end_epoch = [&](std::int64_t epoch) {
    // Its figures over every rank, the test accuracy, a checkpoint.
    // images/s counts the training steps (forward, backward, allreduces, optimizer; not the
    // batches' assembly, as PyTorch's anchor counts); time is the epoch's, the test's included.
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    double sums[3] = {loss_sum, correct, samples};
    coll.allreduce(sums, sums, 3, dtype::float64, reduce::op_kind::sum).wait();
    double test_correct[2] = {0, 0};
    const auto eval_start = std::chrono::steady_clock::now();
    if (ranks > 1 && !opt.sync_bn) s.average_statistics(coll);
    if (opt.eval) {
      const std::uint64_t n = opt.test_samples ? std::min<std::uint64_t>(std::uint64_t(opt.test_samples), s.test_set.count)
                                               : s.test_set.count;
      const data::shard mine = data::shard_of(n, std::uint32_t(rank), std::uint32_t(ranks));
      std::vector<std::uint32_t> all(n);
      std::iota(all.begin(), all.end(), 0u);
      const data::augmentation none{false, 0, 0.0f};
      constexpr std::uint64_t eval_batch = 250;
      for (std::uint64_t b = 0; b < data::steps_in(mine, eval_batch); ++b) {
        data::assemble_batch(s.test_set, data::batch_indices(all, mine, b, eval_batch), none, 0, 0, batch);
        test_correct[0] += double(s.with_images(batch, [&](const auto& x) { return dp.correct(x, batch.labels); }));
      }
      test_correct[1] = double(n);
      coll.allreduce(test_correct, test_correct, 1, dtype::float64, reduce::op_kind::sum).wait();
    }
    const double eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
    if (rank == 0) {
      const double exposed = overlapped_steps ? wait_overlapped / double(overlapped_steps) : 0;
      const double serial = serial_steps ? wait_serial / double(serial_steps) : 0;
      char test_text[32] = "n/a";
      if (opt.eval) std::snprintf(test_text, sizeof test_text, "%.2f%%", 100.0 * test_correct[0] / test_correct[1]);
      // No training figures where a revoke took the epoch's steps with its group (below).
      char train_text[64] = "loss n/a train-acc n/a", speed_text[32] = "n/a";
      if (sums[2] > 0) {
        std::snprintf(train_text, sizeof train_text, "loss %.4f train-acc %.2f%%", sums[0] / sums[2],
                      100.0 * sums[1] / sums[2]);
        std::snprintf(speed_text, sizeof speed_text, "%.1f", double(steps_done * global) / train_seconds);
      }
      std::printf("epoch %lld/%lld: %s test-acc %s images/s %s time %.1fs", static_cast<long long>(epoch + 1),
                  static_cast<long long>(opt.epochs), train_text, test_text, speed_text, seconds + eval_seconds);
      if (ranks > 1 && waits_measured) {
        std::printf(" grad-wait %.2fms/step", opt.overlap ? exposed : serial);
        // nccl-tests' bus bandwidth of a step's gradients, allreduced after backward.
        if (serial > 0)
          std::printf(" allreduce %.2fGB/s",
                      allreduce_busbw_gbps(double(gradient_bytes), ranks, serial));
        if (opt.overlap && serial_steps && overlapped_steps)
          std::printf(" hidden %.0f%% (of %.2fms)", serial > 0 ? 100.0 * std::max(0.0, 1.0 - exposed / serial) : 100.0,
                      serial);
      }
      // A group formed mid-epoch (after a revoke, or a resume) ran only the epoch's last
      // steps: its figures are of those (the group before is not all here to sum its own).
      const std::int64_t epoch_steps = std::min(s.steps_per_epoch, s.total_steps - epoch * s.steps_per_epoch);
      if (sums[2] > 0 && steps_done < epoch_steps)
        std::printf(" (figures of the epoch's last %lld of %lld steps)", static_cast<long long>(steps_done),
                    static_cast<long long>(epoch_steps));
      std::printf("\n");
      std::fflush(stdout);
      if (!opt.checkpoint.empty()) s.save_checkpoint_now();
    }
    s.epoch_ended_at = s.step;
    // Counted by the session, not the group: a generation re-formed mid-run does not
    // start the count again (a black-box test: --stop-after 2 ran 3 epochs).
    return opt.stop_after > 0 && ++s.epochs_ended >= opt.stop_after;
  };
  // An epoch's end that a revoke cut short on every rank (its last step counted, its test,
  // line and checkpoint not done) comes first: the group went on from the next epoch and
  // the end was lost (a black-box test: 5 of 7 recovery runs).
  if (s.step > 0 && s.step % s.steps_per_epoch == 0) {
    std::int64_t ended = s.epoch_ended_at == s.step;
    coll.allreduce(&ended, &ended, 1, dtype::int64, reduce::op_kind::max).wait();
    if (!ended && end_epoch(s.step / s.steps_per_epoch - 1)) return;
  }

  while (s.step < s.total_steps) {
    const std::int64_t epoch = s.step / s.steps_per_epoch, in_epoch = s.step % s.steps_per_epoch;
    if (epoch != order_epoch) {
      order = data::epoch_order(std::uint32_t(s.train_set.count), opt.seed, std::uint64_t(epoch));
      order_epoch = epoch;
    }
    const auto first = std::size_t(in_epoch * global + offset);
    data::assemble_batch(s.train_set, std::span<const std::uint32_t>(order).subspan(first, std::size_t(local_batch)),
                         augment, opt.seed, std::uint64_t(epoch), batch);
    // Every measure_every-th step runs without overlap: what the others hide is measured
    // against it (the same buckets and sums, so the same result).
    const bool measure = opt.overlap && ranks > 1 && opt.measure_every > 0 && s.step % opt.measure_every == opt.measure_every - 1;
    dp.set_overlap(opt.overlap && !measure);
    const auto step_start = std::chrono::steady_clock::now();
    const step_statistics st = s.with_images(batch, [&](const auto& images) {
      return dp.step(images, batch.labels, std::uint64_t(global), float(s.schedule(s.step)));
    });
    train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    ++s.step;
    ++steps_done;
    loss_sum += st.loss_sum;
    correct += double(st.correct);
    samples += double(st.samples);
    waits_measured = waits_measured && st.wait_measured;
    // The group's first step sets up connections and plans: not a measure of either way.
    if (++group_steps > 1) {
      if (opt.overlap && !measure)
        wait_overlapped += st.wait_ms, ++overlapped_steps;
      else
        wait_serial += st.wait_ms, ++serial_steps;
    }
    if (on_step) {
      // Only a step that waited for the whole allreduce after backward times it.
      const bool whole = (!opt.overlap || measure) && st.wait_measured;
      on_step({s.step, local_batch, st, whole ? allreduce_busbw_gbps(double(gradient_bytes), ranks, st.wait_ms) : 0.0});
    }
    // Every rank is at the same step, so all take part in the progress line's sum.
    if (opt.log_every > 0 && s.step % opt.log_every == 0) {
      const double loss = group_mean_loss(coll, st);
      if (rank == 0) {
        std::printf("  step %lld/%lld: loss %.4f (group mean) lr %.4f\n", static_cast<long long>(s.step),
                    static_cast<long long>(s.total_steps), loss, s.schedule(s.step - 1));
        std::fflush(stdout);
      }
    }

    if (s.step % s.steps_per_epoch != 0 && s.step != s.total_steps) continue;
    if (end_epoch(epoch)) break;
    loss_sum = correct = samples = wait_overlapped = wait_serial = train_seconds = 0;
    overlapped_steps = serial_steps = steps_done = 0;
    epoch_start = std::chrono::steady_clock::now();
  }
}

}  // namespace mimatrix::resnet::train
