// p2p_core's definitions: in every unit when header-only, once with separate compilation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/detail/communicator_state.hpp"
#include "mimatrix/detail/p2p_core.hpp"
#include "mimatrix/device/port.hpp"
#include "mimatrix/schedule/p2p.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/batch_call.hpp"
#include "mimatrix/transport/dump_request.hpp"

namespace mimatrix::detail {

/// What makes `options` no options of a p2p call: a p2p op carries its own tag, and a
/// batch has no algorithm to choose.
inline std::optional<std::string> p2p_options_problem(const call_options& options) {
  if (!options.algorithm.empty())
    return "call_options::algorithm ('" + options.algorithm + "') is for collectives; a p2p batch has no algorithm";
  if (options.tag)
    return "call_options::tag (" + std::to_string(options.tag) +
           ") is for collectives; give a send or receive its tag as an argument";
  if (options.stream)
    return std::string("p2p on device buffers (call_options::stream) is not supported yet: host memory only");
  if (options.timeout && options.timeout->count() <= 0)
    return "call_options::timeout is " + std::to_string(options.timeout->count()) +
           " ms; a deadline must be positive (unset: the communicator's)";
  return std::nullopt;
}

/// What makes the buffers of `ops` unusable: a null buffer with a nonzero count, or a
/// receive's memory overlapping another op's (sends may share memory: they only read).
inline std::optional<std::string> p2p_buffer_problem(std::span<const p2p_batch::op> ops,
                                                     std::span<const schedule::p2p::op> shapes) {
  struct span_of {
    const std::byte* begin;
    const std::byte* end;
    std::size_t op;
  };
  std::vector<span_of> spans;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (!shapes[k].count) continue;
    if (!ops[k].buffer) return schedule::p2p::describe_op(shapes, k) + ": a null buffer with count " + std::to_string(shapes[k].count);
    const auto* at = static_cast<const std::byte*>(ops[k].buffer);
    spans.push_back({at, at + shapes[k].bytes(), k});
  }
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  // By start: a span overlaps an earlier one iff it starts before the furthest end so far
  // (a receive's, for a send; anyone's, for a receive).
  std::optional<span_of> reach_any, reach_recv;
  for (const auto& s : spans) {
    const bool recv = !shapes[s.op].send;
    const auto& against = recv ? reach_any : reach_recv;
    if (against && s.begin < against->end)
      return schedule::p2p::describe_op(shapes, s.op) + " at " + device::describe_address(s.begin) + " (" +
             std::to_string(s.end - s.begin) + " bytes) overlaps " + schedule::p2p::describe_op(shapes, against->op) +
             " (" + std::to_string(against->end - against->begin) + " bytes at " +
             device::describe_address(against->begin) + "): a receive's buffer may share memory with no other op";
    if (!reach_any || s.end > reach_any->end) reach_any = s;
    if (recv && (!reach_recv || s.end > reach_recv->end)) reach_recv = s;
  }
  return std::nullopt;
}

struct p2p_core::impl {
  impl(communicator_state& c, const transport_face& t) : comm(c), alive(c.liveness()), transport(t) {}

  [[noreturn]] void misuse(const std::string& what) const {
    throw error(errc::invalid_argument, "rank " + std::to_string(transport.rank) + ": " + what);
  }

  request run(std::span<const p2p_batch::op> ops, const call_options& options);

  communicator_state& comm;
  std::weak_ptr<const void> alive;  // comm's
  transport_face transport;
  int depth = 0;      // groups open
  p2p_batch grouped;  // the ops sent and received inside them
};

MIMATRIX_DECL p2p_core::p2p_core(communicator_state& comm, const transport_face& transport)
    : impl_(std::make_unique<impl>(comm, transport)) {}
MIMATRIX_DECL p2p_core::p2p_core(p2p_core&&) noexcept = default;
MIMATRIX_DECL p2p_core::~p2p_core() {
  if (impl_ && impl_->depth > 0 && !impl_->alive.expired()) impl_->comm.set_grouping(false);
}

