// The quick tier's numeric grid: instead of the full cross product of algorithm ×
// collective × dtype × operation × world size × count × root (the *_grid_test.cpp files
// of the long tier), a pairwise covering design: every pair of levels of any two factors
// is run at least once, every call in place and out of place, on the in-process
// transport. The (algorithm, collective, dtype, operation) part of the design is chosen at
// compile time, so only the combinations it runs are instantiated.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/halving_doubling.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/hierarchical.hpp"
#include "mimatrix/algorithm/recursive_doubling.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "support/collective_checks.hpp"
#include "support/covering.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

// ---- the factors -------------------------------------------------------------------------

enum factor : std::size_t { f_algorithm, f_collective, f_dtype, f_op, f_world, f_count, f_root, factors };

template <int A> struct algorithm_case;
template <> struct algorithm_case<0> {
  static topology::ring make(int) { return {}; }
  using algorithm = algorithm::ring;
};
template <> struct algorithm_case<1> {
  static topology::ring make(int) { return {}; }
  using algorithm = algorithm::recursive_doubling;
};
template <> struct algorithm_case<2> {
  static topology::ring make(int) { return {}; }
  using algorithm = algorithm::halving_doubling;
};
template <> struct algorithm_case<3> {
  static topology::bigraph make(int) { return {}; }
  using algorithm = algorithm::hdrm;
};
template <> struct algorithm_case<4> {
  static topology::mesh make(int) { return {}; }
  using algorithm = algorithm::gdraa;
};
template <> struct algorithm_case<5> {
  using nodes = topology::hierarchical<topology::ring, topology::ring>;
  static nodes make(int p) { return nodes(test::hierarchical_node_size(p)); }
  using algorithm = algorithm::default_for<nodes>;
};
template <> struct algorithm_case<6> {
  static topology::ring make(int) { return {}; }
  using algorithm = algorithm::automatic;
};
constexpr const char* algorithm_names[] = {"ring", "recursive_doubling", "halving_doubling", "hdrm_on_bigraph",
                                           "gdraa_on_mesh", "hierarchical", "automatic"};

constexpr const char* collective_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast"};
constexpr bool reduces(int collective) { return collective < 2; }

using dtypes = std::tuple<std::int8_t, std::uint8_t, std::int32_t, std::int64_t, half, bfloat16, float, double>;
static_assert(std::tuple_size_v<dtypes> == std::size(test::all_dtypes));  // and in the same order

template <class T>
using ops = std::tuple<reduce::sum<T>, reduce::prod<T>, reduce::min<T>, reduce::max<T>, reduce::avg<T>>;
constexpr const char* op_names[] = {"sum", "prod", "min", "max", "avg"};

constexpr int world_sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 16};

// Counts around the group size, a prime, and large (65537 elements, one more than 2^16).
constexpr const char* count_names[] = {"zero", "one", "seven", "p_minus_1", "p", "p_plus_1", "thousand", "large"};
std::size_t count_of(int count_class, int p) {
  constexpr std::size_t fixed[] = {0, 1, 7, 0, 0, 0, 1000, 65537};
  if (count_class >= 3 && count_class <= 5) return std::size_t(p + count_class - 4);
  return fixed[count_class];
}

constexpr const char* root_names[] = {"first", "last", "middle"};
int root_of(int root_class, int p) { return root_class == 0 ? 0 : root_class == 1 ? p - 1 : p / 2; }

constexpr std::array<int, factors> levels{7, 4, 8, 5, int(std::size(world_sizes)), 8, 3};

// An operation means something only where the collective reduces; a root only for broadcast.
template <class Row>
constexpr bool relevant(const Row& r, std::size_t f) {
  if (f == f_op) return reduces(r[f_collective]);
  if (f == f_root) return r[f_collective] == 3;
  return true;
}

// ---- compile time: the (algorithm, collective, dtype, operation) rows --------------------

using type_row = std::array<int, 4>;
constexpr auto type_design = test::build_pairs<4, 96>(
    std::array<int, 4>{levels[0], levels[1], levels[2], levels[3]},
    [](const type_row& r, std::size_t f) { return relevant(r, f); });
static_assert(type_design.complete, "96 rows are not enough for the pairwise type design");

using check_fn = void (*)(int p, std::size_t n, int root, std::uint64_t seed);

template <std::size_t K>
void check_type_row(int p, std::size_t n, int root, std::uint64_t seed) {
  constexpr type_row row = type_design.rows[K];
  using c = algorithm_case<row[f_algorithm]>;
  using T = std::tuple_element_t<row[f_dtype], dtypes>;
  using Op = std::tuple_element_t<row[f_op], ops<T>>;
  const auto topo = c::make(p);
  const typename c::algorithm algo{};
  if constexpr (row[f_collective] == 0) test::check_allreduce<Op>(p, n, seed, topo, algo);
  if constexpr (row[f_collective] == 1) test::check_reduce_scatter<Op>(p, n, seed, topo, algo);
  if constexpr (row[f_collective] == 2) test::check_allgather<T>(p, n, seed, topo, algo);
  if constexpr (row[f_collective] == 3) test::check_broadcast<T>(p, n, root, seed, topo, algo);
}

