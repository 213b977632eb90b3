// Wait-free backpropagation (Poseidon): each parameter's gradient joins a bucket the moment
// backward has written it, and a full bucket's allreduce starts at once, non-blocking, while
// backward goes on below; the optimizer then waits only for what is still in flight.
// Where the gradients lie is a policy: host memory (host_gradients, below) or a device's
// (device_gradients.hpp), whose buckets are ordered on a stream.
#pragma once

#include <mimatrix/collectives.hpp>
#include <mimatrix/request.hpp>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <system_error>
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

/// Gradients in host memory: a bucket is a vector, copies are memcpy, and a bucket's sum is
/// read once its allreduce has finished on the host. `Parameter` has `grad.data` (a vector
/// of floats) and `grad.size()`: nn::parameter.
/// @par Thread Safety
/// Stateless.
template <class Parameter>
struct host_gradients {
  using parameter = Parameter;
  using buffer = std::vector<float>;
  /// false: finish() waits for each bucket before it copies the sum back.
  static constexpr bool ordered_by_stream = false;

  static float* gradient(parameter& p) { return p.grad.data.data(); }
  static std::size_t size(const parameter& p) { return p.grad.size(); }
  void resize(buffer& b, std::size_t elements) { b.resize(elements); }
  void produced() {}  // backward's writes are done when it calls ready()
  void consumed() {}
  void settle() {}
  static float* data(buffer& b) { return b.data(); }
  void copy(float* dst, const float* src, std::size_t elements) { std::memcpy(dst, src, elements * sizeof(float)); }
  [[nodiscard]] call_options options() const { return {}; }
};

/// Buckets form in the order parameters become ready, which is the same on every rank, so
/// every rank starts the same allreduces in the same order. Buffers are kept across steps.
/// `Gradients` is host_gradients or device_gradients (device_gradients.hpp).
///
/// @par Thread Safety
/// One thread (the one running backward), like the collectives it uses.
template <class Collectives, class Gradients>
class gradient_buckets {
 public:
  using parameter = typename Gradients::parameter;

  gradient_buckets(Collectives& coll, wait_free_settings settings, Gradients gradients = {})
      : coll_(coll), settings_(settings), gradients_(std::move(gradients)) {}
  /// Waits for the calls in flight (their failures are the steps' to tell) and, on a
  /// stream, for the copies behind them, before the buckets' memory goes.
  ~gradient_buckets() {
    for (bucket& b : buckets_) {
      std::error_code ignored;
      b.pending.wait(ignored);
    }
    try {
      gradients_.settle();
    } catch (const std::exception&) {  // the device failed: its work will not run
    }
  }
  gradient_buckets(const gradient_buckets&) = delete;
  gradient_buckets& operator=(const gradient_buckets&) = delete;

  /// backward wrote p's gradient (or, on a stream, queued its writing): add it to the open
  /// bucket; start the bucket when full.
  void ready(parameter& p) {
    if (open_ == buckets_.size()) buckets_.emplace_back();
    bucket& b = buckets_[open_];
    b.members.push_back(&p);
    b.elements += Gradients::size(p);
    if (b.elements * sizeof(float) >= settings_.bucket_bytes) close_bucket();
    // MPI's progress rule: a test() moves every call in flight (needed without a thread).
    while (started_ < open_ && buckets_[started_].pending.test()) ++started_;
  }

  /// After backward: starts what is left and writes each bucket's sum back into its
  /// parameters' gradients. On the host it waits for every bucket; on a stream it queues the
  /// copies behind the allreduces and returns at once (the requests are kept until the
  /// buckets' next use, as the calls need). Returns the milliseconds spent here (the
  /// communication not hidden behind backward, on the host).
  double finish() {
    const auto t0 = std::chrono::steady_clock::now();
    if (open_ < buckets_.size() && !buckets_[open_].members.empty()) close_bucket();
    if (!settings_.overlap)
      for (std::size_t i = 0; i < open_; ++i) start(buckets_[i]);
    for (std::size_t i = 0; i < open_; ++i) {
      bucket& b = buckets_[i];
      if constexpr (!Gradients::ordered_by_stream) b.pending.wait();
      // (On a stream, the copies back queue behind the bucket's allreduce.)
      const float* from = Gradients::data(b.flat);
      for (parameter* p : b.members) {
        gradients_.copy(Gradients::gradient(*p), from, Gradients::size(*p));
        from += Gradients::size(*p);
      }
      b.members.clear();
      b.elements = 0;
    }
    gradients_.consumed();
    open_ = 0;
    started_ = 0;
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  /// Waits for every call still in flight (on a stream, those finish() left): before the
  /// host reads the gradients, and to hear of a failure now rather than at the next step.
  void drain() {
    for (bucket& b : buckets_) b.pending.wait();
  }

  /// For the next step (between steps only): the same buckets either way.
  void set_overlap(bool overlap) { settings_.overlap = overlap; }
  [[nodiscard]] bool overlap() const { return settings_.overlap; }
  [[nodiscard]] std::size_t buckets_last_step() const { return last_count_; }

 private:
  struct bucket {
    std::vector<parameter*> members;
    std::size_t elements = 0;
    typename Gradients::buffer flat;  // kept: no allocation in the steady state
    mimatrix::request pending;
  };

  void close_bucket() {
    bucket& b = buckets_[open_++];
    // A stream's last call on this bucket may still be in flight (its request is kept): it
    // must end before a resize, and a failure of it is told here.
    if constexpr (Gradients::ordered_by_stream) b.pending.wait();
    gradients_.resize(b.flat, b.elements);
    gradients_.produced();
    float* to = Gradients::data(b.flat);
    for (parameter* p : b.members) {
      gradients_.copy(to, Gradients::gradient(*p), Gradients::size(*p));
      to += Gradients::size(*p);
    }
    last_count_ = open_;
    if (settings_.overlap) start(b);
  }

  void start(bucket& b) {
    b.pending = coll_.allreduce(Gradients::data(b.flat), Gradients::data(b.flat), b.elements, dtype::float32,
                                reduce::op_kind::sum, gradients_.options());
  }

  Collectives& coll_;
  wait_free_settings settings_;
  Gradients gradients_;
  std::vector<bucket> buckets_;
  std::size_t open_ = 0;     // buckets closed this step; buckets_[open_] fills next
  std::size_t started_ = 0;  // buckets before it are known finished
  std::size_t last_count_ = 0;
};

}  // namespace mimatrix::resnet::train
