// device::port on CUDA: copies are cudaMemcpyAsync, combines the kernels of
// reduce/cuda.cuh found by (dtype, op), events are cudaEvents, and a gate is a one-thread
// kernel that spins on a flag in mapped host memory until a kernel on another stream sets
// it, so the caller's stream waits for a call queued after it with no host in between
// (MIMATRIX_DEVICE_GATE=memop: a cuStreamWaitValue32 that a cuStreamWriteValue32 opens,
// which occupies no SM and leaves a waiting process's timeslices to others).
// For .cu files; `cuda_port::instance()` is the process's port, on the device current where
// it is first used (one GPU a process, as one rank a GPU); `cuda_port::for_device(d)` gives
// ranks of one process on several GPUs a port each, with peer access between them.
#pragma once

#if !defined(__CUDACC__)
#error "mimatrix/device/cuda_port.cuh holds CUDA code: include it from a .cu file compiled by nvcc"
#endif

#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuMemGetAddressRange
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/log.hpp"
#include "mimatrix/device/closing_thread.hpp"
#include "mimatrix/device/import_table.hpp"
#include "mimatrix/device/peer_access.hpp"
#include "mimatrix/device/port.hpp"
#include "mimatrix/reduce/cuda.cuh"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/reduce/ops.hpp"

namespace mimatrix::device {

namespace detail {

inline void check_cuda(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return;
  throw error(errc::cuda, "device::cuda_port: " + std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                              cudaGetErrorString(e) + ")");
}

/// Calls f(Op{}) with the operation of (type, op).
template <class F>
void with_operation(dtype type, reduce::op_kind op, F&& f) {
  const auto of_type = [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
      case reduce::op_kind::sum: return f(reduce::sum<T>{});
      case reduce::op_kind::prod: return f(reduce::prod<T>{});
      case reduce::op_kind::min: return f(reduce::min<T>{});
      case reduce::op_kind::max: return f(reduce::max<T>{});
      case reduce::op_kind::avg: return f(reduce::avg<T>{});
    }
    throw error(errc::invalid_argument, "device::cuda_port: no operation " + std::to_string(int(op)));
  };
  switch (type) {
    case dtype::int8: return of_type(std::int8_t{});
    case dtype::uint8: return of_type(std::uint8_t{});
    case dtype::int32: return of_type(std::int32_t{});
    case dtype::int64: return of_type(std::int64_t{});
    case dtype::float16: return of_type(half{});
    case dtype::bfloat16: return of_type(bfloat16{});
    case dtype::float32: return of_type(float{});
    case dtype::float64: return of_type(double{});
  }
  throw error(errc::invalid_argument, "device::cuda_port: no dtype " + std::to_string(int(type)));
}

/// The driver's cuMemGetAddressRange (where the allocation holding p starts, and its
/// size), which the runtime lacks. Found through the runtime rather than linked: a program
/// linked to libcuda cannot start where no driver is installed, so could not skip there.
inline CUresult allocation_range(CUdeviceptr* base, std::size_t* size, CUdeviceptr p) {
  static const auto resolved = [] {
    void* f = nullptr;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 3020, cudaEnableDefault, nullptr);
#else
    const cudaError_t e = cudaGetDriverEntryPoint("cuMemGetAddressRange", &f, cudaEnableDefault);
#endif
    return e == cudaSuccess ? reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(f) : nullptr;
  }();
  return resolved ? resolved(base, size, p) : CUDA_ERROR_NOT_FOUND;
}

/// cuStreamWaitValue32 and cuStreamWriteValue32 (stream memory operations), found through
/// the runtime as allocation_range is; null where the driver lacks them.
struct stream_memops {
  PFN_cuStreamWaitValue32_v11070 wait = nullptr;
  PFN_cuStreamWriteValue32_v11070 write = nullptr;
};
inline stream_memops find_stream_memops() {
  void* wait = nullptr;
  void* write = nullptr;
#if CUDART_VERSION >= 12050
  const bool found =
      cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &wait, 11070, cudaEnableDefault, nullptr) == cudaSuccess &&
      cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &write, 11070, cudaEnableDefault, nullptr) == cudaSuccess;
#else
  const bool found = cudaGetDriverEntryPoint("cuStreamWaitValue32", &wait, cudaEnableDefault) == cudaSuccess &&
                     cudaGetDriverEntryPoint("cuStreamWriteValue32", &write, cudaEnableDefault) == cudaSuccess;
