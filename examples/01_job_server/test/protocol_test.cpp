// The job server's protocol: every message survives a round trip; frames that lie about
// their length, kind, version or counts are refused with a reason and never allocate
// what they claim; the global batch splits by throughput and sums to B.
#include "protocol.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "auth.hpp"
#include "server.hpp"

namespace mimatrix::job {
namespace MIMATRIX_UNIT_ID {

std::vector<message> samples() {
  assignment a{7, 1, 3, {"a", "a", "b"}, 100, 200, 85, 42, {0, 0, 1}};
  store_reply sr{9, store_reply::outcome::timeout, {std::byte{1}, std::byte{2}}, -5, "late"};
  return {challenge{random_nonce()},
          hello{{}, worker_info{"node7", "node7:4242", 8, 8, 1234.5, 6}},
          welcome{77},
          reject{"failed authentication"},
          a,
          revoke{7, "rank 2 died"},
          heartbeat{7, 1000, 12.5, 3.25, 9.5, 0.7, 800},
          failure{7, "peer lost"},
          store_set{1, "g7/addr/0", std::vector<std::byte>(300, std::byte{7})},
          store_get{2, "g7/addr/1", 5000},
          store_add{3, "g7/count", -2},
          sr,
          status_request{},
          status_reply{std::string(10000, 'x')},
          leave{7}};
}

TEST(protocol, every_message_survives_a_round_trip) {
  for (const message& m : samples()) {
    const auto frame = encode(m);
    const message back = decode_frame(frame.data(), frame.size());
    ASSERT_EQ(back.index(), m.index());
    EXPECT_EQ(encode(back), frame) << "kind " << unsigned(kind_of(m));
  }
}

std::string refusal(std::vector<std::byte> frame) {
  try {
    decode_frame(frame.data(), frame.size());
  } catch (const protocol_error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(protocol, frames_that_lie_are_refused_with_a_reason) {
  auto frame = encode(reject{"x"});
  auto bad = frame;
  bad[6] = std::byte{9};  // version 9
  EXPECT_NE(refusal(bad).find("protocol version 9"), std::string::npos);
  bad = frame;
  bad[4] = std::byte{99};  // kind 99
  EXPECT_NE(refusal(bad).find("kind 99 is unknown"), std::string::npos);
  bad = frame;
  const std::uint32_t huge = 0x7fffffff;
  std::memcpy(bad.data(), &huge, 4);
  EXPECT_NE(refusal(bad).find("is over the"), std::string::npos);
  bad = frame;
  bad.pop_back();  // truncated
  EXPECT_NE(refusal(bad).find("the header says"), std::string::npos);
  bad = frame;
  bad.push_back(std::byte{0});  // a byte more than the header says
  EXPECT_NE(refusal(bad).find("the header says"), std::string::npos);
  EXPECT_NE(refusal({std::byte{1}, std::byte{2}}).find("no whole header"), std::string::npos);
}

TEST(protocol, counts_that_exceed_the_message_are_refused_before_allocating) {
  // A store_set whose value claims 4 GiB in a 30-byte message.
  detail::writer w;
  w.u64(1), w.text("k"), w.u32(0xffffffffu);
  auto body = w.out();
  EXPECT_THROW(decode(kind::store_set, body.data(), body.size()), protocol_error);
  // An assignment that claims a million hosts.
  detail::writer a;
  a.u64(1), a.u32(0), a.u32(1), a.u32(1'000'000);
  body = a.out();
  try {
    decode(kind::assignment, body.data(), body.size());
    ADD_FAILURE() << "accepted";
  } catch (const protocol_error& e) {
    EXPECT_NE(std::string(e.what()).find("hosts"), std::string::npos) << e.what();
  }
  // A text over its bound.
  detail::writer t;
  t.u32(100000);
  body = t.out();
  EXPECT_THROW(decode(kind::reject, body.data(), body.size()), protocol_error);
}

TEST(protocol, an_assignment_must_be_consistent) {
  assignment a{1, 3, 3, {"a", "b", "c"}, 0, 10, 1, 0, {}};  // rank 3 of 3
  const auto frame = encode(a);
  EXPECT_NE(refusal(frame).find("inconsistent"), std::string::npos);
}

TEST(protocol, an_assignment_names_every_ranks_switch_or_none) {
  assignment a{1, 0, 3, {"a", "b", "c"}, 0, 10, 1, 0, {0, 1}};  // two switches for three ranks
  EXPECT_NE(refusal(encode(a)).find("names the switches of 2"), std::string::npos);
}

TEST(balancing, a_cluster_description_numbers_switches_in_order) {
  const std::string path = "/tmp/mimatrix_cluster_test.txt";
  {
    std::ofstream out(path);
    out << "# rack A\nnode1 leafA\nnode2 leafA  # two on A\n\nnode3 leafB\n";
  }
  const auto hosts = load_cluster(path);
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[1], (std::pair<std::string, std::uint32_t>{"node2", 0}));
  EXPECT_EQ(hosts[2], (std::pair<std::string, std::uint32_t>{"node3", 1}));
  {
    std::ofstream out(path);
    out << "node1\n";
  }
  EXPECT_THROW(load_cluster(path), std::runtime_error);
  std::remove(path.c_str());
}

TEST(auth, only_the_secret_answers_the_nonce) {
  const nonce n = random_nonce();
  EXPECT_TRUE(verify("s3cret", n, answer("s3cret", n)));
  EXPECT_FALSE(verify("s3cret", n, answer("s3cre7", n)));
  EXPECT_FALSE(verify("s3cret", random_nonce(), answer("s3cret", n)));
}

TEST(balancing, the_global_batch_splits_by_throughput_and_sums_to_it) {
  const split s = split_by_throughput({300, 100, 300, 300}, 256, 60000);
  EXPECT_EQ(s.batch[0] + s.batch[1] + s.batch[2] + s.batch[3], 256u);
  EXPECT_NEAR(double(s.batch[1]), 256.0 / 10, 1.0);  // a third of the others' speed
  EXPECT_NEAR(double(s.batch[0]), 256.0 * 3 / 10, 1.0);
  EXPECT_EQ(s.shard.front().first, 0u);
  EXPECT_EQ(s.shard.back().second, 60000u);
  for (std::size_t i = 1; i < s.shard.size(); ++i) EXPECT_EQ(s.shard[i].first, s.shard[i - 1].second);
  EXPECT_NEAR(double(s.shard[1].second - s.shard[1].first), 60000.0 * s.batch[1] / 256, 1.0);
  const split even = split_by_throughput({0, 0, 0}, 10, 9);  // no measure yet: even
  EXPECT_EQ(even.batch[0] + even.batch[1] + even.batch[2], 10u);
}

}  // namespace
}  // namespace mimatrix::job
