// Tests of transport/fabric/mailbox.hpp: exact round trips, receive by tag in any order,
// back-pressure and the messages set aside, bulk rings read in place, truncation,
// discarding, threads and forked processes as ranks, ranks on other hosts, failures that
// name their call, and an empty /dev/shm after construction.
#include "mimatrix/transport/fabric/mailbox.hpp"

#include <gtest/gtest.h>

#include "mimatrix/bootstrap/file_store.hpp"
#include "mimatrix/bootstrap/memory_store.hpp"
#include "support/bytes.hpp"
#include "support/grid.hpp"

#include <algorithm>
#include <cstring>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using mimatrix::errc;
using mimatrix::bootstrap::memory_store;
using mimatrix::transport::detail::fabric::local_mailboxes;
using mailboxes = std::vector<std::unique_ptr<local_mailboxes>>;

constexpr std::size_t slots = local_mailboxes::small_messages.slots;
constexpr std::size_t payload_bytes = local_mailboxes::small_messages.payload_bytes;

/// A prefix no other test (or concurrent run) uses; its segments' names start with
/// "mimatrix-mb-" and the prefix with '/' as '_'.
std::string fresh_prefix() {
  static std::atomic<int> n{0};
  return "mbtest-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + "/";
}

/// The entries of /dev/shm that segments made under `prefix` would have.
std::vector<std::string> segments_left(const std::string& prefix) {
  std::string start = "mimatrix-mb-" + prefix;
  std::replace(start.begin(), start.end(), '/', '_');
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().starts_with(start)) found.push_back(e.path().filename().string());
  return found;
}

/// Constructs `size` ranks' mailboxes, one thread each (construction is collective), and
/// hands them all back; `hosts[r]`, when given, overrides rank r's host identity.
mailboxes make_world(mimatrix::bootstrap::store& store, int size, const std::string& prefix,
                     std::vector<std::string> hosts = {},
                     local_mailboxes::geometry shape = local_mailboxes::small_messages) {
  hosts.resize(std::size_t(size));
  mailboxes world(static_cast<std::size_t>(size));
  std::vector<std::exception_ptr> failures(static_cast<std::size_t>(size));
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r)
    ranks.emplace_back([&, r] {
      try {
        world[std::size_t(r)] =
            std::make_unique<local_mailboxes>(r, size, store, prefix, 10s, shape, hosts[std::size_t(r)]);
      } catch (...) {
        failures[std::size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (auto& f : failures)
    if (f) std::rethrow_exception(f);
  return world;
}

std::vector<std::byte> random_bytes(mimatrix::test::random_stream& rng, std::size_t n) {
  std::vector<std::byte> v(n);
  for (auto& b : v) b = std::byte(rng.next());
  return v;
}

/// Receives from `peer` with `tag`, waiting (up to 10 s) for it to come.
bool receive_waiting(local_mailboxes& m, int peer, std::uint64_t tag, void* dst, std::size_t capacity,
                     std::size_t* bytes, std::uint64_t* data) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (unsigned spins = 0;; ++spins) {
    if (m.try_receive(peer, tag, dst, capacity, bytes, data)) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (spins % 64 == 63) std::this_thread::yield();  // the machine may have fewer cores than ranks
  }
}

/// False when the ring stays full for 10 s (the receiver stopped): a failure, not a hang.
[[nodiscard]] bool send_waiting(local_mailboxes& m, int peer, std::uint64_t tag, std::uint64_t data, const void* src,
                                std::size_t bytes) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (unsigned spins = 0; !m.try_send(peer, tag, data, src, bytes); ++spins) {
    if (spins % 64 != 63) continue;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();  // the machine may have fewer cores than ranks
  }
  return true;
}

TEST(local_mailboxes, every_size_round_trips_exactly_both_ways) {
  memory_store store;
  const auto prefix = fresh_prefix();
  auto world = make_world(store, 2, prefix);
  EXPECT_TRUE(segments_left(prefix).empty());
  EXPECT_TRUE(world[0]->reaches(1));
  EXPECT_TRUE(world[1]->reaches(0));
  EXPECT_FALSE(world[0]->reaches(0));
  EXPECT_EQ(world[0]->local_ranks(), (std::vector<int>{0, 1}));
  mimatrix::test::random_stream rng{mimatrix::test::run_seed()};
  for (const std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(8), std::size_t(63), std::size_t(64),
                              std::size_t(65), std::size_t(511), payload_bytes}) {
    for (int from = 0; from < 2; ++from) {
      const int to = 1 - from;
      const auto sent = random_bytes(rng, n);
      const std::uint64_t tag = rng.next(), data = rng.next();
      ASSERT_TRUE(world[std::size_t(from)]->try_send(to, tag, data, sent.data(), n));
      std::vector<std::byte> got(payload_bytes, std::byte{0xee});
      std::size_t bytes = 12345;
      std::uint64_t got_data = 0;
      EXPECT_FALSE(world[std::size_t(to)]->try_receive(from, tag ^ 1, got.data(), got.size(), &bytes, &got_data));
      ASSERT_TRUE(world[std::size_t(to)]->try_receive(from, tag, got.data(), got.size(), &bytes, &got_data));
      EXPECT_EQ(bytes, n);
      EXPECT_EQ(got_data, data);
      EXPECT_TRUE(std::equal(sent.begin(), sent.end(), got.begin())) << n << " bytes from " << from;
      if (n < payload_bytes) {
        EXPECT_EQ(got[n], std::byte{0xee}) << "wrote past " << n << " bytes";
      }
      EXPECT_FALSE(world[std::size_t(to)]->try_receive(from, tag, got.data(), got.size(), &bytes, &got_data))
          << "taken twice";
    }
  }
}

