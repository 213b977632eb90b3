// Checks of progress across calls, for any transport: calls waited in opposite orders on
// different ranks, many calls of mixed collectives in flight waited in reverse or random
// order, and calls a progress thread finishes while the caller never waits. Each returns
// the number of wrong results (0: all exact) and prints the first one.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allgather.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/broadcast.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/reduce_scatter.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/progress.hpp"

namespace mimatrix::test {

inline std::int64_t progress_value(int rank, std::size_t i, int call) {
  return std::int64_t((i * 31 + std::size_t(rank) * 17 + std::size_t(call) * 7) % 1009);
}

inline int report_miss(int rank, int call, std::size_t at, std::int64_t got, std::int64_t want) {
  std::fprintf(stderr, "rank %d: call %d element %zu is %lld, expected %lld\n", rank, call, at,
               static_cast<long long>(got), static_cast<long long>(want));
  return 1;
}

/// Two allreduces; even ranks wait for the first then the second, odd ranks the other way.
template <class Transport>
int opposite_wait_orders(communicator<Transport>& comm, std::size_t count = 100000) {
  allreduce<Transport, topology::ring, reduce::sum<std::int64_t>> sum(comm);
  const int p = comm.size(), r = comm.rank();
  std::vector<std::int64_t> a(count), b(count);
  for (std::size_t i = 0; i < count; ++i) a[i] = progress_value(r, i, 0), b[i] = progress_value(r, i, 1);
  auto first = sum.start(a);
  auto second = sum.start(b);
  if (r % 2 == 0) {
    first.wait();
    second.wait();
  } else {
    second.wait();
    first.wait();
  }
  int wrong = 0;
  for (int call = 0; call < 2 && !wrong; ++call) {
    const auto& v = call == 0 ? a : b;
    for (std::size_t i = 0; i < count && !wrong; ++i) {
      std::int64_t want = 0;
      for (int q = 0; q < p; ++q) want += progress_value(q, i, call);
      if (v[i] != want) wrong += report_miss(r, call, i, v[i], want);
    }
  }
  return wrong;
}

/// `calls` calls in flight at once: allreduce by ring and by GDRAA (one-sided), reduce-
/// scatter, allgather and broadcast, of sizes from 0 to tens of thousands of elements.
/// Even ranks wait in reverse start order, odd ranks in an order drawn from `seed`.
template <class Transport>
int many_in_flight(communicator<Transport>& comm, int calls = 64, std::uint64_t seed = 1) {
  const int p = comm.size(), r = comm.rank();
  allreduce<Transport, topology::ring, reduce::sum<std::int64_t>> ring_sum(comm);
  allreduce<Transport, topology::mesh, reduce::sum<std::int64_t>, algorithm::gdraa> direct_sum(comm);
  reduce_scatter<Transport, topology::ring, reduce::sum<std::int64_t>> scatter(comm);
  allgather<Transport, topology::ring, std::int64_t> gather(comm);
  broadcast<Transport, topology::ring, std::int64_t> bcast(comm);
  constexpr std::size_t sizes[] = {0, 1, 7, 100, 1000, 4099, 30011};

  struct call_data {
    int kind = 0;
    std::size_t count = 0;
    int root = 0;
    std::vector<std::int64_t> in, out;
  };
  std::vector<call_data> data(static_cast<std::size_t>(calls));
  std::vector<request> pending;
  pending.reserve(data.size());
  for (int c = 0; c < calls; ++c) {
    call_data& d = data[std::size_t(c)];
    d.kind = c % 5;
    d.count = sizes[std::size_t(c * 3 + c / 5) % std::size(sizes)];
    d.root = c % p;
    const std::size_t in_count = d.kind == 2 ? d.count * std::size_t(p) : d.count;
    const std::size_t out_count = d.kind == 3 ? d.count * std::size_t(p) : d.count;
    d.in.resize(in_count);
    d.out.assign(out_count, -1);
    for (std::size_t i = 0; i < in_count; ++i) d.in[i] = progress_value(r, i, c);
    switch (d.kind) {
      case 0: pending.push_back(ring_sum.start(d.in, d.out)); break;
      case 1: pending.push_back(direct_sum.start(d.in, d.out)); break;
      case 2: pending.push_back(scatter.start(d.in, d.out)); break;
      case 3: pending.push_back(gather.start(d.in, d.out)); break;
      default: pending.push_back(bcast.start(d.in, d.out, d.root)); break;
    }
  }
  std::vector<std::size_t> order(pending.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  if (r % 2 == 0)
    std::reverse(order.begin(), order.end());
  else
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + std::uint64_t(r)));
  for (std::size_t k : order) pending[k].wait();

  int wrong = 0;
  for (int c = 0; c < calls && !wrong; ++c) {
    const call_data& d = data[std::size_t(c)];
    for (std::size_t i = 0; i < d.out.size() && !wrong; ++i) {
      std::int64_t want = 0;
      switch (d.kind) {
        case 0:
        case 1:
          for (int q = 0; q < p; ++q) want += progress_value(q, i, c);
          break;
        case 2:
          for (int q = 0; q < p; ++q) want += progress_value(q, std::size_t(r) * d.count + i, c);
          break;
        case 3: want = progress_value(int(i / d.count), i % d.count, c); break;
        default: want = progress_value(d.root, i, c); break;
      }
      if (d.out[i] != want) wrong += report_miss(r, c, i, d.out[i], want);
    }
  }
  return wrong;
}

/// With a progress thread, started calls finish while the caller never tests or waits:
/// each rank polls only the count of calls in flight. False if they did not finish within
/// `limit` (the caller alone would never finish them).
template <class Transport>
bool finishes_without_waiting(communicator<Transport>& comm, std::chrono::milliseconds limit) {
  allreduce<Transport, topology::ring, reduce::sum<std::int64_t>> sum(comm);
  std::vector<std::int64_t> a(200000, comm.rank() + 1), b(3, comm.rank());
  auto first = sum.start(a);
  auto second = sum.start(b);
  const auto until = std::chrono::steady_clock::now() + limit;
  while (comm.transport().progress().in_flight() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool finished = comm.transport().progress().in_flight() == 0;
  first.wait();
  second.wait();
  const std::int64_t p = comm.size();
  return finished && a[123] == p * (p + 1) / 2 && b[2] == p * (p - 1) / 2;
}

}  // namespace mimatrix::test
