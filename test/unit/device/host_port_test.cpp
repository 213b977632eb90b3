// device::host_port: streams run their work in order and apart from the caller, events
// say when work is done, a stream can wait for another's event, a gate holds a stream
// until it is opened from another stream, reduce_many reduces into many destinations at
// once, and device memory is shared between processes.
#include "mimatrix/device/host_port.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mimatrix/reduce/host_kernels.hpp"

namespace mimatrix::device {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;

TEST(host_port, a_stream_runs_its_work_in_order_after_the_caller_returns) {
  host_port dev({.lag = 2ms});
  stream_handle s = dev.make_stream();
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) dev.enqueue(s, [&order, i] { order.push_back(i); });
  event e = dev.record(s);
  EXPECT_FALSE(dev.done(e));  // five operations of 2 ms each are still queued
  dev.synchronize(s);
  EXPECT_TRUE(dev.done(e));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  dev.free_event(e);
  dev.free_stream(s);
}

TEST(host_port, copy_combine_and_finalize_run_on_the_stream) {
  host_port dev;
  stream_handle s = dev.make_stream();
  std::vector<std::int32_t> a{1, 2, 3}, b{10, 20, 30}, c(3);
  const auto& sum = reduce::host_kernels_for(dtype::int32, reduce::op_kind::sum);
  const auto& avg = reduce::host_kernels_for(dtype::int32, reduce::op_kind::avg);
  dev.copy(s, c.data(), a.data(), 3 * sizeof(std::int32_t));
  dev.combine(s, sum, c.data(), c.data(), b.data(), 3 * sizeof(std::int32_t));
  dev.finalize(s, avg, c.data(), 3 * sizeof(std::int32_t), 11);
  dev.synchronize(s);
  EXPECT_EQ(c, (std::vector<std::int32_t>{1, 2, 3}));
  dev.free_stream(s);
}

// Every destination gets the finalized fold of every source, in place where a destination
// is its own source: as one pass, whose traffic is one read of each source and one write
// of each destination, and as the port's default combines and copies, which move more.
TEST(host_port, reduce_many_writes_the_reduction_of_every_source_into_every_destination) {
  for (bool one_pass : {true, false}) {
    host_port dev({.lag = 1ms, .device_memory_only = false, .network = {}, .reduce_many_in_one_pass = one_pass});
    stream_handle s = dev.make_stream();
    std::vector<std::int32_t> a{3, 6, -9}, b{30, 60, 90}, c{300, 600, 900}, out(3, -1);
    const auto& avg = reduce::host_kernels_for(dtype::int32, reduce::op_kind::avg);
    void* dsts[] = {a.data(), out.data(), c.data()};
    const void* srcs[] = {a.data(), b.data(), c.data()};
    const std::size_t bytes = 3 * sizeof(std::int32_t), before = dev.memory_traffic();
    dev.reduce_many(s, avg, dsts, 3, srcs, 3, bytes, 3);
    dev.synchronize(s);
    const std::vector<std::int32_t> mean{111, 222, 327};
    EXPECT_EQ(a, mean);
    EXPECT_EQ(out, mean);
    EXPECT_EQ(c, mean);
    // One pass: 3 reads and 3 writes. Default: 2 combines (3 each), avg's finalize (2), 2 copies (2 each).
    EXPECT_EQ(dev.memory_traffic() - before, (one_pass ? 6 : 12) * bytes);
    dev.free_stream(s);
  }
}

TEST(host_port, a_stream_waits_for_another_streams_event) {
  host_port dev;
  stream_handle first = dev.make_stream(), second = dev.make_stream();
  std::atomic<bool> slow_done{false};
  bool seen = false;
  dev.enqueue(first, [&] {
    std::this_thread::sleep_for(20ms);
    slow_done = true;
  });
  event e = dev.record(first);
  dev.wait(second, e);
  dev.free_event(e);  // the wait keeps what it needs
  dev.enqueue(second, [&] { seen = slow_done.load(); });
  dev.synchronize(second);
  EXPECT_TRUE(seen);
  dev.free_stream(first);
  dev.free_stream(second);
}

