// The chunk transport::fabric suggests reaches the collectives: one by provider, or what
// fabric_options or MIMATRIX_CHUNK_BYTES name.
// Results stay exact at each, and a malformed variable is a start-up error naming it.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/memory_store.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

/// Ranks check the suggestion against EXPECT_CHUNK_BYTES, then run ring allreduces whose
/// blocks span several chunks of any size tested here.
MIMATRIX_SCENARIO(exact_at_the_suggested_chunk) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(30));
  const std::size_t chunk = comm.transport().suggested_policy().chunk_bytes;
  const std::size_t want = std::strtoull(std::getenv("EXPECT_CHUNK_BYTES"), nullptr, 10);
  if (chunk != want)
    return std::printf("rank %d over %s: suggested chunk %zu, expected %zu\n", comm.rank(),
                       comm.transport().provider().c_str(), chunk, want),
           1;
  allreduce<fabric, topology::ring, reduce::sum<std::int64_t>> sum(comm);
  const int p = comm.size();
  std::vector<std::int64_t> in((std::size_t(3) << 20) / 8 * std::size_t(p) + 5), out(in.size());
  for (int k = 0; k < 2; ++k) {
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::int64_t(i) * (comm.rank() + 1) - k;
    sum(in, out);
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i] != std::int64_t(i) * p * (p + 1) / 2 - std::int64_t(k) * p)
        return std::printf("rank %d, call %d: element %zu is %lld\n", comm.rank(), k, i, (long long)out[i]), 1;
  }
  return 0;
}

/// Start-up with a chunk whose bulk rings cannot fit in shared memory fails; prints the error.
MIMATRIX_SCENARIO(start_up_with_a_chunk_too_large) {
  try {
    communicator<fabric> comm;
    std::printf("rank %d started\n", comm.rank());
    return 1;
  } catch (const error& e) {
    std::printf("CAUGHT %s\n", e.what());
    return 0;
  }
}

/// Thousands of 256-byte chunks a call (issue 16, item 2): over tcp;ofi_rxm the allgather
/// phase's receives, ready at once, used to fill the provider's receive queue, so the
/// recv_reduce receives of the phase before could never be posted.
template <class Algorithm>
int exact_with_tiny_chunks(communicator<fabric>& comm) {
  allreduce<fabric, topology::ring, reduce::sum<float>, Algorithm> sum(comm, {}, Algorithm(algorithm::policy{256}));
  const int p = comm.size();
  std::vector<float> v(300007);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float((i + std::size_t(comm.rank())) % 7);
  sum(v);
  for (std::size_t i = 0; i < v.size(); ++i) {
    float want = 0;
    for (int r = 0; r < p; ++r) want += float((i + std::size_t(r)) % 7);
    if (v[i] != want)
      return std::printf("rank %d %s: element %zu is %g, expected %g\n", comm.rank(), Algorithm::name.data(), i,
                         double(v[i]), double(want)),
             1;
  }
  return 0;
}

MIMATRIX_SCENARIO(tiny_chunks) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(20));
  return exact_with_tiny_chunks<algorithm::ring>(comm) + exact_with_tiny_chunks<algorithm::halving_doubling>(comm);
}

TEST(chunking, thousands_of_tiny_chunks_a_call_do_not_fill_the_providers_receive_queue) {
  for (const auto& provider : test::test_providers()) {
    SCOPED_TRACE(provider);
    const auto r = test::run_ranks(2, provider, "tiny_chunks", {}, std::chrono::seconds(60));
    ASSERT_FALSE(r.timed_out) << test::all_output(r);
    EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  }
}

TEST(chunking, rxm_providers_get_1_MiB_chunks_shm_512_KiB_and_others_the_default) {
  EXPECT_EQ(fabric::chunk_for_provider("tcp;ofi_rxm"), std::size_t(1) << 20);
  EXPECT_EQ(fabric::chunk_for_provider("verbs;ofi_rxm"), std::size_t(1) << 20);
  EXPECT_EQ(fabric::chunk_for_provider("shm"), std::size_t(512) << 10);
  EXPECT_EQ(fabric::chunk_for_provider("efa"), algorithm::default_chunk_bytes);
}

TEST(chunking, an_option_names_the_chunk) {
  auto store = std::make_shared<bootstrap::memory_store>();
  fabric f(bootstrap::identity{}, store, {.provider = "shm", .chunk_bytes = 12345});
  EXPECT_EQ(f.suggested_policy().chunk_bytes, 12345u);
}

