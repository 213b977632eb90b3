// mimatrix's nccl-tests-style benchmarks over transport::fabric: one runner for the eight
// collectives and the v-forms alltoallv and allgatherv through the runtime-typed entry
// (collectives.hpp): the collective, the type, the operation and the algorithm (--algo) are
// values, as a framework has them. Compiled once for the ten programs (a unit took 7 s in each).
// `--ranks N` without a launcher's environment starts N local ranks of this same program.
// `-G host|cuda` runs the calls on device buffers, ordered on a stream (NCCL's way); the
// sweep fills and checks host copies of them, outside the timed calls.
#include "collective_perf.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "buffers.hpp"
#include "cuda_device_port.hpp"
#include "driver.hpp"
#include "mimatrix/bootstrap/launch.hpp"
#include "mimatrix/collectives.hpp"
#include "mimatrix/device/host_port.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/fabric.hpp"

namespace mimatrix::perf {
namespace {

using fabric_comm = communicator<transport::fabric>;

/// mimatrix's dtype for the harness's name; none for uint32 and uint64.
std::optional<mimatrix::dtype> to_mimatrix(dtype t) {
  switch (t) {
    case dtype::int8: return mimatrix::dtype::int8;
    case dtype::uint8: return mimatrix::dtype::uint8;
    case dtype::int32: return mimatrix::dtype::int32;
    case dtype::int64: return mimatrix::dtype::int64;
    case dtype::half: return mimatrix::dtype::float16;  // same bits as perf::half_t
    case dtype::bfloat16: return mimatrix::dtype::bfloat16;
    case dtype::float32: return mimatrix::dtype::float32;
    case dtype::float64: return mimatrix::dtype::float64;
    default: return std::nullopt;
  }
}

/// One collective call over byte buffers through the runtime-typed entry, on the
/// topology the algorithm needs; in place, `in` and `out` lie in one buffer
/// (collective_buffers). A v-form's blocks are `layout`'s, which follows from `count`.
class call {
 public:
  virtual ~call() = default;
  virtual void run(const std::byte* in, std::byte* out, std::size_t count, int root, const block_layout& layout) = 0;
  /// --persistent 1: each size's calls start one persistent call (MPI_Start) rather than
  /// fresh ones.
  void persist(bool on) { persistent_ = on; }

 protected:
  bool persistent_ = false;
};

// The harness's redop and mimatrix's op_kind list sum prod min max avg in one order.
static_assert(int(redop::prod) == int(reduce::op_kind::prod) && int(redop::avg) == int(reduce::op_kind::avg));

template <class Topology>
class runtime_call final : public call {
 public:
  runtime_call(collective c, fabric_comm& comm, Topology topo, mimatrix::dtype type, redop op, const std::string& algo,
               std::optional<device::stream> stream)
      : c_(c),
        coll_(comm, std::move(topo)),
        type_(type),
        op_(static_cast<reduce::op_kind>(op)),
        options_{algo == "auto" ? std::string() : algo, std::nullopt, stream} {}

  void run(const std::byte* in, std::byte* out, std::size_t count, int root, const block_layout& layout) override {
    if (persistent_) {
      const prepared_key key{in, out, count, root};
      if (!prepared_.valid() || !(key == key_)) {
        prepared_ = prepare(in, out, count, root, layout);
        key_ = key;
      }
      prepared_.start().wait();
      return;
    }
    request pending;
    switch (c_) {
      case collective::allreduce: pending = coll_.allreduce(in, out, count, type_, op_, options_); break;
      case collective::reduce_scatter: pending = coll_.reduce_scatter(in, out, count, type_, op_, options_); break;
      case collective::allgather: pending = coll_.allgather(in, out, count, type_, options_); break;
      case collective::broadcast: pending = coll_.broadcast(in, out, count, type_, root, options_); break;
      case collective::reduce: pending = coll_.reduce(in, out, count, type_, op_, root, options_); break;
      case collective::gather: pending = coll_.gather(in, out, count, type_, root, options_); break;
      case collective::scatter: pending = coll_.scatter(in, out, count, type_, root, options_); break;
      case collective::alltoall: pending = coll_.alltoall(in, out, count, type_, options_); break;
      case collective::allgatherv:
        pending = coll_.allgatherv(in, layout.send.counts[0], out, layout.recv.counts, layout.recv.displs, type_, options_);
        break;
      case collective::alltoallv:
        pending = coll_.alltoallv(in, layout.send.counts, layout.send.displs, out, layout.recv.counts, layout.recv.displs,
                                  type_, options_);
        break;
    }
    pending.wait();
  }

