// The loops the CUDA kernels run (reduce/grid_loops.hpp), run here on the host as a grid
// runs them: every thread of grids of 1, 5 and 256 threads, one after another. For every
// dtype x op, size, alignment (packed and element-wise) and aliasing, the results equal
// cpu.hpp's bit for bit, and every element is written. On a GPU, cuda_test.cu checks the
// launches themselves.
#include "mimatrix/reduce/grid_loops.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "mimatrix/reduce/cpu.hpp"
#include "reference.hpp"

namespace MIMATRIX_UNIT_ID {

namespace reduce = mimatrix::reduce;
namespace grid = mimatrix::reduce::grid;
using reduce::test::bits_of;
using reduce::test::same_result;

constexpr std::size_t grids[] = {1, 5, 256};

/// `n` elements starting `offset` elements past a pack boundary: 0 lets the packed loop
/// run, 1 does not.
template <class T>
class array {
 public:
  array(std::size_t n, std::size_t offset)
      : packs_(std::make_unique<grid::pack<T>[]>(n / grid::pack<T>::lanes + 2)),
        data_(reinterpret_cast<T*>(packs_.get()) + offset), n_(n) {}
  T* data() { return data_; }
  void assign(const std::vector<T>& v) { std::copy(v.begin(), v.end(), data_); }
  std::vector<T> values() const { return {data_, data_ + n_}; }

