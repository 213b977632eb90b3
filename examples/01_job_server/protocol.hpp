// The job server's wire protocol: length-prefixed frames of bounded size, each one typed
// message. The decoder checks every length and count against what is left and against a
// bound before it allocates, so a malformed, oversized or truncated frame is an error
// naming what was wrong, never a crash or an unbounded allocation (a libFuzzer target
// runs it).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace mimatrix::job {

/// Frames: an 8-byte header (payload length, u32 little-endian; message kind, u16; protocol
/// version, u16) and the payload.
inline constexpr std::size_t header_bytes = 8;
inline constexpr std::uint16_t protocol_version = 2;  // 2: hello names the generation a worker runs
/// The largest payload: rendezvous values are addresses and memory keys, kilobytes.
inline constexpr std::uint32_t max_payload_bytes = 1u << 20;
inline constexpr std::size_t max_text_bytes = 4096;  // a key, a host name, a reason
inline constexpr std::size_t max_hosts = 65536;      // ranks of one generation
inline constexpr std::size_t nonce_bytes = 32;
inline constexpr std::size_t mac_bytes = 32;  // HMAC-SHA256

/// A frame or message that breaks the protocol; what() says how.
struct protocol_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class kind : std::uint16_t {
  challenge = 1,   // server -> worker: a nonce to authenticate with
  hello,           // worker -> server: the nonce's HMAC and what the worker is
  welcome,         // server -> worker: its id
  reject,          // server -> worker: why the connection closes
  assignment,      // server -> worker: its rank and work in a generation
  revoke,          // server -> worker: a generation is over; abort its communicator
  heartbeat,       // worker -> server: alive, with the last step's statistics
  failure,         // worker -> server: its communicator failed
  store_set,       // worker -> server: the rendezvous store
  store_get,
  store_add,
  store_reply,     // server -> worker
  status_request,  // a client -> server: the group as text
  status_reply,
  leave,           // worker -> server: done with the job; not a failure
};

struct worker_info {
  std::string host{};
  std::string key{};  // stable across reconnections ("host:pid:nonce" by default): a restarted server knows it again
  std::uint32_t accelerators = 0;
  std::uint32_t nics = 0;
  double throughput = 0.0;  // samples a second it measured (0: not yet); the local batch follows it
  std::uint64_t generation = 0;  // the generation it runs as it (re)joins, 0 if none: one the server did not form ends
};

struct challenge { std::array<std::uint8_t, nonce_bytes> nonce{}; };
struct hello {
  std::array<std::uint8_t, mac_bytes> mac{};
  worker_info info;
};
struct welcome { std::uint64_t worker_id = 0; };
struct reject { std::string reason; };
struct assignment {
  std::uint64_t generation = 0;
  std::uint32_t rank = 0, size = 0;
  std::vector<std::string> hosts;  // by rank: the placement (ranks of a host are consecutive)
  std::uint64_t shard_begin = 0, shard_end = 0;  // this rank's sample indices, [begin, end)
  std::uint32_t local_batch = 0;                 // of the global batch, by throughput
  std::uint64_t resume_step = 0;                 // the last step the group completed
  std::vector<std::uint32_t> switches;           // by rank: its host's switch (cluster description); or none
};
struct revoke {
  std::uint64_t generation = 0;
  std::string reason;
};
struct heartbeat {
  std::uint64_t generation = 0, step = 0;
  double step_ms = 0, allreduce_ms = 0, busbw_gbps = 0, loss = 0, throughput = 0;
};
struct failure {
  std::uint64_t generation = 0;
  std::string reason;
};
struct store_set {
  std::uint64_t id = 0;
  std::string key;
  std::vector<std::byte> value;
};
struct store_get {
  std::uint64_t id = 0;
  std::string key;
  std::uint32_t timeout_ms = 0;
};
struct store_add {
  std::uint64_t id = 0;
  std::string key;
  std::int64_t delta = 0;
};
struct store_reply {
  enum class outcome : std::uint8_t { ok, timeout, error };
  std::uint64_t id = 0;
  outcome result = outcome::ok;
  std::vector<std::byte> value;
  std::int64_t number = 0;
  std::string error;
};
struct status_request {};
struct status_reply { std::string text; };
struct leave { std::uint64_t generation = 0; };

