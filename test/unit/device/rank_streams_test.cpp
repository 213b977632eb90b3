// device::rank_streams: one stream of a rank's own a port, made once; host staging and
// device scratch buffers taken from the port, reused from call to call (each kind for its
// own), and freed by the port that allocated them, also when they outlive the pool.
#include "mimatrix/device/rank_streams.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "mimatrix/device/host_port.hpp"
#include "support/forwarding_port.hpp"

namespace mimatrix::device {
namespace MIMATRIX_UNIT_ID {

/// A host port that counts the host and device memory it hands out and takes back.
class counting_port final : public test::forwarding_port {
 public:
  std::string_view name() const override { return "counting"; }
  stream_handle make_stream() override {
    made_while_making += making;
    return forwarding_port::make_stream();
  }
  void free_stream(stream_handle s) noexcept override {
    ++streams_freed;
    forwarding_port::free_stream(s);
  }

  void* allocate_host(std::size_t bytes) override {
    made_while_making += making;
    void* p = port::allocate_host(bytes);
    live[p] = bytes;
    ++allocations;
    return p;
  }
  void free_host(void* p, std::size_t bytes) noexcept override {
    EXPECT_EQ(live[p], bytes) << "freed with another size than allocated";
    live.erase(p);
    port::free_host(p, bytes);
  }

  void* allocate_device(std::size_t bytes) override {
    made_while_making += making;
    void* p = forwarding_port::allocate_device(bytes);
    live_device[p] = bytes;
    return p;
  }
  void free_device(void* p, std::size_t bytes) noexcept override {
    EXPECT_EQ(live_device[p], bytes) << "freed with another size than allocated";
    live_device.erase(p);
    forwarding_port::free_device(p, bytes);
  }

