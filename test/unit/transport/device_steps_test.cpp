// The executor's device memory space (device_steps.hpp) through the in-process transport
// and the host implementation of device::port: every algorithm, dtype and op exact on
// "device" buffers whose streams run late, with every combine in device memory (a kernel
// cannot read host memory; the port refuses it as a GPU would fault); NCCL's stream order (the call waits for the
// work queued before it, and the work queued after it sees its result) with no host
// wait; GDRAA's allreduce as one pass a rank, with the least memory traffic, which
// algorithm::automatic takes on device buffers; and a failed
// call that ends its stream's wait instead of hanging it.
#include "mimatrix/transport/device_steps.hpp"

#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "mimatrix/algorithm/automatic.hpp"  // collectives<> on hierarchical, also when separately compiled
#include "mimatrix/collectives.hpp"
#include "mimatrix/device/host_port.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/topology/hierarchical.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/device_array.hpp"
#include "support/dtypes.hpp"
#include "support/forwarding_port.hpp"
#include "support/small_values.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using test::device_array;
using transport::inproc;

/// A host "device" whose every operation runs `lag` late, and whose kernels refuse host
/// memory.
device::host_port::settings late(std::chrono::microseconds lag) { return {.lag = lag, .device_memory_only = true}; }

call_options on(device::host_port& dev, device::stream_handle s, const std::string& algorithm = {},
                std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
  return {.algorithm = algorithm, .timeout = timeout, .stream = device::stream{&dev, s}, .tag = 0};
}

/// An allreduce of `n` elements on `p` ranks over `topo` with `algorithm`, out of place or
/// in place, its buffers on a host "device" whose every operation runs `lag` late.
template <class Topology>
void expect_exact_allreduce(int p, Topology topo, const std::string& algorithm, dtype t, reduce::op_kind op,
                            std::size_t n, bool in_place, std::chrono::microseconds lag) {
  device::host_port dev(late(lag));
  test::with_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    transport::run_inproc(p, [&](int r, inproc::world& w) {
      communicator<inproc> comm(w, r);
      collectives<inproc, Topology> coll(comm, topo);
      const device::stream_handle s = dev.make_stream();
      device_array<T> in(dev, n), out(dev, n);
      for (std::size_t i = 0; i < n; ++i) in[i] = T(static_cast<float>(test::small_value(r, i)));
      T* dst = in_place ? in.data() : out.data();
      coll.allreduce(in.data(), dst, n, t, op, on(dev, s, algorithm)).wait();
      for (std::size_t i = 0; i < n; ++i) {
        const double want = test::reduced_small_values(op, p, i, std::is_integral_v<T>);
        // Sums of small integers are exact in every dtype; a float average is one rounding off.
        const double tolerance = std::is_integral_v<T> || op != reduce::op_kind::avg ? 0.0 : want / 128;
        ASSERT_NEAR(static_cast<double>(static_cast<float>(dst[i])), want, tolerance)
            << algorithm << " on " << p << " ranks, " << to_string(t) << " " << reduce::to_string(op) << ", rank "
            << r << ", element " << i << (in_place ? ", in place" : "");
      }
      dev.free_stream(s);
    });
  });
}

TEST(device_steps, every_dtype_and_op_is_exact_on_a_late_running_device) {
  for (dtype t : test::all_dtypes)
    for (reduce::op_kind op : {reduce::op_kind::sum, reduce::op_kind::prod, reduce::op_kind::min,
                               reduce::op_kind::max, reduce::op_kind::avg})
      expect_exact_allreduce(3, topology::ring{}, "ring", t, op, 301, false, 20us);
}

TEST(device_steps, every_algorithm_is_exact_on_device_buffers) {
  const auto sum = reduce::op_kind::sum;
  for (int p : {1, 2, 3, 4, 5, 8}) {
    for (const char* algo : {"ring", "recursive_doubling", "halving_doubling"})
      for (bool in_place : {false, true}) expect_exact_allreduce(p, topology::ring{}, algo, dtype::int32, sum, 1000, in_place, 10us);
    expect_exact_allreduce(p, topology::mesh{}, "gdraa", dtype::int32, sum, 1000, false, 10us);
    expect_exact_allreduce(p, topology::mesh{}, "gdraa", dtype::int64, reduce::op_kind::max, 7, true, 10us);
    expect_exact_allreduce(p, topology::bigraph{}, "hdrm", dtype::int32, sum, 1000, false, 10us);
  }
  expect_exact_allreduce(4, topology::hierarchical<>(2), "hierarchical", dtype::int32, sum, 1000, false, 10us);
  expect_exact_allreduce(6, topology::hierarchical<>(3), "hierarchical", dtype::float32, sum, 999, true, 10us);
}

