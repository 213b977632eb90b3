// Multi-process tests: the test binary launches copies of itself as ranks. A copy started
// with MIMATRIX_TEST_SCENARIO set runs that scenario instead of the tests and exits with
// its result; the parent test asserts on every rank's exit status and output.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "mimatrix/bootstrap/launch.hpp"

namespace mimatrix::test {

/// A scenario's body runs on every rank; it returns 0 on success and prints what failed.
using scenario = std::function<int()>;

inline std::map<std::string, scenario>& scenarios() {
  static std::map<std::string, scenario> all;
  return all;
}

/// Registers a scenario at static-initialization time.
struct scenario_registration {
  // One binary holds several files' scenarios (test/CMakeLists.txt): a name taken twice
  // would run the other file's scenario.
  scenario_registration(const std::string& name, scenario body) {
    if (!scenarios().emplace(name, std::move(body)).second) {
      std::fprintf(stderr, "scenario '%s' is registered twice in this binary\n", name.c_str());
      std::abort();
    }
  }
};
#define MIMATRIX_SCENARIO(name) \
  static int scenario_##name(); \
  static const ::mimatrix::test::scenario_registration registration_##name(#name, scenario_##name); \
  static int scenario_##name()

inline std::string self_executable() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, std::size_t(n)) : std::string();
}

/// The providers the tests run over, as libfabric names them.
inline std::vector<std::string> test_providers() { return {"shm", "tcp;ofi_rxm"}; }

/// "tcp;ofi_rxm" -> "tcp_ofi_rxm", for test names.
inline std::string provider_label(std::string p) {
  for (char& c : p)
    if (c == ';') c = '_';
  return p;
}

/// A (provider, ranks) test parameter's name: "tcp_ofi_rxm_4_ranks".
inline std::string provider_and_ranks_name(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return provider_label(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) + "_ranks";
}

/// The ranks' glibc tunables: the caller's, with malloc's large blocks on transparent huge
/// pages. Over tcp;ofi_rxm an endpoint's opening writes ~80 MiB of rxm's bounce-buffer
/// pools: 4 KiB pages fault for ~0.4 s a rank, 2 MiB pages for ~20 ms, about half a tcp
/// test's time (docs/transports.md). A value the caller gave for it is kept.
inline std::string with_huge_pages(const char* tunables) {
  const std::string given = tunables ? tunables : "";
  if (given.find("glibc.malloc.hugetlb") != std::string::npos) return given;
  return given.empty() ? "glibc.malloc.hugetlb=1" : given + ":glibc.malloc.hugetlb=1";
}

/// Runs `scenario` on `ranks` processes over `provider`, with `env` added; with `hosts`,
/// as that many hosts emulated on this machine (bootstrap::launch_options::hosts).
inline bootstrap::launch_result run_ranks(int ranks, const std::string& provider, const std::string& name,
                                          std::vector<std::pair<std::string, std::string>> env = {},
                                          std::chrono::milliseconds limit = std::chrono::seconds(120),
                                          int hosts = 0) {
  bootstrap::launch_options o;
  o.ranks = ranks;
  o.hosts = hosts;
  o.argv = {self_executable()};
  o.env = std::move(env);
  o.env.emplace_back("MIMATRIX_TEST_SCENARIO", name);
  o.env.emplace_back("MIMATRIX_PROVIDER", provider);
  o.env.emplace_back("GLIBC_TUNABLES", with_huge_pages(std::getenv("GLIBC_TUNABLES")));
#ifdef MIMATRIX_TEST_SANITIZER_SUBSET
  // A sanitizer's allocator takes no huge pages: rxm's pools, a quarter the size. Messages
  // of 4 to 16 KiB then go by rendezvous, not eagerly (the default build keeps both sizes).
  if (!std::getenv("FI_OFI_RXM_BUFFER_SIZE")) o.env.emplace_back("FI_OFI_RXM_BUFFER_SIZE", "4096");
#endif
#ifdef MIMATRIX_LSAN_SUPPRESSIONS
  o.env.emplace_back("LSAN_OPTIONS", "suppressions=" MIMATRIX_LSAN_SUPPRESSIONS);
#endif
  o.capture = true;
  o.timeout = limit;
  o.grace = std::chrono::seconds(30);
  return bootstrap::launch_local(o);
}

/// Holds the last rank until every other rank has finished the call before this, counted
/// under `key` in the communicator's store. A rank about to be killed would otherwise die
/// while a slower peer still finishes that call, and the peer's liveness probe may fail
/// it: a test that means to kill between calls must wait (a CI run under ASan did not).
template <class Communicator>
void wait_until_the_others_finished(Communicator& comm, const std::string& key) {
  const auto store = comm.transport().store();
  if (comm.rank() != comm.size() - 1) {
    (void)store->add(key, 1);
    return;
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (store->add(key, 0) < comm.size() - 1 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

/// Every rank's output, for failure messages.
inline std::string all_output(const bootstrap::launch_result& r) {
  std::string s;
  for (std::size_t k = 0; k < r.output.size(); ++k)
    s += "--- rank " + std::to_string(k) + " (status " + std::to_string(k < r.status.size() ? r.status[k] : -1) +
         ")\n" + r.output[k];
  return s;
}

/// Runs `scenario` on `ranks` processes over `provider` and expects each to exit 0 after
/// printing `ok`.
inline void expect_every_rank(int ranks, const std::string& provider, const std::string& scenario,
                              const std::string& ok) {
  const auto r = run_ranks(ranks, provider, scenario, {}, std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << all_output(r);
  for (int rank = 0; rank < ranks; ++rank)
    EXPECT_NE(r.output[std::size_t(rank)].find(ok), std::string::npos) << all_output(r);
}

}  // namespace mimatrix::test

/// The binary's entry point: a scenario when launched as a rank, the tests otherwise.
int main(int argc, char** argv) {
  if (const char* name = std::getenv("MIMATRIX_TEST_SCENARIO")) {
    auto& all = mimatrix::test::scenarios();
    auto it = all.find(name);
    if (it == all.end()) {
      std::fprintf(stderr, "no scenario named '%s'\n", name);
      return 2;
    }
    try {
      return it->second();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "scenario %s threw: %s\n", name, e.what());
      return 1;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
