// Tests for the symbolic verifier: hand-built correct schedules of every collective, and
// one broken schedule for each thing the verifier checks.
#include "mimatrix/schedule/verify.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstddef>
#include <string>
#include <vector>

namespace MIMATRIX_UNIT_ID {

using namespace mimatrix::schedule;
using group = std::vector<schedule>;

constexpr std::size_t es = 4;  // elem_size in every test
region in(std::size_t first, std::size_t n) { return {buffer::input, first * es, n * es}; }
region out(std::size_t first, std::size_t n) { return {buffer::output, first * es, n * es}; }

descriptor make(collective kind, int size, std::size_t count, int root = 0) {
  return {kind, size, count, es, root};
}

/// Re-runs a (possibly edited) schedule through builder, so successor lists stay right.
schedule rebuild(const schedule& s) {
  builder b(s.desc, s.rank, s.algorithm);
  if (s.scratch_bytes) (void)b.scratch(s.scratch_bytes);
  for (step_id i = 0; i < s.steps.size(); ++i) b.add(s.steps[i], s.deps(i));
  return std::move(b).build();
}

// Edits in place, without the builder's checks and leaving the successor lists stale:
// rebuild afterwards, or do not, to show the verifier what only a hand edit can make.

/// Makes `deps` the dependencies of step `i`.
void set_deps(schedule& s, step_id i, const std::vector<step_id>& deps) {
  const auto first = s.dep_ids.begin() + s.dep_begin[i], last = s.dep_ids.begin() + s.dep_begin[i + 1];
  const auto grown = std::ptrdiff_t(deps.size()) - (last - first);
  s.dep_ids.insert(s.dep_ids.erase(first, last), deps.begin(), deps.end());
  for (auto k = std::size_t(i) + 1; k < s.dep_begin.size(); ++k) s.dep_begin[k] = std::uint32_t(s.dep_begin[k] + grown);
}
/// Inserts `st` as step `at`, after `deps`; the later steps' deps keep their numbers.
void insert_step(schedule& s, step_id at, const step& st, const std::vector<step_id>& deps = {}) {
  const auto begin = s.dep_begin[at];  // the new step's range starts empty
  s.steps.insert(s.steps.begin() + at, st);
  s.dep_begin.insert(s.dep_begin.begin() + at, begin);
  set_deps(s, at, deps);
}
void push_step(schedule& s, const step& st, const std::vector<step_id>& deps = {}) {
  insert_step(s, step_id(s.steps.size()), st, deps);
}

::testing::AssertionResult fails_with(const group& g, std::vector<std::string> needles, verify_options o = {}) {
  const auto r = verify(g, o);
  if (r) return ::testing::AssertionFailure() << "verify accepted a broken schedule";
  for (const auto& n : needles)
    if (r.message.find(n) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks \"" << n << "\": " << r.message;
  return ::testing::AssertionSuccess() << r.message;
}

::testing::AssertionResult passes(const group& g, verify_options o = {}) {
  const auto r = verify(g, o);
  if (r) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.message;
}

// Allreduce by direct exchange, on rank r:
//   send input to every peer q; recv q's input into scratch slot q;
//   copy input -> output (after the sends: in place they share memory);
//   reduce slot q into output, one after another; finalize output.
struct direct_options {
  bool copy_after_sends = true;
  bool finalize = true;
};
group direct_allreduce(int p, std::size_t count, direct_options o = {}) {
  const auto d = make(collective::allreduce, p, count);
  group g;
  for (int r = 0; r < p; ++r) {
    builder b(d, r, "direct");
    std::vector<step_id> sends;
    std::vector<step_id> recvs(std::size_t(p), 0);
    std::vector<region> slot(static_cast<std::size_t>(p));
    for (int q = 0; q < p; ++q)
      if (q != r) sends.push_back(b.send(q, 0, in(0, count)));
    for (int q = 0; q < p; ++q)
      if (q != r) {
        slot[std::size_t(q)] = b.scratch(count * es);
        recvs[std::size_t(q)] = b.recv(q, 0, slot[std::size_t(q)]);
      }
    auto last = b.add(step_kind::copy, -1, 0, in(0, count), out(0, count),
                      o.copy_after_sends ? sends : std::vector<step_id>{});
    for (int q = 0; q < p; ++q)
      if (q != r) last = b.reduce(slot[std::size_t(q)], out(0, count), {last, recvs[std::size_t(q)]});
    if (o.finalize) b.finalize(out(0, count), {last});
    g.push_back(std::move(b).build());
  }
  return g;
}

// Ring allreduce with recv_reduce, count = p*c, chunk k = elements [k*c, (k+1)*c):
//   reduce-scatter, step k: send chunk r-k to r+1 (from input at k=0), recv_reduce
//   chunk r-k-1 from r-1 (input + incoming -> output); rank r then owns chunk r+1, finalizes it;
//   allgather, step k: send chunk r+1-k to r+1, recv chunk r-k from r-1.
//   rank0: c0 ─► rank1   rank1: c1 ─► rank2 ...   (p-1 steps, twice)
group ring_allreduce(int p, std::size_t c) {
  const auto d = make(collective::allreduce, p, std::size_t(p) * c);
  const auto chunk = [&](int k, buffer where) {
    const auto j = std::size_t(((k % p) + p) % p);
    return region{where, j * c * es, c * es};
  };
  group g;
  for (int r = 0; r < p; ++r) {
    builder b(d, r, "ring");
    const int next = (r + 1) % p, prev = (r + p - 1) % p;
    step_id prev_rr = 0;
    std::vector<step_id> rs_sends;
    for (int k = 0; k < p - 1; ++k) {
      const auto src = k == 0 ? chunk(r, buffer::input) : chunk(r - k, buffer::output);
      rs_sends.push_back(k == 0 ? b.send(next, std::uint32_t(k), src) : b.send(next, std::uint32_t(k), src, {prev_rr}));
      prev_rr = b.recv_reduce(prev, std::uint32_t(k), chunk(r - k - 1, buffer::input), chunk(r - k - 1, buffer::output));
    }
    auto last = b.finalize(chunk(r + 1, buffer::output), {prev_rr});
    for (int k = 0; k < p - 1; ++k) {
      const auto tag = std::uint32_t(p - 1 + k);
      b.send(next, tag, chunk(r + 1 - k, buffer::output), {last});
      // Chunk r-k was read by the reduce-scatter send k: overwrite it only after that.
      last = b.recv(prev, tag, chunk(r - k, buffer::output), {rs_sends[std::size_t(k)]});
    }
    g.push_back(std::move(b).build());
  }
  return g;
}

// Allgather by direct exchange: copy input into block r, send it to every peer, receive
// block q from each peer q.
group direct_allgather(int p, std::size_t count) {
  const auto d = make(collective::allgather, p, count);
  group g;
  for (int r = 0; r < p; ++r) {
    builder b(d, r, "direct");
    const auto copy = b.copy(in(0, count), out(std::size_t(r) * count, count));
    for (int q = 0; q < p; ++q)
      if (q != r) b.send(q, 0, in(0, count), {copy});  // in place, input is block r
    for (int q = 0; q < p; ++q)
      if (q != r) b.recv(q, 0, out(std::size_t(q) * count, count));
    g.push_back(std::move(b).build());
  }
  return g;
}

// Ring allgather: copy own block, then p-1 times forward the block last received.
//   step k: rank r sends block r-k to r+1 and receives block r-k-1 from r-1.
group ring_allgather(int p, std::size_t count) {
  const auto d = make(collective::allgather, p, count);
  const auto block = [&](int k) { return out(std::size_t(((k % p) + p) % p) * count, count); };
  group g;
  g.reserve(std::size_t(p));
  for (int r = 0; r < p; ++r) {
    builder b(d, r, "ring");
    auto last = b.copy(in(0, count), block(r));
    for (int k = 0; k < p - 1; ++k) {
      b.send((r + 1) % p, std::uint32_t(k), block(r - k), {last});
      last = b.recv((r + p - 1) % p, std::uint32_t(k), block(r - k - 1));
    }
    g.push_back(std::move(b).build());
  }
  return g;
}

// Broadcast: root copies input to output and sends it to everyone.
group direct_broadcast(int p, std::size_t count, int root) {
  const auto d = make(collective::broadcast, p, count, root);
  group g;
  for (int r = 0; r < p; ++r) {
    builder b(d, r, "direct");
    if (r == root) {
      const auto copy = b.copy(in(0, count), out(0, count));
      for (int q = 0; q < p; ++q)
        if (q != r) b.send(q, 0, in(0, count), {copy});
    } else {
      b.recv(root, 0, out(0, count));
    }
    g.push_back(std::move(b).build());
  }
  return g;
}

// Reduce-scatter by direct exchange: send input block q to q; receive block r from
// every peer into scratch; copy own block r to output, reduce the rest in, finalize.
group direct_reduce_scatter(int p, std::size_t count) {
  const auto d = make(collective::reduce_scatter, p, count);
  group g;
  for (int r = 0; r < p; ++r) {
    builder b(d, r, "direct");
    std::vector<step_id> recvs(std::size_t(p), 0);
    std::vector<region> slot(static_cast<std::size_t>(p));
    for (int q = 0; q < p; ++q)
      if (q != r) b.send(q, 0, in(std::size_t(q) * count, count));
    for (int q = 0; q < p; ++q)
      if (q != r) {
        slot[std::size_t(q)] = b.scratch(count * es);
        recvs[std::size_t(q)] = b.recv(q, 0, slot[std::size_t(q)]);
      }
    auto last = b.copy(in(std::size_t(r) * count, count), out(0, count));
    for (int q = 0; q < p; ++q)
      if (q != r) last = b.reduce(slot[std::size_t(q)], out(0, count), {last, recvs[std::size_t(q)]});
    b.finalize(out(0, count), {last});
    g.push_back(std::move(b).build());
  }
  return g;
}

// ---------------------------------------------------------------------------------------
// Correct schedules

TEST(Verify, CorrectSchedulesPassOverManySizes) {
  for (bool in_place : {false, true}) {
    const verify_options o{in_place};
    for (int p = 1; p <= 6; ++p) {
      for (std::size_t count : {std::size_t(0), std::size_t(1), std::size_t(5)}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " count=" + std::to_string(count) + " in_place=" +
                     std::to_string(in_place));
        EXPECT_TRUE(passes(direct_allreduce(p, count), o));
        EXPECT_TRUE(passes(direct_allgather(p, count), o));
        EXPECT_TRUE(passes(ring_allgather(p, count), o));
        EXPECT_TRUE(passes(direct_reduce_scatter(p, count), o));
        for (int root = 0; root < p; ++root) {
          EXPECT_TRUE(passes(direct_broadcast(p, count, root), o));
        }
        if (p >= 2) {
          EXPECT_TRUE(passes(ring_allreduce(p, count), o));
        }
      }
    }
  }
}

TEST(Verify, ResultConvertsToBool) {
  const auto g = direct_allreduce(2, 3);
  const auto r = verify(g);
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_TRUE(r.message.empty());
  EXPECT_NO_THROW(verify_or_throw(g));
}

TEST(Verify, OrThrowThrowsInvalidArgument) {
  const auto g = direct_allreduce(2, 3, {.copy_after_sends = true, .finalize = false});
  try {
    verify_or_throw(g);
    FAIL() << "no throw";
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), mimatrix::errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("finalized 0 times"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------
// e) result

TEST(Verify, MissingFinalize) {
  EXPECT_TRUE(fails_with(direct_allreduce(2, 3, {.copy_after_sends = true, .finalize = false}),
                         {"rank 0 output element 0", "allreduce expects origin 0, ranks all 2, finalized once",
                          "got origin 0, ranks {0, 1}, finalized 0 times"}));
}

TEST(Verify, DoubleFinalize) {
  auto g = direct_allreduce(3, 2);
  auto& s = g[1];
  push_step(s, {.kind = step_kind::finalize, .dst = out(0, 2)}, {step_id(s.steps.size() - 1)});
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 1 output element 0", "finalized 2 times"}));
}

TEST(Verify, ReducingFinalizedData) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[0];
  // finalize first, then one more reduce of the received slot on top.
  const auto fin = step_id(s.steps.size() - 1);
  push_step(s, {.kind = step_kind::reduce, .src = s.steps[fin - 1].src, .dst = out(0, 2)}, {fin});
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 0 step", "reduce", "already finalized"}));
}

TEST(Verify, RankCountedTwice) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[0];
  // steps: 0 send, 1 recv, 2 copy, 3 reduce, 4 finalize: reduce the slot once more.
  insert_step(s, 4, {.kind = step_kind::reduce, .src = s.steps[3].src, .dst = out(0, 2)}, {3});
  set_deps(s, 5, {4});
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 0 step 4", "reduce", "counts rank 1 twice", "output byte 0"}));
}

TEST(Verify, WrongOrigin) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[1];
  // Reduce element 1 of the received slot into element 0 of the output.
  auto slot = s.steps[3].src;
  s.steps[3].src = {slot.where, slot.offset + es, es};
  s.steps[3].dst = out(0, 1);
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 1 step 3", "reduce", "origin 0 with origin 1"}));
}

