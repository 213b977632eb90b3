#include "mimatrix/algorithm/uneven_exchange.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "support/grid.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::blocks;
using schedule::collective;
using counts = std::vector<std::size_t>;

/// How a rank lays its blocks out: back to back, with gaps, or in reverse rank order.
enum class placement { packed, gaps, reversed };

blocks place(const counts& c, placement how) {
  if (how == placement::packed) return {c, {}};
  blocks b{c, counts(c.size())};
  std::size_t at = 0;
  for (std::size_t k = 0; k < c.size(); ++k) {
    const std::size_t j = how == placement::reversed ? c.size() - 1 - k : k;
    b.displs[j] = at;
    at += c[j] + (how == placement::gaps ? 2 : 0);
  }
  return b;
}

/// Every rank's view of a v-form: `m[i][j]` elements go from rank i to rank j (rows are
/// alike but for alltoallv: the block rank j holds in the one buffer with a block a rank).
std::vector<schedule::descriptor> views(collective kind, const std::vector<counts>& m, int root, placement how) {
  const int p = static_cast<int>(m.size());
  std::vector<schedule::descriptor> out;
  for (int r = 0; r < p; ++r) {
    auto l = std::make_shared<schedule::uneven>();
    const bool rooted = kind == collective::gather || kind == collective::scatter;
    if (kind == collective::alltoall) {
      counts received(m.size());
      for (std::size_t i = 0; i < m.size(); ++i) received[i] = m[i][std::size_t(r)];
      l->many = place(m[std::size_t(r)], how);
      l->received = place(received, how == placement::reversed ? placement::gaps : how);
    } else if (rooted && r != root) {
      counts own(m.size(), 0);  // off the root a rank knows its own count only
      own[std::size_t(r)] = m[0][std::size_t(r)];
      l->many = {own, {}};
    } else {
      l->many = place(m[0], how);
    }
    out.push_back({kind, p, 0, 4, rooted ? root : 0, std::move(l)});
  }
  return out;
}

std::vector<schedule::schedule> group_of(const std::vector<schedule::descriptor>& v, std::size_t window) {
  std::vector<schedule::schedule> group;
  for (int r = 0; r < static_cast<int>(v.size()); ++r) group.push_back(algorithm::uneven_exchange{window}.build(v[std::size_t(r)], r));
  return group;
}

void expect_proved(collective kind, const std::vector<counts>& m, int root, placement how, std::size_t window) {
  const auto v = views(kind, m, root, how);
  const auto group = group_of(v, window);
  for (bool in_place : {false, true}) {
    if (in_place && kind == collective::alltoall) continue;
    const auto result = schedule::verify(group, {in_place});
    ASSERT_TRUE(result) << schedule::to_string(v[std::size_t(root)]) << " window " << window
                        << (in_place ? " in place: " : ": ") << result.message;
  }
}

/// Counts from 0 to 5, a quarter of them 0.
std::vector<counts> random_counts(int p, std::mt19937& gen, bool matrix) {
  std::uniform_int_distribution<std::size_t> pick(0, 7);
  const auto n = static_cast<std::size_t>(p);
  std::vector<counts> m(n, counts(n));
  for (auto& row : m)
    for (auto& c : row) c = std::min<std::size_t>(pick(gen), 5) * (pick(gen) < 2 ? 0 : 1);
  if (!matrix)
    for (auto& row : m) row = m[0];
  return m;
}

class uneven_exchange_verified : public ::testing::TestWithParam<int> {};

TEST_P(uneven_exchange_verified, every_v_form_every_layout) {
  const int p = GetParam();
  std::mt19937 gen(static_cast<unsigned>(p));
  for (collective kind : {collective::gather, collective::scatter, collective::allgather, collective::reduce_scatter,
                          collective::alltoall})
    for (placement how : {placement::packed, placement::gaps, placement::reversed}) {
      const auto m = random_counts(p, gen, kind == collective::alltoall);
      expect_proved(kind, m, (p - 1) / 2, how, algorithm::uneven_exchange::default_window);
      if (HasFatalFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(p, uneven_exchange_verified, ::testing::ValuesIn(test::verified_world_sizes()));

// Windows of one message, a few, and all; every root; every block empty.
TEST(uneven_exchange, every_window_every_root_and_nothing_to_move) {
  std::mt19937 gen(7);
  for (int p : {1, 2, 3, 5, 8})
    for (std::size_t window : {std::size_t(0), std::size_t(1), std::size_t(3)})
      for (collective kind : {collective::gather, collective::scatter, collective::allgather,
                              collective::reduce_scatter, collective::alltoall}) {
        for (int root = 0; root < p; ++root) {
          expect_proved(kind, random_counts(p, gen, kind == collective::alltoall), root, placement::gaps, window);
          if (HasFatalFailure()) return;
        }
        expect_proved(kind, std::vector<counts>(std::size_t(p), counts(std::size_t(p), 0)), 0, placement::packed,
                      window);
        if (HasFatalFailure()) return;
      }
}

// Every pair that exchanges a block exchanges one message, an empty block too: a count
// its peer names otherwise then shows as a message of the wrong length.
TEST(uneven_exchange, sends_one_message_per_pair_even_of_no_bytes) {
  const std::vector<counts> m{{0, 3, 0}, {2, 0, 0}, {1, 0, 4}};
  const auto group = group_of(views(collective::alltoall, m, 0, placement::packed), 8);
  for (const auto& s : group) {
    int sends = 0, recvs = 0;
    for (const auto& st : s.steps) {
      sends += st.kind == schedule::step_kind::send;
      recvs += st.kind == schedule::step_kind::recv;
    }
    EXPECT_EQ(sends, 2) << schedule::to_text(s);
    EXPECT_EQ(recvs, 2) << schedule::to_text(s);
  }
}

// Two ranks that count a block differently do not pass: the verifier finds the message
// lengths apart, as a transport does.
TEST(uneven_exchange, a_count_named_otherwise_by_the_root_is_not_proved) {
  auto v = views(collective::gather, {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}}, 0, placement::packed);
  auto l = std::make_shared<schedule::uneven>(*v[1].layout);
  l->many.counts[1] = 4;  // rank 1 sends 4, the root expects 2
  v[1].layout = l;
  const auto result = schedule::verify(group_of(v, 8), {false});
  EXPECT_FALSE(result);
  EXPECT_NE(result.message.find("bytes"), std::string::npos) << result.message;
}

TEST(uneven_exchange, refuses_a_call_without_a_layout) {
  EXPECT_THROW((void)algorithm::uneven_exchange{}.build({collective::gather, 2, 4, 4, 0}, 0), error);
  auto l = std::make_shared<schedule::uneven>();
  l->many = {{1, 1}, {}};
  EXPECT_THROW((void)algorithm::uneven_exchange{}.build({collective::allreduce, 2, 0, 4, 0, l}, 0), error);
}

}  // namespace MIMATRIX_UNIT_ID
}  // namespace mimatrix