/// The device memory traffic of an int64 sum allreduce of `n` elements on `p` ranks
/// sharing one host "device", all ranks together; checks the result.
template <class Topology>
std::size_t allreduce_traffic(int p, Topology topo, const std::string& algorithm, std::size_t n, bool in_place) {
  device::host_port dev(late(5us));
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc, Topology> coll(comm, topo);
    const device::stream_handle s = dev.make_stream();
    device_array<std::int64_t> in(dev, n), out(dev, n, -1);
    for (std::size_t i = 0; i < n; ++i) in[i] = test::small_value(r, i);
    std::int64_t* dst = in_place ? in.data() : out.data();
    coll.allreduce(in.data(), dst, n, dtype::int64, reduce::op_kind::sum, on(dev, s, algorithm)).wait();
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(dst[i], test::reduced_small_values(reduce::op_kind::sum, p, i, true)) << algorithm << ", " << i;
    dev.free_stream(s);
  });
  return dev.memory_traffic();
}

// GDRAA's allreduce on device memory that every rank reaches runs as one pass a rank
// (direct_collective.hpp): the ranks' work reads each input once and writes each output
// once, 2p buffers in all, where the ring makes more; fewer elements than ranks leave
// shards empty.
TEST(device_steps, gdraa_makes_the_least_memory_traffic_on_device_buffers) {
  for (int p : {2, 3, 8})
    for (std::size_t n : {std::size_t(4099), std::size_t(5)})
      for (bool in_place : {false, true}) {
        const std::size_t buffer = n * sizeof(std::int64_t);
        const std::size_t direct = allreduce_traffic(p, topology::mesh{}, "gdraa", n, in_place);
        EXPECT_EQ(direct, 2 * std::size_t(p) * buffer) << p << " ranks, " << n << (in_place ? ", in place" : "");
        EXPECT_GT(allreduce_traffic(p, topology::ring{}, "ring", n, in_place), direct) << p << " ranks, " << n;
      }
}

// Threads reach each other's device memory, so algorithm::automatic (no algorithm named)
// takes GDRAA's one pass for an allreduce there, on every topology, where on host memory
// the network's cost model chooses (GDRAA does not run on a ring). A MIMATRIX_ALGO rule
// for the call still wins.
TEST(device_steps, automatic_takes_the_least_memory_traffic_on_device_buffers_on_every_topology) {
  constexpr std::size_t n = 4099;
  const auto least = [&](int p) { return 2 * std::size_t(p) * n * sizeof(std::int64_t); };
  for (int p : {2, 3, 5}) {
    EXPECT_EQ(allreduce_traffic(p, topology::ring{}, "", n, false), least(p)) << p << " ranks, ring";
    EXPECT_EQ(allreduce_traffic(p, topology::mesh{}, "", n, true), least(p)) << p << " ranks, mesh";
    EXPECT_EQ(allreduce_traffic(p, topology::bigraph{}, "", n, false), least(p)) << p << " ranks, bigraph";
    EXPECT_GT(allreduce_traffic(p, topology::ring{}, "ring", n, false), least(p)) << p << " ranks, ring named";
  }
  EXPECT_EQ(allreduce_traffic(4, topology::hierarchical<>(2), "", n, true), least(4));

  ::setenv("MIMATRIX_ALGO", "allreduce@32K-:halving_doubling", 1);  // read as each collectives starts
  EXPECT_GT(allreduce_traffic(3, topology::ring{}, "", n, false), least(3)) << "the rule's halving-doubling";
  EXPECT_EQ(allreduce_traffic(3, topology::ring{}, "", 5, false), least(3) * 5 / n) << "no rule under 32 KiB";
  ::unsetenv("MIMATRIX_ALGO");

  // The algorithm each call ran, as the communicator's call hook sees it.
  device::host_port dev(late(5us));
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    std::vector<std::string> ran;
    comm.on_call([&](const call_record& c) { ran.push_back(c.algorithm); });
    collectives<inproc> coll(comm);
    const device::stream_handle s = dev.make_stream();
    device_array<std::int32_t> on_device(dev, 1000, r);
    std::vector<std::int32_t> on_host(1000, r);
    coll.allreduce(on_device.data(), on_device.data(), 1000, dtype::int32, reduce::op_kind::sum, on(dev, s)).wait();
    coll.allreduce(on_host.data(), on_host.data(), 1000, dtype::int32, reduce::op_kind::sum).wait();
    coll.allreduce(on_device.data(), on_device.data(), 1000, dtype::int32, reduce::op_kind::sum, on(dev, s)).wait();
    EXPECT_EQ(on_device[999], 9);
    EXPECT_EQ(on_host[0], 3);
    ASSERT_EQ(ran.size(), 3u);
    EXPECT_EQ(ran[0], "gdraa");
    EXPECT_NE(ran[1], "gdraa");
    EXPECT_EQ(ran[2], "gdraa");
    dev.free_stream(s);
  });
}

