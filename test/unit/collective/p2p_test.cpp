// Point-to-point calls (p2p.hpp) through collectives<inproc>: exact integer data over world
// sizes 1 to 8 and counts 0, 1, 7 and 2^20; a ring exchange in one batch, a 1F1B pipeline,
// same-tag order, batches in flight together, sends to itself, groups, and p2p between
// collectives, whose numbering it leaves alone.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/p2p.hpp"
#include "mimatrix/transport/inproc.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::inproc;
using values = std::vector<std::int32_t>;

/// Element k of what rank r sends with `tag`: distinct everywhere.
std::int32_t value(int r, std::uint32_t tag, std::size_t k) {
  return static_cast<std::int32_t>(r * 1000003 + tag * 7919 + k + 1);
}
values made(int r, std::uint32_t tag, std::size_t n) {
  values v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = value(r, tag, k);
  return v;
}

TEST(p2p, a_ring_exchange_in_one_batch_on_every_rank) {
  for (int p = 1; p <= 8; ++p)
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1) << 20}) {
      if (n == (std::size_t(1) << 20) && p > 4 && p != 8) continue;  // the largest count on 1..4 and 8 ranks
      std::vector<values> from_left(p), from_right(p);
      transport::run_inproc(p, [&](int r, inproc::world& w) {
        communicator<inproc> comm(w, r);
        collectives<inproc> coll(comm);
        const int right = (r + 1) % p, left = (r + p - 1) % p;
        const values to_right = made(r, 1, n), to_left = made(r, 2, n);
        from_left[r].assign(n, -1);
        from_right[r].assign(n, -1);
        p2p_batch ring;  // receives first: blocking sends in this order would deadlock
        ring.recv(std::span<std::int32_t>(from_left[r]), left, 1)
            .recv(std::span<std::int32_t>(from_right[r]), right, 2)
            .send(std::span<const std::int32_t>(to_right), right, 1)
            .send(std::span<const std::int32_t>(to_left), left, 2);
        coll.start(ring).wait();
      });
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(from_left[r], made((r + p - 1) % p, 1, n)) << "p = " << p << ", n = " << n << ", rank " << r;
        EXPECT_EQ(from_right[r], made((r + 1) % p, 2, n)) << "p = " << p << ", n = " << n << ", rank " << r;
      }
    }
}

/// A 1F1B pipeline (Megatron's schedule) of `stages` ranks and `micro` microbatches of
/// `n` elements: forward f_s(x) = 2x + s, backward g_s(d) = d + 3s, the last stage's
/// gradient its own output. Returns, per microbatch, the gradient stage 0 ends with.
std::vector<values> one_f_one_b(int stages, int micro, std::size_t n) {
  std::vector<values> grads(micro);
  transport::run_inproc(stages, [&](int s, inproc::world& w) {
    communicator<inproc> comm(w, s);
    collectives<inproc> coll(comm);
    const bool first = s == 0, last = s == stages - 1;
    const auto forward = [&](values x) {
      for (auto& e : x) e = 2 * e + s;
      return x;
    };
    const auto backward = [&](values d) {
      for (auto& e : d) e += 3 * s;
      return d;
    };
    int next_input = 0, next_grad = 0;  // microbatches taken in, gradients ended (stage 0)
    values in(n), grad(n);
    // Each of these is one batch, as Megatron's p2p_communicate: its sends and receives together.
    const auto exchange = [&](const values* send_fwd, values* recv_fwd, const values* send_bwd, values* recv_bwd) {
      p2p_batch b;
      if (send_fwd && !last) b.send(std::span<const std::int32_t>(*send_fwd), s + 1);
      if (recv_bwd && !last) b.recv(std::span<std::int32_t>(*recv_bwd), s + 1);
      if (send_bwd && !first) b.send(std::span<const std::int32_t>(*send_bwd), s - 1);
      if (recv_fwd && !first) b.recv(std::span<std::int32_t>(*recv_fwd), s - 1);
      coll.start(b).wait();
    };
    const auto take_input = [&](values& x) {
      if (first) x = made(0, 0, n), x[0] = next_input++;
      else exchange(nullptr, &x, nullptr, nullptr);
    };
    const auto end_backward = [&](const values& d) {
      if (first) grads[next_grad++] = d;
      else exchange(nullptr, nullptr, &d, nullptr);
    };
    const int warmup = std::min(stages - s - 1, micro), remaining = micro - warmup;
    values out;
    for (int i = 0; i < warmup; ++i) {
      take_input(in);
      out = forward(in);
      exchange(&out, nullptr, nullptr, nullptr);
    }
    if (remaining > 0) take_input(in);
    for (int i = 0; i < remaining; ++i) {
      out = forward(in);
      if (last) grad = out;
      else exchange(&out, nullptr, nullptr, &grad);  // send_forward_recv_backward
      const values back = backward(grad);
      if (i == remaining - 1) {
        end_backward(back);
      } else if (first) {
        grads[next_grad++] = back;
        take_input(in);
      } else {
        exchange(nullptr, &in, &back, nullptr);  // send_backward_recv_forward
      }
    }
    for (int i = 0; i < warmup; ++i) {
      exchange(nullptr, nullptr, nullptr, &grad);  // recv_backward
      end_backward(backward(grad));
    }
  });
  return grads;
}

TEST(p2p, a_1f1b_pipeline_on_four_ranks) {
  const int stages = 4, micro = 6;
  const std::size_t n = 7;
  const auto grads = one_f_one_b(stages, micro, n);
  for (int m = 0; m < micro; ++m) {
    values x = made(0, 0, n);
    x[0] = m;
    for (int s = 0; s < stages; ++s)
      for (auto& e : x) e = 2 * e + s;
    for (int s = stages - 1; s >= 0; --s)
      for (auto& e : x) e += 3 * s;
    EXPECT_EQ(grads[m], x) << "microbatch " << m;
  }
}

