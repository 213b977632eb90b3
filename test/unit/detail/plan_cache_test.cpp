// The communicator's plan cache: least recently used out first, shared by collectives.
#include "mimatrix/detail/plan_cache.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "mimatrix/allreduce.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix::detail {
namespace MIMATRIX_UNIT_ID {

plan_key key(std::size_t count, std::uint64_t owner = 1) {
  return {owner, schedule::collective::allreduce, count, 4, 0};
}

plan_set made(std::size_t count) {
  plan_set p;
  p.most_scratch = count;
  return p;
}

TEST(plan_cache, evicts_the_least_recently_used_entry) {
  plan_cache cache(3);
  int builds = 0;
  const auto get = [&](std::size_t n) {
    return cache.find_or_build(key(n), [&] { return ++builds, made(n); }).most_scratch;
  };
  EXPECT_EQ(get(1), 1u);
  EXPECT_EQ(get(2), 2u);
  EXPECT_EQ(get(3), 3u);
  EXPECT_EQ(get(1), 1u);  // 1 is now the most recent; 2 the least
  EXPECT_EQ(builds, 3);
  EXPECT_EQ(get(4), 4u);  // evicts 2
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(get(1), 1u);
  EXPECT_EQ(get(3), 3u);
  EXPECT_EQ(builds, 4);
  EXPECT_EQ(get(2), 2u);  // rebuilt
  EXPECT_EQ(builds, 5);
  EXPECT_EQ(cache.hits(), 3u);
  EXPECT_EQ(cache.misses(), 5u);
}

TEST(plan_cache, owners_keep_their_keys_apart_and_capacity_can_shrink) {
  plan_cache cache(8);
  const auto a = cache.new_owner(), b = cache.new_owner();
  EXPECT_NE(a, b);
  cache.find_or_build(key(10, a), [] { return made(1); });
  EXPECT_EQ(cache.find_or_build(key(10, b), [] { return made(2); }).most_scratch, 2u);
  EXPECT_EQ(cache.size(), 2u);
  cache.set_capacity(1);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.find_or_build(key(10, b), [] { return made(3); }).most_scratch, 2u);  // the recent one stayed
}

TEST(plan_cache, a_model_with_more_sizes_than_it_holds_rebuilds_only_the_cold_ones) {
  transport::run_inproc(2, [](int r, transport::inproc::world& w) {
    communicator<transport::inproc> comm(w, r);
    comm.plans().set_capacity(16);
    allreduce<transport::inproc, topology::ring, reduce::sum<std::int32_t>> sum(comm);
    allreduce<transport::inproc, topology::ring, reduce::sum<std::int32_t>> other(comm);
    std::vector<std::int32_t> hot(1000);
    for (std::size_t n = 1; n <= 40; ++n) {
      std::vector<std::int32_t> v(n, r);
      sum(v);
      EXPECT_EQ(v[n - 1], 1);
      hot.assign(hot.size(), 1);
      other(hot);  // the hot size, between every cold one
      ASSERT_EQ(hot[0], 2);
    }
    EXPECT_LE(comm.plans().size(), 16u);
    EXPECT_EQ(comm.plans().misses(), 41u);  // every cold size once, the hot one once
  });
}

}  // namespace
}  // namespace mimatrix::detail