TEST(Verify, AllgatherMustNotFinalize) {
  auto g = direct_allgather(2, 2);
  auto& s = g[0];
  push_step(s, {.kind = step_kind::finalize, .dst = out(0, 4)}, {1, 2});
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 0 output element 0", "finalized 1 times", "allgather"}));
}

TEST(Verify, AllgatherBlockFromWrongRank) {
  auto g = direct_allgather(3, 2);
  // Rank 2 receives rank 1's block into block 0's place and rank 0's into block 1's.
  auto& s = g[2];
  for (auto& st : s.steps)
    if (st.kind == step_kind::recv) st.dst = out(std::size_t(1 - st.peer) * 2, 2);
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 2 output element 0", "ranks {0}", "got origin 0, ranks {1}"}));
}

TEST(Verify, OutputNeverWritten) {
  auto g = direct_broadcast(3, 2, 0);
  auto& s = g[2];
  s.steps.clear();
  s = rebuild(s);
  // Rank 0 now sends to nobody on rank 2: matching reports it first.
  EXPECT_TRUE(fails_with(g, {"rank 0 step 2", "send to peer 2", "no matching recv"}));
  auto& root = g[0];
  root.steps.pop_back();
  root = rebuild(root);
  EXPECT_TRUE(fails_with(g, {"rank 2 output element 0", "never written"}));
}

