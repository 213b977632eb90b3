// Tests for the schedule dumps: region and step strings, to_text lines, to_dot edges.
#include "mimatrix/schedule/format.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace MIMATRIX_UNIT_ID {

using namespace mimatrix::schedule;

// Two ranks exchange their inputs and add them: 0 send, 1 recv_reduce, 2 finalize.
std::vector<schedule> exchange() {
  const descriptor d{collective::allreduce, 2, 1024, 4, 0};
  std::vector<schedule> g;
  for (int r = 0; r < 2; ++r) {
    builder b(d, r, "exchange");
    const auto s = b.send(1 - r, 3, {buffer::input, 0, 4096});
    const auto rr = b.recv_reduce(1 - r, 3, {buffer::input, 0, 4096}, {buffer::output, 0, 4096}, {s});
    b.finalize({buffer::output, 0, 4096}, {rr});
    g.push_back(std::move(b).build());
  }
  return g;
}

TEST(Format, RegionAndStep) {
  EXPECT_EQ(to_string(region{buffer::output, 0, 4096}), "output[0,4096)");
  EXPECT_EQ(to_string(region{buffer::scratch, 8, 8}), "scratch[8,16)");
  EXPECT_EQ(to_string(buffer::input), "input");
  const auto g = exchange();
  EXPECT_EQ(to_string(g[0].steps[0]), "send to peer 1, tag 3, src input[0,4096)");
  EXPECT_EQ(to_string(g[0].steps[1]), "recv_reduce from peer 1, tag 3, src input[0,4096), dst output[0,4096)");
  EXPECT_EQ(to_string(g[0].steps[2]), "finalize dst output[0,4096)");
  const step recv{.kind = step_kind::recv, .peer = 0, .tag = 1, .dst = {buffer::scratch, 0, 16}};
  EXPECT_EQ(to_string(recv), "recv from peer 0, tag 1, dst scratch[0,16)");
  const step copy{.kind = step_kind::copy, .src = {buffer::input, 0, 16}, .dst = {buffer::output, 16, 16}};
  EXPECT_EQ(to_string(copy), "copy src input[0,16), dst output[16,32)");
}

TEST(Format, TextHasOneLineAStep) {
  const auto g = exchange();
  EXPECT_EQ(to_text(g[1]),
            "# allreduce size 2 count 1024 elem_size 4 | rank 1 | exchange | scratch 0 bytes | 3 steps\n"
            "  0: send to peer 0, tag 3, src input[0,4096)\n"
            "  1: recv_reduce from peer 0, tag 3, src input[0,4096), dst output[0,4096) <- {0}\n"
            "  2: finalize dst output[0,4096) <- {1}\n");
}

TEST(Format, DotHasClustersDependenciesAndMessages) {
  const auto g = exchange();
  const auto dot = to_dot(g);
  EXPECT_EQ(dot.rfind("digraph schedule {", 0), 0u);
  for (const char* want : {"subgraph cluster_0", "subgraph cluster_1", "label=\"rank 1 (exchange)\"",
                           "r0s0 [label=\"0: send to peer 1, tag 3, src input[0,4096)\"]", "r0s0 -> r0s1;",
                           "r1s1 -> r1s2;", "r0s0 -> r1s1 [style=dashed];", "r1s0 -> r0s1 [style=dashed];"})
    EXPECT_NE(dot.find(want), std::string::npos) << want << "\n" << dot;
  EXPECT_EQ(dot.back(), '\n');
  EXPECT_EQ(dot[dot.size() - 2], '}');
}

TEST(Format, DotEscapesQuotes) {
  auto g = exchange();
  g[0].algorithm = "say \"hi\"";
  EXPECT_NE(to_dot(g).find("rank 0 (say \\\"hi\\\")"), std::string::npos);
}

TEST(Format, OneSidedStepsAndTheFusedReduction) {
  const step write{
      .kind = step_kind::write, .peer = 2, .tag = 0, .src = {buffer::input, 0, 16}, .dst = {buffer::scratch, 16, 16}};
  EXPECT_EQ(to_string(write), "write to peer 2, tag 0, src input[0,16), dst peer's scratch[16,32)");
  const step notify{.kind = step_kind::notify, .peer = 3, .tag = 5};
  EXPECT_EQ(to_string(notify), "notify peer 3, tag 5");
  const step wait{.kind = step_kind::wait, .tag = 1, .count = 3};
  EXPECT_EQ(to_string(wait), "wait tag 1 for 3 flags");
  const step slots{.kind = step_kind::reduce_slots, .src = {buffer::scratch, 0, 48}, .dst = {buffer::output, 0, 16}};
  EXPECT_EQ(to_string(slots), "reduce_slots src scratch[0,48) (3 slots), dst output[0,16)");
}

TEST(Format, DotDrawsFlagEdgesToTheWait) {
  const descriptor d{collective::allgather, 2, 1, 4, 0};
  std::vector<schedule> g;
  for (int r = 0; r < 2; ++r) {
    builder b(d, r, "flags");
    b.write(1 - r, 7, {buffer::input, 0, 4}, {buffer::output, std::size_t(r) * 4, 4});
    b.wait(7, 1);
    g.push_back(std::move(b).build());
  }
  const auto dot = to_dot(g);
  for (const char* want : {"r0s0 -> r1s1 [style=dotted];", "r1s0 -> r0s1 [style=dotted];"})
    EXPECT_NE(dot.find(want), std::string::npos) << want << "\n" << dot;
}

}  // namespace MIMATRIX_UNIT_ID
