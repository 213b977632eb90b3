// A framework's own store behind the four-method adapter a framework author writes
// (docs/bootstrap.md): what the injected-store tests hand a communicator.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/bootstrap/tcp_store.hpp"

namespace mimatrix::test {

/// Stands for a framework's store client (c10d::Store's set, get, add): its own API.
struct framework_kv {
  std::shared_ptr<bootstrap::tcp_store> client;
  void put(const std::string& k, const std::vector<std::byte>& v) { client->set(k, v); }
  std::vector<std::byte> fetch(const std::string& k, std::chrono::milliseconds wait) { return client->get(k, wait); }
  std::int64_t increment(const std::string& k, std::int64_t by) { return client->add(k, by); }
};

/// The adapter a framework author writes: four methods onto the framework's store. Its
/// where() says nothing of which store it is, as an adapter's may not.
class framework_store final : public bootstrap::store {
 public:
  explicit framework_store(framework_kv kv) : kv_(std::move(kv)) {}
  void set(const std::string& key, const std::vector<std::byte>& value) override {
    check_entry(key, value.size());
    kv_.put(key, value);
  }
  std::vector<std::byte> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return kv_.fetch(key, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return kv_.increment(key, delta); }
  std::string where() const override { return "the framework's store"; }

 private:
  framework_kv kv_;
};

}  // namespace mimatrix::test