 private:
  std::unique_ptr<grid::pack<T>[]> packs_;
  T* data_;
  std::size_t n_;
};

/// Runs `thread(first, stride)` for every thread of a grid of `threads`.
template <class Thread>
void run_grid(std::size_t threads, Thread&& thread) {
  for (std::size_t first = 0; first < threads; ++first) thread(first, threads);
}

template <class T>
::testing::AssertionResult equal(const std::vector<T>& got, const std::vector<T>& expected) {
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (!same_result(got[i], expected[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << +bits_of(got[i]) << " where the CPU gives "
                                           << +bits_of(expected[i]);
  return ::testing::AssertionSuccess();
}

template <class Op>
class grid_loops : public ::testing::Test {};
using all_operations = ::testing::Types<MIMATRIX_TEST_ALL_OPERATIONS>;
TYPED_TEST_SUITE(grid_loops, all_operations);

TYPED_TEST(grid_loops, combine_equals_cpu_packed_or_not_and_in_place) {
  using T = typename TypeParam::value_type;
  const TypeParam op;
  std::mt19937_64 rng(1);
  for (std::size_t n : reduce::test::sizes)
    for (std::size_t offset : {0, 1})
      for (bool packed : {true, false})
        for (int mode = 0; mode < 3; ++mode)  // separate dst, dst == a, dst == b
          for (std::size_t threads : grids) {
            if (packed && offset) continue;  // the launch takes the packed loop only where aligned
            const std::vector<T> a = reduce::test::random_elements<T>(rng, n, false);
            const std::vector<T> b = reduce::test::random_elements<T>(rng, n, false);
            std::vector<T> expected(n);
            reduce::cpu::combine(op, expected.data(), a.data(), b.data(), n);
            array<T> pa(n, offset), pb(n, offset), pd(n, offset);
            pa.assign(a);
            pb.assign(b);
            T* const dst = mode == 1 ? pa.data() : mode == 2 ? pb.data() : pd.data();
            ASSERT_EQ(grid::pack_aligned<T>(dst) && grid::pack_aligned<T>(pa.data()), offset == 0);
            run_grid(threads, [&](std::size_t first, std::size_t stride) {
              if (packed) grid::combine<true>(op, dst, pa.data(), pb.data(), n, first, stride);
              else grid::combine<false>(op, dst, pa.data(), pb.data(), n, first, stride);
            });
            const std::vector<T> got = mode == 1 ? pa.values() : mode == 2 ? pb.values() : pd.values();
            EXPECT_TRUE(equal(got, expected)) << "n " << n << ", offset " << offset << ", packed " << packed
                                              << ", mode " << mode << ", " << threads << " threads";
          }
}

// GDRAA's one pass: 1 to 8 sources, each its own destination (in place) or apart, and
// fewer destinations than sources; every destination is the fold of the sources in order.
TYPED_TEST(grid_loops, reduce_many_equals_cpus_fold_into_every_destination) {
  using T = typename TypeParam::value_type;
  const TypeParam op;
  std::mt19937_64 rng(2);
  struct shape {
    int sources, destinations;
  };
  for (std::size_t n : reduce::test::sizes)
    for (shape s : {shape{1, 1}, shape{2, 2}, shape{3, 3}, shape{8, 8}, shape{3, 1}})
      for (std::size_t offset : {0, 1})
        for (bool packed : {true, false})
          for (bool in_place : {true, false})
            for (std::size_t threads : grids) {
              if (packed && offset) continue;
              std::vector<std::vector<T>> inputs;
              std::vector<T> expected(n);
              for (int r = 0; r < s.sources; ++r) {
                inputs.push_back(reduce::test::random_elements<T>(rng, n, false));
                if (r == 0) expected = inputs[0];
                else reduce::cpu::combine(op, expected.data(), expected.data(), inputs.back().data(), n);
              }
              reduce::cpu::finalize(op, expected.data(), n, s.sources);
              std::vector<std::unique_ptr<array<T>>> sources, apart;
              grid::many_operands<T> m;
              m.sources = s.sources;
              m.destinations = s.destinations;
              for (int r = 0; r < s.sources; ++r) {
                sources.push_back(std::make_unique<array<T>>(n, offset));
                sources.back()->assign(inputs[std::size_t(r)]);
                m.src[r] = sources.back()->data();
              }
              for (int d = 0; d < s.destinations; ++d) {
                apart.push_back(std::make_unique<array<T>>(n, offset));
                apart.back()->assign(std::vector<T>(n, T{}));
                m.dst[d] = in_place ? sources[std::size_t(d)]->data() : apart.back()->data();
              }
              ASSERT_EQ(grid::pack_aligned(m), offset == 0);
              run_grid(threads, [&](std::size_t first, std::size_t stride) {
                if (packed) grid::reduce_many<true>(op, m, n, s.sources, first, stride);
                else grid::reduce_many<false>(op, m, n, s.sources, first, stride);
              });
              for (int d = 0; d < s.destinations; ++d) {
                const std::vector<T> got(m.dst[d], m.dst[d] + n);
                EXPECT_TRUE(equal(got, expected))
                    << "n " << n << ", " << s.sources << " sources, " << s.destinations << " destinations, offset "
                    << offset << ", packed " << packed << ", in place " << in_place << ", " << threads
                    << " threads, destination " << d;
              }
            }
}

TYPED_TEST(grid_loops, finalize_equals_cpu) {
  using T = typename TypeParam::value_type;
  const TypeParam op;
  std::mt19937_64 rng(3);
  for (std::size_t n : reduce::test::sizes)
    for (int ranks : {1, 3, 200, 256})
      for (std::size_t threads : grids) {
        std::vector<T> data = reduce::test::random_elements<T>(rng, n, false);
        std::vector<T> expected = data;
        reduce::cpu::finalize(op, expected.data(), n, ranks);
        run_grid(threads, [&](std::size_t first, std::size_t stride) {
          grid::finalize(op, data.data(), n, ranks, first, stride);
        });
        EXPECT_TRUE(equal(data, expected)) << "n " << n << ", ranks " << ranks << ", " << threads << " threads";
      }
}

TEST(grid_loops_shape, a_packed_grid_needs_a_thread_per_pack_and_per_element_left) {
  EXPECT_EQ(grid::packed_items<float>(0), 0u);
  EXPECT_EQ(grid::packed_items<float>(4), 1u);
  EXPECT_EQ(grid::packed_items<float>(7), 1u + 3u);
  EXPECT_EQ(grid::packed_items<std::int8_t>(33), 2u + 1u);
  EXPECT_EQ(grid::packed_items<double>(5), 2u + 1u);
}

}  // namespace
