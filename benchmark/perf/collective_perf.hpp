// mimatrix's nccl-tests-style benchmarks over transport::fabric: one runner for the four
// collectives, with the type and operation chosen at run time and the algorithm by --algo.
// `--ranks N` without a launcher's environment starts N local ranks of this same program.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "driver.hpp"
#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/allgather.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/bootstrap/launch.hpp"
#include "mimatrix/broadcast.hpp"
#include "mimatrix/reduce_scatter.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/fabric.hpp"

namespace mimatrix::perf {

using fabric_comm = communicator<transport::fabric>;

/// One collective call over byte buffers, bound to a type, an operation and a topology.
class call {
 public:
  virtual ~call() = default;
  virtual void run(const std::byte* in, std::byte* out, std::size_t count, bool in_place, int root) = 0;
};

template <collective C, class Topology, class Op>
class typed_call final : public call {
  using T = typename Op::value_type;

 public:
  typed_call(fabric_comm& comm, Topology topo)
      : run_(make(comm, std::move(topo))), rank_(comm.rank()), size_(comm.size()) {}
  void run(const std::byte* in, std::byte* out, std::size_t count, bool in_place, int root) override {
    const std::size_t p = std::size_t(size());
    auto* src = reinterpret_cast<const T*>(in);
    auto* dst = reinterpret_cast<T*>(out);
    T* mine = const_cast<T*>(src);  // in place: input and output are one buffer
    if constexpr (C == collective::allreduce) {
      if (in_place) return run_(std::span<T>(mine, count));
      run_(std::span<const T>(src, count), std::span<T>(dst, count));
    } else if constexpr (C == collective::reduce_scatter) {
      if (in_place) return run_(std::span<const T>(src, count * p), std::span<T>(mine + count * rank(), count));
      run_(std::span<const T>(src, count * p), std::span<T>(dst, count));
    } else if constexpr (C == collective::allgather) {
      if (in_place) return run_(std::span<const T>(dst + count * rank(), count), std::span<T>(dst, count * p));
      run_(std::span<const T>(src, count), std::span<T>(dst, count * p));
    } else {
      if (in_place) return run_(std::span<T>(mine, count), root);
      run_(std::span<const T>(src, count), std::span<T>(dst, count), root);
    }
  }

 private:
  int rank() const { return rank_; }
  int size() const { return size_; }
  // The collective types are not movable (their engine refers to the communicator), so
  // the member is built in place from this factory's prvalue.
  static auto make(fabric_comm& comm, Topology topo) {
    if constexpr (C == collective::allreduce)
      return allreduce<transport::fabric, Topology, Op, algorithm::automatic>(comm, std::move(topo));
    else if constexpr (C == collective::reduce_scatter)
      return reduce_scatter<transport::fabric, Topology, Op, algorithm::automatic>(comm, std::move(topo));
    else if constexpr (C == collective::allgather)
      return allgather<transport::fabric, Topology, T, algorithm::automatic>(comm, std::move(topo));
    else
      return broadcast<transport::fabric, Topology, T, algorithm::automatic>(comm, std::move(topo));
  }
  decltype(make(std::declval<fabric_comm&>(), std::declval<Topology>())) run_;
  int rank_ = 0, size_ = 1;
};

/// mimatrix's types for the harness's run-time names; nullptr where mimatrix has none.
template <collective C, class Topology>
std::unique_ptr<call> make_call(fabric_comm& comm, const Topology& topo, dtype t, redop op) {
  auto with = [&]<class T>() -> std::unique_ptr<call> {
    if constexpr (C == collective::allgather || C == collective::broadcast) {
      return std::make_unique<typed_call<C, Topology, reduce::sum<T>>>(comm, topo);  // no reduction
    } else {
      switch (op) {
        case redop::sum: return std::make_unique<typed_call<C, Topology, reduce::sum<T>>>(comm, topo);
        case redop::prod: return std::make_unique<typed_call<C, Topology, reduce::prod<T>>>(comm, topo);
        case redop::min: return std::make_unique<typed_call<C, Topology, reduce::min<T>>>(comm, topo);
        case redop::max: return std::make_unique<typed_call<C, Topology, reduce::max<T>>>(comm, topo);
        case redop::avg: return std::make_unique<typed_call<C, Topology, reduce::avg<T>>>(comm, topo);
      }
      return nullptr;
    }
  };
  switch (t) {
    case dtype::int8: return with.template operator()<std::int8_t>();
    case dtype::uint8: return with.template operator()<std::uint8_t>();
    case dtype::int32: return with.template operator()<std::int32_t>();
    case dtype::int64: return with.template operator()<std::int64_t>();
    case dtype::half: return with.template operator()<mimatrix::half>();  // same bits as perf::half_t
    case dtype::bfloat16: return with.template operator()<mimatrix::bfloat16>();
    case dtype::float32: return with.template operator()<float>();
    case dtype::float64: return with.template operator()<double>();
    default: return nullptr;  // uint32, uint64
  }
}

/// The harness's runner over a fabric communicator.
template <collective C>
class fabric_runner {
 public:
  explicit fabric_runner(const options& o) : o_(o) {
    // --algo names an algorithm (MIMATRIX_ALGO pins it); gdraa and hdrm need their own
    // topologies, which only allreduce_perf builds (they triple its compile time).
    if constexpr (C == collective::allreduce) {
      if (o.algo == "gdraa")
        call_ = make_call<C>(comm_, topology::mesh{}, o.type, o.op);
      else if (o.algo == "hdrm")
        call_ = make_call<C>(comm_, topology::bigraph::for_size(comm_.size()), o.type, o.op);
    } else if (o.algo == "gdraa" || o.algo == "hdrm") {
      std::fprintf(stderr, "--algo %s: only allreduce_perf builds its topology\n", o.algo.c_str());
      std::exit(2);
    }
    if (!call_) call_ = make_call<C>(comm_, topology::ring{}, o.type, o.op);
    if (!call_) {
      std::fprintf(stderr, "mimatrix has no %s type\n", std::string(name(o.type)).c_str());
      std::exit(2);
    }
  }

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  const std::string& provider() const { return comm_.transport().provider(); }

