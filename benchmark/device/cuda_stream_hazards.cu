// cuda_stream_hazards: what the device path takes on trust from CUDA, measured on a real
// GPU in seconds, without ever hanging (docs/device.md, "What could still hang or crawl
// on a real GPU"):
//   gates   a caller's stream held by a gate (a spinning kernel, as cuda_port's, or a
//           cuStreamWaitValue32) that work queued later on another stream opens (a
//           kernel, a cuStreamWriteValue32, or the host once an event says the work is
//           done): does it open when streams may share a hardware queue?
//   waiting while a gate holds a stream: does an allocation, a free, a stream or event
//           made or destroyed, or a kernel's first launch (lazy loading) block the host,
//           or hold back work queued after it on another stream?
// Every gate waits on a flag in mapped host memory that the host raises itself past a
// deadline, so a case that would deadlock reports "stuck" and the program goes on. Run it
// under CUDA_DEVICE_MAX_CONNECTIONS=1, 8 and 32 (build/gpu/run.sh does); without a GPU it
// says so and exits 0.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto deadline = 700ms;           // past it, the host opens a gate itself
constexpr std::size_t block_bytes = 64 << 20;  // what the allocations ask for

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "cuda_stream_hazards: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  std::exit(1);
}

double ms_since(steady::time_point t) { return std::chrono::duration<double, std::milli>(steady::now() - t).count(); }

__global__ void spin_until_raised(const volatile std::uint32_t* flag) {
  while (*flag == 0) __nanosleep(1000);
}
__global__ void raise_flag(volatile std::uint32_t* flag) {
  *flag = 1;
  __threadfence_system();
}
/// A kernel first launched while a gate holds a stream: lazy loading loads it then.
template <int Case>
__global__ void first_launch(volatile std::uint32_t* flag) {
  *flag = 1;
  __threadfence_system();
}

/// Flags in mapped pinned memory: the host reads and raises them, kernels and stream
/// memory operations see them.
class flags {
 public:
  explicit flags(std::size_t n) : n_(n) {
    check(cudaHostAlloc(reinterpret_cast<void**>(&host_), n * sizeof(std::uint32_t), cudaHostAllocMapped),
          "cudaHostAlloc of the flags");
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0), "cudaHostGetDevicePointer");
    clear();
  }
  ~flags() { (void)cudaFreeHost(host_); }
  void clear() {
    for (std::size_t k = 0; k < n_; ++k) host_[k] = 0;
  }
  bool raised(std::size_t k) const { return static_cast<volatile std::uint32_t*>(host_)[k] != 0; }
  void raise(std::size_t k) {
    static_cast<volatile std::uint32_t*>(host_)[k] = 1;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  std::uint32_t* device(std::size_t k) const { return device_ + k; }

 private:
  std::size_t n_;
  std::uint32_t* host_ = nullptr;
  std::uint32_t* device_ = nullptr;
};

/// cuStreamWaitValue32 and cuStreamWriteValue32, found through the runtime (a program
/// linked to libcuda could not start without a driver, so could not say there is none).
struct memops {
  PFN_cuStreamWaitValue32_v11070 wait = nullptr;
  PFN_cuStreamWriteValue32_v11070 write = nullptr;
  memops() {
    void* w = nullptr;
    void* r = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &w, 12000, cudaEnableDefault, nullptr) == cudaSuccess &&
        cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &r, 12000, cudaEnableDefault, nullptr) == cudaSuccess) {
      wait = reinterpret_cast<PFN_cuStreamWaitValue32_v11070>(w);
      write = reinterpret_cast<PFN_cuStreamWriteValue32_v11070>(r);
    }
  }
  bool found() const { return wait && write; }
};

enum class gate_kind { kernel, memop };
enum class opener { device, host };
const char* name(gate_kind g) { return g == gate_kind::kernel ? "spinning kernel" : "cuStreamWaitValue32"; }

