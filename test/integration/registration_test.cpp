// The registration cache on a provider path that registers every buffer
// (MIMATRIX_FABRIC_REGISTER=always): results stay exact, and once a buffer has been seen
// the steady state registers nothing more.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace {

using transport::fabric;

MIMATRIX_SCENARIO(steady_state_registers_nothing) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(30));
  allreduce<fabric, topology::ring, reduce::sum<std::int64_t>> sum(comm);
  const int p = comm.size();
  std::vector<std::int64_t> in(std::size_t(1) << 20), out(in.size());
  auto one_call = [&](int k) {
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::int64_t(i) * (comm.rank() + 1) + k;
    sum(in, out);
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i] != std::int64_t(i) * p * (p + 1) / 2 + std::int64_t(k) * p) return false;
    return true;
  };
  if (!one_call(0)) return std::printf("wrong result in call 0\n"), 1;
  const std::size_t registered = comm.transport().registrations();
  for (int k = 1; k <= 10; ++k)
    if (!one_call(k)) return std::printf("wrong result in call %d\n", k), 1;
  std::printf("registrations after 1 call: %zu, after 11: %zu, cache hits: %zu\n", registered,
              comm.transport().registrations(), comm.transport().registration_hits());
  return registered > 0 && comm.transport().registrations() == registered && comm.transport().registration_hits() > 0
             ? 0
             : 1;
}

TEST(registration_cache, the_steady_state_registers_nothing) {
  for (const auto& provider : test::test_providers()) {
    SCOPED_TRACE(provider);
    // Chunks must take the provider's path: over shm they would go by the bulk rings.
    const auto r = test::run_ranks(2, provider, "steady_state_registers_nothing",
                                   {{"MIMATRIX_FABRIC_REGISTER", "always"}, {"MIMATRIX_BULK", "off"}});
    EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  }
}

}  // namespace
}  // namespace mimatrix
