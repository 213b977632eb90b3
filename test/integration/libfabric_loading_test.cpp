// libfabric is loaded by a process's first fabric endpoint, not when it starts
// (transport/fabric/library.hpp): a rank loads it with its communicator, and the process
// that launches ranks, which opens no endpoint, never loads it (Debian's libfabric costs
// about 0.2 s a process to load). The program's signal handlers survive the loading.
#include "multi_process.hpp"

#include <gtest/gtest.h>
#include <link.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "mimatrix/collectives.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/transport/fabric.hpp"

namespace mimatrix {
namespace MIMATRIX_UNIT_ID {

/// Whether this process has libfabric mapped.
bool libfabric_loaded() {
  bool found = false;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        if (info->dlpi_name && std::strstr(info->dlpi_name, "libfabric.so")) *static_cast<bool*>(data) = true;
        return 0;
      },
      &found);
  return found;
}

void program_handler(int) {}

/// Whether `signal`'s handler is program_handler.
bool programs_handler_on(int signal) {
  struct sigaction now {};
  return ::sigaction(signal, nullptr, &now) == 0 && now.sa_handler == program_handler;
}

MIMATRIX_SCENARIO(loads_libfabric_with_its_endpoint) {
  if (libfabric_loaded()) {
    std::printf("libfabric was loaded before any endpoint\n");
    return 1;
  }
  // A program's handlers, as a trainer's or a framework's: Debian's libinfinipath, which
  // libfabric loads, installs its own for these when it loads.
  const int signals[] = {SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL, SIGABRT};
  for (int s : signals) ::signal(s, program_handler);
  communicator<transport::fabric> comm;
  collectives<transport::fabric> coll(comm);
  if (!libfabric_loaded()) {
    std::printf("rank %d: libfabric is not loaded after the communicator opened\n", comm.rank());
    return 1;
  }
  for (int s : signals)
    if (!programs_handler_on(s)) {
      std::printf("rank %d: the handler of signal %d was replaced when libfabric loaded\n", comm.rank(), s);
      return 1;
    }
  std::int64_t v = comm.rank() + 1;
  coll.allreduce(&v, &v, 1, dtype::int64, reduce::op_kind::sum).wait();
  if (v != std::int64_t(comm.size()) * (comm.size() + 1) / 2) return 1;
  std::printf("rank %d: loaded with its endpoint, sum exact\n", comm.rank());
  return 0;
}

TEST(libfabric_loading, a_rank_loads_it_with_its_endpoint_keeping_its_handlers_and_the_launcher_never_does) {
  EXPECT_FALSE(libfabric_loaded());
  // Over tcp: libfabric's shm provider installs handlers of its own with its endpoint, on
  // purpose (they remove its regions, then call the program's).
  const auto r = test::run_ranks(2, "tcp;ofi_rxm", "loads_libfabric_with_its_endpoint");
  ASSERT_EQ(r.exit_code, 0) << test::all_output(r);
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(r.output[std::size_t(rank)].find("rank " + std::to_string(rank) + ": loaded with its endpoint, sum exact"),
              std::string::npos)
        << test::all_output(r);
  EXPECT_FALSE(libfabric_loaded()) << "the launching process loaded libfabric";
}

}  // namespace
}  // namespace mimatrix
