// The small interface through which the executor runs a call's steps on device memory:
// copies and combines queued on a stream, events to learn when they are done, and a gate
// that holds a stream's later work until a call has finished. CUDA implements it
// (device/cuda_port.cuh); so does the host (device/host_port.hpp), which runs the same
// executor logic in CI, where there is no GPU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <new>
#include <string>
#include <string_view>

#include "mimatrix/core/device_stream.hpp"  // device::stream
#include "mimatrix/core/error.hpp"

namespace mimatrix::reduce {
struct host_kernels;  // reduce/host_kernels.hpp: the (dtype, op) a combine runs
}  // namespace mimatrix::reduce

namespace mimatrix::device {

/// A queue of device work, as the port knows it (a cudaStream_t for CUDA).
using stream_handle = void*;
/// A point in a stream's work (a cudaEvent_t for CUDA); null is none.
using event = void*;
/// A latch that a stream's work waits on until the port opens it.
using gate = void*;

/// `p` as an error message shows it.
inline std::string describe_address(const void* p) {
  char text[2 + 2 * sizeof(void*) + 1];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

/// What another process on this node needs to reach a block of device memory
/// (cudaIpcMemHandle_t for CUDA), sent to it as it is.
struct shared_memory {
  std::array<std::byte, 64> handle{};
  /// Which process exported it (device::this_process()), and where its allocation lies
  /// there: an importer retires an open block that a newer one from the same owner
  /// overlaps (device/import_table.hpp).
  std::uint64_t owner = 0, base = 0, bytes = 0;
};

/// How a network library names a port's device memory when it moves it directly
/// (libfabric's FI_HMEM: the interface, and the device for CUDA).
struct network_memory {
  enum class interface { none, system, cuda };
  interface iface = interface::none;  // none: the network cannot read it; stage through the host
  int device = 0;
};

/// What a device offers the executor. Every call queues work and returns at once unless it
/// says otherwise; errors of queued work surface at done() or synchronize().
///
/// @par Thread Safety
/// Every member may be called from any thread, on distinct or shared streams, as CUDA's
/// runtime allows.
class port {
 public:
  port() = default;
  port(const port&) : port() {}  // a copy is a port of its own, with its own lifetime()
  port& operator=(const port&) { return *this; }
  virtual ~port() = default;
  virtual std::string_view name() const = 0;

  /// A stream of the port's own: a call's work runs there, after the caller's.
  virtual stream_handle make_stream() = 0;
  virtual void free_stream(stream_handle s) noexcept = 0;

  /// dst = src, `bytes` bytes; the two do not overlap unless they are equal.
  virtual void copy(stream_handle s, void* dst, const void* src, std::size_t bytes) = 0;
  /// dst = op(a, b) element-wise over `bytes` of `k`'s dtype; dst may be a or b.
  virtual void combine(stream_handle s, const reduce::host_kernels& k, void* dst, const void* a, const void* b,
                       std::size_t bytes) = 0;
  /// data = op.finalize(data, ranks): avg's division, nothing for the other ops.
  virtual void finalize(stream_handle s, const reduce::host_kernels& k, void* data, std::size_t bytes,
                        int ranks) = 0;
  /// Every dsts[d] = op.finalize(op(srcs[0], ..., srcs[n-1]), ranks) over `bytes`: one
  /// pass that reads each source once and writes each destination once, as a rank
  /// reducing its shard of every peer's buffer straight into every peer's output does
  /// (2n times the bytes of traffic for n ranks). dsts[d] may be srcs[d] (in place,
  /// element by element); nothing else overlaps. This default queues combines into
  /// dsts[0] and copies from it: the same result, with more traffic.
  inline virtual void reduce_many(stream_handle s, const reduce::host_kernels& k, void* const* dsts,
                                  std::size_t ndst, const void* const* srcs, std::size_t nsrc, std::size_t bytes,
                                  int ranks);  // inline: a key function emits the vtable everywhere (progress.hpp)

  /// An event that completes once the work queued on `s` so far is done.
  virtual event record(stream_handle s) = 0;
  /// Whether `e` has completed; never blocks.
  virtual bool done(event e) = 0;
  virtual void free_event(event e) noexcept = 0;
  /// Work queued on `s` later waits for `e`.
  virtual void wait(stream_handle s, event e) = 0;

  /// Work queued on `s` later waits until open() runs (a caller's stream waits for a call
  /// whose work is queued on another stream afterwards).
  virtual gate hold(stream_handle s) = 0;
  /// Queued on `s`: opens `g` once the work before it on `s` is done, and frees it.
  virtual void open(stream_handle s, gate g) = 0;

  /// Blocks until the work queued on `s` is done.
  virtual void synchronize(stream_handle s) = 0;

  /// Device memory: a call's scratch, where its kernels combine (cudaMalloc for CUDA; a
  /// kernel cannot read pageable host memory).
  virtual void* allocate_device(std::size_t bytes) = 0;
  virtual void free_device(void* p, std::size_t bytes) noexcept = 0;

  /// Why [p, p + bytes) cannot be a call's device buffer ("host memory at 0x..."); empty
  /// where it can, or where the port cannot tell. A call checks its own buffers with it,
  /// so that the rank that holds a wrong one names it, not a peer whose kernel faults there.
  virtual std::string not_device_memory(const void* p, std::size_t bytes) const {
    (void)p;
    (void)bytes;
    return {};
  }

  /// Whether export_memory() and import_memory() work: processes on this node can read
  /// each other's device memory directly (CUDA IPC), with no copy through the host.
  virtual bool shares_memory() const { return false; }
  /// The handle of the device allocation that holds [p, p + bytes), and p's offset in it.
  /// Throws errc::invalid_argument, naming the memory, where it cannot be shared (not
  /// from allocate_device or cudaMalloc).
  inline virtual shared_memory export_memory(const void* p, std::size_t bytes, std::size_t& offset);
  /// This process's address of a peer's block. A block is opened once and stays open
  /// (opening one costs milliseconds on CUDA) until the port goes or a newer block of
  /// its owner overlaps it (the owner freed it); its handle must come from
  /// export_memory() of the same kind of port on this node.
  inline virtual std::byte* import_memory(const shared_memory& block);

  /// What a network library must be told to send and receive this port's device memory
  /// directly (GPUDirect RDMA); interface::none where it cannot.
  virtual network_memory network() const { return {}; }

  /// Host memory that copies to and from the device run on asynchronously (pinned for
  /// CUDA: a copy from pageable memory would block the thread that queues it).
  virtual void* allocate_host(std::size_t bytes) { return ::operator new(bytes); }
  virtual void free_host(void* p, std::size_t /*bytes*/) noexcept { ::operator delete(p); }

  /// Expires when this port is destroyed. A port may end before the communicators that ran
  /// calls on it, once those calls have ended: what they keep of it (rank_streams' streams
  /// and buffers, which its end freed) is then let go of without calling it.
  std::weak_ptr<const void> lifetime() const { return alive_; }

 private:
  std::shared_ptr<const void> alive_ = std::make_shared<char>();
};

inline void port::reduce_many(stream_handle s, const reduce::host_kernels& k, void* const* dsts, std::size_t ndst,
                              const void* const* srcs, std::size_t nsrc, std::size_t bytes, int ranks) {
  if (!ndst || !nsrc || !bytes) return;
  if (nsrc == 1) copy(s, dsts[0], srcs[0], bytes);
  for (std::size_t i = 1; i < nsrc; ++i) combine(s, k, dsts[0], i == 1 ? srcs[0] : dsts[0], srcs[i], bytes);
  finalize(s, k, dsts[0], bytes, ranks);
  for (std::size_t d = 1; d < ndst; ++d) copy(s, dsts[d], dsts[0], bytes);
}

inline shared_memory port::export_memory(const void*, std::size_t, std::size_t&) {
  throw error(errc::invalid_argument, "device::port " + std::string(name()) +
                                          " cannot share device memory with other processes");
}
inline std::byte* port::import_memory(const shared_memory&) {
  throw error(errc::invalid_argument, "device::port " + std::string(name()) +
                                          " cannot open another process's device memory");
}

}  // namespace mimatrix::device
