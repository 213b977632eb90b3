// device::peer_access over a scripted runtime: access enabled both ways once a pair as
// devices join; a pair the hardware cannot connect makes the map incomplete and is named
// by check(), in its direction only.
#include "mimatrix/device/peer_access.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::device {
namespace MIMATRIX_UNIT_ID {

/// A runtime whose pairs in `cannot` have no peer path; it records what was enabled.
struct scripted_runtime {
  std::set<std::pair<int, int>> cannot;
  std::vector<std::pair<int, int>> enabled;

  peer_access::backend backend() {
    return {[this](int from, int to) { return !cannot.count({from, to}); },
            [this](int from, int to) { enabled.emplace_back(from, to); }};
  }
};

TEST(peer_access, joining_devices_enables_every_pair_both_ways_once) {
  scripted_runtime rt;
  peer_access peers(rt.backend());
  peers.join(0);
  EXPECT_TRUE(rt.enabled.empty()) << "one device has no peer";
  peers.join(1);
  peers.join(2);
  peers.join(1);  // a second port on device 1
  const std::set<std::pair<int, int>> enabled(rt.enabled.begin(), rt.enabled.end());
  EXPECT_EQ(rt.enabled.size(), 6u) << "each ordered pair once";
  EXPECT_EQ(enabled, (std::set<std::pair<int, int>>{{0, 1}, {1, 0}, {0, 2}, {2, 0}, {1, 2}, {2, 1}}));
  EXPECT_TRUE(peers.complete());
  EXPECT_NO_THROW(peers.check(2, 0, "combine"));
  EXPECT_NO_THROW(peers.check(1, 1, "combine"));
}

TEST(peer_access, a_pair_without_a_peer_path_is_named_in_its_direction) {
  scripted_runtime rt;
  rt.cannot = {{1, 3}};
  peer_access peers(rt.backend());
  peers.join(1);
  EXPECT_TRUE(peers.complete());
  peers.join(3);
  EXPECT_FALSE(peers.complete());
  EXPECT_EQ(rt.enabled, (std::vector<std::pair<int, int>>{{3, 1}})) << "only the direction the hardware has";
  EXPECT_NO_THROW(peers.check(3, 1, "combine"));
  try {
    peers.check(1, 3, "combine");
    FAIL() << "GPU 1 reading GPU 3's memory was not refused";
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    const std::string what = e.what();
    EXPECT_NE(what.find("combine on GPU 1"), std::string::npos) << what;
    EXPECT_NE(what.find("memory of GPU 3"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaDeviceCanAccessPeer"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace mimatrix::device
