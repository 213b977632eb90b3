// Gradients in device memory for wait-free backpropagation (wait_free.hpp): a bucket is a
// block of the device's memory, its copies and its allreduce are queued on the training
// stream, so backward, the allreduces and the optimizer follow each other on the device
// with no host wait (the collectives' stream API, docs/device.md).
#pragma once

#include <mimatrix/collectives.hpp>
#include <mimatrix/device/port.hpp>

#include <cstddef>
#include <utility>

namespace mimatrix::resnet::train {

/// `Parameter` has `grad.data()` (device floats) and `grad.size()`: nn_cuda::parameter.
/// `port` is the device's (device::cuda_port::instance() on a GPU; device::host_port in
/// tests) and `stream` the one every layer runs on.
/// @par Thread Safety
/// As the stream: one thread queues work on it.
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
  device_gradients(device::port& port, device::stream_handle stream) : port_(&port), stream_(stream) {}

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
  void copy(float* dst, const float* src, std::size_t elements) {
    if (elements > 0) port_->copy(stream_, dst, src, elements * sizeof(float));
  }
  [[nodiscard]] call_options options() const {
    return {.algorithm = {}, .timeout = {}, .stream = device::stream{port_, stream_}, .tag = 0};
  }

 private:
  device::port* port_ = nullptr;
  device::stream_handle stream_ = nullptr;
};

}  // namespace mimatrix::resnet::train