/// The device memory traffic of an int64 sum reduce-scatter or allgather of blocks of `n`
/// elements (or a broadcast of `n` from the last rank) on `p` ranks sharing one host
/// "device", all ranks together; checks the result.
template <class Topology>
std::size_t scatter_or_gather_traffic(schedule::collective kind, int p, Topology topo, const std::string& algorithm,
                                      std::size_t n, bool in_place, bool one_pass = true) {
  device::host_port::settings settings = late(5us);
  settings.reduce_many_in_one_pass = one_pass;  // false: the port's default, combines and copies
  device::host_port dev(settings);
  const bool scatter = kind == schedule::collective::reduce_scatter;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc, Topology> coll(comm, topo);
    const device::stream_handle s = dev.make_stream();
    device_array<std::int64_t> whole(dev, n * std::size_t(p), -1), block(dev, n, -1);
    std::int64_t* own = in_place ? whole.data() + std::size_t(r) * n : block.data();
    if (kind == schedule::collective::broadcast) {  // from the last rank, `n` elements
      const int root = p - 1;
      if (r == root)
        for (std::size_t i = 0; i < n; ++i) block[i] = std::int64_t(i) * 3 + 1;
      std::int64_t* out = r == root && in_place ? block.data() : whole.data();
      coll.broadcast(r == root ? block.data() : nullptr, out, n, dtype::int64, root, on(dev, s, algorithm)).wait();
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], std::int64_t(i) * 3 + 1) << algorithm << ", rank " << r << ", " << i;
    } else if (scatter) {
      for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = test::small_value(r, i);
      coll.reduce_scatter(whole.data(), own, n, dtype::int64, reduce::op_kind::sum, on(dev, s, algorithm)).wait();
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(own[i], test::reduced_small_values(reduce::op_kind::sum, p, std::size_t(r) * n + i, true))
            << algorithm << ", rank " << r << ", " << i;
    } else {
      for (std::size_t i = 0; i < n; ++i) own[i] = std::int64_t(r) * 1000003 + std::int64_t(i);
      coll.allgather(own, whole.data(), n, dtype::int64, on(dev, s, algorithm)).wait();
      for (std::size_t i = 0; i < whole.size(); ++i)
        ASSERT_EQ(whole[i], std::int64_t(i / n) * 1000003 + std::int64_t(i % n)) << algorithm << ", rank " << r << ", " << i;
    }
    dev.free_stream(s);
  });
  return dev.memory_traffic();
}