// ---------------------------------------------------------------------------------------
// d) data flow and deadlock

TEST(Verify, ReadingUndefinedScratch) {
  const auto d = make(collective::allreduce, 1, 2);
  builder b(d, 0, "bad");
  const auto tmp = b.scratch(2 * es);
  const auto c = b.copy(in(0, 2), out(0, 2));
  const auto r = b.reduce(tmp, out(0, 2), {c});
  b.finalize(out(0, 2), {r});
  const group g{std::move(b).build()};
  EXPECT_TRUE(fails_with(g, {"rank 0 step 1", "reduce", "reads data before it is produced", "scratch byte 0"}));
}

TEST(Verify, BroadcastNonRootInputIsUndefined) {
  auto g = direct_broadcast(2, 2, 0);
  auto& s = g[1];
  // Rank 1 copies its own (unused) input instead of receiving.
  push_step(s, {.kind = step_kind::copy, .src = in(0, 2), .dst = out(0, 2)}, {0});
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 1 step 1", "copy", "reads data before it is produced", "input byte 0"}));
}

TEST(Verify, SendOfUndefinedData) {
  const auto d = make(collective::broadcast, 2, 2, 0);
  group g;
  {
    builder b(d, 0, "bad");
    b.send(1, 0, out(0, 2));  // root sends its output before writing it
    b.copy(in(0, 2), out(0, 2), {0});
    g.push_back(std::move(b).build());
  }
  {
    builder b(d, 1, "bad");
    b.recv(0, 0, out(0, 2));
    g.push_back(std::move(b).build());
  }
  EXPECT_TRUE(fails_with(g, {"rank 0 step 0", "send to peer 1", "reads data before it is produced"}));
}