 private:
  persistent prepare(const std::byte* in, std::byte* out, std::size_t count, int root, const block_layout& layout) {
    switch (c_) {
      case collective::allreduce: return coll_.allreduce_init(in, out, count, type_, op_, options_);
      case collective::reduce_scatter: return coll_.reduce_scatter_init(in, out, count, type_, op_, options_);
      case collective::allgather: return coll_.allgather_init(in, out, count, type_, options_);
      case collective::broadcast: return coll_.broadcast_init(in, out, count, type_, root, options_);
      case collective::reduce: return coll_.reduce_init(in, out, count, type_, op_, root, options_);
      case collective::gather: return coll_.gather_init(in, out, count, type_, root, options_);
      case collective::scatter: return coll_.scatter_init(in, out, count, type_, root, options_);
      case collective::alltoall: return coll_.alltoall_init(in, out, count, type_, options_);
      case collective::allgatherv:
        return coll_.allgatherv_init(in, layout.send.counts[0], out, layout.recv.counts, layout.recv.displs, type_, options_);
      case collective::alltoallv:
        return coll_.alltoallv_init(in, layout.send.counts, layout.send.displs, out, layout.recv.counts,
                                    layout.recv.displs, type_, options_);
    }
    return {};
  }

  struct prepared_key {
    const std::byte* in;
    std::byte* out;
    std::size_t count;
    int root;
    bool operator==(const prepared_key&) const = default;
  };

  collective c_;
  collectives<transport::fabric, Topology> coll_;
  persistent prepared_;
  prepared_key key_{};
  mimatrix::dtype type_;
  reduce::op_kind op_;
  call_options options_;
};

/// -G: the buffers the calls run on, in device memory of a port, and a stream of the
/// caller's; host copies move across on that stream.
class device_buffers {
 public:
  explicit device_buffers(device::port& p) : port_(p), stream_(p.make_stream()) {}
  device_buffers(const device_buffers&) = delete;
  device_buffers& operator=(const device_buffers&) = delete;
  ~device_buffers() {
    port_.synchronize(stream_);
    release();
    port_.free_stream(stream_);
  }

  device::stream stream() const { return {&port_, stream_}; }
  std::byte* in() const { return in_; }
  std::byte* out() const { return out_; }

  /// Device buffers of the host copies' sizes, holding their bytes.
  void take(const std::vector<std::byte>& in, const std::vector<std::byte>& out) {
    if (in.size() > in_bytes_ || out.size() > out_bytes_) {
      port_.synchronize(stream_);
      release();
      in_bytes_ = in.size();
      out_bytes_ = out.size();
      in_ = static_cast<std::byte*>(port_.allocate_device(in_bytes_));
      out_ = static_cast<std::byte*>(port_.allocate_device(out_bytes_));
    }
    port_.copy(stream_, in_, in.data(), in.size());
    port_.copy(stream_, out_, out.data(), out.size());
    port_.synchronize(stream_);
  }
  /// The mean time of `iters` copies of `bytes` between two device buffers of that size
  /// (a reduce-scatter's output and an allgather's input are smaller than the size);
  /// negative where the device cannot hold them.
  double copy_seconds(std::size_t bytes, int iters) {
    std::byte* from = nullptr;
    std::byte* to = nullptr;
    try {
      from = static_cast<std::byte*>(port_.allocate_device(bytes));
      to = static_cast<std::byte*>(port_.allocate_device(bytes));
    } catch (const mimatrix::error&) {
      if (from) port_.free_device(from, bytes);
      return -1;
    }
    port_.copy(stream_, to, from, bytes);  // the first copy may set up what the device needs
    port_.synchronize(stream_);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) port_.copy(stream_, to, from, bytes);
    port_.synchronize(stream_);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / std::max(iters, 1);
    port_.free_device(from, bytes);
    port_.free_device(to, bytes);
    return seconds;
  }

