// Gradients in device memory for wait-free backpropagation (wait_free.hpp): a bucket is a
// block of the device's memory; its copies and its allreduce are queued on a communication
// stream that runs beside backward, and the optimizer follows them on the device with no
// host wait (the collectives' stream API, docs/device.md).
#pragma once

#include <mimatrix/collectives.hpp>
#include <mimatrix/device/port.hpp>

#include <cstddef>
#include <utility>

namespace mimatrix::resnet::train {

/// `Parameter` has `grad.data()` (device floats) and `grad.size()`: nn_cuda::parameter.
/// `port` is the device's (device::cuda_port::instance() on a GPU; device::host_port in
/// tests) and `compute` the stream every layer runs on.
///
/// The buckets' copies and allreduces run on a communication stream of their own, as DDP's
/// do: a call holds its stream until it ends, so on the compute stream it would hold the
/// rest of backward too, and nothing would overlap. The communication stream waits for the
/// compute stream before a bucket's copies (produced()); the compute stream waits for it
/// after the last copy back (consumed()), before the optimizer.
/// @par Thread Safety
/// As the streams: one thread queues work on them.
template <class Parameter>
class device_gradients {
 public:
  using parameter = Parameter;
  /// true: finish() queues the copies back behind the allreduces instead of waiting.
  static constexpr bool ordered_by_stream = true;

  /// Device memory of the port, freed with it.
  class buffer {
   public:
    buffer() = default;
    buffer(buffer&& other) noexcept
        : port_(std::exchange(other.port_, nullptr)), data_(std::exchange(other.data_, nullptr)),
          elements_(std::exchange(other.elements_, 0)) {}
    buffer& operator=(buffer&& other) noexcept {
      std::swap(port_, other.port_);
      std::swap(data_, other.data_);
      std::swap(elements_, other.elements_);
      return *this;
    }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    ~buffer() {
      if (data_) port_->free_device(data_, elements_ * sizeof(float));
    }

   private:
    friend class device_gradients;
    device::port* port_ = nullptr;
    float* data_ = nullptr;
    std::size_t elements_ = 0;
  };

  device_gradients() = default;
  device_gradients(device::port& port, device::stream_handle compute)
      : port_(&port), compute_(compute), comm_(port.make_stream()) {}
  device_gradients(device_gradients&& other) noexcept
      : port_(std::exchange(other.port_, nullptr)), compute_(std::exchange(other.compute_, nullptr)),
        comm_(std::exchange(other.comm_, nullptr)) {}
  device_gradients& operator=(device_gradients&& other) noexcept {
    std::swap(port_, other.port_);
    std::swap(compute_, other.compute_);
    std::swap(comm_, other.comm_);
    return *this;
  }
  device_gradients(const device_gradients&) = delete;
  device_gradients& operator=(const device_gradients&) = delete;
  /// The communication stream goes; its work stays queued (the buckets' calls have ended).
  ~device_gradients() {
    if (comm_) port_->free_stream(comm_);
  }

  static float* gradient(parameter& p) { return p.grad.data(); }
  static std::size_t size(const parameter& p) { return p.grad.size(); }
  static float* data(buffer& b) { return b.data_; }

  /// Only when the size changes (a bucket's members are the same step after step); the
  /// caller has waited for the calls on the old block.
  void resize(buffer& b, std::size_t elements) {
    if (elements == b.elements_ && b.port_ == port_) return;
    buffer fresh;
    fresh.port_ = port_;
    fresh.data_ = static_cast<float*>(port_->allocate_device(elements * sizeof(float)));
    fresh.elements_ = elements;
    b = std::move(fresh);
  }
  /// Backward has queued a bucket's gradients on the compute stream: what comes next on
  /// the communication stream runs after them.
  void produced() { follow(comm_, compute_); }
  /// Every sum is queued to go back: the compute stream's next work (the optimizer) runs
  /// after it.
  void consumed() { follow(compute_, comm_); }
  /// Waits until the communication stream's work has run (before the buckets' memory goes).
  void settle() {
    if (comm_) port_->synchronize(comm_);
  }
  void copy(float* dst, const float* src, std::size_t elements) {
    if (elements > 0) port_->copy(comm_, dst, src, elements * sizeof(float));
  }
  [[nodiscard]] call_options options() const {
    return {.algorithm = {}, .timeout = {}, .stream = device::stream{port_, comm_}, .tag = 0};
  }

 private:
  // `later`'s next work waits for the work queued on `first` so far.
  void follow(device::stream_handle later, device::stream_handle first) {
    const device::event e = port_->record(first);
    port_->wait(later, e);
    port_->free_event(e);  // the wait holds what it needs
  }

  device::port* port_ = nullptr;
  device::stream_handle compute_ = nullptr;
  device::stream_handle comm_ = nullptr;
};

}  // namespace mimatrix::resnet::train
