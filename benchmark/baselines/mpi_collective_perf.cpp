// OpenMPI baselines: MPI_Allreduce, MPI_Reduce, MPI_Allgather, MPI_Gather, MPI_Scatter,
// MPI_Alltoall, MPI_Allgatherv or MPI_Alltoallv (MPI_IN_PLACE for the in-place column)
// through the perf harness, so that each table lines up with mimatrix's <collective>_perf
// column for column (the v-forms' blocks --skew's, splits.hpp). One program a collective,
// mpi_<collective>_perf, which MIMATRIX_PERF_COLLECTIVE names (CMakeLists.txt).
#include "buffers.hpp"
#include "driver.hpp"

#include <mpi.h>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace perf = mimatrix::perf;

namespace {

constexpr perf::collective this_collective = perf::collective::MIMATRIX_PERF_COLLECTIVE;

/// The MPI function of a collective whose buffers MPI lays out as NCCL does; none for a
/// reduce-scatter (MPI's in place puts the result at the start) or a broadcast (one buffer).
char const* mpi_function(perf::collective c) {
  switch (c) {
    case perf::collective::allreduce: return "MPI_Allreduce";
    case perf::collective::reduce: return "MPI_Reduce";
    case perf::collective::allgather: return "MPI_Allgather";
    case perf::collective::gather: return "MPI_Gather";
    case perf::collective::scatter: return "MPI_Scatter";
    case perf::collective::alltoall: return "MPI_Alltoall";
    case perf::collective::allgatherv: return "MPI_Allgatherv";
    case perf::collective::alltoallv: return "MPI_Alltoallv";
    case perf::collective::reduce_scatter:
    case perf::collective::broadcast: return nullptr;
  }
  return nullptr;
}

/// The MPI type; a collective that only moves data moves half and bfloat16 as 16-bit words.
std::optional<MPI_Datatype> mpi_type(perf::dtype t, perf::collective c) {
  if (!perf::has_redop(c) && (t == perf::dtype::half || t == perf::dtype::bfloat16)) return MPI_UINT16_T;
  switch (t) {
    case perf::dtype::int8: return MPI_INT8_T;
    case perf::dtype::uint8: return MPI_UINT8_T;
    case perf::dtype::int32: return MPI_INT32_T;
    case perf::dtype::uint32: return MPI_UINT32_T;
    case perf::dtype::int64: return MPI_INT64_T;
    case perf::dtype::uint64: return MPI_UINT64_T;
    case perf::dtype::float32: return MPI_FLOAT;
    case perf::dtype::float64: return MPI_DOUBLE;
    default: return std::nullopt;  // MPI has no half or bfloat16
  }
}

std::optional<MPI_Op> mpi_op(perf::redop o) {
  switch (o) {
    case perf::redop::sum: return MPI_SUM;
    case perf::redop::prod: return MPI_PROD;
    case perf::redop::min: return MPI_MIN;
    case perf::redop::max: return MPI_MAX;
    default: return std::nullopt;  // MPI has no average
  }
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

class mpi_runner {
 public:
  mpi_runner(perf::options const& o, MPI_Datatype type, MPI_Op op)
      : o_(o), type_(type), op_(op), buffers_(this_collective, o, rank_, size_) {}

  int rank() const { return rank_; }
  int size() const { return size_; }

  void prepare(perf::shape const& s, bool in_place) {
    buffers_.prepare(s, in_place);
    if (perf::is_v_form(this_collective)) {  // MPI's int counts, made outside the timed calls
      send_ = ints(buffers_.layout().send);
      recv_ = ints(buffers_.layout().recv);
    }
  }

  void run() {
    int const n = static_cast<int>(buffers_.count());
    void* in = buffers_.input();
    void* out = buffers_.output();
    // MPI's in place: the root's (every rank's in an allreduce or allgather) input is
    // MPI_IN_PLACE, where the layout already holds it; a scatter's root output likewise.
    bool const here = buffers_.in_place() && (rank_ == o_.root || !perf::has_root(this_collective));
    void const* send = here && this_collective != perf::collective::scatter ? MPI_IN_PLACE : in;
    MPI_Comm const w = MPI_COMM_WORLD;
    switch (this_collective) {
      case perf::collective::allreduce: MPI_Allreduce(send, out, n, type_, op_, w); return;
      case perf::collective::reduce: MPI_Reduce(send, out, n, type_, op_, o_.root, w); return;
      case perf::collective::allgather: MPI_Allgather(send, n, type_, out, n, type_, w); return;
      case perf::collective::gather: MPI_Gather(send, n, type_, out, n, type_, o_.root, w); return;
      case perf::collective::scatter: MPI_Scatter(in, n, type_, here ? MPI_IN_PLACE : out, n, type_, o_.root, w); return;
      case perf::collective::alltoall: MPI_Alltoall(in, n, type_, out, n, type_, w); return;
      case perf::collective::allgatherv:
        MPI_Allgatherv(send, send_.counts[0], type_, out, recv_.counts.data(), recv_.displs.data(), type_, w);
        return;
      case perf::collective::alltoallv:
        MPI_Alltoallv(in, send_.counts.data(), send_.displs.data(), type_, out, recv_.counts.data(),
                      recv_.displs.data(), type_, w);
        return;
      case perf::collective::reduce_scatter:
      case perf::collective::broadcast: return;  // not built (mpi_function)
    }
  }

  std::size_t check() { return buffers_.check(); }

  void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

  double combine(double v, perf::combine_op how) {
    MPI_Op const op = how == perf::combine_op::sum ? MPI_SUM : how == perf::combine_op::min ? MPI_MIN : MPI_MAX;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    return v;
  }

 private:
  struct int_blocks {
    std::vector<int> counts, displs;
  };
  static int_blocks ints(perf::blocks const& b) {
    return {std::vector<int>(b.counts.begin(), b.counts.end()), std::vector<int>(b.displs.begin(), b.displs.end())};
  }

  perf::options const& o_;
  MPI_Datatype type_;
  MPI_Op op_;
  int rank_ = world_rank(), size_ = world_size();
  perf::collective_buffers buffers_;
  int_blocks send_, recv_;  // a v-form's
};
static_assert(perf::runner<mpi_runner>);

std::string library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string v(buf, static_cast<std::size_t>(len));
  if (auto nl = v.find_first_of(",\n"); nl != std::string::npos) v.resize(nl);  // "Open MPI v4.1.4"
  return std::string(mpi_function(this_collective)) + ", " + v;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int const rank = world_rank(), size = world_size();
  auto const o = perf::parse_or_exit(argc, argv);
  std::string const program = "mpi_" + std::string(perf::name(this_collective)) + "_perf";
  auto const type = mpi_type(o.type, this_collective);
  // A collective that does not reduce takes any -o, as nccl-tests' do, and prints none.
  auto const op = perf::has_redop(this_collective) ? mpi_op(o.op) : std::optional<MPI_Op>(MPI_OP_NULL);
  std::string error;
  if (!mpi_function(this_collective)) error = "no MPI baseline of " + std::string(perf::name(this_collective));
  else if (!type) error = "datatype " + std::string(perf::name(o.type)) + " has no MPI type";
  else if (!op) error = "op " + std::string(perf::name(o.op)) + " has no MPI operation";
  else if (o.ranks != 0 && o.ranks != size) error = "--ranks " + std::to_string(o.ranks) + " but mpirun started " + std::to_string(size);
  // Flags a baseline cannot honour are refused, not echoed in a header that would say they ran.
  else if (!o.device.empty()) error = "-G " + o.device + ": this baseline runs on host buffers only";
  else if (!o.provider.empty()) error = "--provider " + o.provider + ": Open MPI picks its transport (mpirun --mca btl ...)";
  else if (!o.algo.empty()) error = "--algo " + o.algo + ": Open MPI picks its algorithm (mpirun --mca coll_tuned_" +
                                     std::string(perf::name(this_collective)) + "_algorithm ...)";
  if (!error.empty()) {
    if (rank == 0) std::fprintf(stderr, "%s: %s\n", program.c_str(), error.c_str());
    MPI_Finalize();
    return 2;
  }
  mpi_runner r(o, *type, *op);
  int const rc = perf::run_sweep(r, o, {program, library_version(), this_collective}).exit_code();
  MPI_Finalize();
  return rc;
}