using message = std::variant<challenge, hello, welcome, reject, assignment, revoke, heartbeat, failure, store_set,
                             store_get, store_add, store_reply, status_request, status_reply, leave>;

/// The kind of each alternative, in order.
inline kind kind_of(const message& m) { return static_cast<kind>(m.index() + 1); }

namespace detail {

class writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(std::byte{v}); }
  void u16(std::uint16_t v) { raw(&v, 2); }
  void u32(std::uint32_t v) { raw(&v, 4); }
  void u64(std::uint64_t v) { raw(&v, 8); }
  void i64(std::int64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void text(const std::string& s) {
    if (s.size() > max_text_bytes) throw protocol_error("a text of " + std::to_string(s.size()) + " bytes is over " + std::to_string(max_text_bytes));
    u32(std::uint32_t(s.size()));
    raw(s.data(), s.size());
  }
  void bytes(const std::vector<std::byte>& b) {
    u32(std::uint32_t(b.size()));
    raw(b.data(), b.size());
  }
  template <std::size_t N> void array(const std::array<std::uint8_t, N>& a) { raw(a.data(), N); }
  std::vector<std::byte>& out() { return out_; }

 private:
  void raw(const void* p, std::size_t n) {  // little-endian hosts (x86-64, arm64)
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<std::byte> out_;
};

class reader {
 public:
  reader(const std::byte* data, std::size_t size) : p_(data), left_(size) {}
  std::uint8_t u8() { return take<std::uint8_t>(); }
  std::uint16_t u16() { return take<std::uint16_t>(); }
  std::uint32_t u32() { return take<std::uint32_t>(); }
  std::uint64_t u64() { return take<std::uint64_t>(); }
  std::int64_t i64() { return take<std::int64_t>(); }
  double f64() { return take<double>(); }
  std::string text() {
    const std::uint32_t n = u32();
    if (n > max_text_bytes) throw protocol_error("a text of " + std::to_string(n) + " bytes is over " + std::to_string(max_text_bytes));
    need(n, "a text");
    std::string s(reinterpret_cast<const char*>(p_), n);
    skip(n);
    return s;
  }
  std::vector<std::byte> bytes() {
    const std::uint32_t n = u32();
    need(n, "a value");
    std::vector<std::byte> b(p_, p_ + n);
    skip(n);
    return b;
  }
  template <std::size_t N> std::array<std::uint8_t, N> array() {
    need(N, "a fixed field");
    std::array<std::uint8_t, N> a{};
    std::memcpy(a.data(), p_, N);
    skip(N);
    return a;
  }
  std::size_t left() const { return left_; }

 private:
  template <class T> T take() {
    need(sizeof(T), "a number");
    T v;
    std::memcpy(&v, p_, sizeof(T));
    skip(sizeof(T));
    return v;
  }
  void need(std::size_t n, const char* what) const {
    if (n > left_)
      throw protocol_error(std::string(what) + " needs " + std::to_string(n) + " bytes but the message has " +
                           std::to_string(left_) + " left");
  }
  void skip(std::size_t n) {
    p_ += n;
    left_ -= n;
  }
  const std::byte* p_;
  std::size_t left_;
};

inline void put(writer& w, const worker_info& i) {
  w.text(i.host);
  w.text(i.key);
  w.u32(i.accelerators);
  w.u32(i.nics);
  w.f64(i.throughput);
  w.u64(i.generation);
}
inline worker_info get_info(reader& r) {
  worker_info i;
  i.host = r.text();
  i.key = r.text();
  i.accelerators = r.u32();
  i.nics = r.u32();
  i.throughput = r.f64();
  i.generation = r.u64();
  return i;
}

inline void put(writer& w, const challenge& m) { w.array(m.nonce); }
inline void put(writer& w, const hello& m) { w.array(m.mac), put(w, m.info); }
inline void put(writer& w, const welcome& m) { w.u64(m.worker_id); }
inline void put(writer& w, const reject& m) { w.text(m.reason); }
inline void put(writer& w, const assignment& m) {
  w.u64(m.generation), w.u32(m.rank), w.u32(m.size);
  w.u32(std::uint32_t(m.hosts.size()));
  for (const auto& h : m.hosts) w.text(h);
  w.u64(m.shard_begin), w.u64(m.shard_end), w.u32(m.local_batch), w.u64(m.resume_step);
  w.u32(std::uint32_t(m.switches.size()));
  for (std::uint32_t s : m.switches) w.u32(s);
}
inline void put(writer& w, const revoke& m) { w.u64(m.generation), w.text(m.reason); }
inline void put(writer& w, const heartbeat& m) {
  w.u64(m.generation), w.u64(m.step);
  w.f64(m.step_ms), w.f64(m.allreduce_ms), w.f64(m.busbw_gbps), w.f64(m.loss), w.f64(m.throughput);
}
inline void put(writer& w, const failure& m) { w.u64(m.generation), w.text(m.reason); }
inline void put(writer& w, const store_set& m) { w.u64(m.id), w.text(m.key), w.bytes(m.value); }
inline void put(writer& w, const store_get& m) { w.u64(m.id), w.text(m.key), w.u32(m.timeout_ms); }
inline void put(writer& w, const store_add& m) { w.u64(m.id), w.text(m.key), w.i64(m.delta); }
inline void put(writer& w, const store_reply& m) {
  w.u64(m.id), w.u8(std::uint8_t(m.result)), w.bytes(m.value), w.i64(m.number), w.text(m.error);
}
inline void put(writer&, const status_request&) {}
inline void put(writer& w, const status_reply& m) {  // longer than a text: the whole group
  w.bytes(std::vector<std::byte>(reinterpret_cast<const std::byte*>(m.text.data()),
                                 reinterpret_cast<const std::byte*>(m.text.data()) + m.text.size()));
}

inline void put(writer& w, const leave& m) { w.u64(m.generation); }

inline message get(kind k, reader& r) {
  switch (k) {
    case kind::challenge: return challenge{r.array<nonce_bytes>()};
    case kind::hello: {
      hello m;
      m.mac = r.array<mac_bytes>();
      m.info = get_info(r);
      return m;
    }
    case kind::welcome: return welcome{r.u64()};
    case kind::reject: return reject{r.text()};
    case kind::assignment: {
      assignment m;
      m.generation = r.u64(), m.rank = r.u32(), m.size = r.u32();
      const std::uint32_t hosts = r.u32();
      if (hosts > max_hosts || hosts > r.left() / 4)  // each host takes 4 bytes or more
        throw protocol_error("an assignment names " + std::to_string(hosts) + " hosts, more than it can hold");
      m.hosts.reserve(hosts);
      for (std::uint32_t k2 = 0; k2 < hosts; ++k2) m.hosts.push_back(r.text());
      m.shard_begin = r.u64(), m.shard_end = r.u64(), m.local_batch = r.u32(), m.resume_step = r.u64();
      const std::uint32_t switches = r.u32();
      if (switches != 0 && switches != m.size)
        throw protocol_error("an assignment of " + std::to_string(m.size) + " ranks names the switches of " +
                             std::to_string(switches));
      if (switches > r.left() / 4) throw protocol_error("an assignment's switches run past its end");
      m.switches.reserve(switches);
      for (std::uint32_t k2 = 0; k2 < switches; ++k2) m.switches.push_back(r.u32());
      if (m.rank >= m.size || m.hosts.size() != m.size || m.shard_begin > m.shard_end)
        throw protocol_error("an assignment of rank " + std::to_string(m.rank) + " of " + std::to_string(m.size) +
                             " with " + std::to_string(m.hosts.size()) + " hosts and shard [" +
                             std::to_string(m.shard_begin) + ", " + std::to_string(m.shard_end) + ") is inconsistent");
      return m;
    }
    case kind::revoke: {
      revoke m;
      m.generation = r.u64(), m.reason = r.text();
      return m;
    }
    case kind::heartbeat: {
      heartbeat m;
      m.generation = r.u64(), m.step = r.u64();
      m.step_ms = r.f64(), m.allreduce_ms = r.f64(), m.busbw_gbps = r.f64(), m.loss = r.f64(), m.throughput = r.f64();
      return m;
    }
    case kind::failure: {
      failure m;
      m.generation = r.u64(), m.reason = r.text();
      return m;
    }
    case kind::store_set: {
      store_set m;
      m.id = r.u64(), m.key = r.text(), m.value = r.bytes();
      return m;
    }
    case kind::store_get: {
      store_get m;
      m.id = r.u64(), m.key = r.text(), m.timeout_ms = r.u32();
      return m;
    }
    case kind::store_add: {
      store_add m;
      m.id = r.u64(), m.key = r.text(), m.delta = r.i64();
      return m;
    }
    case kind::store_reply: {
      store_reply m;
      m.id = r.u64();
      const std::uint8_t outcome = r.u8();
      if (outcome > 2) throw protocol_error("a store reply's outcome " + std::to_string(outcome) + " is unknown");
      m.result = store_reply::outcome(outcome), m.value = r.bytes(), m.number = r.i64(), m.error = r.text();
      return m;
    }
    case kind::status_request: return status_request{};
    case kind::status_reply: {
      const auto b = r.bytes();
      return status_reply{std::string(reinterpret_cast<const char*>(b.data()), b.size())};
    }
    case kind::leave: return leave{r.u64()};
  }
  throw protocol_error("message kind " + std::to_string(unsigned(k)) + " is unknown");
}

}  // namespace detail