TEST(host_port, a_gate_holds_a_stream_until_another_stream_opens_it) {
  host_port dev;
  stream_handle held = dev.make_stream(), opener = dev.make_stream();
  std::atomic<int> step{0};
  gate g = dev.hold(held);
  dev.enqueue(held, [&] { EXPECT_EQ(step.load(), 1); });
  event after = dev.record(held);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(dev.done(after));  // held
  dev.enqueue(opener, [&] { step = 1; });
  dev.open(opener, g);
  dev.synchronize(held);
  EXPECT_TRUE(dev.done(after));
  dev.free_event(after);
  dev.free_stream(held);
  dev.free_stream(opener);
}

TEST(host_port, freeing_a_stream_runs_what_it_holds_first) {
  host_port dev({.lag = 1ms});
  stream_handle s = dev.make_stream();
  int ran = 0;
  for (int i = 0; i < 3; ++i) dev.enqueue(s, [&] { ++ran; });
  dev.free_stream(s);
  EXPECT_EQ(ran, 3);
}

/// What `f` throws, or an error with no code where it throws nothing.
template <class F>
error thrown_by(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e;
  }
  return error(std::error_code(), "nothing was thrown");
}

bool mentions(const error& e, const std::string& text) { return std::string(e.what()).find(text) != std::string::npos; }

TEST(host_port, an_exported_block_imports_as_memory_that_aliases_it) {
  host_port dev;
  EXPECT_TRUE(dev.shares_memory());
  constexpr std::size_t n = 1000;
  auto* block = static_cast<std::int32_t*>(dev.allocate_device(n * sizeof(std::int32_t)));
  std::size_t offset = 0;
  const shared_memory handle = dev.export_memory(block + 10, 100 * sizeof(std::int32_t), offset);
  EXPECT_EQ(offset, 10 * sizeof(std::int32_t));
  std::byte* imported = dev.import_memory(handle);
  EXPECT_NE(imported, reinterpret_cast<std::byte*>(block));  // a mapping of its own
  EXPECT_EQ(dev.import_memory(handle), imported);            // opened once
  auto* alias = reinterpret_cast<std::int32_t*>(imported + offset);
  block[10] = 7;
  EXPECT_EQ(alias[0], 7);
  alias[99] = 9;
  EXPECT_EQ(block[109], 9);
  dev.free_device(block, n * sizeof(std::int32_t));
}

TEST(host_port, threads_that_import_one_block_at_once_get_one_address) {
  host_port dev;
  void* block = dev.allocate_device(64);
  std::size_t offset = 0;
  const shared_memory handle = dev.export_memory(block, 64, offset);
  std::vector<std::byte*> seen(8);
  std::vector<std::thread> threads;
  for (auto& at : seen) threads.emplace_back([&dev, &handle, &at] { at = dev.import_memory(handle); });
  for (auto& t : threads) t.join();
  for (std::byte* at : seen) EXPECT_EQ(at, seen[0]);
  dev.free_device(block, 64);
}

// As CUDA's: work that holds an event (a pool's block in use) may keep it after the
// stream goes; a new stream at the freed one's address does not make it pending again.
TEST(host_port, an_event_outlives_its_stream_and_is_done_once_the_stream_is_freed) {
  host_port dev({.lag = 2ms});
  stream_handle s = dev.make_stream();
  dev.enqueue(s, [] {});
  event e = dev.record(s);
  dev.free_stream(s);  // runs what it holds first
  EXPECT_TRUE(dev.done(e));
  stream_handle next = dev.make_stream();
  for (int i = 0; i < 3; ++i) dev.enqueue(next, [] {});
  EXPECT_TRUE(dev.done(e));
  dev.free_event(e);
  dev.free_stream(next);
}

// As CUDA's allocator does: so that a peer that still has a freed block open sees a new
// block of its owner at the same address.
TEST(host_port, a_freed_blocks_address_goes_to_the_next_block_of_its_size) {
  host_port dev;
  void* first = dev.allocate_device(4096);
  dev.free_device(first, 4096);
  void* larger = dev.allocate_device(8192);
  EXPECT_NE(larger, first);
  auto* again = static_cast<std::int32_t*>(dev.allocate_device(4096));
  EXPECT_EQ(again, first);
  again[1023] = 5;  // mapped, and writable
  EXPECT_EQ(again[1023], 5);
  EXPECT_TRUE(dev.on_device(again, 4096));
  dev.free_device(again, 4096);
  dev.free_device(larger, 8192);
}