// GDRAA's reduce-scatter, allgather and broadcast on device memory that every rank reaches
// run as one pass a rank too (direct_collective.hpp), built with both synchronizations
// (gdraa::build_on_shared_device): rank j reads block j of every input into its output, or
// its input into block j of every output, p+1 blocks a rank (an allgather in place p); a
// broadcast's root its input into every output.
// The ring makes more from 3 ranks on, where automatic takes the pass on every topology;
// a MIMATRIX_ALGO rule still wins.
TEST(device_steps, gdraas_reduce_scatter_allgather_and_broadcast_run_as_one_pass_on_device_buffers) {
  using schedule::collective;
  for (collective kind : {collective::reduce_scatter, collective::allgather})
    for (int p : {2, 3, 5})
      for (std::size_t n : {std::size_t(1001), std::size_t(1)}) {
        const std::string what = std::string(schedule::to_string(kind)) + " on " + std::to_string(p) + " ranks, " +
                                 std::to_string(n) + " elements a block";
        for (bool in_place : {false, true}) {
          // An allgather in place has its own block in place already: p blocks a rank.
          const bool gather_in_place = in_place && kind == collective::allgather;
          const std::size_t least = std::size_t(p) * std::size_t(p + !gather_in_place) * n * sizeof(std::int64_t);
          EXPECT_EQ(scatter_or_gather_traffic(kind, p, topology::mesh{}, "gdraa", n, in_place), least)
              << what << (in_place ? ", in place" : "");
          // Automatic takes the pass from 3 ranks on (on 2 the ring is one step).
          const std::size_t automatic = scatter_or_gather_traffic(kind, p, topology::ring{}, "", n, in_place);
          if (p > 2) {
            EXPECT_EQ(automatic, least) << what << ", automatic" << (in_place ? ", in place" : "");
          }
        }
        const std::size_t least = std::size_t(p) * std::size_t(p + 1) * n * sizeof(std::int64_t);
        if (p > 2) {
          EXPECT_EQ(scatter_or_gather_traffic(kind, p, topology::bigraph{}, "", n, false), least) << what;
        }
        const std::size_t ring = scatter_or_gather_traffic(kind, p, topology::ring{}, "ring", n, false);
        if (p > 2) {
          EXPECT_GT(ring, least) << what << ", ring";
        }
        std::printf("%s: ring %zu bytes, one pass %zu\n", what.c_str(), ring, least);
      }
  // A broadcast: the root's pass reads its input once and writes every other rank's
  // output (and its own out of place): p buffers in place, p+1 not.
  for (int p : {2, 3, 5})
    for (bool in_place : {false, true}) {
      const std::size_t n = 1001, least = std::size_t(p + !in_place) * n * sizeof(std::int64_t);
      const std::string what = "broadcast on " + std::to_string(p) + " ranks" + (in_place ? ", in place" : "");
      EXPECT_EQ(scatter_or_gather_traffic(collective::broadcast, p, topology::mesh{}, "gdraa", n, in_place), least)
          << what;
      const std::size_t automatic = scatter_or_gather_traffic(collective::broadcast, p, topology::ring{}, "", n, in_place);
      if (p > 2) {
        EXPECT_EQ(automatic, least) << what << ", automatic";
      }
      const std::size_t ring = scatter_or_gather_traffic(collective::broadcast, p, topology::ring{}, "ring", n, in_place);
      if (p > 2) {
        EXPECT_GT(ring, least) << what << ", ring";
      }
      std::printf("%s: ring %zu bytes, one pass %zu\n", what.c_str(), ring, least);
    }
  // The port's default reduce_many (a CUDA port's past 8 operands) aliases as the kernel
  // does: in place, exact on every rank.
  for (collective kind : {collective::reduce_scatter, collective::allgather, collective::broadcast})
    (void)scatter_or_gather_traffic(kind, 5, topology::mesh{}, "gdraa", 33, true, /*one_pass=*/false);
  ::setenv("MIMATRIX_ALGO", "allgather:ring", 1);
  EXPECT_GT(scatter_or_gather_traffic(collective::allgather, 3, topology::ring{}, "", 1001, false),
            std::size_t(3 * 4 * 1001 * 8)) << "the rule's ring";
  ::unsetenv("MIMATRIX_ALGO");
}

