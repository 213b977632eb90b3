// MIMATRIX_TIMELINE with a split (issue 53, defect 2): every communicator of every process
// writes a file of its own, named by group and world rank, whose events carry the world
// rank as pid, wall-clock timestamps, and a barrier's name.
#include <gtest/gtest.h>

#include <boost/json/src.hpp>  // header-only Boost.JSON, in this unit alone

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/collectives.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

/// Two allreduces and a barrier on the world, then an allreduce and a barrier on each half.
MIMATRIX_SCENARIO(timeline_with_a_split) {
  communicator<fabric> world;
  collectives<fabric> on_world(world);
  std::vector<std::int32_t> v(1000, 1);
  for (int k = 0; k < 2; ++k) on_world.allreduce(v.data(), v.data(), v.size(), dtype::int32, reduce::op_kind::sum).wait();
  on_world.barrier();
  auto half = world.split(world.rank() % 2, world.rank());
  if (!half) return std::printf("rank %d: no part\n", world.rank()), 1;
  collectives<fabric> on_half(*half);
  on_half.allreduce(v.data(), v.data(), v.size(), dtype::int32, reduce::op_kind::sum).wait();
  on_half.barrier();
  return 0;
}

TEST(timeline, a_split_communicator_writes_its_own_file_with_world_ranks_and_wall_clock) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("mimatrix-timeline-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto r = test::run_ranks(4, "shm", "timeline_with_a_split", {{"MIMATRIX_TIMELINE", (dir / "trace.json").string()}});
  ASSERT_EQ(r.exit_code, 0) << test::all_output(r);
  const double year_2020_us = 1.5778368e15;
  std::map<std::string, int> names;
  std::map<std::int64_t, int> files_of_pid;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    boost::system::error_code ec;
    const boost::json::value doc = boost::json::parse(text.str(), ec);
    ASSERT_FALSE(ec) << entry.path() << " is not JSON: " << ec.message() << "\n" << text.str();
    ++files;
    std::set<std::int64_t> pids;
    std::set<std::string> sequences;
    for (const auto& e : doc.as_array()) {
      const auto& event = e.as_object();
      if (event.at("ph").as_string() != "X") continue;
      const std::string name(event.at("name").as_string());
      EXPECT_TRUE(sequences.insert(name.substr(name.find('#'))).second) << "two communicators wrote " << entry.path();
      ++names[name.substr(0, name.find(' '))];
      pids.insert(event.at("pid").to_number<std::int64_t>());
      EXPECT_GT(event.at("ts").to_number<double>(), year_2020_us) << "not wall clock: " << entry.path();
    }
    ASSERT_EQ(pids.size(), 1u) << entry.path();
    ++files_of_pid[*pids.begin()];
    EXPECT_NE(entry.path().filename().string().find("rank" + std::to_string(*pids.begin())), std::string::npos)
        << entry.path() << " holds the events of world rank " << *pids.begin();
  }
  EXPECT_EQ(files, 8) << "a file for each of 4 processes' world and half";
  for (std::int64_t pid = 0; pid < 4; ++pid) EXPECT_EQ(files_of_pid[pid], 2) << "world rank " << pid;
  EXPECT_EQ(names["allreduce"], 4 * 3) << "every event present";
  EXPECT_EQ(names["barrier"], 4 * 2) << "a barrier is named barrier";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mimatrix
