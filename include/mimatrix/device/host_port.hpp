// device::port on the host: each stream is a thread that runs its queued work in order,
// so the executor's device logic (stream order, events, gates, deferred completion) runs
// and is tested where there is no GPU. A lag before each operation makes the asynchrony
// visible: a step that used data before its copy ran would read stale memory. Its device
// memory is shareable as CUDA's is: a block is a memfd that a process on the node maps;
// and as CUDA's allocator does, it gives a freed block's address to the next block of its
// size, so that a peer's stale view of a freed block shows.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/device/host_blocks.hpp"
#include "mimatrix/device/import_table.hpp"
#include "mimatrix/device/port.hpp"
#include "mimatrix/reduce/host_kernels.hpp"

namespace mimatrix::device {

/// @par Thread Safety
/// As device::port; a stream is freed by one thread, after its last use.
class host_port final : public port {
 public:
  struct settings {
    /// How long each queued operation waits before it runs.
    std::chrono::microseconds lag{0};
    /// Combines and finalizes refuse memory not from allocate_device, as a GPU's kernel
    /// faults on pageable host memory: a call that combines in host memory fails here too.
    bool device_memory_only = false;
    /// How it names its memory to a network (tests: cuda, which a network without CUDA
    /// support refuses to register).
    network_memory network{network_memory::interface::system, 0};
    /// reduce_many as one pass, as a GPU's kernel does; false: the port's default
    /// (combines and copies), so that tests run that too.
    bool reduce_many_in_one_pass = true;
    /// Allocations (allocate_device, allocate_host) first wait for the work queued on the
    /// port's streams, as CUDA may make them wait (its implicit synchronizations), for at
    /// most this long, and then fail; zero: they do not wait.
    std::chrono::milliseconds allocations_wait_for_device{0};
  };

  host_port() : host_port(settings{}) {}
  explicit host_port(settings s) : settings_(s) {}
  host_port(const host_port&) = delete;
  host_port& operator=(const host_port&) = delete;
  /// Frees the streams not freed yet, running what they hold first, then unmaps the
  /// imported blocks and the freed blocks' addresses, and frees the blocks still allocated
  /// (what a communicator that outlives the port kept of it: port::lifetime()).
  ~host_port() override {
    while (true) {
      queue* left = nullptr;
      {
        std::lock_guard lock(mutex_);
        if (streams_.empty()) break;
        left = *streams_.begin();
      }
      free_stream(left);
    }
    for (const auto& block : imports_.take_all()) ::munmap(block.at, host_blocks::mapped_bytes(block.bytes));
    for (const auto& old : retired_) ::munmap(old.at, old.bytes);
    for (const auto& [bytes, at] : freed_) ::munmap(at, bytes);
    for (const auto& [at, b] : device_memory_)
      if (!b.imported) {
        ::munmap(const_cast<void*>(at), host_blocks::mapped_bytes(b.bytes));
        ::close(b.fd);
      }
    for (void* p : host_memory_) port::free_host(p, 0);
  }

  std::string_view name() const override { return "host"; }

  stream_handle make_stream() override {
    auto* s = new queue;
    s->serial = next_stream_serial_.fetch_add(1);
    {
      std::lock_guard lock(mutex_);
      streams_.insert(s);
    }
    s->worker = std::thread([this, s] { run(*s); });
    return s;
  }
  void free_stream(stream_handle handle) noexcept override {
    auto* s = static_cast<queue*>(handle);
    {
      std::lock_guard lock(mutex_);
      s->stop = true;
    }
    changed_.notify_all();
    s->worker.join();  // runs what is queued first
    {
      std::lock_guard lock(mutex_);
      streams_.erase(s);
    }
    delete s;
  }