TEST(Verify, Deadlock) {
  // Both ranks receive before they send, and each send waits for its rank's receive.
  const auto d = make(collective::allreduce, 2, 2);
  group g;
  for (int r = 0; r < 2; ++r) {
    builder b(d, r, "deadlock");
    const auto tmp = b.scratch(2 * es);
    const auto rv = b.recv(1 - r, 7, tmp);
    b.send(1 - r, 7, in(0, 2), {rv});
    const auto c = b.copy(in(0, 2), out(0, 2));
    const auto red = b.reduce(tmp, out(0, 2), {c, rv});
    b.finalize(out(0, 2), {red});
    g.push_back(std::move(b).build());
  }
  EXPECT_TRUE(fails_with(g, {"deadlock", "8 of 10 steps", "rank 0 step 0 (recv from peer 1, tag 7",
                             "rank 1 step 1 (send to peer 0, tag 7", "waits for"}));
}

TEST(Verify, RecvReduceCycleDeadlocks) {
  // recv_reduce straight into output in place must wait for the sends, but a send only
  // completes when the peer's recv_reduce does, which waits for the peer's sends.
  const auto d = make(collective::allreduce, 2, 2);
  group g;
  for (int r = 0; r < 2; ++r) {
    builder b(d, r, "cycle");
    const auto s = b.send(1 - r, 0, in(0, 2));
    const auto rr = b.recv_reduce(1 - r, 0, in(0, 2), out(0, 2), {s});
    b.finalize(out(0, 2), {rr});
    g.push_back(std::move(b).build());
  }
  EXPECT_TRUE(fails_with(g, {"deadlock", "rank 0 step 0 (send to peer 1", "recv_reduce from peer 0"}));
}

// ---------------------------------------------------------------------------------------
// c) races

