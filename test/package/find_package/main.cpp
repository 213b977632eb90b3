// A user's program against an installed mimatrix: reduce two buffers, check every element.
#include <mimatrix/mimatrix.hpp>

#include <cstdio>
#include <vector>

static_assert(MIMATRIX_VERSION_MAJOR == EXPECTED_MAJOR && MIMATRIX_VERSION_MINOR == EXPECTED_MINOR &&
                  MIMATRIX_VERSION_PATCH == EXPECTED_PATCH,
              "version.hpp and the installed CMake package disagree on the version");

int main() {
  std::printf("mimatrix %d.%d.%d (MIMATRIX_VERSION %d), found with find_package\n",
              MIMATRIX_VERSION_MAJOR, MIMATRIX_VERSION_MINOR, MIMATRIX_VERSION_PATCH,
              MIMATRIX_VERSION);
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