  /// The device buffers' bytes back in the host copies.
  void give(std::vector<std::byte>& in, std::vector<std::byte>& out) {
    port_.copy(stream_, in.data(), in_, in.size());
    port_.copy(stream_, out.data(), out_, out.size());
    port_.synchronize(stream_);
  }

 private:
  void release() {
    if (in_) port_.free_device(in_, in_bytes_);
    if (out_) port_.free_device(out_, out_bytes_);
    in_ = out_ = nullptr;
  }

  device::port& port_;
  device::stream_handle stream_;
  std::byte* in_ = nullptr;
  std::byte* out_ = nullptr;
  std::size_t in_bytes_ = 0, out_bytes_ = 0;
};

/// The port `-G` names, or none.
device::port* device_port(const std::string& name) {
  if (name.empty()) return nullptr;
  if (name == "host") {
    static device::host_port host;  // outlives every communicator that ran calls on it
    return &host;
  }
  if (device::port* cuda = cuda_device_port()) return cuda;
  std::fprintf(stderr, "-G cuda: these programs were built without CUDA (no nvcc, or MIMATRIX_GPU_PROGRAMS=OFF)\n");
  std::exit(2);
}

/// The harness's runner over a fabric communicator.
class fabric_runner {
 public:
  /// `o.type` is one of mimatrix's (collective_main checked).
  fabric_runner(collective c, const options& o) : c_(c), o_(o) {
    const mimatrix::dtype type = *to_mimatrix(o.type);
    std::optional<device::stream> stream;
    try {
      if (device::port* port = device_port(o.device)) {
        device_ = std::make_unique<device_buffers>(*port);
        stream = device_->stream();
      }
    } catch (const mimatrix::error& e) {  // no device, or no driver: say which rank found it
      throw mimatrix::error(e.code(), "rank " + std::to_string(rank()) + ": -G " + o.device +
                                          ": no usable device on this rank (" + e.reason() + ")");
    }
    // --algo names an algorithm; gdraa and hdrm run on their own topologies.
    if (o.algo == "gdraa")
      call_ = std::make_unique<runtime_call<topology::mesh>>(c, comm_, topology::mesh{}, type, o.op, o.algo, stream);
    else if (o.algo == "hdrm")
      call_ = std::make_unique<runtime_call<topology::bigraph>>(c, comm_, topology::bigraph::for_size(comm_.size()),
                                                                type, o.op, o.algo, stream);
    else
      call_ = std::make_unique<runtime_call<topology::ring>>(c, comm_, topology::ring{}, type, o.op, o.algo, stream);
    call_->persist(o.persistent);
  }

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  /// -G: the ranks of this host, which share its device (report.hpp); collective.
  int sharing_device() { return comm_.split(transport::fabric::same_host, rank())->size(); }
  const std::string& provider() const { return comm_.transport().provider(); }

  void prepare(const shape& s, bool in_place) {
    buffers_.prepare(s, in_place);
    if (device_) device_->take(buffers_.in_storage(), buffers_.out_storage());
  }

  void run() {
    std::byte* in = device_ ? device_->in() : buffers_.in_storage().data();
    std::byte* out = device_ ? device_->out() : buffers_.out_storage().data();
    call_->run(buffers_.input(in, out), buffers_.output(in, out), buffers_.count(), o_.root, buffers_.layout());
  }

