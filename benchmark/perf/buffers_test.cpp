// collective_buffers (buffers.hpp) against a reference of each collective run over the
// ranks' buffers in one process: the right result checks as 0 wrong, out of place and in
// place, and a result with a block from the wrong rank or place (or a reduction that
// misses a rank) is counted wrong, at every count a sweep makes.
#include "buffers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace mimatrix::perf {
namespace {

/// The ranks' inputs as the call found them, then each rank's output written the way the
/// collective writes it; `wrong` takes another rank's block (or leaves one rank out).
void reference(collective c, std::vector<collective_buffers>& ranks, shape const& s, dtype t, int root, bool wrong) {
  int const n = static_cast<int>(ranks.size());
  std::size_t const block = s.count * size_of(t);
  std::size_t const es = size_of(t);
  std::vector<std::vector<std::byte>> in(ranks.size());
  for (int r = 0; r < n; ++r) {
    std::size_t const sent = is_v_form(c) ? ranks[r].layout().send.total() : s.send_count;
    in[r].assign(ranks[r].input(), ranks[r].input() + sent * es);
  }
  auto const copy = [&](std::byte* to, int from, std::size_t at) {
    if (block) std::memcpy(to, in[from].data() + at * block, block);
  };
  // A v-form's block: `count` elements from `from`'s input at element `at`, as many as it holds.
  auto const copy_v = [&](std::byte* to, int from, std::size_t at, std::size_t count) {
    std::size_t const held = in[from].size() / es;
    count = at < held ? std::min(count, held - at) : 0;
    if (count) std::memcpy(to, in[from].data() + at * es, count * es);
  };
  auto const other = [&](int r) { return wrong ? (r + 1) % n : r; };
  for (int r = 0; r < n; ++r) {
    std::byte* out = ranks[r].output();
    switch (c) {
      case collective::allreduce:
      case collective::reduce:
      case collective::reduce_scatter: {
        if (c == collective::reduce && r != root) break;
        std::size_t const at = c == collective::reduce_scatter ? s.count * std::size_t(r) : 0;
        visit(t, [&]<class T>(type_tag<T>) {
          for (std::size_t i = 0; i < s.count; ++i) {
            T acc = reinterpret_cast<T const*>(in[0].data())[at + i];
            for (int j = 1; j < n - (wrong ? 1 : 0); ++j)
              acc = detail::combine(redop::sum, acc, reinterpret_cast<T const*>(in[j].data())[at + i]);
            reinterpret_cast<T*>(out)[i] = acc;
          }
        });
        break;
      }
      case collective::allgather:
      case collective::gather:
        if (c == collective::gather && r != root) break;
        for (int j = 0; j < n; ++j) copy(out + std::size_t(j) * block, other(j), 0);
        break;
      case collective::broadcast: copy(out, wrong ? (root + 1) % n : root, 0); break;
      case collective::scatter: copy(out, root, std::size_t(other(r))); break;
      case collective::alltoall:
        for (int j = 0; j < n; ++j) copy(out + std::size_t(j) * block, j, std::size_t(other(r)));
        break;
      case collective::allgatherv: {
        blocks const& got = ranks[r].layout().recv;
        for (std::size_t j = 0; j < got.counts.size(); ++j)
          copy_v(out + got.displs[j] * es, other(int(j)), 0, got.counts[j]);
        break;
      }
      case collective::alltoallv: {
        blocks const& got = ranks[r].layout().recv;
        for (std::size_t j = 0; j < got.counts.size(); ++j) {
          auto const from = static_cast<std::size_t>(other(r));  // block `from` of rank j's input
          copy_v(out + got.displs[j] * es, int(j), ranks[j].layout().send.displs[from], got.counts[j]);
        }
        break;
      }
    }
  }
}

std::size_t wrong_after(collective c, int n, std::size_t bytes, dtype t, int root, bool in_place, bool wrong,
                        double skew = 0) {
  options o;
  o.type = t;
  o.root = root;
  o.skew = skew;
  std::vector<collective_buffers> ranks;
  for (int r = 0; r < n; ++r) ranks.emplace_back(c, o, r, n);
  shape const s = shape_of(c, bytes, size_of(t), n);
  for (auto& b : ranks) b.prepare(s, in_place);
  reference(c, ranks, s, t, root, wrong);
  std::size_t w = 0;
  for (auto& b : ranks) w += b.check();
  return w;
}

TEST(collective_buffers, right_results_check_and_misplaced_blocks_count) {
  for (collective c : {collective::allreduce, collective::reduce_scatter, collective::allgather, collective::broadcast,
                       collective::reduce, collective::gather, collective::scatter, collective::alltoall})
    for (int n : {1, 2, 3, 5})
      for (std::size_t bytes : {0ul, 8ul, 64ul, 4096ul, 4100ul})  // blocks of 0 to 1025 elements
        for (dtype t : {dtype::float32, dtype::int8, dtype::bfloat16})
          for (int root : {0, n - 1})
            for (bool in_place : {false, true}) {
              if (in_place && !has_in_place(c)) continue;
              std::string const where = std::string(name(c)) + " of " + std::to_string(n) + " ranks, " +
                                        std::to_string(bytes) + " B of " + std::string(name(t)) + ", root " +
                                        std::to_string(root) + (in_place ? ", in place" : "");
              EXPECT_EQ(wrong_after(c, n, bytes, t, root, in_place, false), 0u) << where;
              if (n > 1 && shape_of(c, bytes, size_of(t), n).count > 0) {
                EXPECT_GT(wrong_after(c, n, bytes, t, root, in_place, true), 0u) << where;
              }
            }
}

// The v-forms at even and uneven splits (--skew): a block from the wrong rank, of another
// rank's size or at another place counts.
TEST(collective_buffers, v_forms_check_and_misplaced_blocks_count) {
  for (collective c : {collective::allgatherv, collective::alltoallv})
    for (int n : {1, 2, 3, 5})
      for (std::size_t bytes : {0ul, 8ul, 64ul, 4096ul, 4100ul})
        for (double skew : {0.0, 1.0, 3.5})
          for (dtype t : {dtype::float32, dtype::int8})
            for (bool in_place : {false, true}) {
              if (in_place && !has_in_place(c)) continue;
              std::string const where = std::string(name(c)) + " of " + std::to_string(n) + " ranks, " +
                                        std::to_string(bytes) + " B of " + std::string(name(t)) + ", skew " +
                                        std::to_string(skew) + (in_place ? ", in place" : "");
              EXPECT_EQ(wrong_after(c, n, bytes, t, 0, in_place, false, skew), 0u) << where;
              if (n > 1 && shape_of(c, bytes, size_of(t), n).count > 0) {
                EXPECT_GT(wrong_after(c, n, bytes, t, 0, in_place, true, skew), 0u) << where;
              }
            }
}

// Each rank's splits sum to the size column's elements, skew 0 splits evenly, and what rank
// i sends rank j is what j expects from i.
TEST(collective_buffers, v_form_splits) {
  EXPECT_EQ(split(12, 3, 0, 0), (std::vector<std::size_t>{4, 4, 4}));
  EXPECT_EQ(split(8, 2, 0, 1), (std::vector<std::size_t>{3, 5}));  // weights 1 and 1.75
  for (int n : {1, 2, 3, 7})
    for (std::size_t total : {0ul, 1ul, 5ul, 1000ul, 1ul << 22})
      for (double skew : {0.0, 1.0, 4.0}) {
        for (int i = 0; i < n; ++i) {
          block_layout const a = layout_of(collective::alltoallv, total, n, i, skew);
          EXPECT_EQ(a.send.total(), total);
          for (int j = 0; j < n; ++j)
            EXPECT_EQ(a.send.counts[std::size_t(j)],
                      layout_of(collective::alltoallv, total, n, j, skew).recv.counts[std::size_t(i)]);
          block_layout const g = layout_of(collective::allgatherv, total, n, i, skew);
          EXPECT_EQ(g.recv.total(), total);
          EXPECT_EQ(g.send.total(), g.recv.counts[std::size_t(i)]);
        }
      }
  EXPECT_TRUE(is_v_form(collective::alltoallv) && is_v_form(collective::allgatherv) && !is_v_form(collective::alltoall));
  EXPECT_FALSE(has_in_place(collective::alltoallv));
  EXPECT_TRUE(has_in_place(collective::allgatherv));
}

TEST(collective_buffers, nccl_tests_sizes_and_bus_factors) {
  shape const g = shape_of(collective::gather, 96, 4, 3);  // the gathered buffer, 8 floats a rank
  EXPECT_EQ(g.count, 8u);
  EXPECT_EQ(g.send_count, 8u);
  EXPECT_EQ(g.recv_count, 24u);
  shape const sc = shape_of(collective::scatter, 96, 4, 3);  // the root's whole input
  EXPECT_EQ(sc.send_count, 24u);
  EXPECT_EQ(sc.recv_count, 8u);
  shape const a = shape_of(collective::alltoall, 100, 4, 3);  // whole blocks only: 96 B
  EXPECT_EQ(a.bytes, 96u);
  EXPECT_EQ(a.send_count, 24u);
  EXPECT_EQ(a.recv_count, 24u);
  shape const r = shape_of(collective::reduce, 96, 4, 3);  // the message
  EXPECT_EQ(r.count, 24u);
  EXPECT_EQ(bus_factor(collective::reduce, 4), 1.0);
  EXPECT_EQ(bus_factor(collective::gather, 4), 0.75);
  EXPECT_EQ(bus_factor(collective::scatter, 4), 0.75);
  EXPECT_EQ(bus_factor(collective::alltoall, 4), 0.75);
  EXPECT_FALSE(has_in_place(collective::alltoall));
  EXPECT_TRUE(has_root(collective::gather) && has_root(collective::scatter) && has_root(collective::reduce));
}

}  // namespace
}  // namespace mimatrix::perf
