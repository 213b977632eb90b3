// A store in this process's memory: what a one-rank job rendezvous through, and what
// in-process tests share between their rank threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mimatrix/bootstrap/detail/counter.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"

namespace mimatrix::bootstrap {

/// A store that lives in this process.
///
/// @par Thread Safety
/// Safe from any thread: the threads of one process may share one object.
class memory_store final : public store {
 public:
  void set(const std::string& key, const std::vector<std::byte>& value) override {
    check_entry(key, value.size());
    {
      std::lock_guard lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }

  std::vector<std::byte> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    const auto found = [&] { return values_.count(key) != 0; };
    if (!changed_.wait_until(lock, deadline_after(timeout), found))  // saturated: never overflows
      throw error(errc::timeout, "key '" + key + "' was not set in the rendezvous store at " + where() +
                                     " within " + std::to_string(timeout.count()) + " ms");
    return values_[key];
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::int64_t now = 0;
    {
      std::lock_guard lock(mutex_);
      auto& value = values_[key];
      if (!detail::parse_counter(value, now))
        throw error(errc::invalid_argument,
                    "add to key '" + key + "' in the rendezvous store at " + where() + ": its value is not a counter");
      now += delta;
      value = detail::counter_bytes(now);
    }
    changed_.notify_all();
    return now;
  }

  std::int64_t erase_prefix(const std::string& prefix) override {
    std::lock_guard lock(mutex_);
    auto it = values_.lower_bound(prefix);
    std::int64_t erased = 0;
    for (; it != values_.end() && it->first.starts_with(prefix); ++erased) it = values_.erase(it);
    return erased;
  }

  std::string where() const override { return "memory:"; }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<std::byte>> values_;
};

}  // namespace mimatrix::bootstrap