TEST(local_mailboxes, messages_are_taken_by_tag_in_any_order_and_equal_tags_in_send_order) {
  memory_store store;
  auto world = make_world(store, 2, fresh_prefix());
  auto& a = *world[0];
  auto& b = *world[1];
  // Move the sender's cursor near the ring's end, so later sends wrap around it.
  for (std::uint64_t i = 0; i < slots - 3; ++i) {
    ASSERT_TRUE(a.try_send(1, 99, i, &i, sizeof i));
    std::uint64_t v = 0, d = 0;
    std::size_t n = 0;
    ASSERT_TRUE(b.try_receive(0, 99, &v, sizeof v, &n, &d));
  }
  // Tags 0..9, each twice: (tag, first) then (tag, second).
  for (std::uint64_t round = 0; round < 2; ++round)
    for (std::uint64_t tag = 0; tag < 10; ++tag) {
      const std::uint64_t value = tag * 100 + round;
      ASSERT_TRUE(a.try_send(1, tag, round, &value, sizeof value));
    }
  for (std::uint64_t tag = 10; tag-- > 0;)
    for (std::uint64_t round = 0; round < 2; ++round) {
      std::uint64_t value = 0, data = 7;
      std::size_t n = 0;
      ASSERT_TRUE(b.try_receive(0, tag, &value, sizeof value, &n, &data)) << "tag " << tag;
      EXPECT_EQ(n, sizeof value);
      EXPECT_EQ(data, round) << "tag " << tag << ": equal tags must come in send order";
      EXPECT_EQ(value, tag * 100 + round);
    }
  std::uint64_t value = 0, data = 0;
  std::size_t n = 0;
  EXPECT_FALSE(b.try_receive(0, 3, &value, sizeof value, &n, &data));
}

