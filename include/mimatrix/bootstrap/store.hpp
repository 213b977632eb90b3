// The rendezvous store ranks meet through at start-up: a small blocking key-value
// store that exchanges endpoint addresses and memory keys. It never carries data.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mimatrix/core/error.hpp"

namespace mimatrix::bootstrap {

/// The largest value a store holds: 16 MiB. Rendezvous values are addresses and memory
/// keys (bytes to kilobytes); the bound keeps a broken or forged peer from making a store,
/// or a client reading a store's reply, allocate without limit.
inline constexpr std::size_t max_value_bytes = std::size_t{16} << 20;

/// The longest key a store takes: 4 KiB.
inline constexpr std::size_t max_key_bytes = 4096;

/// Text as a store's value (addresses, process marks, messages), and back.
inline std::vector<std::byte> bytes_of(std::string_view text) {
  const auto* first = reinterpret_cast<const std::byte*>(text.data());
  return {first, first + text.size()};
}
inline std::string text_of(const std::vector<std::byte>& value) {
  return {reinterpret_cast<const char*>(value.data()), value.size()};
}

/// A key-value store shared by the ranks of one job.
///
/// @par Thread Safety
/// Implementations take requests from several threads at once (a fabric communicator asks
/// about lost peers from a thread of its own beside the caller's requests), serialized as
/// they like; many processes may share the store behind it.
class store {
 public:
  virtual ~store() = default;

  /// Sets `key` to `value`, replacing any earlier value. Throws errc::invalid_argument
  /// naming the key, the sizes and the store when the value is over max_value_bytes or the
  /// key over max_key_bytes.
  virtual void set(const std::string& key, const std::vector<std::byte>& value) = 0;

  /// The value of `key`, waiting up to `timeout` for some rank to set it. Throws
  /// `mimatrix::error` (errc::timeout) naming the key and the store when it never appears,
  /// errc::transport when the store cannot be reached.
  virtual std::vector<std::byte> get(const std::string& key, std::chrono::milliseconds timeout) = 0;

  /// Adds `delta` to the integer counter `key` (0 when absent) and returns the new value,
  /// atomically across all ranks.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  /// As add(), for tear-down and other waits that must not outlast `timeout` even when
  /// the store's host is frozen: throws errc::timeout once it passes. A store whose add()
  /// never waits on another process need not override it.
  virtual std::int64_t add_within(const std::string& key, std::int64_t delta, std::chrono::milliseconds timeout) {
    (void)timeout;
    return add(key, delta);
  }

  /// Removes every key that begins with `prefix` and returns how many there were: what a
  /// finished group leaves behind (a fabric endpoint erases its own once all its ranks
  /// said goodbye). Gets still waiting on such a key go on waiting. A store that cannot
  /// erase keeps the keys and returns 0, as this default does.
  virtual std::int64_t erase_prefix(const std::string& prefix) {
    (void)prefix;
    return 0;
  }

  /// Asks the store to set `key` to `value` should this client go without a word: its
  /// process killed or its host lost while it holds this object. Peers waiting for it then
  /// learn at once what they would otherwise learn at their deadline (a rank on another
  /// host, whose process they cannot see). Until cancel_when_gone(key) or this object's
  /// end. Returns false where the store cannot tell, as this default (a file or memory
  /// store has no connection to watch).
  virtual bool set_when_gone(const std::string& key, const std::vector<std::byte>& value) {
    (void)key;
    (void)value;
    return false;
  }

  /// Withdraws set_when_gone(key) (an empty key: every one), waiting at most `timeout`.
  virtual void cancel_when_gone(const std::string& key, std::chrono::milliseconds timeout) {
    (void)key;
    (void)timeout;
  }

  /// Where the store lives, for messages ("tcp://10.0.0.1:29500", "file:/tmp/job").
  virtual std::string where() const = 0;

  /// Which keys this object reaches: objects of one scope share them. What a process opens
  /// through a store is numbered per scope (a fabric endpoint's `<n>`, docs/bootstrap.md
  /// "Groups and their keys"), so that groups through separate stores need no names of
  /// their own. By default each object is a namespace of its own (as c10d hands each
  /// group's backend its own prefixed store); a store at a place its other objects reach
  /// too (a tcp server, a directory) names that place.
  virtual std::string scope() const { return "object " + std::to_string(serial_); }

 protected:
  /// Throws what set() promises when `key` or a value of `value_bytes` is over its bound.
  void check_entry(const std::string& key, std::size_t value_bytes) const {
    if (key.size() > max_key_bytes)
      throw error(errc::invalid_argument, "a key of " + std::to_string(key.size()) + " bytes ('" + key.substr(0, 40) +
                                              "...') is over the " + std::to_string(max_key_bytes) +
                                              " bytes a key may take in the rendezvous store at " + where());
    if (value_bytes > max_value_bytes)
      throw error(errc::invalid_argument, "the value of key '" + key + "' (" + std::to_string(value_bytes) +
                                              " bytes) is over the " + std::to_string(max_value_bytes) +
                                              " bytes a value may take in the rendezvous store at " + where());
  }

 private:
  inline static std::atomic<std::uint64_t> objects_{0};
  std::uint64_t serial_ = ++objects_;  // never reused, unlike an address
};

}  // namespace mimatrix::bootstrap
