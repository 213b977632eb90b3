// A fabric execution's path for device buffers that peers on this host read directly
// (CUDA IPC), as NCCL's P2P transport does: a send posts, through the mailbox, where its
// data lies (the exported block and an offset), not the data; the receiver opens that
// block once, queues the copy or reduction from it on its own stream, and when that has
// run tells the sender, whose send is done only then (its memory may change after).
// Nothing goes through host memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/transport/fabric/execution.hpp"
#include "mimatrix/transport/fabric/mailbox.hpp"
#include "mimatrix/transport/fabric/wire.hpp"

namespace mimatrix::transport::detail::fabric {

inline bool execution::shares_device_memory(device::port& port) const {
  if (!ep_->reaches_peers_device_memory(port, sizeof(shared_region))) return false;
  return std::none_of(plan().steps.begin(), plan().steps.end(), [](const schedule::step& st) {
    return schedule::is_one_sided(st.kind) || (st.kind == kind::wait && st.count > 0);
  });
}

inline bool execution::export_buffers(device::port& port) {
  port_ = &port;
  const auto& d = plan().desc;
  const struct {
    schedule::buffer where;
    const void* data;
    std::size_t bytes;
  } buffers[] = {{schedule::buffer::input, mem_.input, d.input_bytes(plan().rank)},
                 {schedule::buffer::output, mem_.output, d.output_bytes(plan().rank)},
                 {schedule::buffer::scratch, mem_.scratch, plan().scratch_bytes}};
  for (const auto& b : buffers) {
    if (!b.data || !b.bytes) continue;
    try {
      std::size_t offset = 0;
      exported_[std::size_t(b.where)] = {port.export_memory(b.data, b.bytes, offset), offset, b.bytes};
    } catch (const error& e) {
      fail(errc::invalid_argument,
           "rank " + std::to_string(plan().rank) + ": " + to_string(sig()) + " cannot share its " +
               std::string(schedule::to_string(b.where)) + " buffer with the ranks on this host: " + e.what() +
               " (MIMATRIX_DEVICE_IPC=0 on every rank stages device buffers through host memory)");
      return false;
    }
  }
  return true;
}

inline execution::posted execution::post_shared(schedule::step_id id) {
  const schedule::step& st = step_at(id);
  const shared_region& buffer = exported_[std::size_t(st.src.where)];
  const shared_region region{buffer.block, buffer.offset + st.src.offset, st.src.bytes};
  if (!small_->try_send(st.peer, wire::data_tag(plan().rank, sig().sequence, st.tag), packed_, &region,
                        sizeof region))
    return posted::deferred;  // the ring is full
  unread_.push_back(id);
  return posted::started;
}

inline bool execution::take_shared(local_mailboxes& box, int peer, schedule::step_id id,
                                   const local_mailboxes::message& m) {
  const schedule::step& st = step_at(id);
  shared_region region{};
  if (m.bytes == sizeof region) std::memcpy(&region, m.payload, sizeof region);
  if (m.data != packed_ || m.bytes != sizeof region || region.bytes != st.dst.bytes) [[unlikely]] {
    const std::string why =
        m.data != packed_ ? wire::disagreement(peer, m.data, packed_, sig(), plan())
        : m.bytes != sizeof region
            ? "rank " + std::to_string(peer) + " sent " + std::to_string(m.bytes) +
                  " bytes of data where this rank reads its device memory directly (set MIMATRIX_DEVICE_IPC alike "
                  "on every rank, and run every rank on device buffers of one kind of port)"
            : "rank " + std::to_string(peer) + " sent " + std::to_string(region.bytes) + " bytes where " +
                  std::to_string(st.dst.bytes) + " were expected (" + to_string(sig()) + ")";
    box.take(peer);
    fail(errc::mismatch, describe(context(id), why));
    return true;
  }
  box.take(peer);
  std::byte* block = nullptr;
  try {
    block = port_->import_memory(region.block);
  } catch (const error& e) {
    fail(errc::transport, describe(context(id), "rank " + std::to_string(peer) +
                                                    "'s device memory cannot be opened here: " + e.what()));
    return true;
  }
  arrive(id, block + region.offset);  // the step is ready: read where it lies, on this rank's stream
  return true;
}

inline void execution::read_done(schedule::step_id id) {
  if (finished()) return;  // a failed call: the sender learns of the failure instead
  const schedule::step& st = step_at(id);
  reads_due_.emplace_back(st.peer, wire::read_tag(plan().rank, sig().sequence, st.tag));
  send_reads();
}

inline bool execution::send_reads() {
  std::size_t sent = 0;
  for (; sent < reads_due_.size(); ++sent)
    if (!small_->try_send(reads_due_[sent].first, reads_due_[sent].second, packed_, nullptr, 0)) break;
  reads_due_.erase(reads_due_.begin(), reads_due_.begin() + std::ptrdiff_t(sent));
  return sent > 0;
}

inline bool execution::take_reads() {
  read_.clear();
  std::size_t kept = 0;
  for (const schedule::step_id id : unread_) {
    const schedule::step& st = step_at(id);
    const local_mailboxes::message* m = small_->try_peek(st.peer, wire::read_tag(st.peer, sig().sequence, st.tag));
    if (!m) {
      unread_[kept++] = id;
      continue;
    }
    const bool same_call = m->data == packed_;
    small_->take(st.peer);
    if (!same_call) {
      fail(errc::mismatch,
           describe(context(id), wire::disagreement(st.peer, m->data, packed_, sig(), plan())));
      return true;
    }
    read_.push_back(id);
  }
  unread_.resize(kept);
  // Completing releases successors, which may post sends to unread_: after it is settled.
  for (const schedule::step_id id : read_)
    if (!finished()) complete(id);
  return !read_.empty();
}

}  // namespace mimatrix::transport::detail::fabric