TEST(local_mailboxes, a_full_ring_refuses_until_a_receive_frees_the_slots_up_to_its_message) {
  memory_store store;
  auto world = make_world(store, 2, fresh_prefix());
  auto& a = *world[0];
  auto& b = *world[1];
  for (std::uint64_t i = 0; i < slots; ++i) ASSERT_TRUE(a.try_send(1, i, i * 3, &i, sizeof i)) << i;
  const std::uint64_t extra = 1000;
  EXPECT_FALSE(a.try_send(1, extra, 0, &extra, sizeof extra));
  EXPECT_FALSE(a.try_send(1, extra, 0, &extra, sizeof extra)) << "still full";
  // The other direction has its own ring.
  EXPECT_TRUE(b.try_send(0, 5, 5, &extra, sizeof extra));
  std::uint64_t v = 0, d = 0;
  std::size_t n = 0;
  // Taking message 17 sets 0..16 aside on the receiver and frees their 18 slots.
  ASSERT_TRUE(b.try_receive(0, 17, &v, sizeof v, &n, &d));
  EXPECT_EQ(v, 17u);
  EXPECT_EQ(d, 51u);
  for (std::uint64_t i = 0; i < 18; ++i) ASSERT_TRUE(a.try_send(1, extra + i, 42 + i, &i, sizeof i)) << i;
  EXPECT_FALSE(a.try_send(1, extra + 18, 0, &extra, sizeof extra));
  // Looking for a message not sent sets the whole ring aside: nothing blocks the sender.
  EXPECT_FALSE(b.try_receive(0, 5000, &v, sizeof v, &n, &d)) << "not sent";
  for (std::uint64_t i = 0; i < slots; ++i) ASSERT_TRUE(a.try_send(1, 2000 + i, 0, nullptr, 0)) << i;
  EXPECT_FALSE(a.try_send(1, 3000, 0, nullptr, 0));
  for (std::uint64_t i = 0; i < slots; ++i) {
    if (i == 17) continue;
    ASSERT_TRUE(b.try_receive(0, i, &v, sizeof v, &n, &d)) << i;
    EXPECT_EQ(v, i);
    EXPECT_EQ(d, i * 3);
  }
  for (std::uint64_t i = 0; i < 18; ++i) {
    ASSERT_TRUE(b.try_receive(0, extra + i, &v, sizeof v, &n, &d)) << i;
    EXPECT_EQ(v, i);
    EXPECT_EQ(d, 42 + i);
  }
  for (std::uint64_t i = 0; i < slots; ++i) {
    ASSERT_TRUE(b.try_receive(0, 2000 + i, &v, sizeof v, &n, &d)) << i;
    EXPECT_EQ(n, 0u);
  }
  EXPECT_FALSE(b.try_receive(0, 0, &v, sizeof v, &n, &d)) << "all taken";
  for (std::uint64_t i = 0; i < slots; ++i) EXPECT_TRUE(a.try_send(1, i, 0, nullptr, 0)) << "emptied: " << i;
}

TEST(local_mailboxes, a_short_receive_reports_the_length_sent_and_writes_no_further) {
  memory_store store;
  auto world = make_world(store, 2, fresh_prefix());
  std::array<std::uint8_t, 300> sent{};
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = std::uint8_t(i * 7 + 1);
  ASSERT_TRUE(world[1]->try_send(0, 8, 9, sent.data(), sent.size()));
  std::array<std::uint8_t, 64> got{};
  got.fill(0xaa);
  std::size_t n = 0;
  std::uint64_t d = 0;
  ASSERT_TRUE(world[0]->try_receive(1, 8, got.data(), 10, &n, &d));
  EXPECT_EQ(n, sent.size());
  EXPECT_EQ(d, 9u);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(got[i], sent[i]) << i;
  for (std::size_t i = 10; i < got.size(); ++i) EXPECT_EQ(got[i], 0xaa) << i;
  // A zero-capacity receive still takes the message.
  ASSERT_TRUE(world[1]->try_send(0, 8, 10, sent.data(), 5));
  ASSERT_TRUE(world[0]->try_receive(1, 8, nullptr, 0, &n, &d));
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(d, 10u);
}