TEST(host_port, an_open_block_that_its_owner_freed_is_unmapped_when_a_newer_block_there_opens) {
  host_port dev;
  constexpr std::size_t bytes = 4096;
  auto* first = static_cast<std::int32_t*>(dev.allocate_device(bytes));
  std::size_t offset = 0;
  const std::byte* old_view = dev.import_memory(dev.export_memory(first, bytes, offset));
  EXPECT_TRUE(dev.on_device(old_view, bytes));
  dev.free_device(first, bytes);
  auto* second = static_cast<std::int32_t*>(dev.allocate_device(bytes));
  ASSERT_EQ(second, first);
  second[7] = 42;
  auto* view = reinterpret_cast<std::int32_t*>(dev.import_memory(dev.export_memory(second, bytes, offset)));
  EXPECT_EQ(view[7], 42);  // the new block, not the freed one
  EXPECT_EQ(dev.imported_blocks(), 1u);
  EXPECT_FALSE(dev.on_device(old_view, bytes));  // unmapped
  dev.free_device(second, bytes);
}

/// This process's open memfds of host_port blocks.
int open_blocks() {
  int n = 0;
  const std::string mine = "/memfd:mimatrix-block-" + std::to_string(::getpid()) + "-";
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    n += std::filesystem::read_symlink(fd.path(), ec).string().rfind(mine, 0) == 0;
  }
  return n;
}

// A communicator may outlive its port (port::lifetime()): what it kept is the port's to free.
TEST(host_port, its_end_frees_the_blocks_still_allocated) {
  const int before = open_blocks();
  {
    host_port dev;
    auto* block = static_cast<std::byte*>(dev.allocate_device(1 << 20));
    void* host = dev.allocate_host(1 << 20);  // ASan's leak check sees it if not freed
    block[(1 << 20) - 1] = std::byte{1};
    ASSERT_NE(host, nullptr);
    EXPECT_EQ(open_blocks(), before + 1);
    dev.free_host(dev.allocate_host(64), 64);
  }
  EXPECT_EQ(open_blocks(), before);
}

TEST(host_port, only_memory_from_allocate_device_can_be_exported) {
  host_port dev;
  std::vector<std::int32_t> host(16);
  std::size_t offset = 0;
  const error not_device = thrown_by([&] { (void)dev.export_memory(host.data(), 64, offset); });
  EXPECT_EQ(not_device.code(), errc::invalid_argument);
  EXPECT_TRUE(mentions(not_device, "allocate_device")) << not_device.what();
  EXPECT_TRUE(mentions(not_device, "64 bytes at 0x")) << not_device.what();

  void* block = dev.allocate_device(64);
  const error past_the_end = thrown_by([&] { (void)dev.export_memory(static_cast<std::byte*>(block) + 8, 64, offset); });
  EXPECT_EQ(past_the_end.code(), errc::invalid_argument) << past_the_end.what();
  dev.free_device(block, 64);
}

TEST(host_port, a_handle_not_from_export_memory_is_refused) {
  host_port dev;
  const error refused = thrown_by([&] { (void)dev.import_memory(shared_memory{}); });
  EXPECT_EQ(refused.code(), errc::invalid_argument);
  EXPECT_TRUE(mentions(refused, "export_memory")) << refused.what();
}

/// A pipe between two processes. Each closes the end it does not use, so that it reads
/// an end of file, rather than waiting for ever, once the other has failed and exited.
struct channel {
  int read_end = -1, write_end = -1;
  channel() {
    int ends[2];
    if (::pipe(ends) == 0) read_end = ends[0], write_end = ends[1];
  }
  ~channel() {
    ::close(read_end);
    ::close(write_end);
  }
  void only_read() { ::close(std::exchange(write_end, -1)); }
  void only_write() { ::close(std::exchange(read_end, -1)); }
  template <class T>
  bool send(const T& v) { return ::write(write_end, &v, sizeof v) == ssize_t(sizeof v); }
  template <class T>
  bool receive(T& v) { return ::read(read_end, &v, sizeof v) == ssize_t(sizeof v); }
};

