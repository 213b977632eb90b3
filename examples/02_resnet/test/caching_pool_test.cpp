// The GPU layers' caching allocator, over a host allocator that counts and checks: its logic
// is the same as over cudaMalloc.
#include "nn_cuda/caching_pool.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

namespace {

using mimatrix::resnet::nn_cuda::caching_pool;
using mimatrix::resnet::nn_cuda::pool_policy;

// malloc with a capacity: null past it (a full device), and a record of what is live.
struct counted_memory {
  struct ledger {
    std::size_t capacity = std::size_t(1) << 30;
    std::size_t live_bytes = 0;
    std::map<void*, std::size_t> live;
    std::vector<std::size_t> sizes;  // of every allocation, in order
  };
  ledger* book;

  void* allocate(std::size_t bytes) {
    if (book->live_bytes + bytes > book->capacity) return nullptr;
    void* p = std::malloc(bytes);
    book->live.emplace(p, bytes);
    book->live_bytes += bytes;
    book->sizes.push_back(bytes);
    std::memset(p, 0xAB, bytes);  // touched, so a wrong size shows under ASan
    return p;
  }
  void free(void* p) {
    const auto it = book->live.find(p);
    ASSERT_NE(it, book->live.end()) << "freed a block twice or one it never gave";
    book->live_bytes -= it->second;
    book->live.erase(it);
    std::free(p);
  }
};

using pool = caching_pool<counted_memory>;

TEST(caching_pool, a_released_block_serves_the_next_request_of_its_size_without_a_raw_allocation) {
  counted_memory::ledger book;
  pool p(counted_memory{&book});
  void* a = p.allocate(1000);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(book.sizes, std::vector<std::size_t>{1024});  // rounded to 512
  p.release(a);
  void* b = p.allocate(1000);
  EXPECT_EQ(b, a);
  const auto s = p.statistics();
  EXPECT_EQ(s.raw_allocations, 1u);
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.in_use_bytes, 1024u);
  EXPECT_EQ(s.cached_bytes, 0u);
  p.release(b);
}

TEST(caching_pool, a_training_step_repeated_allocates_only_in_the_first) {
  // Shapes as a network's: the same sizes, allocated and released in the same order.
  counted_memory::ledger book;
  pool p(counted_memory{&book});
  const std::vector<std::size_t> step = {4 << 20, 4 << 20, 1 << 20, 300, 64 << 10, 4 << 20, 7};
  std::size_t first_step_allocations = 0;
  for (int iteration = 0; iteration < 5; ++iteration) {
    std::vector<void*> held;
    for (std::size_t bytes : step) {
      held.push_back(p.allocate(bytes));
      if (held.size() % 3 == 0) {  // some die early (activations used once)
        p.release(held.front());
        held.erase(held.begin());
      }
    }
    for (void* b : held) p.release(b);
    if (iteration == 0) first_step_allocations = p.statistics().raw_allocations;
  }
  const auto s = p.statistics();
  EXPECT_GT(first_step_allocations, 0u);
  EXPECT_EQ(s.raw_allocations, first_step_allocations);  // none after the first step
  EXPECT_LT(s.raw_allocations, step.size());              // and the first already reused what died
  EXPECT_EQ(s.raw_allocations + s.reuses, 5 * step.size());
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, book.live_bytes);
}

TEST(caching_pool, a_block_much_larger_than_the_request_is_not_used_for_it) {
  counted_memory::ledger book;
  pool p(counted_memory{&book}, pool_policy{.granularity = 512, .slack = 0.25});
  void* big = p.allocate(1 << 20);
  p.release(big);
  void* small = p.allocate(1000);  // 1 MiB is far past 1 KiB + 25%
  EXPECT_NE(small, big);
  void* near = p.allocate((1 << 20) - 100 * 1024);  // within 25% below it: reuses it
  EXPECT_EQ(near, big);
  EXPECT_EQ(p.statistics().in_use_bytes, 1024u + (1u << 20));  // the whole block is in use
  p.release(small);
  p.release(near);
}

TEST(caching_pool, the_best_fitting_block_is_taken) {
  counted_memory::ledger book;
  pool p(counted_memory{&book}, pool_policy{.granularity = 512, .slack = 1.0});
  void* a = p.allocate(4096);
  void* b = p.allocate(2048);
  void* c = p.allocate(3072);
  p.release(a);
  p.release(b);
  p.release(c);
  EXPECT_EQ(p.allocate(2500), c);  // 3072, not 4096
  EXPECT_EQ(p.allocate(2000), b);
  EXPECT_EQ(p.allocate(2000), a);  // 4096 is within twice 2048
  EXPECT_EQ(p.statistics().cached_bytes, 0u);
  p.release(a);
  p.release(b);
  p.release(c);
}

TEST(caching_pool, a_full_device_gives_the_cache_back_and_tries_again) {
  counted_memory::ledger book;
  book.capacity = 8192;
  pool p(counted_memory{&book});
  void* a = p.allocate(4096);
  void* b = p.allocate(4096);
  p.release(a);
  p.release(b);
  EXPECT_EQ(book.live.size(), 2u);  // cached, not freed
  void* c = p.allocate(6000);       // 6144 fits only once the cache is gone
  ASSERT_NE(c, nullptr);
  const auto s = p.statistics();
  EXPECT_EQ(s.raw_frees, 2u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(book.live.size(), 1u);
  p.release(c);
}

TEST(caching_pool, a_request_past_the_device_says_how_much_and_what_is_held) {
  counted_memory::ledger book;
  book.capacity = 8192;
  pool p(counted_memory{&book});
  void* held = p.allocate(4096);
  try {
    (void)p.allocate(6000);
    FAIL() << "6144 bytes more cannot fit in 8192 with 4096 held";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot allocate 6144 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4096 bytes in use"), std::string::npos) << e.what();
  }
  p.release(held);
}

TEST(caching_pool, releasing_a_block_twice_or_a_foreign_one_is_refused) {
  counted_memory::ledger book;
  pool p(counted_memory{&book});
  void* a = p.allocate(100);
  p.release(a);
  EXPECT_THROW(p.release(a), std::invalid_argument);
  int foreign = 0;
  EXPECT_THROW(p.release(&foreign), std::invalid_argument);
  EXPECT_EQ(p.allocate(0), nullptr);
  p.release(nullptr);  // as free(nullptr)
}

TEST(caching_pool, trim_and_destruction_give_every_cached_block_back) {
  counted_memory::ledger book;
  {
    pool p(counted_memory{&book});
    std::vector<void*> blocks;
    for (std::size_t bytes : {512u, 2048u, 100000u}) blocks.push_back(p.allocate(bytes));
    for (void* b : blocks) p.release(b);
    p.trim();
    EXPECT_TRUE(book.live.empty());
    p.release(p.allocate(777));
    EXPECT_EQ(book.live.size(), 1u);
  }
  EXPECT_TRUE(book.live.empty());
}

TEST(caching_pool, a_bad_policy_is_refused) {
  counted_memory::ledger book;
  EXPECT_THROW(pool(counted_memory{&book}, pool_policy{.granularity = 0}), std::invalid_argument);
  EXPECT_THROW(pool(counted_memory{&book}, pool_policy{.granularity = 512, .slack = -1}), std::invalid_argument);
}

}  // namespace