template <std::size_t... K>
constexpr std::array<check_fn, sizeof...(K)> make_checks(std::index_sequence<K...>) {
  return {&check_type_row<K>...};
}
constexpr std::size_t type_rows = type_design.size;
const auto checks = make_checks(std::make_index_sequence<type_rows>{});

// ---- run time: every row, world size, count and root -------------------------------------

using full_row = std::array<int, factors>;

// A collective that reduces nothing runs under operation 0's name, whatever its row says.
type_row normalized(type_row t) {
  if (!reduces(t[f_collective])) t[f_op] = 0;
  return t;
}

// Each compiled type row with every world size, count and root it can take.
template <class Visit>
void for_each_runnable_row(Visit visit) {
  for (std::size_t k = 0; k < type_rows; ++k) {
    const type_row t = normalized(type_design.rows[k]);
    for (int w = 0; w < levels[f_world]; ++w)
      for (int c = 0; c < levels[f_count]; ++c)
        for (int root = 0; root < (t[f_collective] == 3 ? levels[f_root] : 1); ++root)
          visit(full_row{t[0], t[1], t[2], t[3], w, c, root});
  }
}

constexpr std::size_t max_rows = 192;
const auto& design() {
  static const auto d = test::cover_pairs<factors, max_rows>(
      levels, [](auto visit) { for_each_runnable_row(visit); },
      [](const full_row& r, std::size_t f) { return relevant(r, f); });
  return d;
}

std::size_t type_row_of(const full_row& r) {
  for (std::size_t k = 0; k < type_rows; ++k)
    if (normalized(type_design.rows[k]) == type_row{r[0], r[1], r[2], r[3]}) return k;
  return type_rows;
}

std::string row_name(const full_row& r) {
  std::string name = algorithm_names[r[f_algorithm]];
  name += '_';
  name += collective_names[r[f_collective]];
  name += '_';
  name += to_string(test::all_dtypes[r[f_dtype]]);
  if (relevant(r, f_op)) (name += '_') += op_names[r[f_op]];
  (name += "_p") += std::to_string(world_sizes[r[f_world]]);
  (name += "_count_") += count_names[r[f_count]];
  if (relevant(r, f_root)) (name += "_root_") += root_names[r[f_root]];
  return name;
}

class pairwise : public ::testing::TestWithParam<full_row> {};

TEST_P(pairwise, matches_the_reference_in_and_out_of_place) {
  const full_row r = GetParam();
  const int p = world_sizes[r[f_world]];
  const std::size_t k = type_row_of(r);
  ASSERT_LT(k, type_rows);
  checks[k](p, count_of(r[f_count], p), root_of(r[f_root], p), test::run_seed() + std::size_t(r[f_count]));
}

INSTANTIATE_TEST_SUITE_P(quick, pairwise, ::testing::ValuesIn(design().begin(), design().end()),
                         [](const auto& info) { return row_name(info.param); });

// The design itself: every pair that some runnable row holds is held by a row of the
// design, checked by brute force rather than by the generator's own bookkeeping.
TEST(pairwise_design, covers_every_pair_of_every_two_factors) {
  ASSERT_TRUE(design().complete) << max_rows << " rows are not enough";
  using pair_key = std::tuple<std::size_t, int, std::size_t, int>;
  auto pairs_of = [](const full_row& r, std::set<pair_key>& into) {
    for (std::size_t i = 0; i < factors; ++i)
      for (std::size_t j = i + 1; j < factors; ++j)
        if (relevant(r, i) && relevant(r, j)) into.emplace(i, r[i], j, r[j]);
  };
  std::set<pair_key> needed, covered;
  for (int a = 0; a < levels[f_algorithm]; ++a)  // every type combination, not only the compiled ones
    for (int c = 0; c < levels[f_collective]; ++c)
      for (int d = 0; d < levels[f_dtype]; ++d)
        for (int o = 0; o < (reduces(c) ? levels[f_op] : 1); ++o)
          for (int w = 0; w < levels[f_world]; ++w)
            for (int n = 0; n < levels[f_count]; ++n)
              for (int root = 0; root < (c == 3 ? levels[f_root] : 1); ++root) pairs_of({a, c, d, o, w, n, root}, needed);
  for (const full_row& r : design()) pairs_of(r, covered);
  for (const pair_key& k : needed)
    EXPECT_TRUE(covered.count(k)) << "factor " << std::get<0>(k) << " = " << std::get<1>(k) << " with factor "
                                  << std::get<2>(k) << " = " << std::get<3>(k) << " is never run";
  EXPECT_EQ(needed, covered);
  std::printf("pairwise design: %zu compiled type rows, %zu test rows, %zu pairs\n", type_rows, design().size,
              needed.size());
}

}  // namespace
}  // namespace mimatrix
