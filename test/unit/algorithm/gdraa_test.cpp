// GDRAA schedules proved by the verifier for p = 1..64, in place and out of place, those
// for device memory every rank reaches too, and the shape the paper promises: two
// synchronizations, no send or recv.
#include "mimatrix/algorithm/gdraa.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"
#include "support/grid.hpp"
#include "support/verify_checks.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;
using schedule::step_kind;

std::vector<schedule::schedule> build_group(const schedule::descriptor& d) {
  return test::build_group(algorithm::gdraa{}, topology::mesh{}, d);
}

/// GDRAA's schedules for device memory that every rank reaches, as the checks build them.
struct gdraa_on_shared_device {
  static constexpr std::string_view name = "gdraa (build_on_shared_device)";
  schedule::schedule build(const topology::mesh& t, const schedule::descriptor& d, int r) const {
    return algorithm::gdraa{}.build_on_shared_device(t, d, r);
  }
};

void expect_proved(const schedule::descriptor& d) {
  test::expect_proved(algorithm::gdraa{}, topology::mesh{}, d);
  test::expect_proved(gdraa_on_shared_device{}, topology::mesh{}, d);
}

class gdraa_verified : public ::testing::TestWithParam<int> {};

TEST_P(gdraa_verified, every_collective_and_count) {
  const int p = GetParam();
  const auto sp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts{0, 1, 2, 3, sp - 1, sp, sp + 1, 2 * sp + 3};
  if (p <= 16) counts.push_back(257);
  for (std::size_t elem_size : {std::size_t(4), std::size_t(2)})
    for (collective kind :
         {collective::allreduce, collective::reduce_scatter, collective::allgather, collective::broadcast})
      for (std::size_t n : counts) {
        if (kind == collective::broadcast)
          for (int root : {0, p / 2, p - 1}) expect_proved({kind, p, n, elem_size, root});
        else
          expect_proved({kind, p, n, elem_size, 0});
        if (HasFatalFailure()) return;
      }
}

INSTANTIATE_TEST_SUITE_P(p, gdraa_verified, ::testing::ValuesIn(test::verified_world_sizes()));

struct shape {
  int waits = 0, writes = 0, messages = 0;
};
shape shape_of(const schedule::schedule& s) {
  shape k;
  for (const auto& st : s.steps) {
    k.waits += st.kind == step_kind::wait;
    k.writes += st.kind == step_kind::write;
    k.messages += schedule::is_communication(st.kind);
  }
  return k;
}

// The paper's claim: exactly two synchronizations a call, whatever p, and no handshake.
TEST(gdraa, allreduce_synchronizes_exactly_twice_with_writes_only) {
  for (int p : {2, 3, 8, 33})
    for (int r : {0, p - 1}) {
      const auto s = algorithm::gdraa{}.build({}, {collective::allreduce, p, 1000, 4, 0}, r);
      const auto k = shape_of(s);
      EXPECT_EQ(k.waits, 2) << schedule::to_text(s);
      EXPECT_EQ(k.writes, 2 * (p - 1));
      EXPECT_EQ(k.messages, 0);
      for (const auto& st : s.steps)
        if (st.kind == step_kind::wait) {
          EXPECT_EQ(st.count, static_cast<std::uint32_t>(p - 1));
        }
    }
}

TEST(gdraa, reduce_is_one_fused_pass_over_all_slots) {
  const int p = 5;
  const auto s = algorithm::gdraa{}.build({}, {collective::allreduce, p, 103, 4, 0}, 2);
  int fused = 0, binary = 0;
  for (const auto& st : s.steps) {
    fused += st.kind == step_kind::reduce_slots;
    binary += st.kind == step_kind::reduce || st.kind == step_kind::recv_reduce;
    if (st.kind == step_kind::reduce_slots) {
      EXPECT_EQ(st.src.bytes, static_cast<std::size_t>(p - 1) * st.dst.bytes);
    }
  }
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(binary, 0);
}

TEST(gdraa, the_other_collectives_synchronize_once) {
  for (int p : {2, 7}) {
    EXPECT_EQ(shape_of(algorithm::gdraa{}.build({}, {collective::reduce_scatter, p, 10, 4, 0}, 1)).waits, 1);
    EXPECT_EQ(shape_of(algorithm::gdraa{}.build({}, {collective::allgather, p, 10, 4, 0}, 1)).waits, 1);
    EXPECT_EQ(shape_of(algorithm::gdraa{}.build({}, {collective::broadcast, p, 10, 4, 0}, 1)).waits, 1);
    EXPECT_EQ(shape_of(algorithm::gdraa{}.build({}, {collective::broadcast, p, 10, 4, 0}, 0)).writes, p - 1);
  }
}