void hold(gate_kind g, const memops& m, cudaStream_t s, std::uint32_t* flag) {
  if (g == gate_kind::kernel) {
    spin_until_raised<<<1, 1, 0, s>>>(flag);
    check(cudaGetLastError(), "launch of a gate");
  } else if (CUresult r = m.wait(s, CUdeviceptr(flag), 1, CU_STREAM_WAIT_VALUE_GEQ); r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuda_stream_hazards: cuStreamWaitValue32 failed: CUresult %d\n", int(r));
    std::exit(1);
  }
}

void raise_on(gate_kind g, const memops& m, cudaStream_t s, std::uint32_t* flag) {
  if (g == gate_kind::kernel) {
    raise_flag<<<1, 1, 0, s>>>(flag);
    check(cudaGetLastError(), "launch of a flag's raise");
  } else if (CUresult r = m.write(s, CUdeviceptr(flag), 1, 0); r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuda_stream_hazards: cuStreamWriteValue32 failed: CUresult %d\n", int(r));
    std::exit(1);
  }
}

/// `pairs` calls at once, as cuda_port runs them: on caller stream i a gate, then the
/// caller's later kernel; on own stream i the call's kernel, then the gate's opening.
/// Callers' streams are made first, as a program's are before its first call.
void gates(gate_kind g, opener by, int pairs, const memops& m) {
  const auto n = static_cast<std::size_t>(pairs);
  std::vector<cudaStream_t> callers(n), own(n);
  for (auto& s : callers) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  for (auto& s : own) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  flags f(3 * std::size_t(pairs));  // per pair: gate, the caller's later kernel, the call's kernel
  const auto gate = [&](int i) { return std::size_t(3 * i); };
  std::vector<cudaEvent_t> done(n);
  const auto start = steady::now();
  for (int i = 0; i < pairs; ++i) {
    hold(g, m, callers[std::size_t(i)], f.device(gate(i)));
    raise_flag<<<1, 1, 0, callers[std::size_t(i)]>>>(f.device(gate(i) + 1));
  }
  for (int i = 0; i < pairs; ++i) {
    raise_flag<<<1, 1, 0, own[std::size_t(i)]>>>(f.device(gate(i) + 2));
    check(cudaEventCreateWithFlags(&done[std::size_t(i)], cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(done[std::size_t(i)], own[std::size_t(i)]), "cudaEventRecord");
    if (by == opener::device) raise_on(g, m, own[std::size_t(i)], f.device(gate(i)));
  }
  int work_ran = 0, opened = 0;
  std::vector<bool> host_opened(n, false);
  const auto until = steady::now() + deadline;
  while (steady::now() < until && opened < pairs) {
    opened = work_ran = 0;
    for (int i = 0; i < pairs; ++i) {
      if (by == opener::host && !host_opened[std::size_t(i)] && cudaEventQuery(done[std::size_t(i)]) == cudaSuccess) {
        f.raise(gate(i));
        host_opened[std::size_t(i)] = true;
      }
      work_ran += f.raised(gate(i) + 2);
      opened += f.raised(gate(i) + 1);
    }
    std::this_thread::sleep_for(50us);
  }
  const double took = ms_since(start);
  for (int i = 0; i < pairs; ++i) f.raise(gate(i));  // unstick what did not open
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the gates");
  std::printf("| %-20s | %-6s | %5d | %8s | %5d of %-5d | %s\n", name(g), by == opener::device ? "device" : "host",
              pairs, opened == pairs ? std::to_string(int(took)).c_str() : "-", work_ran, pairs,
              opened == pairs ? "opened" : "STUCK: the host opened them past the deadline");
  for (auto& e : done) (void)cudaEventDestroy(e);
  for (auto& s : callers) (void)cudaStreamDestroy(s);
  for (auto& s : own) (void)cudaStreamDestroy(s);
}

/// While a gate holds stream `held`, the host makes call `what`, then queues a kernel on
/// stream `other`: does the call return before the gate opens, and does the kernel run?
/// `call` gets the flag that its own work raises, or queues none and returns false.
void while_waiting(gate_kind g, const memops& m, const char* what,
                   const std::function<bool(cudaStream_t other, std::uint32_t* flag)>& call) {
  cudaStream_t held, other;
  check(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), "cudaStreamCreate");
  flags f(2);  // the gate; the later work on the other stream
  hold(g, m, held, f.device(0));
  const cudaError_t holding = cudaStreamQuery(held);
  (void)cudaGetLastError();  // not ready is the answer wanted, not an error to keep
  if (holding != cudaErrorNotReady) check(holding == cudaSuccess ? cudaErrorUnknown : holding, "the gate holding");
  std::atomic<bool> resolved{false};
  const auto start = steady::now();
  std::thread watchdog([&] {
    while (!resolved.load() && steady::now() - start < deadline) std::this_thread::sleep_for(100us);
    f.raise(0);
  });
  const bool queued_its_own = call(other, f.device(1));
  const double call_ms = ms_since(start);
  if (!queued_its_own) raise_flag<<<1, 1, 0, other>>>(f.device(1));
  check(cudaGetLastError(), "launch after the call");
  bool ran_while_held = false;
  while (steady::now() - start < deadline && !(ran_while_held = f.raised(1))) std::this_thread::sleep_for(50us);
  ran_while_held = ran_while_held && !f.raised(0);  // the watchdog had not opened it yet
  resolved = true;
  watchdog.join();
  check(cudaDeviceSynchronize(), what);
  const bool blocked = call_ms >= 0.8 * std::chrono::duration<double, std::milli>(deadline).count();
  std::printf("| %-20s | %-34s | %9.2f | %-9s | %s\n", name(g), what, call_ms, ran_while_held ? "ran" : "HELD",
              blocked ? "BLOCKS THE HOST until the gate opens" : ran_while_held ? "safe" : "SERIALIZES behind the gate");
  (void)cudaStreamDestroy(held);
  (void)cudaStreamDestroy(other);
}

