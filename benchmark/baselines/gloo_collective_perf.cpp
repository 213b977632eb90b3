// Gloo baselines: gloo::allreduce (ring unless --algo bcube), gloo::reduce, gloo::gather,
// gloo::scatter, gloo::alltoall, gloo::allgatherv or gloo::alltoallv (the v-forms' blocks
// --skew's, splits.hpp) over Gloo's tcp transport, through the perf harness. One
// program a collective, gloo_<collective>_perf, which MIMATRIX_PERF_COLLECTIVE names
// (CMakeLists.txt). One process a rank: RANK / WORLD_SIZE (or OMPI_COMM_WORLD_RANK / _SIZE),
// rendezvous in a FileStore directory: GLOO_STORE_DIR, else /tmp/mimatrix-gloo-<MASTER_PORT>.
#include "buffers.hpp"
#include "driver.hpp"

#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
// The v-forms where this Gloo has them (CMakeLists.txt builds their programs only there).
#if __has_include(<gloo/allgatherv.h>) && __has_include(<gloo/alltoallv.h>)
#include <gloo/allgatherv.h>
#include <gloo/alltoallv.h>
#define MIMATRIX_GLOO_V_FORMS 1
#endif
#include <gloo/barrier.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace perf = mimatrix::perf;

namespace {

constexpr perf::collective this_collective = perf::collective::MIMATRIX_PERF_COLLECTIVE;
static_assert(this_collective == perf::collective::allreduce || this_collective == perf::collective::reduce ||
                  this_collective == perf::collective::gather || this_collective == perf::collective::scatter ||
                  this_collective == perf::collective::alltoall || this_collective == perf::collective::allgatherv ||
                  this_collective == perf::collective::alltoallv,
              "Gloo baselines: allreduce, reduce, gather, scatter, alltoall, allgatherv and alltoallv");

using reduce_fn = gloo::AllreduceOptions::Func;

std::string env_or(char const* name, std::string fallback) {
  char const* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::optional<int> env_int(std::initializer_list<char const*> names) {
  for (char const* n : names)
    if (char const* v = std::getenv(n); v && *v) return std::atoi(v);
  return std::nullopt;
}

// Gloo's own element-wise kernels (gloo/math.h), as torch.distributed uses them.
template <class T>
std::optional<reduce_fn> gloo_kernel(perf::redop op) {
  using raw = void (*)(void*, void const*, void const*, std::size_t);
  switch (op) {
    case perf::redop::sum: return reduce_fn(static_cast<raw>(&gloo::sum<T>));
    case perf::redop::prod: return reduce_fn(static_cast<raw>(&gloo::product<T>));
    case perf::redop::min: return reduce_fn(static_cast<raw>(&gloo::min<T>));
    case perf::redop::max: return reduce_fn(static_cast<raw>(&gloo::max<T>));
    default: return std::nullopt;  // Gloo has no average
  }
}

std::optional<reduce_fn> reduction(perf::dtype t, perf::redop op) {
  switch (t) {
    case perf::dtype::int8: return gloo_kernel<std::int8_t>(op);
    case perf::dtype::uint8: return gloo_kernel<std::uint8_t>(op);
    case perf::dtype::int32: return gloo_kernel<std::int32_t>(op);
    case perf::dtype::uint32: return gloo_kernel<std::uint32_t>(op);
    case perf::dtype::int64: return gloo_kernel<std::int64_t>(op);
    case perf::dtype::uint64: return gloo_kernel<std::uint64_t>(op);
    case perf::dtype::float32: return gloo_kernel<float>(op);
    case perf::dtype::float64: return gloo_kernel<double>(op);
    default: return std::nullopt;  // half and bfloat16: not wired to gloo::float16 here
  }
}

class gloo_runner {
 public:
  gloo_runner(perf::options const& o, std::shared_ptr<gloo::Context> ctx, reduce_fn fn,
              gloo::AllreduceOptions::Algorithm algo)
      : o_(o), ctx_(std::move(ctx)), fn_(std::move(fn)), algo_(algo), buffers_(this_collective, o, rank(), size()) {}

  int rank() const { return ctx_->rank; }
  int size() const { return ctx_->size; }

  // The call's options are built once a size: the timed loop measures the collective, not
  // buffer registration.
  void prepare(perf::shape const& s, bool in_place) {
    buffers_.prepare(s, in_place);
    perf::visit(o_.type, [&]<class T>(perf::type_tag<T>) { call_ = make_call(reinterpret_cast<T*>(buffers_.input()),
                                                                              reinterpret_cast<T*>(buffers_.output())); });
  }

  void run() {
    if (buffers_.count() == 0) return;  // gloo rejects empty calls
    call_();
  }

  std::size_t check() { return buffers_.check(); }

  void barrier() {
    gloo::BarrierOptions b(ctx_);
    b.setTag(2);
    gloo::barrier(b);
  }

  double combine(double v, perf::combine_op how) {
    gloo::AllreduceOptions a(ctx_);
    a.setOutput(&v, 1);
    a.setTag(1);
    using raw = void (*)(void*, void const*, void const*, std::size_t);
    a.setReduceFunction(how == perf::combine_op::sum ? static_cast<raw>(&gloo::sum<double>)
                        : how == perf::combine_op::min ? static_cast<raw>(&gloo::min<double>)
                                                       : static_cast<raw>(&gloo::max<double>));
    gloo::allreduce(a);
    return v;
  }

 private:
  template <class T>
  std::function<void()> make_call(T* in, T* out) {
    std::size_t const n = buffers_.count(), blocks = n * static_cast<std::size_t>(size());
    bool const in_place = buffers_.in_place();
    // No input: in place. A reduce's output on every rank: Gloo reduces through it.
    auto reducing = [&](auto& opts) {
      opts.setReduceFunction(fn_);
      if (!in_place) opts.setInput(in, n);
      opts.setOutput(out, n);
      opts.setTag(0);
    };
    if constexpr (this_collective == perf::collective::allreduce) {
      auto opts = std::make_shared<gloo::AllreduceOptions>(ctx_);
      opts->setAlgorithm(algo_);
      reducing(*opts);
      return [opts] { gloo::allreduce(*opts); };
    } else if constexpr (this_collective == perf::collective::reduce) {
      auto opts = std::make_shared<gloo::ReduceOptions>(ctx_);
      opts->setRoot(o_.root);
      reducing(*opts);
      return [opts] { gloo::reduce(*opts); };
    } else if constexpr (this_collective == perf::collective::gather) {
      auto opts = std::make_shared<gloo::GatherOptions>(ctx_);
      opts->setInput(in, n);  // in place, block `rank` of the root's output
      if (rank() == o_.root) opts->setOutput(out, blocks);
      opts->setRoot(o_.root);
      opts->setTag(0);
      return [opts] { gloo::gather(*opts); };
    } else if constexpr (this_collective == perf::collective::scatter) {
      auto opts = std::make_shared<gloo::ScatterOptions>(ctx_);
      if (rank() == o_.root) {
        std::vector<T*> parts;
        for (int r = 0; r < size(); ++r) parts.push_back(in + n * static_cast<std::size_t>(r));
        opts->setInputs(parts, n);
      }
      opts->setOutput(out, n);  // in place, block `rank` of the root's input
      opts->setRoot(o_.root);
      opts->setTag(0);
      return [opts] { gloo::scatter(*opts); };
    } else if constexpr (this_collective == perf::collective::alltoall) {
      auto opts = std::make_shared<gloo::AlltoallOptions>(ctx_);
      opts->setInput(in, blocks);
      opts->setOutput(out, blocks);
      opts->setTag(0);
      return [opts] { gloo::alltoall(*opts); };
    }
#ifdef MIMATRIX_GLOO_V_FORMS
    else if constexpr (this_collective == perf::collective::allgatherv) {
      perf::blocks const& all = buffers_.layout().recv;  // back to back, as Gloo lays them
      auto opts = std::make_shared<gloo::AllgathervOptions>(ctx_);
      if (!in_place) opts->setInput(in, buffers_.layout().send.counts[0]);  // none: in place
      opts->setOutput(out, all.counts);
      opts->setTag(0);
      return [opts] { gloo::allgatherv(*opts); };
    } else {
      auto const counts = [](perf::blocks const& b) { return std::vector<std::int64_t>(b.counts.begin(), b.counts.end()); };
      auto opts = std::make_shared<gloo::AlltoallvOptions>(ctx_);
      opts->setInput(in, counts(buffers_.layout().send));
      opts->setOutput(out, counts(buffers_.layout().recv));
      opts->setTag(0);
      return [opts] { gloo::alltoallv(*opts); };
    }
#endif
    return {};
  }

  perf::options const& o_;
  std::shared_ptr<gloo::Context> ctx_;
  reduce_fn fn_;
  gloo::AllreduceOptions::Algorithm algo_;
  perf::collective_buffers buffers_;
  std::function<void()> call_;
};
static_assert(perf::runner<gloo_runner>);

}  // namespace

int main(int argc, char** argv) {
  auto const o = perf::parse_or_exit(argc, argv);
  std::string const program = "gloo_" + std::string(perf::name(this_collective)) + "_perf";
  auto const rank = env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"});
  auto const size = env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  auto fail = [&](std::string const& why) {
    std::fprintf(stderr, "%s: %s\n", program.c_str(), why.c_str());
    return 2;
  };
  if (!rank || !size) return fail("set RANK and WORLD_SIZE (or run under mimatrix-run, torchrun or mpirun)");
  if (*size < 1 || *rank < 0 || *rank >= *size)
    return fail("RANK " + std::to_string(*rank) + " is not in WORLD_SIZE " + std::to_string(*size));
  if (o.ranks != 0 && o.ranks != *size)
    return fail("--ranks " + std::to_string(o.ranks) + " but WORLD_SIZE is " + std::to_string(*size));
  // Flags a baseline cannot honour are refused, not echoed in a header that would say they ran.
  if (!o.device.empty()) return fail("-G " + o.device + ": this baseline runs on host buffers only");
  if (!o.provider.empty()) return fail("--provider " + o.provider + ": Gloo runs over its own tcp transport");
  // A collective that does not reduce takes any -o and any type, as nccl-tests' do.
  auto fn = perf::has_redop(this_collective) ? reduction(o.type, o.op) : std::optional<reduce_fn>(reduce_fn());
  if (!fn) return fail("datatype " + std::string(perf::name(o.type)) + " with op " + std::string(perf::name(o.op)) + " has no Gloo reduction");
  auto algo = gloo::AllreduceOptions::Algorithm::RING;
  bool const allreduce = this_collective == perf::collective::allreduce;
  if (allreduce && o.algo == "bcube") algo = gloo::AllreduceOptions::Algorithm::BCUBE;
  else if (allreduce && !o.algo.empty() && o.algo != "ring") return fail("--algo " + o.algo + ": Gloo has ring and bcube");
  else if (!allreduce && !o.algo.empty()) return fail("--algo " + o.algo + ": Gloo has one algorithm of this collective");

  std::string const store_dir = env_or("GLOO_STORE_DIR", "/tmp/mimatrix-gloo-" + env_or("MASTER_PORT", "default"));
  // Keys of a crashed earlier run would be read as this run's; a run id keeps runs apart.
  std::string const run_id = env_or("MIMATRIX_RUN_ID", env_or("TORCHELASTIC_RUN_ID", env_or("OMPI_MCA_ess_base_jobid", "run")));
  try {
    std::filesystem::create_directories(store_dir);
    gloo::rendezvous::FileStore file_store(store_dir);
    gloo::rendezvous::PrefixStore store(program + "/" + run_id, file_store);

    gloo::transport::tcp::attr attr;
    if (auto iface = env_or("GLOO_SOCKET_IFNAME", ""); !iface.empty()) attr.iface = iface;
    else {
      char host[256] = "localhost";
      gethostname(host, sizeof host - 1);
      attr.hostname = env_or("GLOO_HOSTNAME", host);
    }
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(*rank, *size);
    ctx->connectFullMesh(store, dev);

    gloo_runner r(o, ctx, *fn, algo);
    std::string library = "gloo::" + std::string(perf::name(this_collective)) + ", tcp";
    if (allreduce) library = std::string("gloo::allreduce ") + (o.algo.empty() ? "ring" : o.algo) + ", tcp";
    int const rc = perf::run_sweep(r, o, {program, library, this_collective}).exit_code();
    r.barrier();
    // Everyone has read every key by now: each rank clears the keys it wrote, so the
    // directory can be reused.
    for (auto const& path : file_store.getAllKeyFilePaths()) std::filesystem::remove(path);
    return rc;
  } catch (std::exception const& e) {
    return fail("rank " + std::to_string(*rank) + " of " + std::to_string(*size) + ", store " + store_dir + ": " + e.what());
  }
}
