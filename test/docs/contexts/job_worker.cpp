// A trainer of the job server's (it includes examples/01_job_server/worker.hpp): the
// secret, this host's name, and the current generation's communicator, which on_revoke aborts.
// NEEDS: <rdma/fabric.h> <boost/asio.hpp> <openssl/evp.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mimatrix/mimatrix.hpp>
#include <mimatrix/transport/fabric.hpp>
// SNIPPET_HEAD
using namespace std::chrono_literals;

void snippet() {
  const std::string secret = "not a secret", hostname = "node1";
  std::unique_ptr<mimatrix::communicator<mimatrix::transport::fabric>> comm_ptr;
// SNIPPET
}