// On device memory that every rank reaches each rank runs its part as one pass over the
// others' memory, so every collective needs both synchronizations: sync 1 (where a rank's
// buffers lie) before the pass, sync 2 (the pass has run) after it. The reduce-scatter's,
// allgather's and broadcast's gain a notify to every peer; the allreduce is build()'s.
TEST(gdraa, on_shared_device_memory_every_collective_synchronizes_twice) {
  const algorithm::gdraa g;
  for (int p : {2, 7})
    for (int r : {0, 1, p - 1}) {
      for (collective kind : {collective::reduce_scatter, collective::allgather}) {
        const auto s = g.build_on_shared_device({}, {kind, p, 10, 4, 0}, r);
        std::vector<std::uint32_t> waited;
        int notifies = 0;
        for (const auto& st : s.steps) {
          if (st.kind == step_kind::wait) waited.push_back(st.tag);
          notifies += st.kind == step_kind::notify;
        }
        EXPECT_EQ(waited, (std::vector<std::uint32_t>{algorithm::gdraa::sync_1, algorithm::gdraa::sync_2}))
            << schedule::to_text(s);
        EXPECT_EQ(notifies, p - 1);
        EXPECT_EQ(shape_of(s).writes, p - 1);
        EXPECT_EQ(shape_of(s).messages, 0);
      }
      const schedule::descriptor all{collective::allreduce, p, 10, 4, 0};
      EXPECT_EQ(schedule::to_text(g.build_on_shared_device({}, all, r)), schedule::to_text(g.build({}, all, r)));
      // In a broadcast every rank notifies every other (sync 1), so that each sees every
      // peer's root; the root waits for them, copies, then writes each its output (sync 2);
      // the others wait for sync 1 and for that one write.
      const auto cast = g.build_on_shared_device({}, {collective::broadcast, p, 10, 4, 1}, r);
      std::vector<std::pair<std::uint32_t, std::uint32_t>> waited;  // tag, count
      int writes = 0, notifies = 0;
      for (const auto& st : cast.steps) {
        if (st.kind == step_kind::wait) waited.emplace_back(st.tag, st.count);
        writes += st.kind == step_kind::write && st.tag == algorithm::gdraa::sync_2;
        notifies += st.kind == step_kind::notify && st.tag == algorithm::gdraa::sync_1;
      }
      std::vector<std::pair<std::uint32_t, std::uint32_t>> want{{algorithm::gdraa::sync_1, std::uint32_t(p - 1)}};
      if (r != 1) want.emplace_back(algorithm::gdraa::sync_2, 1u);
      EXPECT_EQ(waited, want) << schedule::to_text(cast);
      EXPECT_EQ(writes, r == 1 ? p - 1 : 0);
      EXPECT_EQ(notifies, p - 1);
    }
  const schedule::descriptor one{collective::allgather, 1, 10, 4, 0};
  EXPECT_EQ(schedule::to_text(g.build_on_shared_device({}, one, 0)), schedule::to_text(g.build({}, one, 0)));
}

TEST(gdraa, is_the_default_on_a_mesh) {
  static_assert(std::is_same_v<algorithm::default_for<topology::mesh>, algorithm::gdraa>);
  static_assert(algorithm::builds_for<algorithm::gdraa, topology::mesh>);
}

// The verifier is not vacuous on GDRAA: phase B without waiting for the fused reduction
// would ship a partial sum; a sync-1 wait counting one flag too few lets the reduction
// read a slot before it lands.
TEST(gdraa, the_verifier_catches_a_dropped_dependency_and_a_short_wait) {
  const schedule::descriptor d{collective::allreduce, 4, 40, 4, 0};
  auto group = build_group(d);
  ASSERT_TRUE(schedule::verify(group, {true}));
  // Re-runs `s` through a builder, `edit` changing each step and its deps on the way.
  const auto rebuilt = [&](const schedule::schedule& s, auto&& edit) {
    schedule::builder b(s.desc, s.rank, s.algorithm);
    (void)b.scratch(s.scratch_bytes);
    for (schedule::step_id i = 0; i < s.steps.size(); ++i) {
      auto st = s.steps[i];
      auto deps = s.deps(i);
      edit(st, deps);
      b.add(st, deps);
    }
    return std::move(b).build();
  };
  auto broken = group;
  broken[1] = rebuilt(group[1], [](schedule::step& st, std::span<const schedule::step_id>& deps) {
    if (st.kind == step_kind::write && st.tag == algorithm::gdraa::sync_2) deps = {};
  });
  auto result = schedule::verify(broken, {true});
  EXPECT_FALSE(result);
  EXPECT_NE(result.message.find("rank 1"), std::string::npos) << result.message;

  broken = group;
  broken[2] = rebuilt(group[2], [](schedule::step& st, std::span<const schedule::step_id>&) {
    if (st.kind == step_kind::wait && st.tag == algorithm::gdraa::sync_1) st.count = 2;
  });
  result = schedule::verify(broken);
  EXPECT_FALSE(result);
  EXPECT_NE(result.message.find("waits for 2 flags but 3 writes/notifies raise tag 0 at rank 2"), std::string::npos)
      << result.message;
}

}  // namespace
}  // namespace mimatrix