TEST(local_mailboxes, discard_if_drops_the_matching_messages_of_one_peer_or_all_and_empties_their_rings) {
  memory_store store;
  auto world = make_world(store, 3, fresh_prefix());
  for (int from : {1, 2})
    for (std::uint64_t i = 0; i < slots; ++i) ASSERT_TRUE(world[std::size_t(from)]->try_send(0, i, i, &i, sizeof i));
  auto& z = *world[0];
  EXPECT_EQ(z.discard_if(1, [](std::uint64_t tag) { return tag % 2 == 0; }), slots / 2);
  EXPECT_EQ(z.discard_if(1, [](std::uint64_t tag) { return tag % 2 == 0; }), 0u) << "already gone";
  std::uint64_t v = 0, d = 0;
  std::size_t n = 0;
  EXPECT_FALSE(z.try_receive(1, 4, &v, sizeof v, &n, &d));
  ASSERT_TRUE(z.try_receive(1, 5, &v, sizeof v, &n, &d));
  EXPECT_EQ(v, 5u);
  ASSERT_TRUE(z.try_receive(2, 4, &v, sizeof v, &n, &d)) << "rank 2's messages untouched";
  EXPECT_EQ(v, 4u);
  // Rank 1's ring is empty (its odd messages wait on rank 0's side): a whole ring fits.
  for (std::size_t i = 0; i < slots; ++i) ASSERT_TRUE(world[1]->try_send(0, 1000 + i, 0, nullptr, 0)) << i;
  EXPECT_FALSE(world[1]->try_send(0, 2000, 0, nullptr, 0));
  // The kept messages still come in order, before the later ones.
  ASSERT_TRUE(z.try_receive(1, 7, &v, sizeof v, &n, &d));
  EXPECT_EQ(v, 7u);
  // peer < 0: every peer. Rank 1: 32 in the ring + 14 odd kept; rank 2: 31 (4 was taken).
  EXPECT_EQ(z.discard_if(-1, [](std::uint64_t) { return true; }), slots + (slots / 2 - 2) + (slots - 1));
  EXPECT_FALSE(z.try_receive(1, 1000, &v, sizeof v, &n, &d));
  EXPECT_FALSE(z.try_receive(1, 9, &v, sizeof v, &n, &d));
  for (int from : {1, 2})
    for (std::uint64_t i = 0; i < slots; ++i) EXPECT_TRUE(world[std::size_t(from)]->try_send(0, i, 0, nullptr, 0));
}

TEST(local_mailboxes, every_pair_of_five_ranks_has_its_own_ring) {
  memory_store store;
  const int p = 5;
  const auto prefix = fresh_prefix();
  auto world = make_world(store, p, prefix);
  EXPECT_TRUE(segments_left(prefix).empty());
  // Fill every ring, then read everything back: rings that overlapped would mix senders.
  for (int from = 0; from < p; ++from)
    for (int to = 0; to < p; ++to) {
      if (to == from) continue;
      for (std::uint64_t i = 0; i < slots; ++i) {
        const std::uint64_t value = std::uint64_t(from) << 32 | std::uint64_t(to) << 16 | i;
        ASSERT_TRUE(world[std::size_t(from)]->try_send(to, i, value, &value, sizeof value));
      }
      EXPECT_FALSE(world[std::size_t(from)]->try_send(to, 0, 0, nullptr, 0));
    }
  for (int to = 0; to < p; ++to)
    for (int from = 0; from < p; ++from) {
      if (to == from) continue;
      for (std::uint64_t i = slots; i-- > 0;) {
        const std::uint64_t expected = std::uint64_t(from) << 32 | std::uint64_t(to) << 16 | i;
        std::uint64_t v = 0, d = 0;
        std::size_t n = 0;
        ASSERT_TRUE(world[std::size_t(to)]->try_receive(from, i, &v, sizeof v, &n, &d));
        EXPECT_EQ(v, expected);
        EXPECT_EQ(d, expected);
      }
    }
}

