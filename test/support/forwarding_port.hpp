// A device port that hands every operation to a host_port it owns, for tests that change
// one thing about a port (count what it allocates, or not check buffers at a call's
// start) and keep the rest.
#pragma once

#include <cstddef>
#include <string_view>

#include "mimatrix/device/host_port.hpp"

namespace mimatrix::test {

class forwarding_port : public device::port {
 public:
  explicit forwarding_port(device::host_port::settings s = {}) : inner_(s) {}

  std::string_view name() const override { return inner_.name(); }
  device::stream_handle make_stream() override { return inner_.make_stream(); }
  void free_stream(device::stream_handle s) noexcept override { inner_.free_stream(s); }
  void copy(device::stream_handle s, void* dst, const void* src, std::size_t bytes) override {
    inner_.copy(s, dst, src, bytes);
  }
  void combine(device::stream_handle s, const reduce::host_kernels& k, void* dst, const void* a, const void* b,
               std::size_t bytes) override {
    inner_.combine(s, k, dst, a, b, bytes);
  }
  void finalize(device::stream_handle s, const reduce::host_kernels& k, void* data, std::size_t bytes,
                int ranks) override {
    inner_.finalize(s, k, data, bytes, ranks);
  }
  device::event record(device::stream_handle s) override { return inner_.record(s); }
  bool done(device::event e) override { return inner_.done(e); }
  void free_event(device::event e) noexcept override { inner_.free_event(e); }
  void wait(device::stream_handle s, device::event e) override { inner_.wait(s, e); }
  device::gate hold(device::stream_handle s) override { return inner_.hold(s); }
  void open(device::stream_handle s, device::gate g) override { inner_.open(s, g); }
  void synchronize(device::stream_handle s) override { inner_.synchronize(s); }
  void* allocate_device(std::size_t bytes) override { return inner_.allocate_device(bytes); }
  void free_device(void* p, std::size_t bytes) noexcept override { inner_.free_device(p, bytes); }

  device::host_port& inner() { return inner_; }

 private:
  device::host_port inner_;
};

}  // namespace mimatrix::test