void calls_while_waiting(gate_kind g, const memops& m) {
  void* device_block = nullptr;
  void* pinned_block = nullptr;
  cudaStream_t idle_stream;
  cudaEvent_t idle_event;
  std::vector<char> pageable(block_bytes);
  check(cudaMalloc(&device_block, block_bytes), "cudaMalloc");
  check(cudaMallocHost(&pinned_block, block_bytes), "cudaMallocHost");
  check(cudaStreamCreate(&idle_stream), "cudaStreamCreate");
  check(cudaEventCreate(&idle_event), "cudaEventCreate");
  void* p = nullptr;
  while_waiting(g, m, "nothing (the control)", [](cudaStream_t, std::uint32_t*) { return false; });
  while_waiting(g, m, "cudaMalloc 64 MiB", [&](cudaStream_t, std::uint32_t*) {
    check(cudaMalloc(&p, block_bytes), "cudaMalloc");
    return false;
  });
  check(cudaFree(p), "cudaFree");
  while_waiting(g, m, "cudaFree 64 MiB", [&](cudaStream_t, std::uint32_t*) {
    check(cudaFree(device_block), "cudaFree");
    return false;
  });
  while_waiting(g, m, "cudaMallocHost 64 MiB", [&](cudaStream_t, std::uint32_t*) {
    check(cudaMallocHost(&p, block_bytes), "cudaMallocHost");
    return false;
  });
  check(cudaFreeHost(p), "cudaFreeHost");
  while_waiting(g, m, "cudaFreeHost 64 MiB", [&](cudaStream_t, std::uint32_t*) {
    check(cudaFreeHost(pinned_block), "cudaFreeHost");
    return false;
  });
  while_waiting(g, m, "cudaHostRegister 64 MiB", [&](cudaStream_t, std::uint32_t*) {
    check(cudaHostRegister(pageable.data(), block_bytes, cudaHostRegisterDefault), "cudaHostRegister");
    return false;
  });
  while_waiting(g, m, "cudaHostUnregister 64 MiB", [&](cudaStream_t, std::uint32_t*) {
    check(cudaHostUnregister(pageable.data()), "cudaHostUnregister");
    return false;
  });
  while_waiting(g, m, "cudaMallocAsync 64 MiB (pool grows)", [&](cudaStream_t other, std::uint32_t*) {
    check(cudaMallocAsync(&p, block_bytes, other), "cudaMallocAsync");
    check(cudaFreeAsync(p, other), "cudaFreeAsync");
    return false;
  });
  while_waiting(g, m, "cudaStreamCreate", [&](cudaStream_t, std::uint32_t*) {
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    (void)cudaStreamDestroy(s);
    return false;
  });
  while_waiting(g, m, "cudaStreamDestroy (idle stream)", [&](cudaStream_t, std::uint32_t*) {
    check(cudaStreamDestroy(idle_stream), "cudaStreamDestroy");
    return false;
  });
  while_waiting(g, m, "cudaEventCreate and Destroy", [&](cudaStream_t, std::uint32_t*) {
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventDestroy(idle_event), "cudaEventDestroy");
    idle_event = e;
    return false;
  });
  while_waiting(g, m, "cudaIpcGetMemHandle", [&](cudaStream_t, std::uint32_t*) {
    void* q = nullptr;
    cudaIpcMemHandle_t h;
    check(cudaMalloc(&q, 1 << 20), "cudaMalloc");
    check(cudaIpcGetMemHandle(&h, q), "cudaIpcGetMemHandle");
    (void)cudaFree(q);  // a free, after the handle: counted in the time
    return false;
  });
  const auto first = [&](auto launch) {
    return [launch](cudaStream_t other, std::uint32_t* flag) {
      launch(other, flag);
      return true;
    };
  };
  if (g == gate_kind::kernel)
    while_waiting(g, m, "a kernel's first launch", first([](cudaStream_t s, std::uint32_t* f) {
                    first_launch<0><<<1, 1, 0, s>>>(f);
                  }));
  else
    while_waiting(g, m, "a kernel's first launch", first([](cudaStream_t s, std::uint32_t* f) {
                    first_launch<1><<<1, 1, 0, s>>>(f);
                  }));
  (void)cudaEventDestroy(idle_event);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("cuda_stream_hazards: no CUDA device; nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  std::printf("# %s, driver %d, runtime %d; CUDA_DEVICE_MAX_CONNECTIONS=%s, CUDA_MODULE_LOADING=%s\n", prop.name,
              driver, runtime, connections ? connections : "(unset: 8)", loading ? loading : "(unset: lazy)");
  const memops m;
  if (!m.found()) std::printf("# stream memory operations: not found; their cases are left out\n");
  cudaFuncAttributes attributes;  // loaded before any gate (cuda_port does the same)
  check(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&spin_until_raised)), "loading a kernel");
  check(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&raise_flag)), "loading a kernel");

  std::printf("\n## Gates: pairs of a caller's stream held and a call's stream that opens it\n\n");
  std::printf("| %-20s | %-6s | %5s | %8s | %-14s | %s\n", "gate", "opener", "pairs", "ms", "call work ran", "result");
  for (const gate_kind g : {gate_kind::kernel, gate_kind::memop}) {
    if (g == gate_kind::memop && !m.found()) continue;
    for (const opener by : {opener::device, opener::host})
      for (const int pairs : {1, 4, 8, 16, 32}) gates(g, by, pairs, m);
  }

  std::printf("\n## Calls made while a gate holds another stream\n\n");
  std::printf("| %-20s | %-34s | %9s | %-9s | %s\n", "gate", "call", "host ms", "later work", "result");
  for (const gate_kind g : {gate_kind::kernel, gate_kind::memop})
    if (g == gate_kind::kernel || m.found()) calls_while_waiting(g, m);
  return 0;
}