TEST(local_mailboxes, threads_ping_pong_and_stream_with_exact_sequence) {
  memory_store store;
  auto world = make_world(store, 2, fresh_prefix());
  constexpr std::uint64_t messages = 100000;
  // Ping-pong: rank 0 sends i, rank 1 answers i + 1; sizes and tags vary with i.
  auto ping = [&](int me) {
    auto& m = *world[std::size_t(me)];
    const int peer = 1 - me;
    std::array<std::uint64_t, 8> buffer{};
    for (std::uint64_t i = 0; i < messages; ++i) {
      const std::size_t words = 1 + i % buffer.size();
      const std::uint64_t tag = i % 3;
      if (me == 0) {
        buffer.fill(i);
        ASSERT_TRUE(send_waiting(m, peer, tag, i, buffer.data(), words * 8)) << "rank 0 #" << i;
      }
      std::size_t n = 0;
      std::uint64_t d = 0;
      buffer.fill(~0ull);
      ASSERT_TRUE(receive_waiting(m, peer, tag, buffer.data(), sizeof buffer, &n, &d)) << "rank " << me << " #" << i;
      ASSERT_EQ(n, words * 8) << i;
      ASSERT_EQ(d, i + std::uint64_t(me == 0)) << i;
      for (std::size_t w = 0; w < words; ++w) ASSERT_EQ(buffer[w], i + std::uint64_t(me == 0)) << i;
      if (me == 1) {
        buffer.fill(i + 1);
        ASSERT_TRUE(send_waiting(m, peer, tag, i + 1, buffer.data(), words * 8)) << "rank 1 #" << i;
      }
    }
  };
  std::thread other(ping, 1);
  ping(0);
  other.join();
  // Streaming: rank 0 sends as fast as the ring allows, so it is often full.
  std::thread receiver([&] {
    for (std::uint64_t i = 0; i < messages; ++i) {
      std::uint64_t v = 0, d = 0;
      std::size_t n = 0;
      ASSERT_TRUE(receive_waiting(*world[1], 0, 5, &v, sizeof v, &n, &d)) << i;
      ASSERT_EQ(v, i);
      ASSERT_EQ(d, ~i);
    }
  });
  for (std::uint64_t i = 0; i < messages; ++i)
    if (!send_waiting(*world[0], 1, 5, ~i, &i, sizeof i)) {
      ADD_FAILURE() << "the receiver stopped taking messages before #" << i;
      break;
    }
  receiver.join();
}

/// Pins the calling thread to `cpu`.
void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(::pthread_setaffinity_np(::pthread_self(), sizeof set, &set), 0);
}

// A receive scans the ring slot by slot, so a receiver preempted mid-scan may resume after
// the sender has refilled slots it already passed; it must still take the earliest
// message. Both threads share one CPU and the receiver never yields, so the scheduler's
// tick lands mid-scan (CI once saw message 25147 overtaken by 25169 under ASan).
TEST(local_mailboxes, a_receiver_preempted_mid_scan_still_takes_messages_in_send_order) {
  memory_store store;
  auto world = make_world(store, 2, fresh_prefix());
  const int cpu = ::sched_getcpu();
  ASSERT_GE(cpu, 0);
  constexpr std::uint64_t messages = 6000;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  std::atomic<bool> stop{false};
  std::uint64_t wrong_at = messages, wrong_value = 0;
  std::thread receiver([&] {
    pin_to(cpu);
    for (std::uint64_t i = 0; i < messages && !stop; ++i) {
      std::uint64_t v = 0, d = 0;
      std::size_t n = 0;
      for (unsigned spins = 0; !world[1]->try_receive(0, 5, &v, sizeof v, &n, &d); ++spins)
        if (spins % 4096 == 0 && (stop || std::chrono::steady_clock::now() > deadline)) return;
      if (v != i) {
        wrong_at = i;
        wrong_value = v;
        stop = true;
      }
    }
    stop = true;
  });
  pin_to(cpu);
  std::uint64_t sent = 0;
  for (; sent < messages && !stop; ++sent)
    while (!world[0]->try_send(1, 5, 0, &sent, sizeof sent) && !stop) std::this_thread::yield();
  receiver.join();
  EXPECT_EQ(wrong_at, messages) << "message " << wrong_at << " was overtaken by " << wrong_value;
  EXPECT_EQ(sent, messages) << "the receiver stopped early (deadline)";
}