TEST(device_steps, reduce_scatter_allgather_and_broadcast_are_exact_on_device_buffers) {
  constexpr int p = 4;
  constexpr std::size_t n = 250;
  device::host_port dev(late(10us));
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const device::stream_handle s = dev.make_stream();
    device_array<std::int32_t> whole(dev, n * p), part(dev, n);
    for (std::size_t i = 0; i < whole.size(); ++i) whole[i] = test::small_value(r, i);
    coll.reduce_scatter(whole.data(), part.data(), n, dtype::int32, reduce::op_kind::sum, on(dev, s)).wait();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(part[i], test::reduced_small_values(reduce::op_kind::sum, p, r * n + i, true)) << i;
    // avg: GDRAA's pass (automatic's choice here) finalizes as it writes.
    device_array<float> values(dev, n * p, float(r + 1)), mean(dev, n);
    coll.reduce_scatter(values.data(), mean.data(), n, dtype::float32, reduce::op_kind::avg, on(dev, s)).wait();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(mean[i], float(p + 1) / 2) << i;

    device_array<std::int32_t> mine(dev, n, r + 1), all(dev, n * p);
    coll.allgather(mine.data(), all.data(), n, dtype::int32, on(dev, s)).wait();
    for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], int(i / n) + 1) << i;

    device_array<std::int32_t> root_data(dev, n, 42), got(dev, n, 0);
    coll.broadcast(r == 2 ? root_data.data() : nullptr, got.data(), n, dtype::int32, 2, on(dev, s)).wait();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 42) << i;
    dev.free_stream(s);
  });
}

// The caller never waits on the request before it reads the result: a "kernel" queued
// before the call writes the input late, one queued after it copies the output out, and
// only the stream is synchronized.
TEST(device_steps, the_call_is_ordered_on_the_callers_stream_without_a_host_wait) {
  constexpr int p = 3;
  constexpr std::size_t n = 4096;
  device::host_port dev(late(200us));
  for (const char* algo : {"ring", "recursive_doubling"})
    transport::run_inproc(p, [&](int r, inproc::world& w) {
      communicator<inproc> comm(w, r);
      collectives<inproc> coll(comm);
      const device::stream_handle s = dev.make_stream();
      device_array<std::int64_t> data(dev, n, 0);
      std::vector<std::int64_t> seen;
      dev.enqueue(s, [&] {
        std::this_thread::sleep_for(30ms);
        for (std::size_t i = 0; i < n; ++i) data[i] = std::int64_t(i) * (r + 1);
      });
      auto pending = coll.allreduce(data.data(), data.data(), n, dtype::int64, reduce::op_kind::sum, on(dev, s, algo));
      dev.enqueue(s, [&] { seen = data.copy(); });
      dev.synchronize(s);
      ASSERT_EQ(seen.size(), n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], std::int64_t(i) * (p * (p + 1) / 2)) << algo << " " << i;
      pending.wait();
      dev.free_stream(s);
    });
}

// GDRAA's allgather and broadcast on device memory (automatic's choice on 3 ranks): a rank
// lets its peers write its output (sync 1) only once its stream has reached the call. Work
// queued before the call that clears the output late comes first; sync 1 once went out
// at the call's start as a notify (only sends and writes were held back), the peers'
// passes wrote first, and the late clearing overwrote their data (found by the fabric
// scenario's late-cleared broadcast).
TEST(device_steps, peers_write_an_output_only_after_the_work_queued_before_the_call) {
  constexpr int p = 3;
  constexpr std::size_t n = 2048;
  device::host_port dev(late(20us));
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    std::vector<std::string> ran;
    comm.on_call([&](const call_record& c) { ran.push_back(c.algorithm); });
    const device::stream_handle s = dev.make_stream();
    device_array<std::int64_t> mine(dev, n, r + 1), all(dev, n * p, 0), got(dev, n, 0), root(dev, n, 42);
    const auto clear_late = [&](device_array<std::int64_t>& out) {
      dev.enqueue(s, [&] {
        std::this_thread::sleep_for(30ms);
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = -1;
      });
    };
    if (r == 1) clear_late(all);  // the others' passes would otherwise run at once
    auto gathered = coll.allgather(mine.data(), all.data(), n, dtype::int64, on(dev, s));
    if (r != 0) clear_late(got);
    auto cast = coll.broadcast(r == 0 ? root.data() : nullptr, r == 0 ? root.data() : got.data(), n, dtype::int64,
                               0, on(dev, s));
    dev.synchronize(s);
    gathered.wait();
    cast.wait();
    for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], std::int64_t(i / n) + 1) << "allgather, rank " << r << ", " << i;
    for (std::size_t i = 0; i < n && r != 0; ++i) ASSERT_EQ(got[i], 42) << "broadcast, rank " << r << ", " << i;
    EXPECT_EQ(ran, (std::vector<std::string>{"gdraa", "gdraa"}));
    dev.free_stream(s);
  });
}

