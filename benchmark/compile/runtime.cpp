// Compile-time unit (issue 10): the runtime-typed entry called with every dtype and op,
// and the other three collectives.
#include <cstdint>
#include <vector>

#include "mimatrix/collectives.hpp"
#include "mimatrix/transport/fabric.hpp"

using namespace mimatrix;

int main() {
  communicator<transport::fabric> comm;
  collectives<transport::fabric> coll(comm);
  std::vector<std::byte> in(1 << 16), out(1 << 20);
  for (dtype t : {dtype::int8, dtype::uint8, dtype::int32, dtype::int64, dtype::float16, dtype::bfloat16,
                  dtype::float32, dtype::float64})
    for (reduce::op_kind op : {reduce::op_kind::sum, reduce::op_kind::prod, reduce::op_kind::min,
                               reduce::op_kind::max, reduce::op_kind::avg}) {
      coll.allreduce(in.data(), out.data(), 16, t, op).wait();
      coll.reduce_scatter(in.data(), out.data(), 4, t, op).wait();
    }
  coll.allgather(in.data(), out.data(), 4, dtype::float32).wait();
  coll.broadcast(in.data(), out.data(), 4, dtype::float32, 0).wait();
  coll.barrier();
  return 0;
}
