// The flight record's ring and its dump: the header is self-contained, the ring keeps the
// last N calls oldest first, a stall note reaches the entry, a dump is valid JSON.
#include "mimatrix/detail/flight_recorder.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>

#include "mimatrix/core/options.hpp"
#include "mimatrix/detail/communicator_state.hpp"

namespace mimatrix::detail {
namespace MIMATRIX_UNIT_ID {

flight_start call(std::uint64_t sequence) {
  flight_start e;
  e.sequence = sequence;
  e.in_count = e.out_count = 8;
  e.type = dtype::int32;
  copy_cut(e.algorithm, "ring");
  return e;
}

TEST(flight_record, keeps_the_last_calls_oldest_first_and_their_ends) {
  flight_record record(3);  // rounded up to 4
  EXPECT_EQ(record.capacity(), 4u);
  for (std::uint64_t s = 0; s < 6; ++s) (void)record.start(call(s));
  record.finish(4, {}, {});
  record.finish(5, make_error_code(errc::timeout), "rank 0: timed out");
  record.finish(0, {}, {});  // its slot is call 4's now: nothing changes
  const flight_snapshot snap = record.snapshot();
  ASSERT_EQ(snap.calls.size(), 4u);
  EXPECT_EQ(snap.recorded, 6u);
  EXPECT_EQ(snap.calls[0].sequence, 2u);
  EXPECT_EQ(snap.calls[0].state, flight_state::started);
  EXPECT_EQ(snap.calls[1].state, flight_state::started);
  EXPECT_EQ(snap.calls[2].state, flight_state::completed);
  EXPECT_EQ(snap.calls[2].ended_ns, snap.calls[3].started_ns) << "completed by the next call's start";
  EXPECT_EQ(snap.calls[3].state, flight_state::failed);
  EXPECT_EQ(snap.calls[3].message, "rank 0: timed out");
  EXPECT_GE(snap.calls[3].ended_ns, snap.calls[3].started_ns);
  EXPECT_STREQ(snap.calls[3].algorithm, "ring");
}

TEST(flight_record, a_stall_note_reaches_the_call_in_flight) {
  flight_record record(4);
  transport::stall_note* note = record.start(call(7));
  EXPECT_EQ(record.snapshot().calls[0].stall_step, -1);
  note->note(3, 2, 5, 64, schedule::step_kind::recv);
  const flight_entry e = record.snapshot().calls[0];
  EXPECT_EQ(e.stall_step, 3);
  EXPECT_EQ(e.stall_peer, 2);
  EXPECT_EQ(e.stall_tag, 5u);
  EXPECT_EQ(e.stall_bytes, 64u);
  (void)record.start(call(11));  // the same slot, another call: the note starts afresh
  EXPECT_EQ(record.snapshot().calls[0].stall_step, -1);
}

TEST(flight_record, a_snapshot_while_calls_start_and_end_sees_whole_entries) {
  flight_record record(8);
  std::atomic<bool> done{false};
  std::thread calls([&] {
    for (std::uint64_t s = 0; s < 20000; ++s) {
      flight_start e = call(s);
      e.in_count = e.out_count = s;
      (void)record.start(e);
      record.finish(s, {}, {});
    }
    done = true;
  });
  while (!done)
    for (const flight_entry& e : record.snapshot().calls) ASSERT_EQ(e.in_count, e.sequence);
  calls.join();
}

TEST(flight_record, a_dump_names_group_rank_and_every_call) {
  flight_recorder recorder(8, flight_member{"world/0", 3, 1, 4}, 0);
  (void)recorder.record().start(call(0));
  recorder.record().start(call(1))->note(2, 0, 9, 32, schedule::step_kind::recv_reduce);
  const std::string path = "/tmp/flight_record_test." + std::to_string(::getpid()) + ".json";
  ASSERT_EQ(recorder.dump(path, "request"), path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  const std::string s = text.str();
  EXPECT_NE(s.find("\"group\": \"world/0\", \"world_rank\": 3, \"rank\": 1, \"size\": 4"), std::string::npos) << s;
  EXPECT_NE(s.find("\"reason\": \"request\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"sequence\": 1, \"tag\": 0, \"collective\": \"allreduce\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"waiting\": {\"step\": 2, \"kind\": \"recv_reduce\", \"peer\": 0, \"tag\": 9, \"bytes\": 32}"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("ended_us"), std::string::npos) << s;
}

TEST(flight_record, the_default_path_is_in_the_directory_set_and_names_group_and_world_rank) {
  ::setenv("MIMATRIX_FLIGHT_RECORD_DIR", "/some/dir", 1);
  EXPECT_EQ(flight_path({"world/0split0/color1/0", 5, 0, 2}), "/some/dir/flight.world-0split0-color1-0.rank5.json");
  ::unsetenv("MIMATRIX_FLIGHT_RECORD_DIR");
  EXPECT_EQ(flight_path({"world/0", 0, 0, 2}), "/tmp/flight.world-0.rank0.json");
}

TEST(flight_record, settings_are_parsed_strictly_and_name_the_variable_and_rank) {
  ::setenv("MIMATRIX_FLIGHT_RECORD", "0", 1);
  EXPECT_EQ(options::from_environment().flight_record, 0u);
  ::setenv("MIMATRIX_FLIGHT_RECORD", "50", 1);
  EXPECT_EQ(options::from_environment().flight_record, 50u);
  for (const char* bad : {"-1", " 5", "5x", "lots", "99999999999"}) {
    ::setenv("MIMATRIX_FLIGHT_RECORD", bad, 1);
    try {
      communicator_state state(3);
      ADD_FAILURE() << bad << " was taken";
    } catch (const error& e) {
      EXPECT_EQ(e.code(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("rank 3: MIMATRIX_FLIGHT_RECORD must be"), std::string::npos) << e.what();
    }
  }
  ::unsetenv("MIMATRIX_FLIGHT_RECORD");
  EXPECT_EQ(options::from_environment().flight_record, 0u);  // off by default until its 8 B cost is under 2%
  ::setenv("MIMATRIX_FLIGHT_RECORD_SIGNAL", "SIGFOO", 1);
  try {
    communicator_state state(2);
    ADD_FAILURE() << "SIGFOO was taken";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2: MIMATRIX_FLIGHT_RECORD_SIGNAL must be"), std::string::npos)
        << e.what();
  }
  ::setenv("MIMATRIX_FLIGHT_RECORD_SIGNAL", "USR2", 1);
  EXPECT_EQ(flight_signal_from_environment(), SIGUSR2);
  ::unsetenv("MIMATRIX_FLIGHT_RECORD_SIGNAL");
  EXPECT_EQ(flight_signal_from_environment(), SIGUSR1);
}

}  // namespace MIMATRIX_UNIT_ID
}  // namespace mimatrix::detail