TEST(Verify, TwoUnorderedWrites) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[0];
  // A second copy into output, ordered with nothing.
  push_step(s, {.kind = step_kind::copy, .src = in(0, 2), .dst = out(0, 2)});
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"race on rank 0", "output byte 0", "step 4 (finalize", "step 5 (copy", "writes it",
                             "neither depends on the other"}));
}

TEST(Verify, SendSourceOverwritten) {
  const auto d = make(collective::allreduce, 2, 2);
  group g;
  for (int r = 0; r < 2; ++r) {
    builder b(d, r, "racy");
    const auto a = b.scratch(2 * es), tmp = b.scratch(2 * es);
    const auto stage = b.copy(in(0, 2), a);
    b.send(1 - r, 0, a, {stage});
    const auto rv = b.recv(1 - r, 0, tmp);
    const auto c = b.copy(in(0, 2), out(0, 2));
    const auto red = b.reduce(tmp, out(0, 2), {c, rv});
    const auto fin = b.finalize(out(0, 2), {red});
    if (r == 1) b.copy(out(0, 2), a, {stage, fin});  // reuses the staging area while the send may read it
    g.push_back(std::move(b).build());
  }
  EXPECT_TRUE(fails_with(g, {"race on rank 1", "scratch byte 0", "step 1 (send to peer 0, tag 0", "reads it",
                             "step 6 (copy", "writes it"}));
}

TEST(Verify, RaceOnlyInPlace) {
  // The copy input -> output does not wait for the sends of input: fine out of place,
  // a race in place where input and output are one memory.
  const auto g = direct_allreduce(3, 4, {.copy_after_sends = false, .finalize = true});
  EXPECT_TRUE(passes(g));
  EXPECT_TRUE(fails_with(g, {"race on rank 0", "(send to peer", "reads it", "step 4 (copy", "in place"}, {.in_place = true}));
}

TEST(Verify, RingAllgatherWithoutForwardingDependencyRaces) {
  auto g = ring_allgather(4, 2);
  auto& s = g[2];
  set_deps(s, 3, {});  // forward block 1 before it arrives
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"race on rank 2", "step 2 (recv from peer 1, tag 0", "step 3 (send to peer 3, tag 1"}));
}

// ---------------------------------------------------------------------------------------
// b) matching

TEST(Verify, UnmatchedSend) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[0];
  push_step(s, {.kind = step_kind::send, .peer = 1, .tag = 99, .src = in(0, 2)});
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 0 step 5", "send to peer 1, tag 99", "no matching recv"}));
}

TEST(Verify, UnmatchedRecv) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[1];
  const auto tmp = region{buffer::scratch, s.scratch_bytes, 2 * es};
  s.scratch_bytes += 2 * es;
  push_step(s, {.kind = step_kind::recv, .peer = 0, .tag = 5, .dst = tmp});
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 1 step 5", "recv from peer 0, tag 5", "no matching send"}));
}

TEST(Verify, MismatchedBytes) {
  auto g = direct_allreduce(2, 4);
  auto& s = g[1];
  s.steps[1].dst.bytes = 2 * es;  // recv expects half
  s.steps[3].src.bytes = 2 * es;
  s.steps[3].dst.bytes = 2 * es;
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 0 step 0", "sends 16 bytes", "rank 1 step 1", "receives 8 bytes"}));
}

TEST(Verify, DuplicateTag) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[0];
  push_step(s, {.kind = step_kind::send, .peer = 1, .tag = 0, .src = in(0, 2)});
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"duplicate message", "rank 0 step 0", "step 5", "send to peer 1, tag 0"}));
}

// ---------------------------------------------------------------------------------------
// a) structure

TEST(Verify, RegionOutOfRange) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[1];
  s.steps[2].dst = out(0, 3);
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 1 step 2", "copy", "dst output[0,12) lies outside the output buffer (8 bytes)"}));
}

TEST(Verify, ScratchOutOfRange) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[0];
  s.scratch_bytes = 4;
  EXPECT_TRUE(fails_with(g, {"rank 0 step 1", "recv from peer 1", "scratch[0,8) lies outside the scratch buffer"}));
}

TEST(Verify, UnalignedRegion) {
  auto g = direct_allreduce(2, 2);
  auto& s = g[0];
  s.steps[0].src = {buffer::input, 2, 4};
  s = rebuild(s);
  EXPECT_TRUE(fails_with(g, {"rank 0 step 0", "send to peer 1", "input[2,6) is not a multiple of elem_size 4"}));
}

TEST(Verify, PeerIsSelfOrOutOfRange) {
  auto g = direct_allreduce(2, 2);
  g[1].steps[0].peer = 1;
  EXPECT_TRUE(fails_with(g, {"rank 1 step 0", "send to peer 1", "is the rank itself"}));
  g[1].steps[0].peer = 2;
  EXPECT_TRUE(fails_with(g, {"rank 1 step 0", "peer 2 is out of range"}));
}