// Calls queued one after another on one caller's stream, none waited for in between, as a
// trainer's gradient buckets are: each call's landings queue on a stream of its own. On one
// stream for all of a rank's calls, the second call's wait for the caller's stream (which
// waits for the first call's gate) sat before the first call's later landings, and both
// hung (found by resnet_device_gradients_test).
TEST(device_steps, calls_in_flight_on_one_callers_stream_all_finish_exactly) {
  constexpr int p = 3;
  constexpr std::size_t n = 3000;
  constexpr int calls = 4;
  device::host_port dev(late(50us));
  for (const char* algo : {"ring", "recursive_doubling", "halving_doubling", ""})  // "": automatic's GDRAA
    transport::run_inproc(p, [&](int r, inproc::world& w) {
      communicator<inproc> comm(w, r);
      collectives<inproc> coll(comm);
      const device::stream_handle s = dev.make_stream();
      std::vector<std::unique_ptr<device_array<std::int64_t>>> data;
      std::vector<request> pending;
      for (int c = 0; c < calls; ++c) {
        data.push_back(std::make_unique<device_array<std::int64_t>>(dev, n));
        for (std::size_t i = 0; i < n; ++i) (*data.back())[i] = std::int64_t(i) * (r + 1) + c;
        pending.push_back(coll.allreduce(data.back()->data(), data.back()->data(), n, dtype::int64,
                                         reduce::op_kind::sum, on(dev, s, algo)));
      }
      dev.synchronize(s);
      for (int c = 0; c < calls; ++c)
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ((*data[std::size_t(c)])[i], std::int64_t(i) * (p * (p + 1) / 2) + p * c)
              << algo << ", call " << c << ", element " << i;
      for (auto& q : pending) q.wait();
      dev.free_stream(s);
    });
  // GDRAA's reduce-scatter and allgather passes (automatic's choice here), interleaved on
  // one stream: each call's sync 1 waits for the stream to reach that call.
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const device::stream_handle s = dev.make_stream();
    std::vector<std::unique_ptr<device_array<std::int64_t>>> whole, block;
    std::vector<request> pending;
    for (int c = 0; c < calls; ++c) {
      whole.push_back(std::make_unique<device_array<std::int64_t>>(dev, n * p));
      block.push_back(std::make_unique<device_array<std::int64_t>>(dev, n));
      auto& all = *whole.back();
      auto& mine = *block.back();
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = std::int64_t(i) * (r + 1) + c;
      // The allgather gathers what the reduce-scatter queued before it on the stream wrote.
      pending.push_back(coll.reduce_scatter(all.data(), mine.data(), n, dtype::int64, reduce::op_kind::sum, on(dev, s)));
      pending.push_back(coll.allgather(mine.data(), all.data(), n, dtype::int64, on(dev, s)));
    }
    dev.synchronize(s);
    for (int c = 0; c < calls; ++c)
      for (std::size_t i = 0; i < n * p; ++i)
        ASSERT_EQ((*whole[std::size_t(c)])[i], std::int64_t(i) * (p * (p + 1) / 2) + p * c)
            << "reduce-scatter then allgather, call " << c << ", element " << i;
    for (auto& q : pending) q.wait();
    dev.free_stream(s);
  });
}