TEST(p2p, ops_of_one_tag_meet_in_order_within_a_batch_and_across_batches) {
  values got[4];
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const values a = made(0, 10, 5), b = made(0, 11, 5), c = made(0, 12, 3), d = made(0, 13, 3);
    if (r == 0) {
      coll.start(p2p_batch().send(std::span<const std::int32_t>(a), 1, 3).send(std::span<const std::int32_t>(b), 1, 3))
          .wait();
      coll.send(c.data(), c.size(), dtype::int32, 1, 4).wait();
      coll.send(d.data(), d.size(), dtype::int32, 1, 4).wait();
      return;
    }
    for (auto& g : got) g.assign(5, -1);
    got[2].resize(3);
    got[3].resize(3);
    coll.start(p2p_batch().recv(std::span<std::int32_t>(got[0]), 0, 3).recv(std::span<std::int32_t>(got[1]), 0, 3))
        .wait();
    coll.recv(got[2].data(), 3, dtype::int32, 0, 4).wait();
    coll.recv(got[3].data(), 3, dtype::int32, 0, 4).wait();
  });
  EXPECT_EQ(got[0], made(0, 10, 5));
  EXPECT_EQ(got[1], made(0, 11, 5));
  EXPECT_EQ(got[2], made(0, 12, 3));
  EXPECT_EQ(got[3], made(0, 13, 3));
}

TEST(p2p, two_batches_with_one_peer_in_flight_at_once) {
  values first(9, -1), second(9, -1);
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const values x = made(0, 1, 9), y = made(0, 2, 9);
    if (r == 0) {
      request a = coll.send(x.data(), 9, dtype::int32, 1);
      request b = coll.send(y.data(), 9, dtype::int32, 1);
      b.wait();
      a.wait();
    } else {
      request a = coll.recv(first.data(), 9, dtype::int32, 0);
      request b = coll.recv(second.data(), 9, dtype::int32, 0);
      b.wait();  // the second first: every wait advances both
      a.wait();
    }
  });
  EXPECT_EQ(first, made(0, 1, 9));
  EXPECT_EQ(second, made(0, 2, 9));
}

TEST(p2p, sends_to_itself_land_in_its_own_receives) {
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const values mine = made(r, 5, 11), also = made(r, 6, 2);
    values got(11, -1), got2(2, -1);
    coll.group_start();
    (void)coll.recv(got.data(), got.size(), dtype::int32, r, 5);
    (void)coll.send(also.data(), also.size(), dtype::int32, r, 6);
    (void)coll.send(mine.data(), mine.size(), dtype::int32, r, 5);
    (void)coll.recv(got2.data(), got2.size(), dtype::int32, r, 6);
    coll.group_end().wait();
    EXPECT_EQ(got, mine);
    EXPECT_EQ(got2, also);
  });
}

TEST(p2p, nested_groups_start_one_batch_at_the_outermost_end) {
  transport::run_inproc(4, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    std::vector<values> got(4, values(3, -1));
    std::vector<values> sent(4);
    coll.group_start();
    for (int q = 0; q < 4; ++q) {  // an all-to-all of sends and receives
      coll.group_start();
      sent[q] = made(r, std::uint32_t(q), 3);
      (void)coll.send(sent[q].data(), 3, dtype::int32, q, 9);
      (void)coll.recv(got[q].data(), 3, dtype::int32, q, 9);
      request inner = coll.group_end();
      EXPECT_FALSE(inner.valid());
    }
    coll.group_end().wait();
    for (int q = 0; q < 4; ++q) EXPECT_EQ(got[q], made(q, std::uint32_t(r), 3)) << "rank " << r << " from " << q;
  });
}

TEST(p2p, p2p_between_allreduces_leaves_the_collectives_numbering_alone) {
  transport::run_inproc(4, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    values x(5, r + 1), sum(5, 0);
    coll.allreduce(x.data(), sum.data(), 5, dtype::int32, reduce::op_kind::sum).wait();
    EXPECT_EQ(sum, values(5, 10));
    const std::uint64_t before = comm.next_sequence();
    // Only neighbours 0-1 and 2-3 exchange, several times: the ranks' batch counts differ.
    const int peer = r ^ 1;
    const values mine = made(r, 0, 4);
    values theirs(4, -1);
    for (int k = 0; k < 1 + r / 2; ++k) {
      p2p_batch b;
      b.send(std::span<const std::int32_t>(mine), peer).recv(std::span<std::int32_t>(theirs), peer);
      request q = coll.start(b);
      EXPECT_EQ(q.sequence(), std::uint64_t(k));  // this rank's own batch number
      q.wait();
      EXPECT_EQ(theirs, made(peer, 0, 4));
    }
    EXPECT_EQ(comm.next_sequence(), before);
    coll.allreduce(x.data(), sum.data(), 5, dtype::int32, reduce::op_kind::sum).wait();
    EXPECT_EQ(sum, values(5, 10));
    EXPECT_EQ(comm.next_sequence(), before + 1);
  });
}

TEST(p2p, an_empty_batch_is_done_and_names_no_peer) {
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    if (r == 0) {
      request none = coll.start(p2p_batch());
      EXPECT_FALSE(none.valid());
      coll.group_start();
      coll.group_end().wait();
    }
    const values mine = made(r, 0, 2);
    values theirs(2, -1);
    coll.start(p2p_batch().send(std::span<const std::int32_t>(mine), 1 - r).recv(std::span<std::int32_t>(theirs), 1 - r))
        .wait();
    EXPECT_EQ(theirs, made(1 - r, 0, 2));
  });
}

}  // namespace
}  // namespace mimatrix
