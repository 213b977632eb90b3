// A user's program against an installed mimatrix: reduce two buffers, check every element,
// then allreduce over four in-process ranks, typed and runtime-typed, and check the sums.
// Linked with mimatrix::compiled (EXPECT_SEPARATE_COMPILATION), the collectives come from
// the library the package builds in this project.
//
// CONSUMER_PROGRAM (CMakeLists.txt) makes less of it where a test is about what is found
// and linked, not about the collectives (find_package already builds and runs them):
// 1 the umbrella header and the reduction; 2 the reduction alone, and, linking
// mimatrix::fabric, a fabric header and a call into libfabric (which the program links
// itself, through the package's libfabric::libfabric: mimatrix loads it only for its own
// endpoints).
#if CONSUMER_PROGRAM < 2
#include <mimatrix/mimatrix.hpp>
#else
#include <mimatrix/reduce/cpu.hpp>
#include <mimatrix/version.hpp>
#endif
#if defined(CONSUMER_LINKS_FABRIC)
#include <mimatrix/transport/fabric/error.hpp>
static_assert(MIMATRIX_WITH_FABRIC, "mimatrix::fabric must define MIMATRIX_WITH_FABRIC");
#endif

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <vector>

static_assert(MIMATRIX_VERSION_MAJOR == EXPECTED_MAJOR && MIMATRIX_VERSION_MINOR == EXPECTED_MINOR &&
                  MIMATRIX_VERSION_PATCH == EXPECTED_PATCH,
              "version.hpp and the installed CMake package disagree on the version");
#if defined(EXPECT_SEPARATE_COMPILATION)
static_assert(!MIMATRIX_HEADER_ONLY, "linking mimatrix::compiled must define MIMATRIX_SEPARATE_COMPILATION");
#endif

namespace {

int check_combine() {
  constexpr int n = 131;  // two full blocks and a tail
  std::vector<int> a(n), b(n), out(n, -1);
  for (int i = 0; i < n; ++i) {
    a[i] = i;
    b[i] = 1000 - 3 * i;
  }
  mimatrix::reduce::cpu::combine(mimatrix::reduce::sum<int>{}, out.data(), a.data(), b.data(), n);
  for (int i = 0; i < n; ++i) {
    if (out[i] != 1000 - 2 * i) {
      std::fprintf(stderr, "sum wrong at %d: %d, expected %d\n", i, out[i], 1000 - 2 * i);
      return 1;
    }
  }
  std::printf("sum<int> of %d elements: ok\n", n);
  return 0;
}

#if CONSUMER_PROGRAM == 0
/// Rank r contributes r + 1 + i at element i: the sum over 4 ranks is 10 + 4i.
int check_allreduce() {
  constexpr int ranks = 4, n = 1001;
  std::atomic<int> wrong{0};
  mimatrix::transport::run_inproc(ranks, [&](int r, mimatrix::transport::inproc::world& w) {
    mimatrix::communicator<mimatrix::transport::inproc> comm(w, r);
    std::vector<std::int32_t> typed(n), runtime(n);
    for (int i = 0; i < n; ++i) typed[i] = runtime[i] = r + 1 + i;
    mimatrix::allreduce<mimatrix::transport::inproc, mimatrix::topology::ring, mimatrix::reduce::sum<std::int32_t>>
        sum(comm);
    sum(typed);
    mimatrix::collectives<mimatrix::transport::inproc> coll(comm);
    coll.allreduce(runtime.data(), runtime.data(), n, mimatrix::dtype::int32, mimatrix::reduce::op_kind::sum).wait();
    for (int i = 0; i < n; ++i)
      if (typed[i] != 10 + 4 * i || runtime[i] != 10 + 4 * i) {
        std::fprintf(stderr, "rank %d: allreduce wrong at %d: typed %d, runtime %d, expected %d\n", r, i, typed[i],
                     runtime[i], 10 + 4 * i);
        ++wrong;
        return;
      }
  });
  if (wrong) return 1;
  std::printf("allreduce of %d ints on %d ranks (%s): ok\n", n, ranks,
              MIMATRIX_HEADER_ONLY ? "header-only" : "mimatrix::compiled");
  return 0;
}
#endif

#if defined(CONSUMER_LINKS_FABRIC)
int check_fabric() {
  const unsigned version = fi_version();  // libfabric's, through libfabric::libfabric
  if (FI_MAJOR(version) < 1) {
    std::fprintf(stderr, "libfabric reports version %u.%u\n", FI_MAJOR(version), FI_MINOR(version));
    return 1;
  }
  std::printf("libfabric %u.%u linked through libfabric::libfabric: ok\n", FI_MAJOR(version), FI_MINOR(version));
  return 0;
}
#endif

}  // namespace

int main() {
  std::printf("mimatrix %d.%d.%d (MIMATRIX_VERSION %d), found with find_package\n",
              MIMATRIX_VERSION_MAJOR, MIMATRIX_VERSION_MINOR, MIMATRIX_VERSION_PATCH,
              MIMATRIX_VERSION);
  int failed = check_combine();
#if CONSUMER_PROGRAM == 0
  failed = failed || check_allreduce();
#endif
#if defined(CONSUMER_LINKS_FABRIC)
  failed = failed || check_fabric();
#endif
  return failed;
}