/// A frame's header, checked: version, kind and length within bounds.
struct frame_header {
  std::uint32_t length = 0;
  kind type = kind::challenge;
};

inline frame_header parse_header(const std::byte* h) {
  std::uint32_t length;
  std::uint16_t type, version;
  std::memcpy(&length, h, 4);
  std::memcpy(&type, h + 4, 2);
  std::memcpy(&version, h + 6, 2);
  if (version != protocol_version)
    throw protocol_error("protocol version " + std::to_string(version) + ", not " + std::to_string(protocol_version));
  if (type < std::uint16_t(kind::challenge) || type > std::uint16_t(kind::leave))
    throw protocol_error("message kind " + std::to_string(type) + " is unknown");
  if (length > max_payload_bytes)
    throw protocol_error("a payload of " + std::to_string(length) + " bytes is over the " +
                         std::to_string(max_payload_bytes) + " a message may take");
  return {length, static_cast<kind>(type)};
}

/// The message in a payload of kind `k`; every byte must be used.
inline message decode(kind k, const std::byte* payload, std::size_t size) {
  detail::reader r(payload, size);
  message m = detail::get(k, r);
  if (r.left() != 0) throw protocol_error(std::to_string(r.left()) + " bytes follow the message");
  return m;
}

/// The frame (header and payload) of `m`.
inline std::vector<std::byte> encode(const message& m) {
  detail::writer w;
  w.u32(0), w.u16(std::uint16_t(kind_of(m))), w.u16(protocol_version);
  std::visit([&](const auto& body) { detail::put(w, body); }, m);
  auto& out = w.out();
  const std::size_t payload = out.size() - header_bytes;
  if (payload > max_payload_bytes)
    throw protocol_error("a payload of " + std::to_string(payload) + " bytes is over the " +
                         std::to_string(max_payload_bytes) + " a message may take");
  const auto length = static_cast<std::uint32_t>(payload);
  std::memcpy(out.data(), &length, 4);
  return std::move(out);
}

/// Decodes a whole frame held in memory (the fuzz target's entry).
inline message decode_frame(const std::byte* data, std::size_t size) {
  if (size < header_bytes) throw protocol_error("a frame of " + std::to_string(size) + " bytes has no whole header");
  const frame_header h = parse_header(data);
  if (size - header_bytes != h.length)
    throw protocol_error("the header says " + std::to_string(h.length) + " bytes but " +
                         std::to_string(size - header_bytes) + " follow");
  return decode(h.type, data + header_bytes, h.length);
}

}  // namespace mimatrix::job