TEST(Verify, DependencyOnLaterStep) {
  auto g = direct_allreduce(2, 2);
  set_deps(g[0], 2, {4});  // not through builder: it would refuse
  EXPECT_TRUE(fails_with(g, {"rank 0 step 2", "depends on step 4, which is not earlier"}));
}

TEST(Verify, SuccessorsOutOfDate) {
  auto g = direct_allreduce(2, 2);
  set_deps(g[0], 2, {1});  // edited without rebuilding
  EXPECT_TRUE(fails_with(g, {"rank 0", "successor lists do not match deps"}));
}

TEST(Verify, DependencyRangesMalformed) {
  auto g = direct_allreduce(2, 2);
  g[1].dep_ids.pop_back();  // the last step's range now ends past the array
  EXPECT_TRUE(fails_with(g, {"rank 1", "dependency ranges do not cover dep_ids"}));
}

TEST(Verify, GroupDisagrees) {
  auto g = direct_allreduce(3, 2);
  g[2].desc.count = 3;
  EXPECT_TRUE(fails_with(g, {"rank 2", "descriptor (allreduce size 3 count 3", "differs from rank 0's"}));
  g = direct_allreduce(3, 2);
  std::swap(g[1], g[2]);
  EXPECT_TRUE(fails_with(g, {"schedule at index 1 says it is rank 2"}));
  g = direct_allreduce(3, 2);
  g.pop_back();
  EXPECT_TRUE(fails_with(g, {"group has 2 schedules", "size 3"}));
  EXPECT_TRUE(fails_with(group{}, {"empty group"}));
}

// ---------------------------------------------------------------------------------------
// scale

TEST(Verify, RingAllgatherOf1024RanksIsQuick) {
  const auto g = ring_allgather(1024, 2);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(passes(g, {.in_place = true}));
  const auto s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("ring allgather p=1024 count=2: %.3f s\n", s);
}

TEST(Verify, SixtyFourRanksWithHundredsOfElements) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(passes(ring_allreduce(64, 5)));  // 320 elements
  EXPECT_TRUE(passes(direct_allreduce(64, 300)));
  EXPECT_TRUE(passes(direct_reduce_scatter(64, 5)));
  EXPECT_TRUE(passes(ring_allgather(64, 5), {.in_place = true}));
  const auto s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("p=64 cases: %.3f s\n", s);
}

// ---------------------------------------------------------------------------------------
// One-sided steps: write, notify, wait

// Allgather by one-sided writes: copy input into block r, write it into block r of every
// peer's output, wait for p-1 flags with tag 1.
group write_allgather(int p, std::size_t count) {
  const auto d = make(collective::allgather, p, count);
  group g;
  for (int r = 0; r < p; ++r) {
    builder b(d, r, "write");
    const auto copy = b.copy(in(0, count), out(std::size_t(r) * count, count));
    for (int q = 0; q < p; ++q)
      if (q != r) b.write(q, 1, in(0, count), out(std::size_t(r) * count, count), {copy});
    b.wait(1, std::uint32_t(p - 1));
    g.push_back(std::move(b).build());
  }
  return g;
}

// Two ranks, allgather of one element. Rank 0 writes its input into block 0 of rank 1's
// output; rank 1 copies its own and waits. `edit` changes rank 1's steps before building.
template <class Rank0, class Rank1>
group two_ranks(Rank0&& rank0, Rank1&& rank1, std::size_t scratch1 = 0) {
  const auto d = make(collective::allgather, 2, 1);
  group g;
  builder b0(d, 0, "hand"), b1(d, 1, "hand");
  rank0(b0);
  if (scratch1) (void)b1.scratch(scratch1);
  rank1(b1);
  g.push_back(std::move(b0).build());
  g.push_back(std::move(b1).build());
  return g;
}

TEST(VerifyOneSided, WriteAllgatherPasses) {
  for (int p : {1, 2, 3, 7})
    for (std::size_t n : {1, 5})
      for (bool in_place : {false, true}) EXPECT_TRUE(passes(write_allgather(p, n), {in_place})) << p << " " << n;
}

TEST(VerifyOneSided, WriteWithoutWait) {
  auto g = write_allgather(3, 2);
  g[2] = rebuild(g[2]);  // keep rank 2 as is; drop rank 1's wait
  builder b(g[1].desc, 1, "write");
  for (std::size_t i = 0; i + 1 < g[1].steps.size(); ++i) b.add(g[1].steps[i]);
  g[1] = std::move(b).build();
  EXPECT_TRUE(fails_with(g, {"rank 0 step 1 (write to peer 1, tag 1", "no matching wait on rank 1 with tag 1"}));
}

