// Point-to-point calls: a p2p_batch of sends and receives that start together, as
// ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd, MPI_Isend/MPI_Irecv with MPI_Waitall, and
// c10d's batch_isend_irecv. collectives<Transport>::start(batch) runs one; send() and
// recv() are batches of one. Matching: this rank's k-th batch naming rank q meets q's k-th
// batch naming this rank, and inside it the n-th send with a tag meets the n-th receive
// with that tag (of equal count and dtype). No order inside a batch can deadlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "mimatrix/core/dtype.hpp"

namespace mimatrix {

/// A list of sends and receives to start together: a value, bound to no communicator,
/// reusable (clear() it, or start it again).
///
/// @code
///   mimatrix::p2p_batch ring;
///   ring.send(std::span<const int>(mine), right).recv(std::span<int>(theirs), left);
///   coll.start(ring).wait();  // every rank at once: no deadlock
/// @endcode
///
/// Tags are 0 to 65534. A receive's count and dtype must equal its send's. Receive buffers
/// must not overlap each other or a send's buffer. At most 253 ops a batch (for now).
///
/// @par Thread Safety
/// A plain value: concurrent reads are safe, writes need exclusive access.
class p2p_batch {
 public:
  struct op {
    bool send = true;
    const void* buffer = nullptr;  // a receive's is written
    std::size_t count = 0;
    dtype type = dtype::uint8;
    int peer = 0;
    std::uint32_t tag = 0;
  };

  /// Sends `count` elements of `type` at `buffer` to rank `peer`.
  p2p_batch& send(const void* buffer, std::size_t count, dtype type, int peer, std::uint32_t tag = 0) {
    ops_.push_back({true, buffer, count, type, peer, tag});
    return *this;
  }
  /// Receives `count` elements of `type` from rank `peer` into `buffer`.
  p2p_batch& recv(void* buffer, std::size_t count, dtype type, int peer, std::uint32_t tag = 0) {
    ops_.push_back({false, buffer, count, type, peer, tag});
    return *this;
  }
  template <class T>
    requires element<std::remove_const_t<T>>
  p2p_batch& send(std::span<T> buffer, int peer, std::uint32_t tag = 0) {
    return send(buffer.data(), buffer.size(), dtype_of<std::remove_const_t<T>>, peer, tag);
  }
  template <element T>
  p2p_batch& recv(std::span<T> buffer, int peer, std::uint32_t tag = 0) {
    return recv(buffer.data(), buffer.size(), dtype_of<T>, peer, tag);
  }

  std::span<const op> ops() const { return ops_; }
  std::size_t size() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }
  void clear() { ops_.clear(); }

 private:
  std::vector<op> ops_;
};

}  // namespace mimatrix