// Bulk rings: a few slots of a chunk each. A receiver reads a message where it lies
// (try_peek), whether in the ring or set aside, and take() frees exactly that one.
TEST(local_mailboxes, a_bulk_ring_carries_chunks_read_in_place) {
  memory_store store;
  constexpr local_mailboxes::geometry bulk{64 * 1024 + 8, 4};
  auto world = make_world(store, 2, fresh_prefix(), {}, bulk);
  auto& a = *world[0];
  auto& b = *world[1];
  EXPECT_EQ(b.payload_bytes(), bulk.payload_bytes);
  EXPECT_EQ(b.slots(), bulk.slots);
  mimatrix::test::random_stream rng{mimatrix::test::run_seed()};
  std::vector<std::vector<std::byte>> sent;
  for (std::uint64_t i = 0; i < 4; ++i) {
    sent.push_back(random_bytes(rng, i == 3 ? bulk.payload_bytes : 1000 * (i + 1)));
    ASSERT_TRUE(a.try_send(1, 10 + i, i, sent[i].data(), sent[i].size())) << i;
  }
  EXPECT_FALSE(a.try_send(1, 99, 0, sent[0].data(), 8)) << "four slots";
  // Tag 12 stands third: 10 and 11 are set aside, 12 is read in the ring.
  const auto* m = b.try_peek(0, 12);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->bytes, sent[2].size());
  EXPECT_EQ(m->data, 2u);
  EXPECT_EQ(std::memcmp(m->payload, sent[2].data(), sent[2].size()), 0);
  b.take(0);
  // Three slots are free again (10, 11 set aside, 12 taken).
  for (std::uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(a.try_send(1, 20 + i, 0, sent[i].data(), 64)) << i;
  EXPECT_FALSE(a.try_send(1, 99, 0, sent[0].data(), 8));
  // A set-aside message, read in place; then one still in the ring.
  m = b.try_peek(0, 11);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->bytes, sent[1].size());
  EXPECT_EQ(std::memcmp(m->payload, sent[1].data(), sent[1].size()), 0);
  b.take(0);
  m = b.try_peek(0, 13);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->bytes, bulk.payload_bytes);
  EXPECT_EQ(std::memcmp(m->payload, sent[3].data(), sent[3].size()), 0);
  b.take(0);
  std::vector<std::byte> got(bulk.payload_bytes);
  std::size_t n = 0;
  std::uint64_t d = 0;
  for (std::uint64_t tag : {20, 10, 22, 21}) {
    ASSERT_TRUE(b.try_receive(0, tag, got.data(), got.size(), &n, &d)) << tag;
    const auto& want = tag == 10 ? sent[0] : sent[tag - 20];
    ASSERT_EQ(n, tag == 10 ? want.size() : 64u) << tag;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n), 0) << tag;
  }
  for (std::uint64_t tag : {10, 12, 13}) EXPECT_EQ(b.try_peek(0, tag), nullptr) << "taken: " << tag;
  for (std::uint64_t i = 0; i < 4; ++i) EXPECT_TRUE(a.try_send(1, i, 0, nullptr, 0)) << "emptied: " << i;
}

// Threads stream chunks of every size through a 3-slot bulk ring, each read in place and
// checked word by word: the ring is full most of the time, and wraps thousands of times.
TEST(local_mailboxes, threads_stream_chunks_through_a_bulk_ring_exactly) {
  memory_store store;
  constexpr local_mailboxes::geometry bulk{4096, 3};
  auto world = make_world(store, 2, fresh_prefix(), {}, bulk);
  constexpr std::uint64_t messages = mimatrix::test::quick ? 3000 : 20000;
  std::atomic<bool> stop{false};
  std::uint64_t wrong_at = messages;
  std::thread receiver([&] {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    for (std::uint64_t i = 0; i < messages && !stop; ++i) {
      const local_mailboxes::message* m = nullptr;
      for (unsigned spins = 0; !(m = world[1]->try_peek(0, i % 2)); ++spins)
        if (spins % 64 == 63) {
          if (stop || std::chrono::steady_clock::now() > deadline) return;
          std::this_thread::yield();
        }
      const std::size_t words = 1 + i % (bulk.payload_bytes / 8);
      bool ok = m->bytes == words * 8 && m->data == i;
      for (std::size_t w = 0; ok && w < words; ++w) {
        std::uint64_t v = 0;
        std::memcpy(&v, m->payload + 8 * w, 8);
        ok = v == i * 1000003 + w;
      }
      world[1]->take(0);
      if (!ok) {
        wrong_at = i;
        stop = true;
      }
    }
  });
  std::vector<std::uint64_t> buffer(bulk.payload_bytes / 8);
  for (std::uint64_t i = 0; i < messages && !stop; ++i) {
    const std::size_t words = 1 + i % buffer.size();
    for (std::size_t w = 0; w < words; ++w) buffer[w] = i * 1000003 + w;
    if (!send_waiting(*world[0], 1, i % 2, i, buffer.data(), words * 8)) {
      ADD_FAILURE() << "the receiver stopped taking messages before #" << i;
      stop = true;
    }
  }
  receiver.join();
  EXPECT_EQ(wrong_at, messages) << "message " << wrong_at << " arrived wrong";
}