TEST(VerifyOneSided, WaitCountDiffersFromFlags) {
  auto g = write_allgather(4, 1);
  builder b(g[3].desc, 3, "write");
  for (auto st : g[3].steps) {
    if (st.kind == step_kind::wait) st.count = 2;
    b.add(st);
  }
  g[3] = std::move(b).build();
  EXPECT_TRUE(fails_with(g, {"rank 3 step 4 (wait tag 1 for 2 flags)", "waits for 2 flags but 3 writes/notifies raise tag 1 at rank 3"}));
}

TEST(VerifyOneSided, WaitWithoutAnyOneSidedStep) {
  auto g = direct_allgather(2, 1);
  builder b(g[0].desc, 0, "direct");
  for (const auto& st : g[0].steps) b.add(st);
  b.wait(5, 1);
  g[0] = std::move(b).build();
  EXPECT_TRUE(fails_with(g, {"wait tag 5 for 1 flag", "no write or notify raises tag 5 at rank 0"}));
}

TEST(VerifyOneSided, DuplicateFlagAndDuplicateWait) {
  auto g = two_ranks(
      [](builder& b) {
        b.copy(in(0, 1), out(0, 1));
        const auto w = b.write(1, 0, in(0, 1), out(0, 1));
        b.notify(1, 0, {w});
      },
      [](builder& b) {
        b.copy(in(0, 1), out(1, 1));
        b.wait(0, 2);
      });
  EXPECT_TRUE(fails_with(g, {"duplicate flag", "rank 0 step 2 (notify peer 1, tag 0)", "a second time"}));
  g = two_ranks([](builder& b) { b.notify(1, 0); },
                [](builder& b) {
                  b.wait(0, 1);
                  b.wait(0, 1);
                });
  EXPECT_TRUE(fails_with(g, {"duplicate wait", "rank 1 step 0", "rank 1 step 1"}));
}

TEST(VerifyOneSided, WriteMustLandInsideThePeersOutputOrScratch) {
  auto g = two_ranks([](builder& b) { b.write(1, 0, in(0, 1), in(0, 1)); }, [](builder& b) { b.wait(0, 1); });
  EXPECT_TRUE(fails_with(g, {"rank 0 step 0", "lands in rank 1's input"}));
  g = two_ranks([](builder& b) { b.write(1, 0, in(0, 1), {buffer::scratch, 4, 4}); }, [](builder& b) { b.wait(0, 1); },
                4);
  EXPECT_TRUE(fails_with(g, {"rank 0 step 0", "dst scratch[4,8) lies outside the rank 1's scratch buffer (4 bytes)"}));
}

TEST(VerifyOneSided, WaitsThatNeverCompleteDeadlock) {
  // Each rank notifies the other only after its own wait: neither flag is ever raised.
  const auto d = make(collective::allgather, 2, 1);
  group g;
  for (int r = 0; r < 2; ++r) {
    builder b(d, r, "stuck");
    const auto w = b.wait(0, 1);
    b.notify(1 - r, 0, {w});
    const auto c = b.copy(in(0, 1), out(std::size_t(r), 1));
    b.copy(in(0, 1), out(std::size_t(1 - r), 1), {c});
    g.push_back(std::move(b).build());
  }
  EXPECT_TRUE(fails_with(g, {"deadlock", "rank 0 step 0 (wait tag 0 for 1 flag) waits for flags of rank 1 step 1 (notify peer 0, tag 0)"}));
}

TEST(VerifyOneSided, ReadingTheLandingAreaBeforeTheWaitRaces) {
  // Rank 1 forwards the landed block to... itself, in scratch, without waiting first.
  auto g = two_ranks([](builder& b) { b.write(1, 0, in(0, 1), out(0, 1)); },
                     [](builder& b) {
                       b.copy(in(0, 1), out(1, 1));
                       b.copy(out(0, 1), {buffer::scratch, 0, 4});
                       b.wait(0, 1);
                     },
                     4);
  g[0] = rebuild(g[0]);
  EXPECT_TRUE(fails_with(g, {"race across ranks on rank 1 at output byte 0", "rank 0 step 0 (write to peer 1",
                             "rank 1 step 1 (copy", "reads it", "neither ordered after rank 1 step 2 (wait tag 0"}));
}