// Issue 11 item 4: the environment used to override explicit numeric options.
TEST(chunking, an_explicit_option_wins_over_the_environment_and_an_unset_one_reads_it) {
  auto store = std::make_shared<bootstrap::memory_store>();
  ::setenv("MIMATRIX_CHUNK_BYTES", "65536", 1);
  ::setenv("MIMATRIX_WINDOW_BYTES", "1048576", 1);
  {
    fabric f(bootstrap::identity{}, store, {.provider = "shm", .window_bytes = 0, .chunk_bytes = 12345});
    EXPECT_EQ(f.suggested_policy().chunk_bytes, 12345u);
    EXPECT_EQ(f.window_bytes(), 0u);
  }
  {
    fabric f(bootstrap::identity{}, store, {.provider = "shm"});
    EXPECT_EQ(f.suggested_policy().chunk_bytes, 65536u);
    EXPECT_NE(f.window_bytes(), 0u);
  }
  ::unsetenv("MIMATRIX_CHUNK_BYTES");
  ::unsetenv("MIMATRIX_WINDOW_BYTES");
}

TEST(chunking, every_provider_is_exact_at_its_own_chunk_and_at_a_chosen_one) {
  for (const auto& provider : test::test_providers()) {
    SCOPED_TRACE(provider);
    const auto own = std::to_string(fabric::chunk_for_provider(provider));
    auto r = test::run_ranks(3, provider, "exact_at_the_suggested_chunk", {{"EXPECT_CHUNK_BYTES", own}});
    EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
    r = test::run_ranks(2, provider, "exact_at_the_suggested_chunk",
                        {{"MIMATRIX_CHUNK_BYTES", "40000"}, {"EXPECT_CHUNK_BYTES", "40000"}});
    EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  }
}

TEST(chunking, a_malformed_chunk_variable_names_itself_and_the_rank) {
  auto store = std::make_shared<bootstrap::memory_store>();
  for (const char* bad : {"1M", "0", "-4096", "lots"}) {
    SCOPED_TRACE(bad);
    ::setenv("MIMATRIX_CHUNK_BYTES", bad, 1);
    try {
      fabric f(bootstrap::identity{}, store, {.provider = "shm"});
      ADD_FAILURE() << "accepted MIMATRIX_CHUNK_BYTES=" << bad;
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 0: MIMATRIX_CHUNK_BYTES must be a positive number of bytes, got '" + std::string(bad) + "'"),
                std::string::npos)
          << what;
    }
  }
  ::unsetenv("MIMATRIX_CHUNK_BYTES");
}

// Found by a black-box test: a chunk too large for the bulk rings failed in
// posix_fallocate, naming neither the chunk nor what to change.
TEST(chunking, a_chunk_too_large_for_the_bulk_rings_is_named_with_what_to_change) {
  const auto r = test::run_ranks(2, "shm", "start_up_with_a_chunk_too_large", {{"MIMATRIX_CHUNK_BYTES", "1099511627776"}},
                                 std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  int named = 0;
  for (const std::string& out : r.output)
    named += out.find("chunks of MIMATRIX_CHUNK_BYTES=1099511627776") != std::string::npos &&
             out.find("MIMATRIX_BULK=off") != std::string::npos;
  EXPECT_GE(named, 1) << test::all_output(r);
}

// Found by a black-box test: MIMATRIX_DEVICE_IPC=x and MIMATRIX_DEVICE_HMEM=x were taken
// as "on" and "auto"; a typo must not choose how device memory moves.
TEST(chunking, a_malformed_device_setting_names_itself_and_the_rank) {
  auto store = std::make_shared<bootstrap::memory_store>();
  for (const char* name : {"MIMATRIX_DEVICE_IPC", "MIMATRIX_DEVICE_HMEM"}) {
    SCOPED_TRACE(name);
    ::setenv(name, "x", 1);
    try {
      fabric f(bootstrap::identity{}, store, {.provider = "shm"});
      ADD_FAILURE() << "accepted " << name << "=x";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 0: " + std::string(name) + " must be"), std::string::npos) << what;
      EXPECT_NE(what.find("got 'x'"), std::string::npos) << what;
    }
    ::unsetenv(name);
  }
}

}  // namespace
}  // namespace mimatrix