MIMATRIX_DECL request p2p_core::impl::run(std::span<const p2p_batch::op> ops, const call_options& options) {
  transport::dump_request::serve_if_raised();
  const int rank = transport.rank, size = transport.size;
  refuse_if_destroyed(alive, rank, "p2p batch");
  if (!transport.start_batch) misuse("this transport runs no p2p batch yet");
  const auto bad_options = p2p_options_problem(options);
  if (ops.empty()) {  // done at once; no peer is named, so none is told
    if (bad_options) misuse("an empty p2p batch: " + *bad_options);
    return request();
  }
  std::vector<schedule::p2p::op> shapes;
  std::vector<std::byte*> entries;
  std::vector<int> peers;
  shapes.reserve(ops.size());
  entries.reserve(ops.size());
  for (const auto& o : ops) {
    shapes.push_back({o.send, o.peer, o.tag, o.count, o.type});
    entries.push_back(static_cast<std::byte*>(const_cast<void*>(o.buffer)));  // a send's is only read
    if (o.peer != rank && o.peer >= 0 && o.peer < size) peers.push_back(o.peer);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  const auto numbers = comm.take_batch(rank, size, transport.progress, peers);
  signature sig;
  sig.kind = schedule::collective::p2p;
  sig.type = dtype::uint8;
  sig.sequence = numbers.local;
  const transport::batch_call call{sig, shapes, entries, numbers.epochs};

  // A refused batch fails its peers' sides at once (they name this rank), then throws.
  errc code = errc::invalid_argument;
  auto why = bad_options;
  if (!why) why = schedule::p2p::problem(shapes, size);
  if (!why) why = p2p_buffer_problem(ops, shapes);
  if (!why && (why = schedule::p2p::self_mismatch(shapes, rank))) code = errc::mismatch;
  if (why) {
    const std::string message = describe({rank, -1, "p2p batch", static_cast<std::int64_t>(numbers.local)}, *why);
    transport.fail_batch(transport.transport, call, code, message);
    throw error(code, message);
  }
  auto plan = std::make_shared<const schedule::schedule>(schedule::p2p::build(shapes, rank, size));
  const auto deadline = options.timeout.value_or(comm.settings().timeout);
  return request(transport.start_batch(transport.transport, std::move(plan), call, deadline), numbers.local);
}

MIMATRIX_DECL request p2p_core::start(const p2p_batch& batch, const call_options& options) {
  if (impl_->depth > 0)
    impl_->misuse("start(p2p_batch) inside group_start()/group_end(); call send() and recv() there, or start the "
                  "batch after group_end()");
  return impl_->run(batch.ops(), options);
}

MIMATRIX_DECL request p2p_core::send(const void* buffer, std::size_t count, dtype type, int peer, std::uint32_t tag,
                                     const call_options& options) {
  if (impl_->depth == 0) return impl_->run(p2p_batch().send(buffer, count, type, peer, tag).ops(), options);
  if (auto why = p2p_options_problem(options)) impl_->misuse("a send inside a group: " + *why);
  impl_->grouped.send(buffer, count, type, peer, tag);
  return request();
}

MIMATRIX_DECL request p2p_core::recv(void* buffer, std::size_t count, dtype type, int peer, std::uint32_t tag,
                                     const call_options& options) {
  if (impl_->depth == 0) return impl_->run(p2p_batch().recv(buffer, count, type, peer, tag).ops(), options);
  if (auto why = p2p_options_problem(options)) impl_->misuse("a recv inside a group: " + *why);
  impl_->grouped.recv(buffer, count, type, peer, tag);
  return request();
}

MIMATRIX_DECL void p2p_core::group_start() {
  refuse_if_destroyed(impl_->alive, impl_->transport.rank, "group_start");
  ++impl_->depth;
  impl_->comm.set_grouping(true);
}

MIMATRIX_DECL request p2p_core::group_end(const call_options& options) {
  impl& e = *impl_;
  if (e.depth == 0) e.misuse("group_end() without group_start()");
  if (--e.depth > 0) return request();
  if (!e.alive.expired()) e.comm.set_grouping(false);
  const p2p_batch batch = std::exchange(e.grouped, {});
  return e.run(batch.ops(), options);
}

}  // namespace mimatrix::detail
