// Tests for composing schedules: toy sub-schedules embedded into a group's schedules and
// proved by the verifier, and the mistakes composition must not hide.
#include "mimatrix/schedule/compose.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/schedule/verify.hpp"

namespace MIMATRIX_UNIT_ID {

using namespace mimatrix::schedule;
using mimatrix::errc;
using mimatrix::error;

constexpr std::size_t es = 4;  // elem_size in every test

std::vector<step_id> deps_of(const schedule& s, step_id i) {
  const auto d = s.deps(i);
  return {d.begin(), d.end()};
}

/// A two-rank allreduce of `count` elements on sub-ranks {0, 1}: swap inputs into scratch,
/// copy input to output after the send, reduce, and finalize when asked.
schedule pair_allreduce(int sub_rank, std::size_t count, std::uint32_t tag = 0) {
  builder b({collective::allreduce, 2, count, es, 0}, sub_rank, "pair");
  const auto bytes = count * es;
  const auto slot = b.scratch(bytes);
  const auto sent = b.send(1 - sub_rank, tag, {buffer::input, 0, bytes});
  const auto got = b.recv(1 - sub_rank, tag, slot);
  const auto copied = b.copy({buffer::input, 0, bytes}, {buffer::output, 0, bytes}, {sent});
  const auto summed = b.reduce(slot, {buffer::output, 0, bytes}, {got, copied});
  b.finalize({buffer::output, 0, bytes}, {summed});
  return std::move(b).build();
}

/// An allreduce of 4 ranks as two pair allreduces, {0,1} and {2,3}, then the pairs
/// {0,2} and {1,3} (in place on the output), the first round unfinalized: the classic
/// 2x2 hierarchical shape.
std::vector<schedule> two_by_two(std::size_t count, tag_map first, tag_map second) {
  std::vector<schedule> group;
  for (int r = 0; r < 4; ++r) {
    builder b({collective::allreduce, 4, count, es, 0}, r, "two_by_two");
    embedding inner;
    inner.ranks = {r & ~1, r | 1};
    inner.input = region_map::at(buffer::input, 0);
    inner.output = region_map::at(buffer::output, 0);
    inner.tags = first;
    inner.keep_finalize = false;
    const auto exits = embed(b, pair_allreduce(r & 1, count), inner);
    embedding outer;
    outer.ranks = {r & 1, (r & 1) + 2};
    outer.input = outer.output = region_map::at(buffer::output, 0);
    outer.tags = second;
    (void)embed(b, pair_allreduce(r >> 1, count), outer, exits);
    group.push_back(std::move(b).build());
  }
  return group;
}

TEST(compose, two_phases_of_pairs_make_a_proved_allreduce) {
  for (std::size_t count : {1, 5, 64}) {
    const auto group = two_by_two(count, {}, {});
    for (bool in_place : {false, true}) {
      const auto result = verify(group, {in_place});
      EXPECT_TRUE(result) << "count " << count << (in_place ? " in place: " : ": ") << result.message;
    }
  }
}

TEST(compose, translation_of_ranks_tags_regions_and_dependencies) {
  builder b({collective::allreduce, 8, 4, es, 0}, 5, "host");
  const auto before = b.copy({buffer::input, 0, es}, {buffer::output, 0, es});
  (void)b.scratch(3 * es);
  embedding how;
  how.ranks = {7, 5};
  how.input = region_map::at(buffer::input, 0);
  how.output = region_map::at(buffer::output, 2 * es);
  how.tags = {3, 2};
  const std::vector<step_id> after{before};
  const auto exits = embed(b, pair_allreduce(1, 2, 10), how, after);
  const auto s = std::move(b).build();
  ASSERT_EQ(s.steps.size(), 6u);
  const auto& send = s.steps[1];
  EXPECT_EQ(send.kind, step_kind::send);
  EXPECT_EQ(send.peer, 7);
  EXPECT_EQ(send.tag, 10u * 3 + 2);
  EXPECT_EQ(deps_of(s, 1), std::vector<step_id>{before});  // an entry step waits for `after`
  const auto& recv = s.steps[2];
  EXPECT_EQ(recv.dst, (region{buffer::scratch, 3 * es, 2 * es}));  // a fresh scratch slice
  EXPECT_EQ(s.scratch_bytes, 5 * es);
  EXPECT_EQ(s.steps[3].dst, (region{buffer::output, 2 * es, 2 * es}));
  EXPECT_EQ(exits, std::vector<step_id>{5});  // the finalize
}

// A dropped finalize passes its dependencies on; a copy onto itself disappears.
TEST(compose, dropped_steps_pass_their_dependencies_on) {
  builder b({collective::allreduce, 2, 2, es, 0}, 0, "host");
  embedding how;
  how.ranks = {0, 1};
  how.input = how.output = region_map::at(buffer::output, 0);  // the copy lands on itself
  how.keep_finalize = false;
  const auto exits = embed(b, pair_allreduce(0, 2), how);
  const auto s = std::move(b).build();
  ASSERT_EQ(s.steps.size(), 3u);  // send, recv, reduce
  EXPECT_EQ(s.steps[2].kind, step_kind::reduce);
  EXPECT_EQ(deps_of(s, 2), (std::vector<step_id>{0, 1}));  // got, and the copy's dep: sent
  EXPECT_EQ(exits, std::vector<step_id>{2});
}

TEST(compose, an_empty_sub_schedule_exits_where_it_entered) {
  builder b({collective::allreduce, 2, 0, es, 0}, 1, "host");
  const auto first = b.copy({buffer::input, 0, 0}, {buffer::output, 0, 0});
  embedding how{{0, 1}, region_map::at(buffer::input, 0), region_map::at(buffer::output, 0), {}, {}, true};
  const std::vector<step_id> after{first};
  EXPECT_EQ(embed(b, builder({collective::allreduce, 2, 0, es, 0}, 1, "empty").build(), how, after), after);
}

// Two phases over the same pairs with the same tags: the verifier sees the collision;
// an offset (or a stride) keeps them apart.
TEST(compose, a_tag_collision_without_an_offset_is_caught) {
  const auto clash = verify(two_by_two(4, {}, {}));
  EXPECT_TRUE(clash) << clash.message;  // different pairs: no clash
  // Both phases on the same pairs {0,1} and {2,3}:
  std::vector<schedule> group;
  for (tag_map second : {tag_map{}, tag_map{2, 1}}) {
    group.clear();
    for (int r = 0; r < 4; ++r) {
      builder b({collective::allreduce, 4, 3, es, 0}, r, "twice");
      embedding once{{r & ~1, r | 1}, region_map::at(buffer::input, 0), region_map::at(buffer::output, 0), {},
                     second.stride == 1 ? tag_map{} : tag_map{2, 0}, false};
      const auto exits = embed(b, pair_allreduce(r & 1, 3), once);
      embedding again = once;
      again.input = region_map::at(buffer::output, 0);
      again.tags = second;
      (void)embed(b, pair_allreduce(r & 1, 3), again, exits);
      group.push_back(std::move(b).build());
    }
    const auto result = verify(group);
    if (second.stride == 1) {
      EXPECT_FALSE(result);
      EXPECT_NE(result.message.find("duplicate message"), std::string::npos) << result.message;
    } else {
      // No collision now; what remains wrong is the result (pairs counted twice).
      EXPECT_EQ(result.message.find("duplicate message"), std::string::npos) << result.message;
    }
  }
}

TEST(compose, segmented_maps_place_blocks_apart_and_reject_straddling_regions) {
  region_map m;
  m.place(0, 8, buffer::output, 16).place(8, 8, buffer::output, 0).place(16, 8, buffer::output, 8);
  EXPECT_EQ(m.segments().size(), 2u);  // the last two are neighbours on both sides: merged
  EXPECT_EQ(m({buffer::input, 4, 4}), (region{buffer::output, 20, 4}));
  EXPECT_EQ(m({buffer::input, 8, 16}), (region{buffer::output, 0, 16}));  // spans the merged seam
  try {
    (void)m({buffer::input, 4, 8});
    FAIL() << "a region across two segments was translated";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("does not lie inside one segment"), std::string::npos) << e.what();
  }
}

