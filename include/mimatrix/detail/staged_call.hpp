// Device buffers on a transport that neither runs calls on device memory nor stages them
// itself (inproc and fabric do: device_steps.hpp, host_staging.hpp): the call is staged
// through host copies and runs to its end inside the call, so the stream's later work sees
// the result without a gate. Correct, and blocking: a transport of one's own that wants
// better implements transport::runs_on_device.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "mimatrix/core/operation.hpp"
#include "mimatrix/device/port.hpp"

namespace mimatrix::detail {

/// A call that has ended, as a request reads it.
class finished_operation final : public operation {
 public:
  finished_operation(std::error_code ec, std::string message, int last_peer)
      : ec_(ec), message_(std::move(message)), last_peer_(last_peer) {}
  bool test(std::error_code& ec) override {
    ec = ec_;
    return true;
  }
  void wait(std::error_code& ec) override { ec = ec_; }
  const std::string& message() const override { return message_; }
  int last_peer() const override { return last_peer_; }

 private:
  std::error_code ec_;
  std::string message_;
  int last_peer_;
};

/// Copies the input (null: none) to the host after `stream`'s earlier work, runs
/// `start_host(host_input, host_output)` to its end, and copies the output back.
template <class StartHost>
std::unique_ptr<operation> run_staged(const device::stream& stream, const std::byte* input, std::size_t input_bytes,
                                      std::byte* output, std::size_t output_bytes, StartHost&& start_host) {
  device::port& port = *stream.device;
  std::vector<std::byte> host_in(input ? input_bytes : 0), host_out(output_bytes);
  if (!host_in.empty()) port.copy(stream.handle, host_in.data(), input, input_bytes);
  port.synchronize(stream.handle);
  std::unique_ptr<operation> op = start_host(input ? host_in.data() : nullptr, host_out.data());
  std::error_code ec;
  op->wait(ec);
  if (!ec && output_bytes) {
    port.copy(stream.handle, output, host_out.data(), output_bytes);
    port.synchronize(stream.handle);  // host_out goes away with this call
  }
  return std::make_unique<finished_operation>(ec, ec ? op->message() : std::string(), op->last_peer());
}

}  // namespace mimatrix::detail
