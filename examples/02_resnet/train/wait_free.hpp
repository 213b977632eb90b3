// Wait-free backpropagation (Poseidon): each parameter's gradient joins a bucket the moment
// backward has written it, and a full bucket's allreduce starts at once, non-blocking, while
// backward goes on below; the optimizer then waits only for what is still in flight.
#pragma once

#include "nn/tensor.hpp"

#include <mimatrix/collectives.hpp>
#include <mimatrix/request.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <vector>

namespace mimatrix::resnet::train {

struct wait_free_settings {
  /// A bucket's allreduce starts once it holds this many bytes of gradients (Horovod's
  /// tensor fusion, DDP's bucket_cap): small tensors travel together, large ones alone.
  std::size_t bucket_bytes = std::size_t(1) << 20;
  /// false: every bucket's allreduce starts after backward ends (the baseline WFBP beats),
  /// with the same buckets, so the results are bitwise the same.
  bool overlap = true;
};

/// Buckets form in the order parameters become ready, which is the same on every rank, so
/// every rank starts the same allreduces in the same order. Buffers are kept across steps.
///
/// @par Thread Safety
/// One thread (the one running backward), like the collectives it uses.
template <class Collectives>
class gradient_buckets {
 public:
  gradient_buckets(Collectives& coll, wait_free_settings settings) : coll_(coll), settings_(settings) {}

  /// backward wrote p's gradient: add it to the open bucket; start the bucket when full.
  void ready(nn::parameter& p) {
    if (open_ == buckets_.size()) buckets_.emplace_back();
    bucket& b = buckets_[open_];
    b.members.push_back(&p);
    b.elements += p.grad.size();
    if (b.elements * sizeof(float) >= settings_.bucket_bytes) close_bucket();
    // MPI's progress rule: a test() moves every call in flight (needed without a thread).
    while (started_ < open_ && buckets_[started_].pending.test()) ++started_;
  }

  /// After backward: starts what is left, waits for every bucket and writes each sum back
  /// into its parameters' gradients. Returns the milliseconds spent waiting here (the
  /// communication not hidden behind backward).
  double finish() {
    const auto t0 = std::chrono::steady_clock::now();
    if (open_ < buckets_.size() && !buckets_[open_].members.empty()) close_bucket();
    if (!settings_.overlap)
      for (std::size_t i = 0; i < open_; ++i) start(buckets_[i]);
    for (std::size_t i = 0; i < open_; ++i) {
      bucket& b = buckets_[i];
      b.pending.wait();
      const float* from = b.flat.data();
      for (nn::parameter* p : b.members) {
        std::memcpy(p->grad.data.data(), from, p->grad.size() * sizeof(float));
        from += p->grad.size();
      }
      b.members.clear();
      b.elements = 0;
    }
    open_ = 0;
    started_ = 0;
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  /// For the next step (between steps only): the same buckets either way.
  void set_overlap(bool overlap) { settings_.overlap = overlap; }
  [[nodiscard]] bool overlap() const { return settings_.overlap; }
  [[nodiscard]] std::size_t buckets_last_step() const { return last_count_; }

 private:
  struct bucket {
    std::vector<nn::parameter*> members;
    std::size_t elements = 0;
    std::vector<float> flat;  // kept: no allocation in the steady state
    mimatrix::request pending;
  };

  void close_bucket() {
    bucket& b = buckets_[open_++];
    b.flat.resize(b.elements);
    float* to = b.flat.data();
    for (const nn::parameter* p : b.members) {
      std::memcpy(to, p->grad.data.data(), p->grad.size() * sizeof(float));
      to += p->grad.size();
    }
    last_count_ = open_;
    if (settings_.overlap) start(b);
  }

  void start(bucket& b) {
    b.pending = coll_.allreduce(b.flat.data(), b.flat.data(), b.elements, dtype::float32, reduce::op_kind::sum);
  }

  Collectives& coll_;
  wait_free_settings settings_;
  std::vector<bucket> buckets_;
  std::size_t open_ = 0;     // buckets closed this step; buckets_[open_] fills next
  std::size_t started_ = 0;  // buckets before it are known finished
  std::size_t last_count_ = 0;
};

}  // namespace mimatrix::resnet::train