TEST(local_mailboxes, ranks_that_disagree_on_the_geometry_fail_naming_it) {
  memory_store store;
  const auto prefix = fresh_prefix();
  std::vector<std::string> failures(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        const local_mailboxes::geometry shape = r == 0 ? local_mailboxes::small_messages : local_mailboxes::geometry{1024, 8};
        local_mailboxes m(r, 2, store, prefix, 2s, shape);
      } catch (const mimatrix::error& e) {
        failures[std::size_t(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    // Each rank finds the other's segment laid out otherwise, or times out waiting for a
    // rank that gave up.
    EXPECT_FALSE(failures[std::size_t(r)].empty());
  }
  const std::string both = failures[0] + " | " + failures[1];
  EXPECT_NE(both.find("disagree on who shares this host or on the mailboxes' size"), std::string::npos) << both;
  EXPECT_TRUE(segments_left(prefix).empty());
}

TEST(local_mailboxes, an_empty_geometry_is_refused) {
  memory_store store;
  try {
    local_mailboxes m(0, 1, store, fresh_prefix(), 1s, {0, 4});
    FAIL() << "built slots of 0 bytes";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("4 slots of 0 bytes"), std::string::npos) << e.what();
  }
}

TEST(local_mailboxes, a_rank_on_another_host_is_not_reached) {
  memory_store store;
  const auto prefix = fresh_prefix();
  auto world = make_world(store, 4, prefix, {"", "elsewhere", "", "elsewhere-too"});
  EXPECT_TRUE(world[0]->reaches(2));
  EXPECT_TRUE(world[2]->reaches(0));
  EXPECT_FALSE(world[0]->reaches(1));
  EXPECT_FALSE(world[0]->reaches(3));
  EXPECT_FALSE(world[0]->reaches(4)) << "out of range";
  EXPECT_FALSE(world[0]->reaches(-1));
  EXPECT_FALSE(world[1]->reaches(0));
  EXPECT_FALSE(world[1]->reaches(3)) << "another host each";
  EXPECT_EQ(world[0]->local_ranks(), (std::vector<int>{0, 2}));
  EXPECT_EQ(world[1]->local_ranks(), (std::vector<int>{1}));
  EXPECT_EQ(world[1]->discard_if(-1, [](std::uint64_t) { return true; }), 0u);
  try {
    (void)world[0]->try_send(1, 0, 0, nullptr, 0);
    FAIL() << "sent to another host";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("peer 1"), std::string::npos) << e.what();
  }
  std::uint64_t v = 42;
  ASSERT_TRUE(world[2]->try_send(0, 1, 2, &v, sizeof v));
  std::size_t n = 0;
  std::uint64_t d = 0;
  v = 0;
  ASSERT_TRUE(world[0]->try_receive(2, 1, &v, sizeof v, &n, &d));
  EXPECT_EQ(v, 42u);
  EXPECT_TRUE(segments_left(prefix).empty());
}

TEST(local_mailboxes, a_message_larger_than_a_slot_is_refused) {
  memory_store store;
  auto world = make_world(store, 2, fresh_prefix());
  std::vector<std::byte> big(payload_bytes + 1);
  try {
    (void)world[0]->try_send(1, 0, 0, big.data(), big.size());
    FAIL() << "sent " << big.size() << " bytes";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(std::to_string(payload_bytes + 1) + " bytes"), std::string::npos) << e.what();
  }
}