TEST(VerifyOneSided, TouchingTheLandingAreaAfterTheWaitIsFineBeforeItRaces) {
  const auto rank0 = [](builder& b) {
    b.copy(in(0, 1), out(0, 1));
    b.write(1, 0, in(0, 1), out(0, 1));
  };
  const auto ok = two_ranks(rank0, [](builder& b) {
    b.copy(in(0, 1), out(1, 1));
    const auto w = b.wait(0, 1);
    b.copy(out(0, 1), {buffer::scratch, 0, 4}, {w});  // reads what landed: ordered
  }, 4);
  // rank 0's block 1 is never written: only the race question matters here.
  EXPECT_EQ(verify(ok).message.find("race"), std::string::npos) << verify(ok).message;
  const auto g = two_ranks(rank0, [](builder& b) {
    b.copy(in(0, 1), out(1, 1));
    b.copy(in(0, 1), out(0, 1));  // rank 1 writes the landing area too: unordered
    b.wait(0, 1);
  });
  EXPECT_TRUE(fails_with(g, {"race across ranks on rank 1 at output byte 0", "rank 1 step 1 (copy", "writes it"}));
}

// In-place GDRAA's phase B in miniature: rank 1 writes and reads its block 0, then
// notifies rank 0, which only then overwrites that block with a write. Safe, because
// rank 1's steps completed before its notify, which rank 0's wait counts; without that
// causal chain it is a race.
TEST(VerifyOneSided, CrossRankCausalityOrdersALandingAfterLocalSteps) {
  const auto d = make(collective::allgather, 2, 1);
  const auto build = [&](bool ordered) {
    group g;
    {
      builder b(d, 0, "causal");
      b.copy(in(0, 1), out(0, 1));
      const auto w = b.wait(0, 1);
      if (ordered)
        b.write(1, 1, in(0, 1), out(0, 1), {w});
      else
        b.write(1, 1, in(0, 1), out(0, 1));
      b.wait(2, 1);
      g.push_back(std::move(b).build());
    }
    {
      builder b(d, 1, "causal");
      const auto slot = b.scratch(4);
      const auto own = b.copy(in(0, 1), out(1, 1));
      b.write(0, 2, out(1, 1), out(1, 1), {own});
      const auto scribble = b.copy(in(0, 1), out(0, 1));  // uses block 0 as a temporary
      const auto read = b.copy(out(0, 1), slot, {scribble});
      b.notify(0, 0, {read});
      b.wait(1, 1);
      g.push_back(std::move(b).build());
    }
    return g;
  };
  EXPECT_TRUE(passes(build(true)));
  EXPECT_TRUE(fails_with(build(false), {"race across ranks on rank 1 at output byte 0",
                                        "rank 0 step 2 (write to peer 1, tag 1", "rank 1 step 2 (copy", "writes it"}));
}

TEST(VerifyOneSided, TwoWritesLandingOnTheSameBytesUnordered) {
  const auto d = make(collective::allgather, 3, 1);
  group g;
  for (int r = 0; r < 3; ++r) {
    builder b(d, r, "clash");
    if (r != 0) b.write(0, 0, in(0, 1), out(1, 1));  // both land on rank 0's block 1
    if (r == 0) b.wait(0, 2);
    g.push_back(std::move(b).build());
  }
  EXPECT_TRUE(fails_with(g, {"race across ranks on rank 0 at output byte 4", "rank 1 step 0 (write to peer 0",
                             "rank 2 step 0 (write to peer 0", "both land there"}));
}

TEST(VerifyOneSided, LandedDataIsCheckedLikeReceivedData) {
  // The write carries an undefined scratch element: the read is caught at the writer.
  auto g = two_ranks([](builder& b) {
    (void)b.scratch(4);
    b.write(1, 0, {buffer::scratch, 0, 4}, out(0, 1));
  },
                     [](builder& b) {
                       b.copy(in(0, 1), out(1, 1));
                       b.wait(0, 1);
                     });
  EXPECT_TRUE(fails_with(g, {"rank 0 step 0 (write to peer 1", "reads data before it is produced"}));
}

TEST(VerifyOneSided, ReduceSlotsNeedsWholeSlots) {
  const auto d = make(collective::allreduce, 1, 2);
  builder b(d, 0, "slots");
  const auto s = b.scratch(12);
  b.reduce_slots(s, out(0, 2));
  const group g{std::move(b).build()};
  EXPECT_TRUE(fails_with(g, {"rank 0 step 0 (reduce_slots", "src must hold whole slots"}));
}

TEST(VerifyOneSided, RingAtSixtyFourStaysOnTheFastPath) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(passes(ring_allreduce(64, 3)));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace MIMATRIX_UNIT_ID
