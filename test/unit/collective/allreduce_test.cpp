#include "mimatrix/allreduce.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <system_error>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/broadcast.hpp"
#include "mimatrix/collectives.hpp"
#include "mimatrix/device/host_port.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "support/collective_checks.hpp"
#include "support/device_array.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::inproc;

// Tiny chunks: many steps of every rank in flight at once, the pipelined path.
TEST(allreduce, tiny_chunks_pipeline_correctly) {
  for (int p : {2, 3, 5, 8})
    for (std::size_t n : {std::size_t(1), std::size_t(17), std::size_t(4099)}) {
      test::check_allreduce<reduce::sum<std::int32_t>>(p, n, test::run_seed(), topology::ring{},
                                                       algorithm::ring(algorithm::policy{8}));
      test::check_allreduce<reduce::sum<float>>(p, n, test::run_seed(), topology::ring{},
                                                algorithm::ring(algorithm::policy{12}));
    }
}

TEST(allreduce, ring_order_permutation_gives_the_same_sums) {
  test::check_allreduce<reduce::sum<std::int64_t>>(5, 1234, test::run_seed(), topology::ring({3, 0, 4, 1, 2}),
                                                   algorithm::ring{});
  test::check_allreduce<reduce::avg<float>>(5, 1234, test::run_seed(), topology::ring({4, 3, 2, 1, 0}),
                                            algorithm::ring{});
}

TEST(allreduce, repeated_calls_reuse_cached_schedules_and_stay_correct) {
  const int p = 4;
  transport::run_inproc(p, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, topology::ring, reduce::sum<std::int32_t>> sum(comm);
    for (int iteration = 0; iteration < 50; ++iteration) {
      std::vector<std::int32_t> v(100 + iteration % 3, r + iteration);
      sum(v);
      for (auto x : v) ASSERT_EQ(x, p * iteration + p * (p - 1) / 2) << "rank " << r << " iteration " << iteration;
    }
  });
}

// The typed façade takes call_options too: a tag (ranks that differ fail with mismatch), a
// deadline of its own, and a stream for device buffers; an algorithm is refused, since
// the type fixes it.
// Found by a black-box test: rank 1's host buffer in a call on device streams failed
// every rank with rank 2's error ("a reduce_many ... touches host memory", a peer's pass
// reading it); the rank that holds it now names it, before anything runs.
TEST(allreduce, a_host_buffer_on_a_device_stream_is_named_by_the_rank_that_holds_it) {
  device::host_port dev({.lag = std::chrono::microseconds(0), .device_memory_only = true});
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    comm.set_timeout(std::chrono::seconds(60));
    collectives<inproc> coll(comm);
    const device::stream s{&dev, dev.make_stream()};
    test::device_array<std::int32_t> on_device(dev, 1000, r + 1), out(dev, 1000);
    std::vector<std::int32_t> on_host(1000, r + 1);
    const std::int32_t* in = r == 1 ? on_host.data() : on_device.data();
    const auto start = std::chrono::steady_clock::now();
    try {
      coll.allreduce(in, out.data(), 1000, dtype::int32, reduce::op_kind::sum, {.stream = s}).wait();
      ADD_FAILURE() << "rank " << r << ": the call ran";
    } catch (const error& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.code(), errc::invalid_argument) << what;
      EXPECT_NE(what.find("rank 1, allreduce #0: the input (4000 bytes) is host memory at"), std::string::npos) << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "rank " << r;
    // The output is checked too; device buffers on every rank then run exactly.
    try {
      coll.allreduce(on_device.data(), r == 0 ? on_host.data() : out.data(), 1000, dtype::int32,
                     reduce::op_kind::sum, {.stream = s})
          .wait();
      ADD_FAILURE() << "rank " << r << ": the call ran";
    } catch (const error& e) {
      if (r == 0) {
        EXPECT_NE(std::string(e.what()).find("the output (4000 bytes) is host memory"), std::string::npos) << e.what();
      }
    }
    coll.allreduce(on_device.data(), out.data(), 1000, dtype::int32, reduce::op_kind::sum, {.stream = s}).wait();
    dev.synchronize(s.handle);
    EXPECT_EQ(out[999], 6) << "rank " << r;
    dev.free_stream(s.handle);
  });
}

TEST(allreduce, a_typed_call_takes_a_tag_a_deadline_and_a_stream_but_no_algorithm) {
  using namespace std::chrono_literals;
  device::host_port dev({.lag = std::chrono::microseconds(200)});
  transport::run_inproc(3, [&](int r, inproc::world& w) {
    communicator<inproc> comm(w, r);
    allreduce<inproc, topology::ring, reduce::sum<std::int32_t>> sum(comm);
    std::vector<std::int32_t> v(1000, r + 1);

    call_options tagged;
    tagged.tag = 4;
    sum.start(v, tagged).wait();
    EXPECT_EQ(v[999], 6);
    call_options mine;
    mine.tag = r == 2 ? 5 : 4;
    std::error_code ec;
    sum.start(v, mine).wait(ec);
    EXPECT_EQ(ec, errc::mismatch) << "rank " << r;

    call_options named;
    named.algorithm = "ring";
    try {
      (void)sum.start(v, named);
      ADD_FAILURE() << "rank " << r << ": a typed call took an algorithm";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(r)), std::string::npos) << e.what();
    }

    const device::stream s{&dev, dev.make_stream()};
    call_options on_stream;
    on_stream.stream = s;
    std::vector<std::int32_t> d(5000, 0);
    dev.enqueue(s.handle, [&] { std::fill(d.begin(), d.end(), r + 1); });  // a producer on the stream
    auto pending = sum.start(d, on_stream);
    std::vector<std::int32_t> seen;
    dev.enqueue(s.handle, [&] { seen = d; });  // a consumer behind the call
    dev.synchronize(s.handle);
    pending.wait();
    EXPECT_EQ(seen, std::vector<std::int32_t>(5000, 6)) << "rank " << r;
    dev.free_stream(s.handle);

    if (r == 1) {  // a deadline of its own: rank 1 calls a broadcast no one else does
      broadcast<inproc, topology::ring, std::int32_t> bcast(comm);
      call_options soon;
      soon.timeout = 100ms;
      bcast.start(v, 0, soon).wait(ec);
      EXPECT_EQ(ec, errc::timeout);
    }
  });
}

}  // namespace
}  // namespace mimatrix