// Rank 1 never calls: rank 0's call times out, and the work queued after it on its stream
// still runs (the gate opens on failure) instead of waiting forever.
// Calls on two streams of each rank in flight at once, as a framework's compute and
// communication streams: on even ranks the first stream runs late, on odd ranks the second,
// and a host call, waited for on the host, comes between them. All three are exact, and
// none hangs behind another's stream.
TEST(device_steps, calls_on_two_streams_and_a_host_call_in_flight_are_exact) {
  constexpr int p = 4;
  constexpr std::size_t n = 2000;
  device::host_port dev(late(20us));
  for (const char* algo : {"ring", ""})  // "": automatic's GDRAA pass
    transport::run_inproc(p, [&](int r, inproc::world& w) {
      communicator<inproc> comm(w, r);
      collectives<inproc> coll(comm);
      const device::stream_handle streams[2] = {dev.make_stream(), dev.make_stream()};
      device_array<std::int64_t> first(dev, n), second(dev, n);
      for (std::size_t i = 0; i < n; ++i) first[i] = second[i] = std::int64_t(i) * (r + 1);
      dev.enqueue(streams[r % 2], [] { std::this_thread::sleep_for(40ms); });
      auto a = coll.allreduce(first.data(), first.data(), n, dtype::int64, reduce::op_kind::sum, on(dev, streams[0], algo));
      std::vector<std::int64_t> host(n, r);
      coll.allreduce(host.data(), host.data(), n, dtype::int64, reduce::op_kind::sum).wait();
      auto b = coll.allreduce(second.data(), second.data(), n, dtype::int64, reduce::op_kind::max, on(dev, streams[1], algo));
      for (const device::stream_handle s : streams) dev.synchronize(s);
      a.wait();
      b.wait();
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(first[i], std::int64_t(i) * (p * (p + 1) / 2)) << algo << ", rank " << r << ", element " << i;
        ASSERT_EQ(second[i], std::int64_t(i) * p) << algo << ", rank " << r << ", element " << i;
        ASSERT_EQ(host[i], p * (p - 1) / 2) << algo << ", rank " << r << ", element " << i;
      }
      for (const device::stream_handle s : streams) dev.free_stream(s);
    });
}

// A call that fails while an earlier call on the same stream is still waiting for a peer:
// the later call's work waits behind the earlier call's gate, so letting go of it must
// not wait for that work on the thread that moves the earlier call.
TEST(device_steps, a_call_failing_behind_an_earlier_call_on_its_stream_lets_both_end) {
  constexpr int p = 3;
  constexpr std::size_t n = 1000;
  device::host_port dev(late(20us));
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const device::stream_handle s = dev.make_stream();
    device_array<std::int64_t> first(dev, n, r + 1), second(dev, n, 1);
    if (r == p - 1) std::this_thread::sleep_for(500ms);  // its first call comes late, its second never
    auto a = coll.allreduce(first.data(), first.data(), n, dtype::int64, reduce::op_kind::sum,
                            on(dev, s, "ring", std::chrono::milliseconds(20'000)));
    std::string second_error = "not started";
    if (r != p - 1) {
      auto b = coll.allreduce(second.data(), second.data(), n, dtype::int64, reduce::op_kind::sum,
                              on(dev, s, "ring", std::chrono::milliseconds(100)));
      try {
        b.wait();
        second_error = "none";
      } catch (const error& e) {
        second_error = e.what();
      }
    }
    std::string first_error = "none";
    try {
      a.wait();
    } catch (const error& e) {
      first_error = e.what();
    }
    dev.synchronize(s);
    if (r != p - 1) {
      EXPECT_NE(second_error.find("timed out"), std::string::npos) << "rank " << r << ": " << second_error;
    }
    std::printf("rank %d: first call: %s\n", r, first_error.c_str());
    dev.free_stream(s);
  });
}

// A call that must allocate (its rank's pool lacks a larger scratch and a second stream)
// while an earlier call's gate still holds the caller's stream. On CUDA an allocation may
// wait for the device, that gate included, which only the progress thread opens, once
// it has the engine's lock: a call made under that lock hung there. Each rank has a
// "GPU" of its own whose allocations wait for its queued work (failing past 5 s, as they
// did when made under the lock).
TEST(device_steps, a_call_that_allocates_while_an_earlier_call_is_in_flight_lets_it_end) {
  constexpr int p = 4;
  constexpr std::size_t small = 1000, large = 8000;
  std::vector<std::unique_ptr<device::host_port>> devices;
  for (int r = 0; r < p; ++r)
    devices.push_back(std::make_unique<device::host_port>(
        device::host_port::settings{.lag = 20us, .allocations_wait_for_device = 5000ms}));
  std::barrier made(p);
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    device::host_port& dev = *devices[std::size_t(r)];
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const device::stream_handle s = dev.make_stream();
    device_array<std::int64_t> first(dev, small, r + 1), second(dev, large, 10 * (r + 1));
    made.arrive_and_wait();  // arrays too wait for the device: all are made before any call
    if (r == p - 1) std::this_thread::sleep_for(300ms);  // the first call waits for it
    auto a = coll.allreduce(first.data(), first.data(), small, dtype::int64, reduce::op_kind::sum, on(dev, s, "recursive_doubling"));
    auto b = coll.allreduce(second.data(), second.data(), large, dtype::int64, reduce::op_kind::sum, on(dev, s, "recursive_doubling"));
    a.wait();
    b.wait();
    dev.synchronize(s);
    for (std::size_t i = 0; i < small; ++i) ASSERT_EQ(first[i], p * (p + 1) / 2) << "rank " << r << ", element " << i;
    for (std::size_t i = 0; i < large; ++i)
      ASSERT_EQ(second[i], 10 * p * (p + 1) / 2) << "rank " << r << ", element " << i;
    dev.free_stream(s);
  });
}