  void prepare(const shape& s, bool in_place) {
    shape_ = s;
    in_place_ = in_place;
    const std::size_t es = size_of(o_.type);
    const std::size_t in_bytes = s.send_count * es, out_bytes = s.recv_count * es;
    if (in_.size() < in_bytes) in_.resize(in_bytes);
    if (out_.size() < out_bytes) out_.resize(out_bytes);
    const bool reads_input = C != collective::broadcast || rank() == o_.root;
    if constexpr (C == collective::allgather) {
      // In place the input is block `rank` of the output, filled as that block.
      std::byte* input = in_place ? out_.data() + s.count * es * std::size_t(rank()) : in_.data();
      bytes::fill_sentinel(o_.type, out_.data(), s.recv_count);
      bytes::fill_input(o_.type, input, s.count, o_.op, rank(), s.count * std::size_t(rank()));
    } else {
      if (reads_input || in_place) bytes::fill_input(o_.type, in_.data(), s.send_count, o_.op, rank());
      if (!in_place) bytes::fill_sentinel(o_.type, out_.data(), s.recv_count);
      if (C == collective::broadcast && in_place && rank() != o_.root)
        bytes::fill_sentinel(o_.type, in_.data(), s.send_count);
    }
  }

  void run() {
    const bool gather_in_place = C == collective::allgather && in_place_;
    call_->run(gather_in_place ? out_.data() : in_.data(), out_.data(), shape_.count, in_place_, o_.root);
  }

  std::size_t check() const {
    const std::byte* result = in_place_ && C != collective::allgather ? in_.data() : out_.data();
    if constexpr (C == collective::reduce_scatter)
      if (in_place_) result = in_.data() + shape_.count * size_of(o_.type) * std::size_t(rank());
    switch (C) {
      case collective::allreduce: return bytes::check_allreduce(o_.type, result, shape_.count, o_.op, size());
      case collective::reduce_scatter:
        return bytes::check_reduce_scatter(o_.type, result, shape_.count, o_.op, size(), rank());
      case collective::allgather: return bytes::check_allgather(o_.type, result, shape_.count, o_.op, size());
      default: return bytes::check_broadcast(o_.type, result, shape_.count, o_.op, o_.root);
    }
  }

  void barrier() {
    std::int32_t token = 0;
    barrier_(std::span<std::int32_t>(&token, 1));
  }

  double combine(double v, combine_op how) {
    switch (how) {
      case combine_op::sum: sum_(std::span<double>(&v, 1)); break;
      case combine_op::min: min_(std::span<double>(&v, 1)); break;
      case combine_op::max: max_(std::span<double>(&v, 1)); break;
    }
    return v;
  }

 private:
  const options& o_;
  fabric_comm comm_;
  std::unique_ptr<call> call_;
  allreduce<transport::fabric, topology::ring, reduce::sum<std::int32_t>> barrier_{comm_};
  allreduce<transport::fabric, topology::ring, reduce::sum<double>> sum_{comm_};
  allreduce<transport::fabric, topology::ring, reduce::min<double>> min_{comm_};
  allreduce<transport::fabric, topology::ring, reduce::max<double>> max_{comm_};
  std::vector<std::byte> in_, out_;
  shape shape_{};
  bool in_place_ = false;
};

/// main() of <collective>_perf.
template <collective C>
int collective_main(int argc, char** argv, const char* program) {
  const options o = parse_or_exit(argc, argv);
  std::string provider = o.provider == "tcp" ? "tcp;ofi_rxm" : o.provider;
  if (!provider.empty()) ::setenv("MIMATRIX_PROVIDER", provider.c_str(), 1);
  if (!o.algo.empty() && o.algo != "auto" && o.algo != "gdraa" && o.algo != "hdrm")
    ::setenv("MIMATRIX_ALGO", o.algo.c_str(), 1);  // automatic obeys MIMATRIX_ALGO rules
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
    fabric_runner<C> r(o);
    return run_sweep(r, o, {program, "mimatrix fabric " + r.provider(), C, r.size()}).exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace mimatrix::perf
