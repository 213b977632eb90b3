// What a killed rank leaves behind does not break the next job (issue 17, item 1): a
// region of libfabric's shm provider under a pid that a new rank gets again.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "mimatrix/bootstrap/detail/shm_files.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

/// Plants what a dead process with this rank's pid would have left, then starts.
MIMATRIX_SCENARIO(starts_over_a_stale_region) {
  const std::string planted = "/dev/shm/" + std::to_string(::getpid()) + ":0:0";
  const int fd = ::open(planted.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ::ftruncate(fd, 4096) != 0) return std::printf("could not plant %s\n", planted.c_str()), 2;
  ::close(fd);
  communicator<transport::fabric> comm;
  allreduce<transport::fabric, topology::ring, reduce::sum<int>> sum(comm);
  std::vector<int> v(1000, comm.rank() + 1);
  sum(v);
  const int want = comm.size() * (comm.size() + 1) / 2;
  for (int x : v)
    if (x != want) return std::printf("rank %d: got %d, want %d\n", comm.rank(), x, want), 1;
  std::printf("rank %d: exact over a stale region\n", comm.rank());
  return 0;
}

TEST(leftovers, a_stale_shm_region_under_a_ranks_pid_does_not_stop_the_job) {
  const auto r = test::run_ranks(3, "shm", "starts_over_a_stale_region");
  EXPECT_EQ(r.exit_code, 0) << test::all_output(r);
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.output[std::size_t(rank)].find("exact over a stale region"), std::string::npos) << test::all_output(r);
}

TEST(leftovers, only_the_files_of_the_pid_are_removed) {
  char dir[] = "/tmp/mimatrix-shm-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  // libfabric shm's regions and mimatrix's mailbox segments of pid 4242, and others'.
  const std::vector<std::string> gone = {"4242:0:0", "4242:1:0", "mimatrix-mb-job_-r3-p4242-00ff00ff00ff00ff"};
  const std::vector<std::string> kept = {"42420:0:0", "424:0:0", "other", "mimatrix-mb-job_-r3-p42420-0a",
                                         "x-mimatrix-mb-r1-p4242-0b"};
  for (const auto& name : gone) std::fclose(std::fopen((std::string(dir) + "/" + name).c_str(), "w"));
  for (const auto& name : kept) std::fclose(std::fopen((std::string(dir) + "/" + name).c_str(), "w"));
  EXPECT_EQ(bootstrap::detail::remove_shm_files_of(4242, dir), gone.size());
  for (const auto& name : kept) {
    const std::string path = std::string(dir) + "/" + name;
    EXPECT_EQ(::access(path.c_str(), F_OK), 0) << name << " was removed";
    ::unlink(path.c_str());
  }
  ::rmdir(dir);
}

}  // namespace
}  // namespace mimatrix