TEST(local_mailboxes, a_peer_segment_that_cannot_be_opened_is_named_and_nothing_leaks) {
  memory_store store;
  const auto prefix = fresh_prefix();
  // Rank 1 is played by the test: same host, and a segment name that does not exist.
  const std::string missing = "/mimatrix-mb-" + prefix.substr(0, prefix.size() - 1) + "_missing";
  store.set(prefix + "mailbox/host/1", mimatrix::test::bytes("host-x"));
  store.set(prefix + "mailbox/segment/1", mimatrix::test::bytes(missing));
  try {
    local_mailboxes m(0, 2, store, prefix, 2s, local_mailboxes::small_messages, "host-x");
    FAIL() << "mapped a segment that does not exist";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::transport);
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
    EXPECT_NE(what.find("peer 1"), std::string::npos) << what;
    EXPECT_NE(what.find("shm_open('" + missing + "')"), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  EXPECT_TRUE(segments_left(prefix).empty()) << "its own segment was unlinked";
}

TEST(local_mailboxes, a_rank_that_never_comes_times_out) {
  memory_store store;
  const auto prefix = fresh_prefix();
  try {
    local_mailboxes m(0, 2, store, prefix, 150ms);
    FAIL() << "constructed without rank 1";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::timeout);
    EXPECT_NE(std::string(e.what()).find("rank(s) 1"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(segments_left(prefix).empty());
}

TEST(local_mailboxes, forked_processes_exchange_through_shared_memory) {
  std::string dir = (std::filesystem::temp_directory_path() / "mimatrix-mailbox-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const auto prefix = fresh_prefix();
  constexpr std::uint64_t messages = mimatrix::test::quick ? 2000 : 20000;
  // Rank 1 echoes each message back with every word incremented, and the data negated.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    try {
      mimatrix::bootstrap::file_store store(dir);
      local_mailboxes m(1, 2, store, prefix, 10s);
      if (!m.reaches(0)) ::_exit(2);
      std::array<std::uint64_t, 64> buffer{};
      for (std::uint64_t i = 0; i < messages && code == 0; ++i) {
        std::size_t n = 0;
        std::uint64_t d = 0;
        if (!receive_waiting(m, 0, i, buffer.data(), sizeof buffer, &n, &d)) code = 3;
        else if (d != i || n != 8 * (1 + i % 64)) code = 4;
        if (code) break;
        for (std::size_t w = 0; w < n / 8; ++w) buffer[w] += 1;
        if (!send_waiting(m, 0, i, ~d, buffer.data(), n)) code = 5;
      }
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  std::uint64_t mismatches = 0;
  {
    mimatrix::bootstrap::file_store store(dir);
    local_mailboxes m(0, 2, store, prefix, 10s);
    EXPECT_TRUE(m.reaches(1));
    std::array<std::uint64_t, 64> buffer{};
    for (std::uint64_t i = 0; i < messages; ++i) {
      const std::size_t words = 1 + i % 64;
      for (std::size_t w = 0; w < words; ++w) buffer[w] = i * 1000 + w;
      ASSERT_TRUE(send_waiting(m, 1, i, i, buffer.data(), words * 8)) << i;
      std::size_t n = 0;
      std::uint64_t d = 0;
      buffer.fill(0);
      ASSERT_TRUE(receive_waiting(m, 1, i, buffer.data(), sizeof buffer, &n, &d)) << i;
      ASSERT_EQ(n, words * 8) << i;
      ASSERT_EQ(d, ~i) << i;
      for (std::size_t w = 0; w < words; ++w) mismatches += buffer[w] != i * 1000 + w + 1;
    }
    // The child unlinked its name before its first echo, this rank before returning.
    EXPECT_TRUE(segments_left(prefix).empty());
  }
  EXPECT_EQ(mismatches, 0u);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::filesystem::remove_all(dir);
}

}  // namespace