  std::map<void*, std::size_t> live, live_device;
  int allocations = 0;
  int streams_freed = 0;
  bool making = false;        // within made_outside's make(), where a lock would be held
  int made_while_making = 0;  // streams and buffers made there
};

// A stream a call in flight: calls at once get their own (a shared one hung two calls on
// one caller's stream), calls one after another reuse them, and each port frees its own.
TEST(rank_streams, a_stream_a_call_in_flight_kept_for_the_next_calls_and_freed_by_its_port) {
  counting_port a, b;
  stream_handle first = nullptr, second = nullptr;
  {
    rank_streams streams;
    {
      pooled_stream s1 = streams.take_stream(a);
      pooled_stream s2 = streams.take_stream(a);  // a second call while the first runs
      ASSERT_NE(s1.get(), nullptr);
      EXPECT_NE(s2.get(), s1.get());
      EXPECT_NE(streams.take_stream(b).get(), s1.get());
      first = s1.get();
      second = s2.get();
    }
    EXPECT_EQ(a.streams_freed, 0);  // kept
    {
      pooled_stream again = streams.take_stream(a);
      EXPECT_TRUE(again.get() == first || again.get() == second);  // one of the kept two, not a third
      pooled_stream held = std::move(again);
      EXPECT_EQ(again.get(), nullptr);
      EXPECT_NE(held.get(), nullptr);
      pooled_stream outliving = streams.take_stream(b);
      (void)outliving;
    }
  }
  EXPECT_EQ(a.streams_freed, 2);  // so no third was made
  EXPECT_EQ(b.streams_freed, 1);  // the same one, taken twice
}

TEST(rank_streams, a_stream_given_back_after_the_rank_is_gone_is_freed) {
  counting_port a;
  pooled_stream late;
  {
    rank_streams streams;
    late = streams.take_stream(a);
  }
  EXPECT_EQ(a.streams_freed, 0);
  late = pooled_stream{};
  EXPECT_EQ(a.streams_freed, 1);
}

// A port that ends before the rank (declared after the communicator, found by a black-box
// test): its end freed its streams, so the kept ones are let go of without calling it (its
// mutex was gone: "Invalid argument" thrown from a noexcept free), and a later port is never
// handed what the first one kept. (Its device scratch is an mmap the test leaves.)
TEST(rank_streams, what_a_port_that_ended_first_made_is_let_go_of_without_calling_it) {
  host_port next;  // outlives the rank
  rank_streams streams;
  pooled_stream late;
  {
    host_port dev;
    { const pooled_stream kept = streams.take_stream(dev); }
    { const pooled_buffer scratch = streams.scratch(dev, 256); }
    { const pooled_buffer staging = streams.staging(dev, 256); }  // the port frees both at its end
    late = streams.take_stream(dev);
  }  // ends here, before `streams`
  late = pooled_stream{};
  EXPECT_NE(streams.take_stream(next).get(), nullptr);
  EXPECT_NE(streams.scratch(next, 256).data(), nullptr);
}

TEST(rank_streams, staging_buffers_are_reused_when_large_enough_and_freed_by_their_port) {
  counting_port dev, other;
  {
    rank_streams streams;
    std::byte* first = nullptr;
    {
      pooled_buffer big = streams.staging(dev, 4096);
      ASSERT_NE(big.data(), nullptr);
      EXPECT_GE(big.size(), 4096u);
      first = big.data();
      big.data()[4095] = std::byte{7};  // it is writable memory of that size
    }
    EXPECT_EQ(dev.live.size(), 1u);  // kept for the next call
    {
      pooled_buffer again = streams.staging(dev, 1000);  // smaller: the kept one serves
      EXPECT_EQ(again.data(), first);
      pooled_buffer larger = streams.staging(dev, 8192);  // none kept is large enough
      EXPECT_NE(larger.data(), first);
      pooled_buffer elsewhere = streams.staging(other, 10);  // another port's memory is its own
      EXPECT_EQ(other.allocations, 1);
    }
    EXPECT_EQ(dev.allocations, 2);
  }
  EXPECT_TRUE(dev.live.empty()) << "the pool freed what it kept";
  EXPECT_TRUE(other.live.empty());
}

// Freeing device or pinned memory on CUDA waits for every call's gate, which the freeing
// thread may have to open: nothing given back is freed while the rank lives, however many
// calls ran at once. A call takes the smallest kept buffer that is large enough.
TEST(rank_streams, buffers_given_back_are_all_kept_until_the_rank_goes_and_the_smallest_that_fits_serves) {
  counting_port dev;
  {
    rank_streams streams;
    std::vector<std::byte*> data;
    {
      std::vector<pooled_buffer> in_flight;
      for (std::size_t k = 0; k < 8; ++k) {
        in_flight.push_back(streams.scratch(dev, (k + 1) * 1024));
        data.push_back(in_flight.back().data());
      }
    }
    EXPECT_EQ(dev.live_device.size(), 8u) << "every buffer given back is kept";
    EXPECT_EQ(streams.scratch(dev, 3000).data(), data[2]);  // 3 KiB: the smallest of 1..8 KiB that fits
    EXPECT_EQ(streams.scratch(dev, 8 * 1024).data(), data[7]);
  }
  EXPECT_TRUE(dev.live_device.empty()) << "the pool freed them when the rank went";
}

TEST(rank_streams, scratch_is_device_memory_kept_apart_from_staging) {
  counting_port dev;
  {
    rank_streams streams;
    std::byte* host = nullptr;
    {
      pooled_buffer staged = streams.staging(dev, 256);
      host = staged.data();
    }
    pooled_buffer scratch = streams.scratch(dev, 128);  // a kept host buffer is large enough, but host
    EXPECT_NE(scratch.data(), host);
    EXPECT_EQ(dev.live_device.count(scratch.data()), 1u);
    std::byte* device = scratch.data();
    scratch = pooled_buffer{};
    EXPECT_EQ(streams.scratch(dev, 64).data(), device);  // the kept device buffer serves again
    EXPECT_EQ(streams.staging(dev, 64).data(), host);
  }
  EXPECT_TRUE(dev.live.empty());
  EXPECT_TRUE(dev.live_device.empty()) << "the pool freed the device memory it kept, through free_device";
}

TEST(rank_streams, a_buffer_that_outlives_its_pool_is_freed_by_its_port) {
  counting_port dev;
  pooled_buffer kept_past;
  {
    rank_streams streams;
    kept_past = streams.staging(dev, 64);
  }
  EXPECT_EQ(dev.live.size(), 1u);
  kept_past = pooled_buffer{};
  EXPECT_TRUE(dev.live.empty());
}

// A call is made under its progress engine's lock, where an allocation that waits for the
// device (CUDA's may) would wait for a gate only the lock's other holder opens. What the
// call lacks is made outside make(), which runs again and finds it kept; a call that needs
// nothing new is made at once.
TEST(rank_streams, made_outside_makes_what_a_call_lacks_outside_make_and_runs_it_again) {
  counting_port dev;
  rank_streams streams;
  int runs = 0;
  const auto call = [&] {
    ++runs;
    dev.making = true;
    struct taken {
      pooled_stream stream;
      pooled_buffer staging, scratch;
    } t{streams.take_stream(dev), streams.staging(dev, 4096), streams.scratch(dev, 1024)};
    dev.making = false;
    return t;
  };
  const auto make = [&] {
    try {
      return call();
    } catch (...) {
      dev.making = false;
      throw;
    }
  };
  auto first = streams.made_outside(make);
  EXPECT_EQ(runs, 4) << "a stream, a staging buffer and a scratch buffer lacked, one a run";
  EXPECT_EQ(dev.made_while_making, 0);
  ASSERT_NE(first.stream.get(), nullptr);
  EXPECT_GE(first.staging.size(), 4096u);
  EXPECT_EQ(dev.live_device.count(first.scratch.data()), 1u);
  EXPECT_EQ(dev.live.size(), 1u) << "what a run took before it lacked something went back to the pool";
  first = {};
  runs = 0;
  auto again = streams.made_outside(make);
  EXPECT_EQ(runs, 1) << "everything kept";
  EXPECT_EQ(dev.allocations, 1);
}

// Other threads of the rank could take what grew before the call runs again: past a few
// runs, it allocates as it goes rather than never being made.
TEST(rank_streams, a_call_that_lacks_something_at_every_run_is_made_at_last) {
  counting_port dev;
  rank_streams streams;
  std::size_t bytes = 64;
  int runs = 0;
  std::vector<pooled_buffer> taken_by_others;
  auto made = streams.made_outside([&] {
    ++runs;
    taken_by_others.push_back(streams.staging(dev, 1));  // the grown one, taken first
    return streams.staging(dev, bytes *= 2);
  });
  EXPECT_GT(runs, 1);
  EXPECT_LT(runs, 20);
  EXPECT_GE(made.size(), bytes);
}

// A call unmade after it queued device work (a throw past its takes) hands that work to
// let_go_later: letting go waits for it, which must not happen under the lock make() holds
// (an earlier call's gate, which only that lock's other holder opens, may come first).
TEST(rank_streams, an_unmade_calls_device_work_goes_once_make_has_let_go_of_its_lock) {
  rank_streams streams;
  bool locked = false;
  int gone = 0, gone_locked = 0;
  struct work {
    const bool* locked;
    int* gone;
    int* gone_locked;
    ~work() {
      ++*gone;
      *gone_locked += *locked;
    }
  };
  struct held {  // make()'s lock
    bool& on;
    explicit held(bool& b) : on(b) { on = true; }
    ~held() { on = false; }
  };
  EXPECT_THROW(streams.made_outside([&]() -> int {
    const held lock(locked);
    streams.let_go_later(std::make_shared<work>(&locked, &gone, &gone_locked));
    throw error(errc::invalid_argument, "unmade after queuing device work");
  }),
               error);
  EXPECT_EQ(gone, 1);
  EXPECT_EQ(gone_locked, 0);
  EXPECT_EQ(streams.made_outside([&] {
    const held lock(locked);
    streams.let_go_later(std::make_shared<work>(&locked, &gone, &gone_locked));
    return 7;
  }),
            7);
  EXPECT_EQ(gone, 2);
  EXPECT_EQ(gone_locked, 0);
}

}  // namespace
}  // namespace mimatrix::device
