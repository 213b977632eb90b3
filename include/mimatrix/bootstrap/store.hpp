// The rendezvous store ranks meet through at start-up: a small blocking key-value
// store that exchanges endpoint addresses and memory keys. It never carries data.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mimatrix::bootstrap {

/// A key-value store shared by the ranks of one job.
///
/// @par Thread Safety
/// One thread at a time per store object; many processes may share the store behind it.
class store {
 public:
  virtual ~store() = default;

  /// Sets `key` to `value`, replacing any earlier value.
  virtual void set(const std::string& key, const std::vector<std::byte>& value) = 0;

  /// The value of `key`, waiting up to `timeout` for some rank to set it. Throws
  /// `mimatrix::error` (errc::timeout) naming the key and the store when it never appears,
  /// errc::transport when the store cannot be reached.
  virtual std::vector<std::byte> get(const std::string& key, std::chrono::milliseconds timeout) = 0;

  /// Adds `delta` to the integer counter `key` (0 when absent) and returns the new value,
  /// atomically across all ranks.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  /// Where the store lives, for messages ("tcp://10.0.0.1:29500", "file:/tmp/job").
  virtual std::string where() const = 0;
};

}  // namespace mimatrix::bootstrap