/// What the child offers: a block whose [offset, end) holds a pattern, and a second block
/// that the parent opens only after the child has exited.
struct offer {
  shared_memory first, second;
  std::size_t offset;
};
constexpr std::size_t shared_ints = 4096, first_offered = 16;

/// The child's side, as an exit status: 0 once the parent has rewritten the pattern.
int share_a_block_with_the_parent(channel& to_parent, channel& to_child) {
  try {
    host_port dev;  // made after the fork, and with no streams: no threads cross it
    auto* first = static_cast<std::int32_t*>(dev.allocate_device(shared_ints * sizeof(std::int32_t)));
    void* second = dev.allocate_device(64);
    for (std::size_t i = 0; i < shared_ints; ++i) first[i] = std::int32_t(i * 3 + 1);
    offer o{};
    std::size_t second_offset = 0;
    o.first = dev.export_memory(first + first_offered, (shared_ints - first_offered) * sizeof(std::int32_t), o.offset);
    o.second = dev.export_memory(second, 64, second_offset);
    if (!to_parent.send(o)) return 2;
    char go = 0;
    if (!to_child.receive(go)) return 3;  // the parent failed before it wrote
    for (std::size_t i = first_offered; i < shared_ints; ++i)
      if (first[i] != -std::int32_t(i)) return 4;
    return 0;
  } catch (...) {
    return 5;
  }
}

TEST(host_port, a_block_is_shared_with_another_process) {
  channel to_parent, to_child;
  const pid_t child = ::fork();  // first, while this process runs no other thread
  ASSERT_GE(child, 0);
  if (child == 0) {
    to_parent.only_write();
    to_child.only_read();
    ::_exit(share_a_block_with_the_parent(to_parent, to_child));
  }
  to_parent.only_read();
  to_child.only_write();
  host_port dev;
  offer o{};
  const bool offered = to_parent.receive(o);
  EXPECT_TRUE(offered);
  std::int32_t* alias = nullptr;
  if (offered) {
    EXPECT_EQ(o.offset, first_offered * sizeof(std::int32_t));
    alias = reinterpret_cast<std::int32_t*>(dev.import_memory(o.first) + o.offset);
    for (std::size_t i = first_offered; i < shared_ints; ++i) {
      EXPECT_EQ(alias[i - first_offered], std::int32_t(i * 3 + 1)) << i;
      alias[i - first_offered] = -std::int32_t(i);
    }
  }
  EXPECT_TRUE(to_child.send('g'));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2, 3: a pipe failed; 4: the child did not see the parent's writes; 5: it threw";
  if (!offered) return;
  EXPECT_EQ(alias[0], -std::int32_t(first_offered));  // an open block outlives its owner
  const error gone = thrown_by([&] { (void)dev.import_memory(o.second); });
  EXPECT_EQ(gone.code(), errc::transport);
  EXPECT_TRUE(mentions(gone, "process " + std::to_string(child))) << gone.what();
}

TEST(host_port, a_combine_may_read_an_imported_block_where_only_device_memory_is_allowed) {
  host_port dev({.device_memory_only = true});
  stream_handle s = dev.make_stream();
  constexpr std::size_t bytes = 3 * sizeof(std::int32_t);
  auto* mine = static_cast<std::int32_t*>(dev.allocate_device(bytes));
  auto* peers = static_cast<std::int32_t*>(dev.allocate_device(bytes));
  for (int i = 0; i < 3; ++i) mine[i] = i + 1, peers[i] = 10 * (i + 1);
  std::size_t offset = 0;
  const auto* imported = dev.import_memory(dev.export_memory(peers, bytes, offset)) + offset;
  const auto& sum = reduce::host_kernels_for(dtype::int32, reduce::op_kind::sum);
  dev.combine(s, sum, mine, mine, imported, bytes);
  dev.synchronize(s);
  EXPECT_EQ(std::vector<std::int32_t>(mine, mine + 3), (std::vector<std::int32_t>{11, 22, 33}));
  std::vector<std::int32_t> host(3);
  EXPECT_EQ(thrown_by([&] { dev.combine(s, sum, mine, mine, host.data(), bytes); }).code(), errc::invalid_argument);
  dev.free_stream(s);
  dev.free_device(mine, bytes);
  dev.free_device(peers, bytes);
}

}  // namespace
}  // namespace mimatrix::device