  std::size_t check() {
    if (device_) device_->give(buffers_.in_storage(), buffers_.out_storage());
    return buffers_.check();
  }

  void barrier() { harness_.barrier(); }

  /// -G: one device-to-device copy of `bytes` on this rank's device (report.hpp's limit).
  double copy_seconds(std::size_t bytes, int iters) { return device_ ? device_->copy_seconds(bytes, iters) : -1; }

  double combine(double v, combine_op how) {
    const auto op = how == combine_op::sum ? reduce::op_kind::sum
                    : how == combine_op::min ? reduce::op_kind::min
                                             : reduce::op_kind::max;
    harness_.allreduce(&v, &v, 1, mimatrix::dtype::float64, op).wait();
    return v;
  }

 private:
  collective c_;
  const options& o_;
  fabric_comm comm_;
  std::unique_ptr<device_buffers> device_;  // -G; before call_: calls end before the buffers go
  std::unique_ptr<call> call_;
  collectives<transport::fabric> harness_{comm_};  // the sweep's barriers and timings
  collective_buffers buffers_{c_, o_, comm_.rank(), comm_.size()};
};

}  // namespace

int collective_main(collective c, int argc, char** argv, const char* program) {
  const options o = parse_or_exit(argc, argv);
  static constexpr std::string_view algorithms[] = {"", "auto", "automatic", "ring", "recursive_doubling",
                                                     "halving_doubling", "gdraa", "hdrm", "linear", "binomial",
                                                     "rabenseifner", "pairwise", "bruck"};
  if (std::find(std::begin(algorithms), std::end(algorithms), o.algo) == std::end(algorithms)) {
    std::fprintf(stderr,
                 "%s: --algo %s: these programs run ring, recursive_doubling, halving_doubling, gdraa (on a mesh), "
                 "hdrm (on a BiGraph), linear, binomial (reduce, gather, scatter), rabenseifner (reduce), pairwise, bruck "
                 "(alltoall) or automatic (the hierarchical algorithm needs a typed topology of servers); the v-forms run "
                 "linear (allgatherv) or pairwise (alltoallv)\n",
                 program, o.algo.c_str());
    return 2;
  }
  if (!to_mimatrix(o.type)) {  // before any rank starts: once, not once a rank
    std::fprintf(stderr,
                 "%s: -d %s: mimatrix has no such type (its dtypes: int8, uint8, int32, int64, half, float, double, "
                 "bfloat16; the MPI baseline takes uint32 and uint64 too)\n",
                 program, std::string(name(o.type)).c_str());
    return 2;
  }
  // Before CUDA starts (-G cuda): a call's gate must not share a hardware queue with the
  // call's own work (docs/device.md); an explicit setting wins.
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  std::string provider = o.provider == "tcp" ? "tcp;ofi_rxm" : o.provider;
  if (!provider.empty()) ::setenv("MIMATRIX_PROVIDER", provider.c_str(), 1);
  if (o.ranks > 0 && !std::getenv("WORLD_SIZE") && !std::getenv("OMPI_COMM_WORLD_SIZE") &&
      !std::getenv("SLURM_NTASKS") && !std::getenv("PMI_SIZE")) {
    bootstrap::launch_options l;
    l.ranks = o.ranks;
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    l.argv.assign(argv, argv + argc);
    if (n > 0) l.argv[0] = std::string(self, std::size_t(n));
    l.prefix = false;
    return bootstrap::launch_local(l).exit_code;
  }
  try {
    fabric_runner r(c, o);
    if (o.ranks > 0 && o.ranks != r.size()) {  // under a launcher, which started the ranks
      if (r.rank() == 0)
        std::fprintf(stderr, "%s: --ranks %d, but the launcher started %d ranks\n", program, o.ranks, r.size());
      return 2;
    }
    return run_sweep(r, o, {program, "mimatrix fabric " + r.provider(), c, r.size()}).exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace mimatrix::perf
