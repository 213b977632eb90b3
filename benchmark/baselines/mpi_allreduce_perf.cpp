// OpenMPI baseline: MPI_Allreduce (MPI_IN_PLACE for the in-place column) through the perf
// harness, so its table lines up with mimatrix's allreduce_perf column for column.
#include "driver.hpp"

#include <mpi.h>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace perf = mimatrix::perf;

namespace {

std::optional<MPI_Datatype> mpi_type(perf::dtype t) {
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

class mpi_runner {
 public:
  mpi_runner(perf::options const& o, MPI_Datatype type, MPI_Op op) : o_(o), type_(type), op_(op) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

  void prepare(perf::shape const& s, bool in_place) {
    count_ = s.count;
    in_place_ = in_place;
    std::size_t const bytes = count_ * perf::size_of(o_.type);
    if (in_.size() < bytes) {  // keep the largest buffers: no page faults inside the timing
      in_.resize(bytes);
      out_.resize(bytes);
    }
    perf::bytes::fill_input(o_.type, in_.data(), count_, o_.op, rank_);
    perf::bytes::fill_sentinel(o_.type, out_.data(), count_);
  }

  void run() {
    MPI_Allreduce(in_place_ ? MPI_IN_PLACE : in_.data(), in_place_ ? in_.data() : out_.data(),
                  static_cast<int>(count_), type_, op_, MPI_COMM_WORLD);
  }

  std::size_t check() const {
    return perf::bytes::check_allreduce(o_.type, in_place_ ? in_.data() : out_.data(), count_, o_.op, size_);
  }

  void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

  double combine(double v, perf::combine_op how) {
    MPI_Op const op = how == perf::combine_op::sum ? MPI_SUM : how == perf::combine_op::min ? MPI_MIN : MPI_MAX;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    return v;
  }

 private:
  perf::options const& o_;
  MPI_Datatype type_;
  MPI_Op op_;
  int rank_ = 0, size_ = 1;
  std::size_t count_ = 0;
  bool in_place_ = false;
  std::vector<std::byte> in_, out_;
};
static_assert(perf::runner<mpi_runner>);

std::string library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string v(buf, static_cast<std::size_t>(len));
  if (auto nl = v.find_first_of(",\n"); nl != std::string::npos) v.resize(nl);  // "Open MPI v4.1.4"
  return "MPI_Allreduce, " + v;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto const o = perf::parse_or_exit(argc, argv);
  auto const type = mpi_type(o.type);
  auto const op = mpi_op(o.op);
  std::string error;
  if (!type) error = "datatype " + std::string(perf::name(o.type)) + " has no MPI type";
  else if (!op) error = "op " + std::string(perf::name(o.op)) + " has no MPI operation";
  else if (o.ranks != 0 && o.ranks != size) error = "--ranks " + std::to_string(o.ranks) + " but mpirun started " + std::to_string(size);
  // Flags a baseline cannot honour are refused, not echoed in a header that would say they ran.
  else if (!o.device.empty()) error = "-G " + o.device + ": this baseline reduces host buffers only";
  else if (!o.provider.empty()) error = "--provider " + o.provider + ": Open MPI picks its transport (mpirun --mca btl ...)";
  else if (!o.algo.empty()) error = "--algo " + o.algo + ": Open MPI picks its algorithm (mpirun --mca coll_tuned_allreduce_algorithm ...)";
  if (!error.empty()) {
    if (rank == 0) std::fprintf(stderr, "mpi_allreduce_perf: %s\n", error.c_str());
    MPI_Finalize();
    return 2;
  }
  mpi_runner r(o, *type, *op);
  int const rc = perf::run_sweep(r, o, {"mpi_allreduce_perf", library_version(), perf::collective::allreduce}).exit_code();
  MPI_Finalize();
  return rc;
}
