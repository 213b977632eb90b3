// Listen only where asked (issue 53, defect 4): a job told MASTER_ADDR=127.0.0.1 listens
// on loopback alone, its rendezvous store and libfabric tcp's endpoints alike, with no
// FI_TCP_IFACE from the user. Before, the store listened on every address and tcp on the
// first interface libfabric found (eth0 here, where there is one).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <netinet/in.h>

#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "multi_process.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::fabric;

/// The inodes of this process's sockets.
std::set<std::string> own_socket_inodes() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  return inodes;
}

/// Whether an address of /proc/net/tcp or tcp6 ("0100007F", 32 hex digits for IPv6: 32-bit
/// words in this host's byte order) is loopback: 127/8, ::1 or ::ffff:127/104.
bool loopback(const std::string& hex) {
  unsigned char b[16] = {};
  for (std::size_t w = 0; w * 8 < hex.size(); ++w) {
    const auto word = static_cast<std::uint32_t>(std::stoul(hex.substr(w * 8, 8), nullptr, 16));
    for (int k = 0; k < 4; ++k) b[w * 4 + std::size_t(k)] = static_cast<unsigned char>(word >> (8 * k));
  }
  if (hex.size() == 8) return b[0] == 127;
  in6_addr a{};
  for (int k = 0; k < 16; ++k) a.s6_addr[k] = b[k];
  return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
}

/// "address:port" of each of this process's listening TCP sockets not on loopback.
std::vector<std::string> listening_off_loopback() {
  const auto mine = own_socket_inodes();
  std::vector<std::string> found;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeouts, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeouts >> inode;
      if (state != "0A" || !mine.contains(inode)) continue;  // 0A: LISTEN
      const std::string address = local.substr(0, local.find(':'));
      if (!loopback(address)) found.push_back(local + " (" + table + ")");
    }
  }
  return found;
}

MIMATRIX_SCENARIO(listens_on_loopback_only) {
  communicator<fabric> comm;  // MASTER_ADDR=127.0.0.1 from the launcher
  allreduce<fabric, topology::ring, reduce::sum<std::int64_t>> sum(comm);
  std::vector<std::int64_t> data(1000, comm.rank() + 1);
  sum(data);
  const std::int64_t want = std::int64_t(comm.size()) * (comm.size() + 1) / 2;
  if (data.front() != want || data.back() != want) return std::printf("rank %d: wrong sum\n", comm.rank()), 1;
  const auto off = listening_off_loopback();
  for (const auto& s : off) std::printf("rank %d listens off loopback on %s\n", comm.rank(), s.c_str());
  const char* iface = std::getenv("FI_TCP_IFACE");
  std::printf("rank %d: FI_TCP_IFACE=%s\n", comm.rank(), iface ? iface : "(unset)");
  sum(data);  // every rank checked before rank 0's store goes
  if (!off.empty()) return 1;
  std::printf("LOOPBACK ONLY\n");
  return 0;
}

// Regression (issue 53, defect 4): rank 0's store listened on [::] and libfabric tcp on
// eth0's address, though every rank was told 127.0.0.1.
TEST(listening_sockets, a_job_told_master_addr_127_0_0_1_listens_on_loopback_alone) {
  test::expect_every_rank(2, "tcp;ofi_rxm", "listens_on_loopback_only", "LOOPBACK ONLY");
}

}  // namespace
}  // namespace mimatrix
