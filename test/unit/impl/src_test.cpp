// Separate compilation: this unit is built with MIMATRIX_SEPARATE_COMPILATION and linked
// with mimatrix::compiled, so the kernel table and transport::fabric come from the library.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/core/config.hpp"
#include "mimatrix/transport/inproc.hpp"

#if defined(MIMATRIX_WITH_FABRIC)
#include "mimatrix/transport/fabric.hpp"
#endif

namespace mimatrix {
namespace {

static_assert(!MIMATRIX_HEADER_ONLY, "this test must be built with MIMATRIX_SEPARATE_COMPILATION");

TEST(separate_compilation, runtime_typed_calls_find_their_kernels_in_the_library) {
  transport::run_inproc(3, [](int r, transport::inproc::world& w) {
    communicator<transport::inproc> comm(w, r);
    collectives<transport::inproc> coll(comm);
    std::vector<std::int64_t> v(1000, r + 1);
    coll.allreduce(v.data(), v.data(), v.size(), dtype::int64, reduce::op_kind::prod).wait();
    EXPECT_EQ(v[999], 6);
  });
}

TEST(separate_compilation, p2p_batches_run_on_the_library_s_p2p_core) {
  transport::run_inproc(2, [](int r, transport::inproc::world& w) {
    communicator<transport::inproc> comm(w, r);
    collectives<transport::inproc> coll(comm);
    std::vector<std::int64_t> mine(100, r + 1), theirs(100, 0);
    coll.group_start();
    (void)coll.send(mine.data(), mine.size(), dtype::int64, 1 - r);
    (void)coll.recv(theirs.data(), theirs.size(), dtype::int64, 1 - r);
    coll.group_end().wait();
    EXPECT_EQ(theirs[99], 2 - r);
  });
}

#if defined(MIMATRIX_WITH_FABRIC)
TEST(separate_compilation, the_fabric_transport_is_compiled_in_the_library) {
  EXPECT_EQ(transport::fabric::chunk_for_provider("shm"), std::size_t(512) << 10);
}
#endif

}  // namespace
}  // namespace mimatrix