  void copy(stream_handle s, void* dst, const void* src, std::size_t bytes) override {
    if (bytes && (!on_device(dst, bytes) || !on_device(src, bytes))) {
      ++host_copies_;
      host_copy_bytes_ += bytes;
    }
    if (dst != src) traffic_ += 2 * bytes;
    enqueue(s, [=] {
      if (dst != src && bytes) std::memmove(dst, src, bytes);
    });
  }
  void combine(stream_handle s, const reduce::host_kernels& k, void* dst, const void* a, const void* b,
               std::size_t bytes) override {
    require_device({dst, a, b}, bytes, "combine");
    traffic_ += 3 * bytes;
    enqueue(s, [&k, dst, a, b, bytes] {
      k.combine(static_cast<std::byte*>(dst), static_cast<const std::byte*>(a), static_cast<const std::byte*>(b),
                bytes);
    });
  }
  void finalize(stream_handle s, const reduce::host_kernels& k, void* data, std::size_t bytes, int ranks) override {
    require_device({data}, bytes, "finalize");
    if (k.op == reduce::op_kind::avg) traffic_ += 2 * bytes;  // a GPU runs no kernel for the others
    enqueue(s, [&k, data, bytes, ranks] { k.finalize(static_cast<std::byte*>(data), bytes, ranks); });
  }
  /// As one kernel would: each source read once, each destination written once.
  void reduce_many(stream_handle s, const reduce::host_kernels& k, void* const* dsts, std::size_t ndst,
                   const void* const* srcs, std::size_t nsrc, std::size_t bytes, int ranks) override {
    if (!settings_.reduce_many_in_one_pass) return port::reduce_many(s, k, dsts, ndst, srcs, nsrc, bytes, ranks);
    if (!ndst || !nsrc || !bytes) return;
    for (std::size_t d = 0; d < ndst; ++d) require_device({dsts[d]}, bytes, "reduce_many");
    for (std::size_t i = 0; i < nsrc; ++i) require_device({srcs[i]}, bytes, "reduce_many");
    traffic_ += (ndst + nsrc) * bytes;
    enqueue(s, [&k, to = std::vector<void*>(dsts, dsts + ndst), from = std::vector<const void*>(srcs, srcs + nsrc),
                bytes, ranks] {
      // Into dsts[0], which may only be srcs[0]; the others are written once every source is read.
      auto* sum = static_cast<std::byte*>(to[0]);
      const auto* first = static_cast<const std::byte*>(from[0]);
      if (from.size() == 1) std::memmove(sum, first, bytes);
      for (std::size_t i = 1; i < from.size(); ++i)
        k.combine(sum, i == 1 ? first : sum, static_cast<const std::byte*>(from[i]), bytes);
      k.finalize(sum, bytes, ranks);
      for (std::size_t d = 1; d < to.size(); ++d) std::memcpy(to[d], sum, bytes);
    });
  }

