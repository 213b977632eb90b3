// transport/fabric/tcp_interface.hpp: the interface libfabric tcp is given (FI_TCP_IFACE)
// follows the job's store or MIMATRIX_SOCKET_IFNAME, and the user's own FI_TCP_IFACE wins
// (issue 53: without FI_TCP_IFACE=lo a job told 127.0.0.1 listened on eth0's address).
#include "mimatrix/transport/fabric/tcp_interface.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "support/environment.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::detail::fabric::tcp_interface_for;
using test::environment;

std::optional<std::string> chosen(const environment& vars, int rank = 0) {
  return tcp_interface_for(rank, test::lookup(vars));
}

TEST(tcp_interface, follows_master_addr_to_the_interface_holding_it) {
  EXPECT_EQ(chosen({{"MASTER_ADDR", "127.0.0.1"}}), "lo");
  EXPECT_EQ(chosen({{"MIMATRIX_STORE", "tcp://127.0.0.1:29500"}}), "lo");
  EXPECT_EQ(chosen({{"MIMATRIX_STORE", "tcp://[::1]:29500"}}), "lo");
}

TEST(tcp_interface, mimatrix_socket_ifname_names_it) {
  EXPECT_EQ(chosen({{"MASTER_ADDR", "198.51.100.7"}, {"MIMATRIX_SOCKET_IFNAME", "lo"}}), "lo");
}

TEST(tcp_interface, the_users_own_fi_tcp_iface_wins) {
  EXPECT_EQ(chosen({{"MASTER_ADDR", "127.0.0.1"}, {"FI_TCP_IFACE", "eth7"}}), std::nullopt);
  EXPECT_EQ(chosen({{"MIMATRIX_SOCKET_IFNAME", "lo"}, {"FI_TCP_IFACE", "eth7"}}), std::nullopt);
}

TEST(tcp_interface, nothing_named_leaves_it_to_libfabric) {
  EXPECT_EQ(chosen({}), std::nullopt);
  EXPECT_EQ(chosen({{"MIMATRIX_STORE", "file:/tmp/job"}}), std::nullopt);
}

TEST(tcp_interface, a_name_that_is_no_interface_fails_naming_the_rank) {
  try {
    (void)chosen({{"MIMATRIX_SOCKET_IFNAME", "nosuch0"}}, 3);
    ADD_FAILURE() << "nothing thrown";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 3: MIMATRIX_SOCKET_IFNAME='nosuch0'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mimatrix
