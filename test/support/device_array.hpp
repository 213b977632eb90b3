// A typed block of a host_port's "device" memory, for tests that run calls on device
// buffers through device::host_port: allocated and freed as a GPU's would be
// (allocate_device), and readable from the host because that device is the host.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "mimatrix/device/host_port.hpp"

namespace mimatrix::test {

template <class T>
class device_array {
 public:
  device_array(device::host_port& port, std::size_t n, T fill = T{})
      : port_(&port), n_(n), data_(static_cast<T*>(port.allocate_device(n * sizeof(T)))) {
    std::fill_n(data_, n_, fill);
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { port_->free_device(data_, n_ * sizeof(T)); }

  T* data() const { return data_; }
  std::size_t size() const { return n_; }
  T& operator[](std::size_t i) const { return data_[i]; }
  std::vector<T> copy() const { return std::vector<T>(data_, data_ + n_); }

 private:
  device::host_port* port_;
  std::size_t n_;
  T* data_;
};

}  // namespace mimatrix::test
