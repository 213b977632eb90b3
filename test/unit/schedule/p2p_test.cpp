#include "mimatrix/schedule/p2p.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/format.hpp"
#include "mimatrix/schedule/verify.hpp"

namespace mimatrix::schedule {
namespace MIMATRIX_UNIT_ID {

using p2p::op;

op send_to(int peer, std::uint32_t tag, std::uint64_t count, dtype type = dtype::int32) {
  return {true, peer, tag, count, type};
}
op recv_from(int peer, std::uint32_t tag, std::uint64_t count, dtype type = dtype::int32) {
  return {false, peer, tag, count, type};
}

/// The message of the error `f` throws, and its code.
template <class F>
std::pair<errc, std::string> thrown(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return {static_cast<errc>(e.code().value()), e.what()};
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

TEST(p2p_schedule, the_step_tag_holds_the_user_tag_above_the_occurrence) {
  EXPECT_EQ(p2p::step_tag(7, 2), (7u << 12) | 2u);
  EXPECT_EQ(p2p::user_tag(p2p::step_tag(65534, 4095)), 65534u);
  EXPECT_EQ(p2p::occurrence(p2p::step_tag(65534, 4095)), 4095u);
  EXPECT_LT(p2p::step_tag(65534, 4095), p2p::manifest_tag);
  EXPECT_LT(p2p::manifest_tag, std::uint32_t(1) << 28);  // within the wire's 28-bit step tag
  EXPECT_EQ(entry_index(entry(0)), 0u);
  EXPECT_EQ(entry_index(entry(max_entries - 1)), max_entries - 1);
  EXPECT_FALSE(is_entry(buffer::scratch));
  EXPECT_TRUE(is_entry(entry(0)));
}

TEST(p2p_schedule, each_op_is_one_step_over_its_own_entry_with_no_dependencies) {
  const std::vector<op> ops{send_to(1, 5, 10), recv_from(2, 5, 3, dtype::int64), send_to(1, 5, 4), recv_from(2, 9, 0)};
  const schedule s = p2p::build(ops, 0, 3);
  EXPECT_EQ(s.desc.kind, collective::p2p);
  EXPECT_EQ(s.desc.input_bytes(0), 0u);
  EXPECT_EQ(s.desc.output_bytes(0), 0u);
  ASSERT_EQ(s.steps.size(), 4u);
  EXPECT_EQ(s.entry_bytes, (std::vector<std::uint64_t>{40, 24, 16, 0}));
  EXPECT_TRUE(s.dep_ids.empty());
  EXPECT_EQ(s.steps[0].kind, step_kind::send);
  EXPECT_EQ(s.steps[0].tag, p2p::step_tag(5, 0));
  EXPECT_EQ(s.steps[2].tag, p2p::step_tag(5, 1));  // the second send with tag 5 to rank 1
  EXPECT_EQ(s.steps[1].tag, p2p::step_tag(5, 0));  // a receive counts apart from the sends
  EXPECT_EQ(s.steps[1].kind, step_kind::recv);
  EXPECT_EQ(s.steps[1].dst, (region{entry(1), 0, 24}));
  EXPECT_EQ(to_string(s.steps[0].src), "entry 0[0,40)");
}

TEST(p2p_schedule, sends_to_itself_become_copies_into_the_receives_they_meet) {
  const std::vector<op> ops{recv_from(1, 3, 2), send_to(1, 3, 2), recv_from(1, 3, 2), send_to(1, 3, 2),
                            send_to(0, 4, 1)};
  const schedule s = p2p::build(ops, 1, 2);
  std::vector<std::pair<std::size_t, std::size_t>> copies;
  for (const auto& st : s.steps)
    if (st.kind == step_kind::copy) copies.emplace_back(entry_index(st.src.where), entry_index(st.dst.where));
  ASSERT_EQ(copies.size(), 2u);  // and the send to rank 0
  EXPECT_EQ(copies[0], (std::pair<std::size_t, std::size_t>{1, 0}));  // occurrence 0 with occurrence 0
  EXPECT_EQ(copies[1], (std::pair<std::size_t, std::size_t>{3, 2}));
  EXPECT_EQ(s.steps.size(), 3u);
}

TEST(p2p_schedule, sends_and_receives_to_itself_that_do_not_pair_are_a_mismatch) {
  auto [code, what] = thrown([] { (void)p2p::build(std::vector<op>{send_to(2, 4, 1)}, 2, 3); });
  EXPECT_EQ(code, errc::mismatch);
  EXPECT_NE(what.find("a send to itself with tag 4 (1 x int32) meets no receive from itself"), std::string::npos)
      << what;
  std::tie(code, what) = thrown([] { (void)p2p::build(std::vector<op>{send_to(0, 4, 2), recv_from(0, 4, 3)}, 0, 1); });
  EXPECT_EQ(code, errc::mismatch);
  EXPECT_NE(what.find("meets a receive from itself with tag 4 (3 x int32)"), std::string::npos) << what;
}

TEST(p2p_schedule, refuses_peers_tags_and_counts_it_cannot_carry) {
  const auto refused = [](std::vector<op> ops, const char* words) {
    auto [code, what] = thrown([&] { (void)p2p::build(ops, 0, 4); });
    EXPECT_EQ(code, errc::invalid_argument);
    EXPECT_NE(what.find(words), std::string::npos) << what;
  };
  refused({send_to(1, 0, 1), send_to(4, 2, 1)}, "op 1 (send to rank 4, tag 2): peer 4 is outside a group of 4");
  refused({recv_from(-1, 0, 1)}, "peer -1 is outside");
  refused({send_to(1, 65535, 1)}, "tag 65535 is above 65534");
  refused({send_to(1, 0, std::uint64_t(1) << 55, dtype::int32)}, "reach past 2^56 bytes");
  EXPECT_NO_THROW((void)p2p::build(std::vector<op>{send_to(1, 65534, 1)}, 0, 4));
  // 253 entries a batch (increment 1) come before 4095 ops of one tag could.
  EXPECT_FALSE(p2p::problem(std::vector<op>(max_entries, send_to(1, 7, 0)), 4));
  refused(std::vector<op>(max_entries + 1, send_to(1, 7, 0)), "a batch of 254 ops; a batch holds at most 253");
}

/// Every rank's batch of a ring exchange, two tags a neighbour, for p ranks.
std::vector<schedule> ring_batches(int p) {
  std::vector<schedule> group;
  for (int r = 0; r < p; ++r) {
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    std::vector<op> ops{recv_from(left, 1, 8), send_to(right, 1, 8), send_to(right, 1, 3), recv_from(left, 1, 3),
                        send_to(left, 2, 5),   recv_from(right, 2, 5)};
    group.push_back(p2p::build(ops, r, p));
  }
  return group;
}

TEST(p2p_schedule, the_verifier_proves_that_every_send_meets_its_receive) {
  for (int p = 2; p <= 9; ++p) {
    const auto group = ring_batches(p);
    const auto result = verify_matching(group);
    EXPECT_TRUE(result) << "p = " << p << ": " << result.message;
  }
}

TEST(p2p_schedule, the_verifier_names_a_send_that_meets_no_receive) {
  std::vector<schedule> group{p2p::build(std::vector<op>{send_to(1, 6, 4)}, 0, 2),
                              p2p::build(std::vector<op>{recv_from(0, 5, 4)}, 1, 2)};
  const auto result = verify_matching(group);
  ASSERT_FALSE(result);
  EXPECT_NE(result.message.find("no matching"), std::string::npos) << result.message;
  group[1] = p2p::build(std::vector<op>{recv_from(0, 6, 5)}, 1, 2);
  const auto sizes = verify_matching(group);
  ASSERT_FALSE(sizes);
  EXPECT_NE(sizes.message.find("sends 16 bytes"), std::string::npos) << sizes.message;
}

TEST(p2p_schedule, manifests_agree_when_each_op_meets_its_counterpart) {
  const std::vector<op> a{send_to(1, 5, 4), send_to(1, 5, 2), recv_from(1, 9, 1), send_to(2, 0, 1)};
  const std::vector<op> b{send_to(0, 9, 1), recv_from(0, 5, 4), recv_from(0, 5, 2), recv_from(2, 9, 1)};
  const auto ma = p2p::manifest(a, 1);
  const auto mb = p2p::manifest(b, 0);
  ASSERT_EQ(ma.size(), 3u);
  EXPECT_TRUE(p2p::agree(ma, mb));
  EXPECT_TRUE(p2p::agree(mb, ma));
  EXPECT_EQ(p2p::digest(ma, 3), p2p::digest(p2p::flipped(mb), 3));
  EXPECT_NE(p2p::digest(ma, 3), p2p::digest(ma, 4));
  EXPECT_NE(p2p::digest({}, 0), 0u);
}

TEST(p2p_schedule, the_difference_names_the_peer_and_the_tags_from_each_side) {
  const std::vector<op> a{send_to(1, 5, 100, dtype::float32)};
  const std::vector<op> b{recv_from(0, 6, 100, dtype::float32)};
  const auto ma = p2p::manifest(a, 1), mb = p2p::manifest(b, 0);
  EXPECT_FALSE(p2p::agree(ma, mb));
  const std::string text = p2p::difference(0, 1, ma, mb);
  EXPECT_NE(text.find("this rank sends tag 5 (100 x float) that rank 1 does not receive"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 receives tag 6 (100 x float) that this rank does not send"), std::string::npos) << text;
  const auto shape = p2p::difference(1, 0, mb, p2p::manifest(std::vector<op>{send_to(1, 6, 100, dtype::bfloat16)}, 1));
  EXPECT_NE(shape.find("rank 0 sends tag 6 (100 x bfloat16) where this rank receives tag 6 (100 x float)"),
            std::string::npos)
      << shape;
}

}  // namespace
}  // namespace mimatrix::schedule