#endif
  if (!found || !wait || !write) return {};
  return {reinterpret_cast<PFN_cuStreamWaitValue32_v11070>(wait), reinterpret_cast<PFN_cuStreamWriteValue32_v11070>(write)};
}

inline void check_driver(CUresult r, std::string_view what) {
  if (r == CUDA_SUCCESS) return;
  throw error(errc::cuda, "device::cuda_port: " + std::string(what) + ": CUresult " + std::to_string(int(r)));
}

/// Holds its stream until the flag reaches `ticket`.
__global__ inline void gate_hold_kernel(const volatile std::uint32_t* flag, std::uint32_t ticket) {
  while (static_cast<std::int32_t>(*flag - ticket) < 0) __nanosleep(1000);
}

__global__ inline void gate_open_kernel(volatile std::uint32_t* flag, std::uint32_t ticket) {
  *flag = ticket;
  __threadfence_system();
}

/// The process's map of peer access between its GPUs (device/peer_access.hpp).
inline peer_access& process_peers() {
  static peer_access peers({[](int from, int to) {
                              int can = 0;
                              return cudaDeviceCanAccessPeer(&can, from, to) == cudaSuccess && can != 0;
                            },
                            [](int from, int to) {
                              int current = -1;
                              (void)cudaGetDevice(&current);
                              (void)cudaSetDevice(from);
                              const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
                              if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
                              (void)cudaSetDevice(current);
                              check_cuda(e == cudaErrorPeerAccessAlreadyEnabled ? cudaSuccess : e,
                                         "cudaDeviceEnablePeerAccess from GPU " + std::to_string(from) + " to GPU " +
                                             std::to_string(to));
                            }});
  return peers;
}

}  // namespace detail

/// @par Thread Safety
/// As device::port.
class cuda_port final : public port {
 public:
  /// Gates in flight at once, at most: a slot is reused after this many more.
  static constexpr std::uint32_t gate_slots = 4096;

