// Tests of bootstrap/socket_interface.hpp: the job store listens only where it is asked
// (issue 53, defect 4): on MASTER_ADDR's address, or on the interface
// MIMATRIX_SOCKET_IFNAME names; a name that is no interface here fails at start.
#include "mimatrix/bootstrap/socket_interface.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "support/environment.hpp"

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using mimatrix::test::environment;
using mimatrix::test::lookup;
using mimatrix::test::rank_of;

/// Whether something accepts TCP connections on the IPv4 address `ip`, port `port`.
bool accepts(const char* ip, int port) {
  mimatrix::bootstrap::detail::unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

/// A port nobody listens on now.
std::string free_port() { return std::to_string(mimatrix::bootstrap::tcp_store("127.0.0.1", 0, true, 1s).port()); }

// Regression (issue 53, defect 4): the store listened on every address. All of 127/8 is
// loopback on Linux: a store on every address accepts on 127.0.0.2, one on 127.0.0.1 not.
TEST(store_listener, a_store_told_master_addr_127_0_0_1_cannot_be_reached_on_another_local_address) {
  const std::string port = free_port();
  const environment vars = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
  auto served = mimatrix::bootstrap::open_store(rank_of(0, 2), 1s, lookup(vars));
  EXPECT_TRUE(accepts("127.0.0.1", std::stoi(port)));
  EXPECT_FALSE(accepts("127.0.0.2", std::stoi(port)));
}

TEST(store_listener, mimatrix_socket_ifname_names_the_interface_the_store_listens_on) {
  const std::string port = free_port();
  const environment vars = {{"MASTER_ADDR", "localhost"}, {"MASTER_PORT", port}, {"MIMATRIX_SOCKET_IFNAME", "lo"}};
  auto served = mimatrix::bootstrap::open_store(rank_of(0, 2), 1s, lookup(vars));
  EXPECT_EQ(served->where(), "tcp://127.0.0.1:" + port);  // lo's address, where rank 0 reaches it
  EXPECT_TRUE(accepts("127.0.0.1", std::stoi(port)));
  EXPECT_FALSE(accepts("127.0.0.2", std::stoi(port)));
}

TEST(store_listener, a_name_that_is_no_interface_fails_at_start_naming_the_rank_and_the_choices) {
  const environment vars = {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}, {"MIMATRIX_SOCKET_IFNAME", "nosuch0"}};
  try {
    (void)mimatrix::bootstrap::open_store(rank_of(1, 2), 200ms, lookup(vars));  // every rank checks it
    ADD_FAILURE() << "nothing thrown";
  } catch (const mimatrix::error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), mimatrix::errc::invalid_argument) << m;
    EXPECT_NE(m.find("rank 1: MIMATRIX_SOCKET_IFNAME='nosuch0' is not an interface of this host"), std::string::npos) << m;
    EXPECT_NE(m.find("lo"), std::string::npos) << m;  // the accepted values
  }
}

TEST(store_listener, a_master_addr_not_of_this_host_fails_on_rank_0_saying_what_to_set) {
  // TEST-NET-2: no host's address; bind() refuses it, nothing is sent.
  const environment vars = {{"MASTER_ADDR", "198.51.100.7"}, {"MASTER_PORT", free_port()}};
  try {
    (void)mimatrix::bootstrap::open_store(rank_of(0, 2), 200ms, lookup(vars));
    ADD_FAILURE() << "nothing thrown";
  } catch (const mimatrix::error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), mimatrix::errc::transport) << m;
    EXPECT_NE(m.find("rank 0 could not serve the rendezvous store on 198.51.100.7 port"), std::string::npos) << m;
    EXPECT_NE(m.find("MIMATRIX_SOCKET_IFNAME"), std::string::npos) << m;
  }
}

}  // namespace MIMATRIX_UNIT_ID
