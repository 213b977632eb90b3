// The c10d::Store that PyTorch hands a process group, as mimatrix's rendezvous store: the
// library meets its peers through it and opens no port of its own (docs/bootstrap.md).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::torch_backend {

/// c10d's store serializes its own requests; mimatrix asks from its caller's thread and
/// from its watch for lost peers, which c10d's TCPStore client takes as it comes.
class c10d_store final : public bootstrap::store {
 public:
  explicit c10d_store(c10::intrusive_ptr<c10d::Store> s) : s_(std::move(s)) {}

  void set(const std::string& key, const std::vector<std::byte>& value) override {
    check_entry(key, value.size());
    const auto* first = reinterpret_cast<const std::uint8_t*>(value.data());
    s_->set(key, std::vector<std::uint8_t>(first, first + value.size()));
  }
  std::vector<std::byte> get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      s_->wait({key}, timeout);
    } catch (const std::exception& e) {  // c10d says "Wait timeout" or that the store is gone
      throw error(errc::timeout, "key '" + key + "' did not appear in the c10d store within " +
                                     std::to_string(timeout.count()) + " ms: " + e.what());
    }
    const std::vector<std::uint8_t> v = s_->get(key);
    const auto* first = reinterpret_cast<const std::byte*>(v.data());
    return {first, first + v.size()};
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return s_->add(key, delta); }
  std::string where() const override { return "the c10d store of the process group"; }

 private:
  c10::intrusive_ptr<c10d::Store> s_;
};

}  // namespace mimatrix::torch_backend
