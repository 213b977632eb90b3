// transport/fabric/library.hpp: libfabric is loaded by a process's first endpoint; where it
// cannot be, the error names the rank, what each file's loading said, and what to do. (That
// a rank loads it with its endpoint and the process launching ranks never does is checked
// by the multi-process test integration/libfabric_loading_test.cpp.)
#include "mimatrix/transport/fabric/library.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

using transport::detail::fabric::load_libfabric;

/// The message of the error load_libfabric(files, rank) throws, after checking its code.
std::string refusal(const std::vector<const char*>& files, int rank) {
  try {
    load_libfabric(files, rank);
  } catch (const error& e) {
    EXPECT_EQ(e.code(), errc::transport) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "load_libfabric loaded one of the files";
  return {};
}

TEST(libfabric_loading, a_missing_library_is_named_with_every_file_tried_the_rank_and_what_to_do) {
  const std::string what = refusal({"libmimatrix-no-such-fabric.so.1", "/nonexistent/libfabric.so"}, 3);
  EXPECT_NE(what.find("rank 3: transport::fabric: cannot load libfabric"), std::string::npos) << what;
  EXPECT_NE(what.find("libmimatrix-no-such-fabric.so.1"), std::string::npos) << what;
  EXPECT_NE(what.find("/nonexistent/libfabric.so"), std::string::npos) << what;
  EXPECT_NE(what.find("libfabric1"), std::string::npos) << what;
  EXPECT_NE(what.find("LD_LIBRARY_PATH"), std::string::npos) << what;
}

TEST(libfabric_loading, a_library_without_libfabrics_entry_points_is_refused_naming_them) {
  // libm loads, and has none of them.
  const std::string what = refusal({"libm.so.6"}, -1);
  EXPECT_EQ(what.find("rank "), std::string::npos) << "no rank was given: " << what;
  for (const char* symbol : {"fi_getinfo", "fi_freeinfo", "fi_dupinfo", "fi_fabric", "fi_strerror"})
    EXPECT_NE(what.find(std::string("no symbol ") + symbol), std::string::npos) << what;
}

}  // namespace
}  // namespace mimatrix