  cuda_port() {
    // A blocking launch of a gate returns only when the gate opens, which the progress
    // thread queues after this call returns: every device call would hang.
    if (const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING"); blocking && std::string_view(blocking) == "1")
      throw error(errc::invalid_argument,
                  "device::cuda_port: device calls cannot run with CUDA_LAUNCH_BLOCKING=1 (a call's gate on the "
                  "caller's stream would never return from its launch); unset it, or stage host buffers");
    detail::check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
    if (const char* queues = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"); queues && std::atoi(queues) < 8)
      log(log_level::warn, std::string("device::cuda_port: CUDA_DEVICE_MAX_CONNECTIONS=") + queues +
                               ": a device call's gate may share a hardware queue with the call's own work, and "
                               "hang it; mimatrix wants 32 (docs/device.md)");
    if (const char* kind = std::getenv("MIMATRIX_DEVICE_GATE"); kind && *kind) {
      const std::string_view k(kind);
      if (k == "memop")
        memops_ = detail::find_stream_memops();
      else if (k != "kernel")
        throw error(errc::invalid_argument, "device::cuda_port: MIMATRIX_DEVICE_GATE=" + std::string(k) +
                                                ": a gate is a spinning \"kernel\" (the default) or a \"memop\"");
      if (k == "memop" && !memops_.wait)
        throw error(errc::invalid_argument, "device::cuda_port: MIMATRIX_DEVICE_GATE=memop, but the driver has no "
                                            "cuStreamWaitValue32 or cuStreamWriteValue32");
    }
    load_kernels();
    detail::check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&flags_), gate_slots * sizeof(std::uint32_t),
                                     cudaHostAllocMapped | cudaHostAllocPortable),
                       "cudaHostAlloc of the gate flags");
    for (std::uint32_t k = 0; k < gate_slots; ++k) flags_[k] = 0;
    detail::check_cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flags_), flags_, 0),
                       "cudaHostGetDevicePointer of the gate flags");
    detail::process_peers().join(device_);
  }
  cuda_port(const cuda_port&) = delete;
  cuda_port& operator=(const cuda_port&) = delete;
  /// Loads every kernel a call launches while a gate spins (lazy loading, CUDA's default,
  /// would load each at its first launch, which may wait for the spinning gate).
  static void load_kernels() {
    cudaFuncAttributes attributes{};
    detail::check_cuda(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&detail::gate_hold_kernel)),
                       "loading the gate kernels");
    detail::check_cuda(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&detail::gate_open_kernel)),
                       "loading the gate kernels");
    for (const dtype type : reduce::detail::every_dtype)
      for (const reduce::op_kind op : reduce::detail::every_op)
        detail::with_operation(type, op, [&](auto o) {
          detail::check_cuda(reduce::cuda::detail::load_kernels<decltype(o)>(), "loading the reduction kernels");
        });
  }

  /// Closes the peers' blocks that import_memory opened (closer_ then closes those
  /// retired and not closed yet).
  ~cuda_port() override {
    here();
    for (const auto& block : imports_.take_all()) cudaIpcCloseMemHandle(block.at);
    cudaFreeHost(flags_);
  }

  /// The process's port: for_device() of the device current where it is first used.
  static cuda_port& instance() {
    static cuda_port& port = [] () -> cuda_port& {
      int d = 0;
      detail::check_cuda(cudaGetDevice(&d), "cudaGetDevice");
      return for_device(d);
    }();
    return port;
  }
  /// The port of GPU `d`, made once a process: ranks of one process on several GPUs take
  /// one each. Their kernels read each other's memory (peer access, enabled as each is made).
  static cuda_port& for_device(int d) {
    static std::mutex guard;
    static std::map<int, std::unique_ptr<cuda_port>> ports;
    std::lock_guard lock(guard);
    auto& slot = ports[d];
    if (!slot) {
      int current = -1;
      detail::check_cuda(cudaGetDevice(&current), "cudaGetDevice");
      detail::check_cuda(cudaSetDevice(d), "cudaSetDevice to GPU " + std::to_string(d));
      try {
        slot = std::make_unique<cuda_port>();
      } catch (...) {
        (void)cudaSetDevice(current);
        throw;
      }
      (void)cudaSetDevice(current);
    }
    return *slot;
  }
  /// `s` as a collective takes it: on instance(), or on GPU `d`'s port.
  static stream on(cudaStream_t s) { return {&instance(), s}; }
  static stream on(cudaStream_t s, int d) { return {&for_device(d), s}; }

  std::string_view name() const override { return "cuda"; }

  stream_handle make_stream() override {
    here();
    cudaStream_t s = nullptr;
    detail::check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  void free_stream(stream_handle s) noexcept override {
    here();
    cudaStreamSynchronize(as_stream(s));
    cudaStreamDestroy(as_stream(s));
  }

  void copy(stream_handle s, void* dst, const void* src, std::size_t bytes) override {
    here();
    if (dst == src || bytes == 0) return;
    detail::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(s)), "cudaMemcpyAsync");
  }
  void combine(stream_handle s, const reduce::host_kernels& k, void* dst, const void* a, const void* b,
               std::size_t bytes) override {
    here();
    if (!detail::process_peers().complete())  // some pair of this process's GPUs has no peer path
      for (const void* operand : {static_cast<const void*>(dst), a, b}) reachable(operand, "combine");
    detail::with_operation(k.type, k.op, [&](auto op) {
      using T = typename decltype(op)::value_type;
      reduce::cuda::combine(op, static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b),
                            bytes / sizeof(T), as_stream(s));
    });
  }
  /// One kernel (reduce::cuda::reduce_many) for up to reduce::cuda::max_operands of each;
  /// more are combined and copied (port's default).
  void reduce_many(stream_handle s, const reduce::host_kernels& k, void* const* dsts, std::size_t ndst,
                   const void* const* srcs, std::size_t nsrc, std::size_t bytes, int ranks) override {
    constexpr auto most = std::size_t(reduce::cuda::max_operands);
    if (ndst > most || nsrc > most) return port::reduce_many(s, k, dsts, ndst, srcs, nsrc, bytes, ranks);
    if (!ndst || !nsrc || !bytes) return;
    here();
    if (!detail::process_peers().complete()) {
      for (std::size_t d = 0; d < ndst; ++d) reachable(dsts[d], "reduce_many");
      for (std::size_t i = 0; i < nsrc; ++i) reachable(srcs[i], "reduce_many");
    }
    detail::with_operation(k.type, k.op, [&](auto op) {
      using T = typename decltype(op)::value_type;
      reduce::cuda::many_operands<T> m;
      m.destinations = int(ndst);
      m.sources = int(nsrc);
      for (std::size_t d = 0; d < ndst; ++d) m.dst[d] = static_cast<T*>(dsts[d]);
      for (std::size_t i = 0; i < nsrc; ++i) m.src[i] = static_cast<const T*>(srcs[i]);
      reduce::cuda::reduce_many(op, m, bytes / sizeof(T), ranks, as_stream(s));
    });
  }
  void finalize(stream_handle s, const reduce::host_kernels& k, void* data, std::size_t bytes, int ranks) override {
    here();
    detail::with_operation(k.type, k.op, [&](auto op) {
      using T = typename decltype(op)::value_type;
      reduce::cuda::finalize(op, static_cast<T*>(data), bytes / sizeof(T), ranks, as_stream(s));
    });
  }

  event record(stream_handle s) override {
    here();
    cudaEvent_t e = nullptr;
    detail::check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    detail::check_cuda(cudaEventRecord(e, as_stream(s)), "cudaEventRecord");
    return e;
  }
  bool done(event e) override {
    here();
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (status == cudaErrorNotReady) return false;
    detail::check_cuda(status, "work before an event (cudaEventQuery)");
    return true;
  }
  void free_event(event e) noexcept override {
    here();
    cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
  void wait(stream_handle s, event e) override {
    here();
    detail::check_cuda(cudaStreamWaitEvent(as_stream(s), static_cast<cudaEvent_t>(e), 0), "cudaStreamWaitEvent");
  }

  gate hold(stream_handle s) override {
    here();
    std::uint32_t ticket = 0;
    while (ticket == 0) ticket = next_ticket_.fetch_add(1) + 1;  // 0 is no gate (it wraps after 2^32)
    std::uint32_t* flag = device_flags_ + ticket % gate_slots;
    if (memops_.wait) {  // GEQ compares cyclically, as the kernel does
      detail::check_driver(memops_.wait(as_stream(s), CUdeviceptr(flag), ticket, CU_STREAM_WAIT_VALUE_GEQ),
                           "cuStreamWaitValue32 of a gate");
    } else {
      detail::gate_hold_kernel<<<1, 1, 0, as_stream(s)>>>(flag, ticket);
      detail::check_cuda(cudaGetLastError(), "launch of a gate");
    }
    return reinterpret_cast<gate>(static_cast<std::uintptr_t>(ticket));
  }
  void open(stream_handle s, gate g) override {
    here();
    const auto ticket = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(g));
    std::uint32_t* flag = device_flags_ + ticket % gate_slots;
    if (memops_.write) {
      detail::check_driver(memops_.write(as_stream(s), CUdeviceptr(flag), ticket, CU_STREAM_WRITE_VALUE_DEFAULT),
                           "cuStreamWriteValue32 of a gate's opening");
    } else {
      detail::gate_open_kernel<<<1, 1, 0, as_stream(s)>>>(flag, ticket);
      detail::check_cuda(cudaGetLastError(), "launch of a gate's opening");
    }
  }

  void synchronize(stream_handle s) override {
    here();
    detail::check_cuda(cudaStreamSynchronize(as_stream(s)), "cudaStreamSynchronize");
  }

  void* allocate_device(std::size_t bytes) override {
    here();
    void* p = nullptr;
    detail::check_cuda(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc of a call's scratch");
    return p;
  }
  void free_device(void* p, std::size_t) noexcept override {
    here();
    cudaFree(p);
  }

  bool shares_memory() const override { return true; }
  /// libfabric's FI_HMEM_CUDA on this port's device (GPUDirect RDMA where the provider can).
  network_memory network() const override { return {network_memory::interface::cuda, device_}; }
  /// Pageable host memory, which no kernel reads; device, pinned and managed memory pass.
  std::string not_device_memory(const void* p, std::size_t bytes) const override {
    cudaPointerAttributes attributes{};
    if (bytes == 0) return {};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      cudaGetLastError();  // cannot tell: the call goes on, as before
      return {};
    }
    if (attributes.type != cudaMemoryTypeUnregistered) return {};
    return "pageable host memory at " + describe_address(p) +
           " (not from cudaMalloc, cudaMallocHost or cudaMallocManaged)";
  }

  /// The CUDA IPC handle of the cudaMalloc allocation that holds [p, p + bytes).
  shared_memory export_memory(const void* p, std::size_t bytes, std::size_t& offset) override {
    here();
    const auto refuse = [&](const std::string& why) {
      cudaGetLastError();  // a failed query must not surface at the next launch's check
      return error(errc::invalid_argument,
                   "device::cuda_port: cannot share " + std::to_string(bytes) + " bytes at " + describe_address(p) +
                       ": " + why + "; allocate it with cudaMalloc (cudaMallocAsync pools, managed memory and host memory "
                       "cannot be shared by CUDA IPC)");
    };
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess || attributes.type != cudaMemoryTypeDevice)
      throw refuse("it is not device memory");
    CUdeviceptr base = 0;
    std::size_t size = 0;
    if (detail::allocation_range(&base, &size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
      throw refuse("cuMemGetAddressRange finds no allocation there");
    offset = std::size_t(reinterpret_cast<CUdeviceptr>(p) - base);
    if (bytes > size - offset)
      throw refuse("it runs past the end of its " + std::to_string(size) + "-byte allocation");
    cudaIpcMemHandle_t handle;
    if (cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base)) != cudaSuccess)
      throw refuse("cudaIpcGetMemHandle refuses its allocation");
    static_assert(sizeof handle == sizeof(shared_memory::handle));
    shared_memory out{{}, this_process(), std::uint64_t(base), size};
    std::memcpy(out.handle.data(), &handle, sizeof handle);
    process_exports::instance().record(out, reinterpret_cast<std::byte*>(base));
    return out;
  }
  /// Opens a peer's block once (it costs milliseconds); later calls return the same
  /// address. The owner's blocks it overlaps (freed there) are closed.
  std::byte* import_memory(const shared_memory& block) override {
    here();
    // this process's own block (ranks of one process): CUDA cannot open its own handle
    if (std::byte* mine = process_exports::instance().find(block)) return mine;
    std::lock_guard lock(imports_mutex_);  // held while opening: a handle is opened once
    if (std::byte* at = imports_.find(block)) return at;
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, block.handle.data(), sizeof handle);
    void* at = nullptr;
    detail::check_cuda(cudaIpcOpenMemHandle(&at, handle, cudaIpcMemLazyEnablePeerAccess),
                       "cudaIpcOpenMemHandle of a peer's block (has the peer exited, or is it on another node?)");
    for (const auto& old : imports_.add(block, static_cast<std::byte*>(at)))
      closer_.run_later([device = device_, old = old.at] {
        (void)cudaSetDevice(device);
        (void)cudaDeviceSynchronize();  // the work queued so far, a failed call's reads of it included
        (void)cudaIpcCloseMemHandle(old);
      });
    return static_cast<std::byte*>(at);
  }

  /// How many peers' blocks are open here (import_memory).
  std::size_t imported_blocks() {
    std::lock_guard lock(imports_mutex_);
    return imports_.size();
  }

  void* allocate_host(std::size_t bytes) override {
    here();
    void* p = nullptr;
    detail::check_cuda(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost of staging memory");
    return p;
  }
  void free_host(void* p, std::size_t) noexcept override {
    here();
    cudaFreeHost(p);
  }

 private:
  // This port's device, made current on the calling thread: the progress thread, which
  // queues landings and opens peers' blocks, starts on device 0, and CUDA ties streams,
  // events and opened blocks to the device current when they are used.
  void here() const noexcept {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_) (void)cudaSetDevice(device_);
  }

  static cudaStream_t as_stream(stream_handle s) { return static_cast<cudaStream_t>(s); }

  /// Throws, naming both GPUs, where `p` is memory of a GPU this one cannot read.
  void reachable(const void* p, std::string_view what) const {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      (void)cudaGetLastError();  // not CUDA's memory: the kernel's own check says more
      return;
    }
    if (attributes.type == cudaMemoryTypeDevice) detail::process_peers().check(device_, attributes.device, what);
  }

  std::uint32_t* flags_ = nullptr;         // host view of the gate flags
  std::uint32_t* device_flags_ = nullptr;  // the same memory as kernels see it
  std::atomic<std::uint32_t> next_ticket_{0};
  detail::stream_memops memops_;  // gates as stream memory operations (MIMATRIX_DEVICE_GATE=memop); else kernels
  int device_ = 0;
  std::mutex imports_mutex_;
  import_table imports_;  // peers' blocks open here
  closing_thread closer_;  // last: destroyed first, while the rest still stands
};

}  // namespace mimatrix::device
