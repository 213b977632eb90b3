// Round-trip latency of transport/fabric/mailbox.hpp between two ranks on one host, as
// forked processes and as threads, for message sizes 8 B .. 512 B (one slot).
//
// Each iteration is one ping-pong: rank 0 sends, rank 1 echoes, rank 0 takes the echo.
// `one_way` is half the round trip: compare it with libfabric shm's latency for the same
// size (fi_pingpong -p shm), about 1 us.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "mimatrix/bootstrap/file_store.hpp"
#include "mimatrix/bootstrap/memory_store.hpp"
#include "mimatrix/transport/fabric/mailbox.hpp"

namespace {

using mimatrix::transport::detail::fabric::local_mailboxes;
using namespace std::chrono_literals;

constexpr std::uint64_t ping_tag = 1, stop = ~std::uint64_t(0);

/// Spins on `attempt` until it succeeds, yielding now and then: with more busy processes
/// than cores, pure spinning would cost a scheduler quantum (milliseconds) per message.
template <class Attempt>
void until(Attempt attempt) {
  for (unsigned spins = 1; !attempt(); ++spins)
    if (spins % 4096 == 0) std::this_thread::yield();
}

/// Rank 1: echoes every message until one carries `stop` as its data.
void echo(local_mailboxes& m) {
  std::vector<std::byte> buffer(local_mailboxes::small_messages.payload_bytes);
  for (;;) {
    std::size_t n = 0;
    std::uint64_t data = 0;
    until([&] { return m.try_receive(0, ping_tag, buffer.data(), buffer.size(), &n, &data); });
    if (data == stop) return;
    until([&] { return m.try_send(0, ping_tag, data, buffer.data(), n); });
  }
}

/// Rank 0: the timed loop, then the stop message.
void ping(benchmark::State& state, local_mailboxes& m) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::byte> buffer(local_mailboxes::small_messages.payload_bytes, std::byte{1});
  std::uint64_t sequence = 0;
  for (auto _ : state) {
    until([&] { return m.try_send(1, ping_tag, sequence, buffer.data(), bytes); });
    std::size_t n = 0;
    std::uint64_t data = 0;
    until([&] { return m.try_receive(1, ping_tag, buffer.data(), buffer.size(), &n, &data); });
    if (data != sequence++ || n != bytes) state.SkipWithError("the echo is not the message sent");
  }
  until([&] { return m.try_send(1, ping_tag, stop, nullptr, 0); });
  state.counters["one_way"] = benchmark::Counter(double(state.iterations()) * 2,
                                                 benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

std::string fresh_prefix() {
  static int n = 0;
  return "mbbench-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + "/";
}

void mailbox_ping_pong_processes(benchmark::State& state) {
  std::string dir = (std::filesystem::temp_directory_path() / "mimatrix-mailbox-bench-XXXXXX").string();
  if (!::mkdtemp(dir.data())) return state.SkipWithError("mkdtemp failed");
  const auto prefix = fresh_prefix();
  const pid_t child = ::fork();
  if (child == 0) {
    int code = 0;
    try {
      mimatrix::bootstrap::file_store store(dir);
      local_mailboxes m(1, 2, store, prefix, 30s);
      echo(m);
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  {
    mimatrix::bootstrap::file_store store(dir);
    local_mailboxes m(0, 2, store, prefix, 30s);
    ping(state, m);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  std::filesystem::remove_all(dir);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) state.SkipWithError("the echoing process failed");
}

void mailbox_ping_pong_threads(benchmark::State& state) {
  mimatrix::bootstrap::memory_store store;
  const auto prefix = fresh_prefix();
  std::unique_ptr<local_mailboxes> other;
  std::thread constructing([&] { other = std::make_unique<local_mailboxes>(1, 2, store, prefix, 30s); });
  local_mailboxes m(0, 2, store, prefix, 30s);
  constructing.join();
  std::thread echoing([&] { echo(*other); });
  ping(state, m);
  echoing.join();
}

BENCHMARK(mailbox_ping_pong_processes)->RangeMultiplier(4)->Range(8, 512)->UseRealTime();
BENCHMARK(mailbox_ping_pong_threads)->RangeMultiplier(4)->Range(8, 512)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
