// The registration cache on a provider path that registers every buffer
// (MIMATRIX_FABRIC_REGISTER=always): results stay exact, each buffer is registered whole
// once, the steady state registers nothing more, and a buffer the application
// deregisters before freeing it is registered afresh.
#include "mimatrix/transport/fabric.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

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
  // Each buffer is registered whole, once (input, output, scratch, staging), not a chunk at a time.
  return registered > 0 && registered <= 4 && comm.transport().registrations() == registered &&
                 comm.transport().registration_hits() > 0
             ? 0
             : 1;
}

// A framework that frees a buffer tells the cache first: the pages are registered afresh
// when memory at that address is used again, and results stay exact.
MIMATRIX_SCENARIO(deregistered_buffers_are_registered_afresh) {
  communicator<fabric> comm;
  comm.set_timeout(std::chrono::seconds(30));
  allreduce<fabric, topology::ring, reduce::sum<std::int64_t>> sum(comm);
  auto& fab = comm.transport();
  const int p = comm.size();
  const std::size_t count = std::size_t(1) << 18, bytes = count * sizeof(std::int64_t);
  auto one_call = [&](std::vector<std::int64_t>& in, std::vector<std::int64_t>& out, int k) {
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::int64_t(i) * (comm.rank() + 1) + k;
    sum(in, out);
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i] != std::int64_t(i) * p * (p + 1) / 2 + std::int64_t(k) * p) return false;
    return true;
  };
  std::size_t registered = 0;
  for (int k = 0; k < 3; ++k) {
    auto in = std::make_unique<std::vector<std::int64_t>>(count), out = std::make_unique<std::vector<std::int64_t>>(count);
    if (!one_call(*in, *out, k)) return std::printf("wrong result in call %d\n", k), 1;
    if (fab.registrations() <= registered)
      return std::printf("call %d registered nothing new (%zu)\n", k, fab.registrations()), 1;
    registered = fab.registrations();
    const std::size_t live = fab.live_registrations();
    const std::size_t dropped = fab.deregister(in->data(), bytes) + fab.deregister(out->data(), bytes);
    std::printf("call %d: %zu registrations in all, %zu live, %zu dropped\n", k, registered, live, dropped);
    if (dropped == 0 || fab.live_registrations() != live - dropped) return 1;
    if (fab.deregister(in->data(), bytes) != 0) return std::printf("a second deregister dropped more\n"), 1;
  }
  return 0;
}

// Two ranks over each provider, registering every buffer. Chunks must take the
// provider's path: over shm they would go by the bulk rings.
void run_registering(const char* scenario) {
  for (const auto& provider : test::test_providers()) {
    SCOPED_TRACE(provider);
    const auto r = test::run_ranks(2, provider, scenario, {{"MIMATRIX_FABRIC_REGISTER", "always"}, {"MIMATRIX_BULK", "off"}});
    EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  }
}

TEST(registration_cache, the_steady_state_registers_nothing) { run_registering("steady_state_registers_nothing"); }

TEST(registration_cache, a_deregistered_buffer_is_registered_afresh) {
  run_registering("deregistered_buffers_are_registered_afresh");
}

}  // namespace
}  // namespace mimatrix
