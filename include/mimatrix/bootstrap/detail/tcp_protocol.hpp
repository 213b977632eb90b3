// The wire protocol of the TCP rendezvous store, shared by its server and its clients.
//
// Every message is a frame: a 4-byte big-endian length, then that many bytes of body.
//   request: u8 op, u32 key length, key, then  set: value | get: u32 timeout ms | add: i64 delta
//            | erase_prefix: nothing (the key is the prefix)
//            | when_gone: u8 1, value (arm: set the key to the value if this connection
//              ends without disarming it) or u8 0 (disarm the key; an empty key: all)
//   reply:   u8 status, then  ok: value (get) or i64 (add: the sum; erase_prefix: the keys
//            erased) or nothing (set, when_gone) | error: message
// A get of an absent key waits in the server, which answers at once when some rank sets the
// key, or `timeout` after the request with status timeout: the client never spins.
// Both ends bound a frame by max_key_bytes and max_value_bytes (store.hpp): the server
// answers a set or key over them with status error, and drops a connection whose length
// prefix is over tcp_max_request; a client fails on a reply over tcp_max_reply before
// allocating for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mimatrix/bootstrap/store.hpp"

namespace mimatrix::bootstrap::detail {

enum class tcp_op : std::uint8_t { set = 1, get = 2, add = 3, erase_prefix = 4, when_gone = 5 };
enum class tcp_status : std::uint8_t { ok = 0, timeout = 1, error = 2 };

inline constexpr std::size_t tcp_max_request = 1 + 4 + max_key_bytes + max_value_bytes;  // larger is garbage
inline constexpr std::size_t tcp_max_reply = 1 + max_value_bytes;  // a value, a counter or an error message

inline void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::byte>(v >> shift));
}
inline void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<std::byte>(v >> shift));
}
inline std::vector<std::byte> u64_bytes(std::uint64_t v) {
  std::vector<std::byte> out;
  put_u64(out, v);
  return out;
}
inline std::uint64_t get_uint(const std::byte* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}

/// One frame: its length prefix, then `body`.
inline std::vector<std::byte> make_frame(const std::vector<std::byte>& body) {
  std::vector<std::byte> frame;
  frame.reserve(4 + body.size());
  put_u32(frame, static_cast<std::uint32_t>(body.size()));
  frame.insert(frame.end(), body.begin(), body.end());
  return frame;
}

/// A reply frame's prefix and status, followed by `n` bytes of `data` (a counter or an
/// error message; values go out of the stored copy, see tcp_server::reply).
inline std::vector<std::byte> reply_head(tcp_status status, std::size_t body_rest, const std::byte* data = nullptr,
                                         std::size_t n = 0) {
  // resize + memcpy rather than insert: GCC 12 warns (-Warray-bounds) about the latter.
  std::vector<std::byte> head;
  head.reserve(5 + n);
  put_u32(head, static_cast<std::uint32_t>(1 + body_rest + n));
  head.push_back(static_cast<std::byte>(status));
  head.resize(5 + n);
  if (n) std::memcpy(head.data() + 5, data, n);
  return head;
}

}  // namespace mimatrix::bootstrap::detail
