// Gloo baseline: gloo::allreduce (ring unless --algo bcube) over Gloo's tcp transport, through
// the perf harness. One process a rank: RANK / WORLD_SIZE (or OMPI_COMM_WORLD_RANK / _SIZE),
// rendezvous in a FileStore directory: GLOO_STORE_DIR, else /tmp/mimatrix-gloo-<MASTER_PORT>.
#include "driver.hpp"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
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
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace perf = mimatrix::perf;

namespace {

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
      : o_(o), ctx_(std::move(ctx)), fn_(std::move(fn)), algo_(algo) {}

  int rank() const { return ctx_->rank; }
  int size() const { return ctx_->size; }

  void prepare(perf::shape const& s, bool in_place) {
    count_ = s.count;
    in_place_ = in_place;
    std::size_t const esize = perf::size_of(o_.type);
    if (in_.size() < count_ * esize) {
      in_.resize(count_ * esize);
      out_.resize(count_ * esize);
    }
    perf::bytes::fill_input(o_.type, in_.data(), count_, o_.op, rank());
    perf::bytes::fill_sentinel(o_.type, out_.data(), count_);
    // Built once a size: the timed loop measures gloo::allreduce, not buffer registration.
    opts_ = std::make_unique<gloo::AllreduceOptions>(ctx_);
    opts_->setAlgorithm(algo_);
    opts_->setReduceFunction(fn_);
    opts_->setTag(0);
    perf::visit(o_.type, [&]<class T>(perf::type_tag<T>) {
      if (!in_place_) opts_->setInput(reinterpret_cast<T*>(in_.data()), count_);
      opts_->setOutput(reinterpret_cast<T*>(in_place_ ? in_.data() : out_.data()), count_);
    });
  }

  void run() {
    if (count_ == 0) return;  // gloo rejects empty allreduces
    gloo::allreduce(*opts_);
  }

  std::size_t check() const {
    return perf::bytes::check_allreduce(o_.type, in_place_ ? in_.data() : out_.data(), count_, o_.op, size());
  }

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
  perf::options const& o_;
  std::shared_ptr<gloo::Context> ctx_;
  reduce_fn fn_;
  gloo::AllreduceOptions::Algorithm algo_;
  std::unique_ptr<gloo::AllreduceOptions> opts_;
  std::size_t count_ = 0;
  bool in_place_ = false;
  std::vector<std::byte> in_, out_;
};
static_assert(perf::runner<gloo_runner>);

}  // namespace

int main(int argc, char** argv) {
  auto const o = perf::parse_or_exit(argc, argv);
  auto const rank = env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"});
  auto const size = env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  auto fail = [](std::string const& why) {
    std::fprintf(stderr, "gloo_allreduce_perf: %s\n", why.c_str());
    return 2;
  };
  if (!rank || !size) return fail("set RANK and WORLD_SIZE (or run under mimatrix-run, torchrun or mpirun)");
  if (*size < 1 || *rank < 0 || *rank >= *size)
    return fail("RANK " + std::to_string(*rank) + " is not in WORLD_SIZE " + std::to_string(*size));
  if (o.ranks != 0 && o.ranks != *size)
    return fail("--ranks " + std::to_string(o.ranks) + " but WORLD_SIZE is " + std::to_string(*size));
  // Flags a baseline cannot honour are refused, not echoed in a header that would say they ran.
  if (!o.device.empty()) return fail("-G " + o.device + ": this baseline reduces host buffers only");
  if (!o.provider.empty()) return fail("--provider " + o.provider + ": Gloo runs over its own tcp transport");
  auto fn = reduction(o.type, o.op);
  if (!fn) return fail("datatype " + std::string(perf::name(o.type)) + " with op " + std::string(perf::name(o.op)) + " has no Gloo reduction");
  auto algo = gloo::AllreduceOptions::Algorithm::RING;
  if (o.algo == "bcube") algo = gloo::AllreduceOptions::Algorithm::BCUBE;
  else if (!o.algo.empty() && o.algo != "ring") return fail("--algo " + o.algo + ": Gloo has ring and bcube");

  std::string const store_dir = env_or("GLOO_STORE_DIR", "/tmp/mimatrix-gloo-" + env_or("MASTER_PORT", "default"));
  // Keys of a crashed earlier run would be read as this run's; a run id keeps runs apart.
  std::string const run_id = env_or("MIMATRIX_RUN_ID", env_or("TORCHELASTIC_RUN_ID", env_or("OMPI_MCA_ess_base_jobid", "run")));
  try {
    std::filesystem::create_directories(store_dir);
    gloo::rendezvous::FileStore file_store(store_dir);
    gloo::rendezvous::PrefixStore store("gloo_allreduce_perf/" + run_id, file_store);

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
    std::string const library = std::string("gloo::allreduce ") + (o.algo.empty() ? "ring" : o.algo) + ", tcp";
    int const rc = perf::run_sweep(r, o, {"gloo_allreduce_perf", library, perf::collective::allreduce}).exit_code();
    r.barrier();
    // Everyone has read every key by now: each rank clears the keys it wrote, so the
    // directory can be reused.
    for (auto const& path : file_store.getAllKeyFilePaths()) std::filesystem::remove(path);
    return rc;
  } catch (std::exception const& e) {
    return fail("rank " + std::to_string(*rank) + " of " + std::to_string(*size) + ", store " + store_dir + ": " + e.what());
  }
}