// The pair allreduce sends its whole buffer; with the halves of each element range
// swapped in the host buffers, that region spans two segments: embed stages it.
TEST(compose, regions_across_segments_run_in_staged_scratch) {
  const std::size_t count = 4, half = count / 2 * es;
  region_map swapped;
  swapped.place(0, half, buffer::input, half).place(half, half, buffer::input, 0);
  region_map swapped_out;
  swapped_out.place(0, half, buffer::output, half).place(half, half, buffer::output, 0);
  std::vector<schedule> group;
  for (int r = 0; r < 2; ++r) {
    builder b({collective::allreduce, 2, count, es, 0}, r, "swapped");
    (void)embed(b, pair_allreduce(r, count), {{0, 1}, swapped, swapped_out, {}, {}, true});
    group.push_back(std::move(b).build());
  }
  EXPECT_EQ(group[0].steps.front().kind, step_kind::copy);  // the input, into scratch
  for (bool in_place : {false, true}) {
    const auto result = verify(group, {in_place});
    EXPECT_TRUE(result) << (in_place ? "in place: " : "out of place: ") << result.message;
  }
}

TEST(compose, a_rank_map_that_does_not_fit_is_rejected_with_a_sentence) {
  const auto message = [](embedding how) {
    builder b({collective::allreduce, 4, 2, es, 0}, 2, "host");
    try {
      (void)embed(b, pair_allreduce(0, 2, 1), how);  // tag 1: the stride test overflows
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const auto out = region_map::at(buffer::output, 0);
  EXPECT_NE(message({{2}, out, out, {}, {}, true}).find("lists 1 ranks but the pair sub-schedule is for 2"),
            std::string::npos);
  EXPECT_NE(message({{1, 2}, out, out, {}, {}, true}).find("sub-rank 0 of the pair sub-schedule is not host rank 2"),
            std::string::npos);
  EXPECT_NE(message({{2, 9}, out, out, {}, {}, true}).find("names rank 9, outside a group of 4"), std::string::npos);
  EXPECT_NE(message({{2, 3}, out, out, {}, {0xffffffffu, 1}, true}).find("does not fit a 32-bit tag"),
            std::string::npos);
}

}  // namespace