  /// An event outlives its stream, as CUDA's does: once the stream is freed (which runs
  /// what it holds first), the event is done.
  event record(stream_handle handle) override {
    auto* s = static_cast<queue*>(handle);
    std::lock_guard lock(mutex_);
    return new mark{s, s->serial, s->queued};
  }
  bool done(event e) override {
    const auto* m = static_cast<const mark*>(e);
    std::lock_guard lock(mutex_);
    return reached(*m);
  }
  void free_event(event e) noexcept override { delete static_cast<mark*>(e); }
  void wait(stream_handle s, event e) override {
    const mark m = *static_cast<const mark*>(e);  // the event may be freed before this runs
    enqueue(s, [this, m] {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return reached(m); });
    });
  }

  gate hold(stream_handle s) override {
    auto* g = new bool(false);
    enqueue(s, [this, g] {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return *g; });
      delete g;  // the opener touched it under the lock, before this saw it open
    });
    return g;
  }
  void open(stream_handle s, gate g) override {
    enqueue(s, [this, g] {
      {
        std::lock_guard lock(mutex_);
        *static_cast<bool*>(g) = true;
      }
      changed_.notify_all();
    });
  }

  void synchronize(stream_handle handle) override {
    auto* s = static_cast<queue*>(handle);
    std::unique_lock lock(mutex_);
    const std::uint64_t until = s->queued;
    changed_.wait(lock, [&] { return s->finished >= until; });
  }

  /// "Device" memory: host memory that the port knows as its device's, in a memfd of its
  /// own so that another process can map it (export_memory).
  void* allocate_device(std::size_t bytes) override {
    wait_for_device("device", bytes);
    const std::uint64_t id = next_block_id_.fetch_add(1);
    const int fd = ::memfd_create(host_blocks::block_name(::getpid(), id).c_str(), MFD_CLOEXEC);
    if (fd < 0) throw host_blocks::allocation_error("memfd_create", bytes);
    std::unique_lock lock(mutex_);
    void* at = nullptr;  // a freed block's address of this size, kept reserved
    if (auto it = freed_.find(host_blocks::mapped_bytes(bytes)); it != freed_.end()) {
      at = it->second;
      freed_.erase(it);
    }
    lock.unlock();
    void* p = MAP_FAILED;
    if (::ftruncate(fd, off_t(host_blocks::mapped_bytes(bytes))) == 0)
      p = ::mmap(at, host_blocks::mapped_bytes(bytes), PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
    if (p == MAP_FAILED) {
      const error failure = host_blocks::allocation_error("ftruncate and mmap", bytes);
      ::close(fd);
      lock.lock();
      if (at) freed_.emplace(host_blocks::mapped_bytes(bytes), at);
      throw failure;
    }
    lock.lock();
    device_memory_[p] = {bytes, ::getpid(), fd, id, false, this_process(), reinterpret_cast<std::uintptr_t>(p)};
    return p;
  }
  void free_device(void* p, std::size_t) noexcept override {
    block freed;
    {
      std::lock_guard lock(mutex_);
      auto it = device_memory_.find(p);
      if (it == device_memory_.end() || it->second.imported) return;  // imports stay while their owner's do
      freed = it->second;
      device_memory_.erase(it);
    }
    // The address stays reserved for the next block of this size; a peer that still
    // maps the block keeps its memory.
    const std::size_t bytes = host_blocks::mapped_bytes(freed.bytes);
    const bool kept = ::mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == p;
    ::close(freed.fd);
    if (!kept) return void(::munmap(p, bytes));
    std::lock_guard lock(mutex_);
    freed_.emplace(bytes, p);
  }
  void* allocate_host(std::size_t bytes) override {
    wait_for_device("host", bytes);
    void* p = port::allocate_host(bytes);
    std::lock_guard lock(mutex_);
    host_memory_.insert(p);
    return p;
  }
  void free_host(void* p, std::size_t bytes) noexcept override {
    {
      std::lock_guard lock(mutex_);
      if (!host_memory_.erase(p)) return;
    }
    port::free_host(p, bytes);
  }
  /// Whether [p, p + bytes) lies in one allocate_device block or one imported block.
  bool on_device(const void* p, std::size_t bytes) const {
    std::lock_guard lock(mutex_);
    return find_block(p, bytes) != device_memory_.end();
  }
  std::string not_device_memory(const void* p, std::size_t bytes) const override {
    const bool fine = !settings_.device_memory_only || bytes == 0 || on_device(p, bytes);
    return fine ? std::string() : "host memory at " + describe_address(p);
  }

  bool shares_memory() const override { return true; }
  /// Its "device" memory is host memory, which a network reads as such (settings).
  network_memory network() const override { return settings_.network; }
  /// The handle of the allocate_device block holding [p, p + bytes) (an imported block
  /// gives its owner's handle), and p's offset in it.
  shared_memory export_memory(const void* p, std::size_t bytes, std::size_t& offset) override {
    std::lock_guard lock(mutex_);
    const auto it = find_block(p, bytes);
    if (it == device_memory_.end())
      throw error(errc::invalid_argument, "device::host_port: cannot share " + std::to_string(bytes) +
                                              " bytes at " + describe_address(p) +
                                              ": only memory from allocate_device can be shared with other processes");
    offset = std::size_t(static_cast<const std::byte*>(p) - static_cast<const std::byte*>(it->first));
    const block& b = it->second;
    const host_blocks::handle_fields fields{host_blocks::handle_magic, std::int64_t(b.owner), b.fd, b.id, b.bytes};
    shared_memory out{{}, b.origin, b.origin_base, b.bytes};
    std::memcpy(out.handle.data(), &fields, sizeof fields);
    return out;
  }
  /// Maps the block through its owner's /proc/<pid>/fd, once: later calls return the
  /// same address. Unmaps the owner's blocks it overlaps (freed there).
  std::byte* import_memory(const shared_memory& handle) override {
    host_blocks::handle_fields fields;
    std::memcpy(&fields, handle.handle.data(), sizeof fields);
    if (fields.magic != host_blocks::handle_magic)
      throw error(errc::invalid_argument,
                  "device::host_port: import_memory was given a handle not made by a host_port's export_memory");
    {
      std::lock_guard lock(mutex_);
      if (std::byte* at = imports_.find(handle)) return at;
    }
    auto* at = static_cast<std::byte*>(host_blocks::map_peer_block(fields));
    std::lock_guard lock(mutex_);
    if (std::byte* first = imports_.find(handle)) {  // another thread mapped it first
      ::munmap(at, host_blocks::mapped_bytes(fields.bytes));
      return first;
    }
    for (const auto& old : imports_.add(handle, at)) {
      device_memory_.erase(old.at);
      // Unmapped once the work queued so far has run: a failed call's reads of it too.
      retired_.push_back({old.at, host_blocks::mapped_bytes(old.bytes), {}});
      for (queue* q : streams_) retired_.back().after.push_back({q, q->serial, q->queued});
    }
    std::erase_if(retired_, [&](const retired& old) {
      for (const mark& m : old.after)
        if (!reached(m)) return false;
      ::munmap(old.at, old.bytes);
      return true;
    });
    device_memory_[at] = {fields.bytes, pid_t(fields.owner), int(fields.fd), fields.id, true, handle.owner, handle.base};
    return at;
  }

  /// How many peers' blocks this port has opened (import_memory).
  std::size_t imported_blocks() const {
    std::lock_guard lock(mutex_);
    return imports_.size();
  }

  /// How many copies touched host memory (staging through the host does; a call whose
  /// data moves device to device does not).
  std::size_t host_copies() const { return host_copies_; }
  /// Their bytes.
  std::size_t host_copy_bytes() const { return host_copy_bytes_; }

  /// The bytes of device memory the work queued so far reads and writes, as a GPU's
  /// kernels would: a copy 2 times its bytes, a combine 3, avg's finalize 2, reduce_many
  /// its sources and destinations. A collective's memory traffic is its delta.
  std::size_t memory_traffic() const { return traffic_; }

  /// Queues `work` on `s` as a kernel would be: a test's stand-in for the caller's own
  /// device work before and after a collective.
  void enqueue(stream_handle handle, std::function<void()> work) {
    auto* s = static_cast<queue*>(handle);
    {
      std::lock_guard lock(mutex_);
      s->work.push_back(std::move(work));
      ++s->queued;
    }
    changed_.notify_all();
  }

 private:
  struct queue {
    std::deque<std::function<void()>> work;
    std::uint64_t queued = 0, finished = 0;
    std::uint64_t serial = 0;
    bool stop = false;
    std::thread worker;
  };
  struct mark {
    queue* on;
    std::uint64_t serial;  // on's: another stream may later take its address
    std::uint64_t count;   // done once `on` has finished this many operations
  };
  /// A peer's block retired while work that may read it was queued.
  struct retired {
    void* at;
    std::size_t bytes;
    std::vector<mark> after;  // the streams' work then
  };
  /// Whether `m` is done; the caller holds mutex_.
  bool reached(const mark& m) const {
    const auto it = streams_.find(m.on);
    return it == streams_.end() || (*it)->serial != m.serial || m.on->finished >= m.count;
  }
  /// A block of device memory: this process's, or imported (then `fd` is its owner's).
  struct block {
    std::size_t bytes = 0;
    pid_t owner = 0;
    int fd = -1;
    std::uint64_t id = 0;  // unique in the owner process
    bool imported = false;
    std::uint64_t origin = 0, origin_base = 0;  // shared_memory's owner and base
  };
  using block_map = std::map<const void*, block>;

  /// The block holding [p, p + bytes), or end(); the caller holds mutex_.
  block_map::const_iterator find_block(const void* p, std::size_t bytes) const {
    auto it = device_memory_.upper_bound(p);
    if (it == device_memory_.begin()) return device_memory_.end();
    --it;
    const auto* base = static_cast<const std::byte*>(it->first);
    const auto* at = static_cast<const std::byte*>(p);
    const std::size_t size = it->second.bytes;
    const bool inside = at >= base && std::size_t(at - base) <= size && bytes <= size - std::size_t(at - base);
    return inside ? it : device_memory_.end();
  }

  void require_device(std::initializer_list<const void*> operands, std::size_t bytes, const char* what) const {
    if (!settings_.device_memory_only || bytes == 0) return;
    for (const void* p : operands)
      if (!on_device(p, bytes))
        throw error(errc::invalid_argument, "device::host_port: a " + std::string(what) + " of " +
                                                std::to_string(bytes) + " bytes touches host memory at " +
                                                describe_address(p) + ", not device memory: a GPU kernel would fault there");
  }

  /// As settings::allocations_wait_for_device says: until the work queued so far on every
  /// stream is done.
  void wait_for_device(const char* memory, std::size_t bytes) {
    if (settings_.allocations_wait_for_device.count() <= 0) return;
    std::unique_lock lock(mutex_);
    std::vector<std::pair<const queue*, std::uint64_t>> until;
    for (const queue* s : streams_) until.emplace_back(s, s->queued);
    const auto idle = [&] {
      for (const auto& [s, count] : until)
        if (streams_.count(const_cast<queue*>(s)) && s->finished < count) return false;
      return true;
    };
    if (!changed_.wait_for(lock, settings_.allocations_wait_for_device, idle))
      throw error(errc::timeout, "device::host_port: an allocation of " + std::to_string(bytes) + " bytes of " +
                                     memory + " memory waited " +
                                     std::to_string(settings_.allocations_wait_for_device.count()) +
                                     " ms for the device's queued work, and it is not done (a gate that the "
                                     "allocating thread keeps from opening?)");
  }

  void run(queue& s) {
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return s.stop || !s.work.empty(); });
      if (s.work.empty()) return;  // stopped, and nothing left
      std::function<void()> next = std::move(s.work.front());
      s.work.pop_front();
      lock.unlock();
      if (settings_.lag.count() > 0) std::this_thread::sleep_for(settings_.lag);
      next();
      lock.lock();
      ++s.finished;
      changed_.notify_all();
    }
  }

  settings settings_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::set<queue*> streams_;
  block_map device_memory_;  // allocate_device and imported blocks by start
  std::set<void*> host_memory_;                 // allocate_host's, not freed yet
  import_table imports_;                         // peers' blocks mapped here
  std::multimap<std::size_t, void*> freed_;     // freed blocks' addresses, reserved, by size
  std::vector<retired> retired_;                // peers' blocks to unmap once their readers ran
  std::atomic<std::size_t> host_copies_{0};
  std::atomic<std::size_t> host_copy_bytes_{0};
  std::atomic<std::size_t> traffic_{0};
  static inline std::atomic<std::uint64_t> next_block_id_{0};
  std::atomic<std::uint64_t> next_stream_serial_{0};  // process-wide: ids key imports
};

}  // namespace mimatrix::device
