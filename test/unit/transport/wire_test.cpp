// Tests of transport/fabric/wire.hpp's packed signature: what every data message carries
// so that a receiver tells a peer running another call, algorithm or tag.
#include "mimatrix/transport/fabric/wire.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mimatrix::transport::detail::fabric {
namespace MIMATRIX_UNIT_ID {

using schedule::collective;

signature call(collective kind, std::uint32_t tag = 0, int root = 0) {
  return {kind, reduce::op_kind::sum, dtype::int32, 1000, root, 5, tag};
}

TEST(wire, an_untagged_call_packs_as_before_tags_existed) {
  // The top 16 bits are the algorithm's digest (a broadcast's root) alone: peers built
  // before call_options::tag read an untagged call's messages as they did.
  const std::uint64_t packed = wire::pack(call(collective::allreduce), "ring");
  EXPECT_EQ(packed >> 48, wire::algorithm_digest("ring"));
  EXPECT_EQ(wire::pack(call(collective::broadcast, 0, 3), "ring") >> 48, 3u);
  EXPECT_EQ(wire::tag_digest(0), 0);
}

TEST(wire, calls_that_differ_only_in_their_tag_pack_differently) {
  for (collective kind : {collective::allreduce, collective::reduce_scatter, collective::allgather,
                          collective::broadcast})
    for (std::uint32_t tag : {1u, 2u, 7u, 65536u, 0xFFFFFFFFu}) {
      EXPECT_NE(wire::pack(call(kind, tag), "ring"), wire::pack(call(kind), "ring")) << tag;
      EXPECT_NE(wire::pack(call(kind, tag), "ring"), wire::pack(call(kind, tag + 1), "ring")) << tag;
      // Flags carry a digest of the packing: tags differ there too.
      EXPECT_NE(wire::digest(wire::pack(call(kind, tag), "ring")), wire::digest(wire::pack(call(kind), "ring")));
    }
}

TEST(wire, a_tagged_broadcasts_root_unpacks_under_its_tag) {
  const std::uint64_t packed = wire::pack(call(collective::broadcast, 9, 3), "ring");
  EXPECT_EQ(wire::unpack(packed, 5, 9).root, 3);
  EXPECT_EQ(wire::unpack(packed, 5, 9), call(collective::broadcast, 9, 3));
}

TEST(wire, a_disagreement_in_the_top_bits_names_the_algorithm_or_tag) {
  const signature mine = call(collective::allreduce, 1);
  const std::string why = wire::disagreement(2, wire::pack(call(collective::allreduce, 2), "ring"),
                                             wire::pack(mine, "ring"), mine, "ring");
  EXPECT_EQ(why, "rank 2 runs allreduce #5 (count 1000, int32, sum) with another algorithm, topology or tag than "
                 "this rank's (algorithm 'ring', tag 1); every rank must give a call the same algorithm (the "
                 "collective's Algorithm, call_options::algorithm, MIMATRIX_ALGO), built alike (the topology's "
                 "ring order, node size or shape; the algorithm's rank order and chunk), and the same tag "
                 "(call_options::tag)");
  const signature root = call(collective::broadcast, 0, 1);
  const std::string bcast = wire::disagreement(0, wire::pack(call(collective::broadcast, 0, 0), "ring"),
                                               wire::pack(root, "ring"), root, "ring");
  EXPECT_EQ(bcast, "rank 0 runs broadcast #5 (count 1000, int32) with another root or tag than this rank's "
                   "(root 1, tag 0); every rank must give a call the same root and tag (call_options::tag)");
  // Another count is named as such, with both calls.
  const std::string count = wire::disagreement(
      1, wire::pack({collective::allreduce, reduce::op_kind::sum, dtype::int32, 999, 0, 5, 0}, "ring"),
      wire::pack(call(collective::allreduce), "ring"), call(collective::allreduce), "ring");
  EXPECT_NE(count.find("count 999"), std::string::npos) << count;
  EXPECT_NE(count.find("but this rank runs allreduce #5 (count 1000"), std::string::npos) << count;
}

// One algorithm built on other parameters (schedule::agreement) packs differently, and
// the message says what must agree; a broadcast's top bits stay its root.
TEST(wire, one_algorithm_with_other_parameters_packs_differently) {
  const signature mine = call(collective::allreduce);
  EXPECT_NE(wire::pack(mine, "ring", 0x1234'5678'9abc'def0ull), wire::pack(mine, "ring", 0x1234'5678'9abc'def1ull));
  EXPECT_EQ(wire::pack(mine, "ring", 0), wire::pack(mine, "ring"));
  const signature root = call(collective::broadcast, 0, 1);
  EXPECT_EQ(wire::pack(root, "ring", 7), wire::pack(root, "ring", 9));
  const std::string why = wire::disagreement(1, wire::pack(mine, "ring", 7), wire::pack(mine, "ring", 9), mine,
                                             "ring", 9);
  EXPECT_NE(why.find("built alike (the topology's ring order"), std::string::npos) << why;
}

// A broadcast's packing carries its root, so ranks on two topologies pack alike; the
// which_call answer compares the agreement whole and says so (built_differently).
TEST(wire, a_call_built_differently_is_named_with_what_must_agree) {
  const signature root = call(collective::broadcast, 0, 0);
  EXPECT_EQ(wire::built_differently(2, root, "ring"),
            "rank 2 runs broadcast #5 (count 1000, int32, root 0) on another topology or algorithm than this "
            "rank's (algorithm 'ring'); every rank must give a call the same algorithm (the collective's "
            "Algorithm, call_options::algorithm, MIMATRIX_ALGO), built alike (the topology's ring order, node "
            "size or shape; the algorithm's rank order and chunk)");
}

// Regression: a broadcast whose ranks each named themselves the root left its messages
// unreceived over tcp, and the broadcast of the same shape 2^15 calls later, whose tags
// are the same, took one as its data without a word.
TEST(wire, calls_whose_tags_wrap_onto_each_other_pack_differently) {
  constexpr std::uint64_t wrap = std::uint64_t(1) << wire::sequence_bits;
  for (collective kind : {collective::allreduce, collective::broadcast}) {
    signature first = call(kind), later = call(kind);
    first.sequence = 3;
    later.sequence = 3 + wrap;
    ASSERT_EQ(wire::data_tag(1, first.sequence, 7), wire::data_tag(1, later.sequence, 7));
    EXPECT_NE(wire::pack(first, "ring"), wire::pack(later, "ring"));
    EXPECT_NE(wire::digest(wire::pack(first, "ring")), wire::digest(wire::pack(later, "ring")));
    EXPECT_EQ(wire::unpack(wire::pack(later, "ring"), later.sequence), later);
  }
  std::vector<bool> seen(std::size_t(1) << 16);
  for (std::uint64_t epoch = 0; epoch < (std::uint64_t(1) << 16); ++epoch) {
    const std::uint16_t d = wire::epoch_digest(epoch * wrap + 5);
    EXPECT_FALSE(seen[d]) << "epoch " << epoch;
    seen[d] = true;
  }
  EXPECT_EQ(wire::epoch_digest(wrap - 1), 0) << "the first 2^15 calls pack as before";
}

TEST(wire, a_message_left_by_an_earlier_call_is_named_as_such) {
  signature left = call(collective::broadcast), mine = call(collective::broadcast);
  left.sequence = 0;
  mine.sequence = std::uint64_t(2) << wire::sequence_bits;
  const std::string why =
      wire::disagreement(0, wire::pack(left, "ring"), wire::pack(mine, "ring"), mine, "ring");
  EXPECT_EQ(why.rfind("a message of rank 0 left unreceived by broadcast #0 reached this rank's broadcast #65536", 0),
            0u)
      << why;
  EXPECT_NE(why.find("disagree on a broadcast's root"), std::string::npos) << why;
}

}  // namespace
}  // namespace mimatrix::transport::detail::fabric