TEST(device_steps, a_failed_call_lets_the_stream_go_on) {
  device::host_port dev(late(50us));
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    if (r == 1) return;
    const device::stream_handle s = dev.make_stream();
    device_array<std::int32_t> data(dev, 1000, 1);
    bool after = false;
    auto pending =
        coll.allreduce(data.data(), data.data(), data.size(), dtype::int32, reduce::op_kind::sum, on(dev, s, {}, 300ms));
    dev.enqueue(s, [&] { after = true; });
    dev.synchronize(s);  // returns once the call has failed
    EXPECT_TRUE(after);
    try {
      pending.wait();
      ADD_FAILURE() << "the call succeeded without rank 1";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::timeout) << e.what();
    }
    dev.free_stream(s);
  });
}

// Counts that differ fail both ranks with mismatch; neither stream is left held.
TEST(device_steps, a_mismatch_fails_every_rank_and_frees_their_streams) {
  device::host_port dev(late(20us));
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const device::stream_handle s = dev.make_stream();
    device_array<std::int32_t> data(dev, r == 0 ? 1000 : 1024, 1);
    auto pending = coll.allreduce(data.data(), data.data(), data.size(), dtype::int32, reduce::op_kind::sum,
                                  on(dev, s, "ring", 5s));
    std::error_code ec;
    pending.wait(ec);
    EXPECT_EQ(ec, errc::mismatch) << r;
    dev.synchronize(s);
    dev.free_stream(s);
  });
}

// A device that refuses a call's work (here: a combine in host memory, which a GPU's
// kernel cannot read) fails the call on every rank with what it said, instead of
// throwing out of the progress thread; the streams go on. The port here cannot tell
// host memory at the call's start (port::not_device_memory), so its work refuses it.
TEST(device_steps, work_the_device_refuses_fails_the_call_and_names_why) {
  test::forwarding_port dev(late(10us));
  transport::run_inproc(2, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    const device::stream_handle s = dev.make_stream();
    std::vector<std::int32_t> host(1000, 1);  // not device memory
    call_options o{.algorithm = "ring", .timeout = 5s, .stream = device::stream{&dev, s}};
    auto pending = coll.allreduce(host.data(), host.data(), host.size(), dtype::int32, reduce::op_kind::sum, o);
    try {
      pending.wait();
      ADD_FAILURE() << "rank " << r << ": a combine in host memory was taken";
    } catch (const error& e) {
      if (std::string(e.what()).find("failed on another rank") == std::string::npos) {
        EXPECT_EQ(e.code(), errc::transport) << e.what();
        EXPECT_NE(std::string(e.what()).find("not device memory"), std::string::npos) << e.what();
      }
    }
    bool after = false;
    dev.inner().enqueue(s, [&] { after = true; });
    dev.synchronize(s);
    EXPECT_TRUE(after);
    dev.free_stream(s);
  });
}

TEST(device_steps, a_stream_without_its_port_is_named) {
  transport::run_inproc(1, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    collectives<inproc> coll(comm);
    std::int32_t x = 1;
    try {
      (void)coll.allreduce(&x, &x, 1, dtype::int32, reduce::op_kind::sum,
                           {.algorithm = {}, .timeout = {}, .stream = device::stream{}, .tag = 0});
      ADD_FAILURE() << "a stream without a port was taken";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("names no device port"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace mimatrix
