// Tests of bootstrap/detail/interfaces.hpp: which interface holds an address or its
// subnet, and an interface's address to listen on. Every Linux host has lo.
#include "mimatrix/bootstrap/detail/interfaces.hpp"

#include <gtest/gtest.h>

#include <string>

namespace MIMATRIX_UNIT_ID {

using namespace mimatrix::bootstrap::detail;

TEST(interfaces, loopback_addresses_are_los) {
  EXPECT_EQ(interface_reaching("127.0.0.1"), "lo");
  EXPECT_EQ(interface_reaching("127.0.0.2"), "lo");  // on lo's subnet, 127/8
  EXPECT_EQ(address_of_interface("lo"), "127.0.0.1");
  EXPECT_NE(interface_names().find("lo"), std::string::npos);
}

TEST(interfaces, what_is_no_interface_has_no_address) {
  EXPECT_EQ(address_of_interface("nosuch0"), "");
  EXPECT_EQ(interface_reaching("no.such.host.invalid"), "");
}

}  // namespace MIMATRIX_UNIT_ID
