// The long tier of issue 17 item 1: a hundred jobs in a row start over stale files in
// /dev/shm, planted under every free pid near the ones the next ranks will get, as
// earlier killed jobs would have left them.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

MIMATRIX_SCENARIO(exact_among_stale_files) {
  communicator<transport::fabric> comm;
  allreduce<transport::fabric, topology::ring, reduce::sum<int>> sum(comm);
  std::vector<int> v(100000, comm.rank() + 1);
  sum(v);
  const int want = comm.size() * (comm.size() + 1) / 2;
  for (int x : v)
    if (x != want) return std::printf("rank %d: got %d, want %d\n", comm.rank(), x, want), 1;
  return 0;
}

/// Plants libfabric shm regions and mimatrix segments under each free pid in the next
/// `count` after this process's: the ranks launched next get pids from there.
std::vector<std::string> plant_near_next_pids(int count) {
  std::vector<std::string> planted;
  for (pid_t pid = ::getpid() + 1; pid <= ::getpid() + count; ++pid) {
    if (::kill(pid, 0) == 0) continue;  // alive: not a dead process's
    for (const std::string& name : {std::to_string(pid) + ":0:0", "mimatrix-mb-x-r0-p" + std::to_string(pid) + "-01"}) {
      const std::string path = "/dev/shm/" + name;
      const int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
      if (fd >= 0 && ::ftruncate(fd, 4096) == 0) planted.push_back(path);
      if (fd >= 0) ::close(fd);
    }
  }
  return planted;
}

TEST(leftovers_grid, a_hundred_jobs_in_a_row_start_over_stale_files) {
  for (int job = 0; job < 100; ++job) {
    const auto planted = plant_near_next_pids(64);
    const auto r = test::run_ranks(3, "shm", "exact_among_stale_files");
    for (const auto& path : planted) ::unlink(path.c_str());
    ASSERT_EQ(r.exit_code, 0) << "job " << job << "\n" << test::all_output(r);
  }
}

}  // namespace
}  // namespace mimatrix
