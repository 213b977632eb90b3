// The nccl-tests size sweep over any library: a binary implements `runner` for its collective
// and calls run_sweep; the columns, timing rules and checks are the same for every library.
//
// A runner is one rank's view of one collective. Every rank calls run_sweep, which calls the
// runner's members in the same order on every rank (they may be collective):
//
//   rank(), size()              this rank and the world size
//   prepare(shape, in_place)    make buffers for shape.send_count / shape.recv_count elements of
//                               opts.type (keep them across calls when large enough), fill the
//                               input with bytes::fill_input and the output with the sentinel;
//                               in_place: the output is the input (MPI_IN_PLACE); never for a
//                               collective without an in-place form (has_in_place: alltoall).
//                               collective_buffers (buffers.hpp) does all this for every collective
//   run()                       one collective over the prepared buffers, returns when complete
//   check()                     this rank's wrong output elements after the last run()
//                               (bytes::check_allreduce and friends, or collective_buffers::check)
//   barrier()                   all ranks
//   combine(value, how)         `value` reduced over all ranks (sum, min or max); rank 0 uses it
//
// Example, an MPI allreduce (benchmark/baselines/mpi_collective_perf.cpp has all of it, for six collectives):
//
//   struct mpi_runner {
//     perf::options const& o; std::vector<std::byte> in, out; std::size_t n = 0; bool inplace = false;
//     int rank() const; int size() const;
//     void prepare(perf::shape const& s, bool in_place) {
//       n = s.count; inplace = in_place; in.resize(n * perf::size_of(o.type)); out.resize(in.size());
//       perf::bytes::fill_input(o.type, in.data(), n, o.op, rank());
//       perf::bytes::fill_sentinel(o.type, out.data(), n);
//     }
//     void run() { MPI_Allreduce(inplace ? MPI_IN_PLACE : in.data(), inplace ? in.data() : out.data(), ...); }
//     std::size_t check() { return perf::bytes::check_allreduce(o.type, inplace ? in.data() : out.data(), n, o.op, size()); }
//     void barrier() { MPI_Barrier(MPI_COMM_WORLD); }
//     double combine(double v, perf::combine_op how) { MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, ..., MPI_COMM_WORLD); return v; }
//   };
//   int main(int argc, char** argv) {
//     MPI_Init(&argc, &argv);
//     auto const o = perf::parse_or_exit(argc, argv);
//     mpi_runner r{o};
//     int const rc = perf::run_sweep(r, o, {"mpi_allreduce_perf", "OpenMPI", perf::collective::allreduce}).exit_code();
//     MPI_Finalize();
//     return rc;
//   }
//
// Timing as nccl-tests: per size and placement, warmup_iters calls, a barrier, then iters calls
// back to back timed together; the time is their mean, combined over ranks as -a says. With -c 1
// the input is filled again and one more, untimed, call is checked. Before the first size, its
// calls run for -W milliseconds (100), which nccl-tests does not do (warm_up).
#pragma once

#include "args.hpp"
#include "data.hpp"
#include "datatype.hpp"
#include "report.hpp"
#include "../../examples/writable_path.hpp"

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace mimatrix::perf {

enum class combine_op { sum, min, max };

template <class R>
concept runner = requires(R& r, R const& cr, shape const& s, bool in_place, double v, combine_op how) {
  { cr.rank() } -> std::convertible_to<int>;
  { cr.size() } -> std::convertible_to<int>;
  r.prepare(s, in_place);
  r.run();
  { r.check() } -> std::convertible_to<std::size_t>;
  r.barrier();
  { r.combine(v, how) } -> std::convertible_to<double>;
};

// Optional: a runner whose calls run on device buffers (-G) also times a device-to-device
// copy on its device, which bounds an allreduce of ranks sharing that device (report.hpp:
// the memory-traffic limit). copy_seconds(bytes, iters): the mean time of `iters` copies of
// `bytes`, or a negative value where the buffers are host memory.
template <class R>
concept device_runner = runner<R> && requires(R& r, std::size_t bytes, int iters) {
  { r.copy_seconds(bytes, iters) } -> std::convertible_to<double>;
};

// Optional, with device_runner: sharing_device(), collective, the ranks that share this
// rank's device (its host's); the limit above holds where they are all the ranks.
template <class R>
concept host_aware_runner = device_runner<R> && requires(R& r) {
  { r.sharing_device() } -> std::convertible_to<int>;
};

// What a sweep found: identical on every rank (wrong counts are combined), rows filled on all.
struct sweep_result {
  std::vector<row> rows;
  std::size_t wrong = 0;
  double average_busbw = 0;
  bool bad_arguments = false;
  // 0 all correct, 1 wrong elements, 2 arguments the collective cannot take.
  [[nodiscard]] int exit_code() const { return bad_arguments ? 2 : wrong ? 1 : 0; }
};

namespace detail {

template <runner R>
double time_calls(R& r, options const& o) {
  for (int i = 0; i < o.warmup_iters; ++i) r.run();
  r.barrier();
  auto const t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) r.run();
  auto const t1 = std::chrono::steady_clock::now();
  double const local = std::chrono::duration<double>(t1 - t0).count() / o.iters;
  switch (o.average) {
    case time_average::rank0: return local;  // only rank 0 prints; no collective needed
    case time_average::mean: return r.combine(local, combine_op::sum) / r.size();
    case time_average::min: return r.combine(local, combine_op::min);
    case time_average::max: return r.combine(local, combine_op::max);
  }
  return local;
}

/// Calls of shape `s` until every rank has made them for `o.warmup_ms`, deciding together
/// after each call: a transport's one-time costs stay out of the first size's figure
/// (libfabric's rxm grows its buffer pools in the first tens of ms of traffic, 9 ms a
/// time over tcp: docs/performance.md). The same for every runner, baselines included.
template <runner R>
void warm_up(R& r, options const& o, shape const& s) {
  if (o.warmup_ms <= 0) return;
  r.prepare(s, false);
  r.barrier();
  auto const t0 = std::chrono::steady_clock::now();
  double elapsed_ms = 0;
  while (elapsed_ms < o.warmup_ms) {
    r.run();
    double const local = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    elapsed_ms = r.combine(local, combine_op::max);
  }
}

/// Rank 0's device-to-device copy time of `bytes`, measured while the others wait at a
/// barrier, so that no call shares the device with it; negative without device buffers.
template <runner R>
double copy_time(R& r, options const& o, std::size_t bytes) {
  if constexpr (device_runner<R>) {
    r.barrier();
    double const seconds = r.rank() == 0 ? r.copy_seconds(bytes, o.iters) : -1;
    r.barrier();
    return seconds;
  } else {
    return -1;
  }
}

template <runner R>
std::size_t checked_call(R& r, options const& o, shape const& s, bool in_place) {
  if (!o.check) return 0;
  r.prepare(s, in_place);  // the timed calls overwrote an in-place input
  r.run();
  double const wrong = r.combine(static_cast<double>(r.check()), combine_op::sum);
  return static_cast<std::size_t>(wrong);
}

/// A flag whose value every rank must share, as a number all ranks can compare
/// (strings as a 32-bit digest, exact in a double), and how to print it.
struct shared_flag {
  char const* flag;
  double value;
  std::string (*text)(double);  // null: a string flag, `own` printed as rank 0's
  std::string own = {};
};

inline std::uint32_t digest(std::string_view s) {  // FNV-1a
  std::uint32_t h = 2166136261u;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return h;
}

inline std::vector<shared_flag> shared_flags(options const& o) {
  auto const number = [](double v) { return std::to_string(static_cast<long long>(v)); };
  auto const type = [](double v) { return std::string(name(static_cast<dtype>(static_cast<int>(v)))); };
  auto const op = [](double v) { return std::string(name(static_cast<redop>(static_cast<int>(v)))); };
  auto const n = [](auto v) { return static_cast<double>(v); };
  auto const real = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  return {{"-b", n(o.min_bytes), number},  {"-e", n(o.max_bytes), number},   {"-i", n(o.step_bytes), number},
          {"-f", n(o.step_factor), number}, {"-n", n(o.iters), number},       {"-w", n(o.warmup_iters), number},
          {"-W", n(o.warmup_ms), number},   {"-c", n(o.check), number},       {"-d", n(int(o.type)), type},
          {"-o", n(int(o.op)), op},          {"-r", n(o.root), number},        {"-a", n(int(o.average)), number},
          {"--algo", n(digest(o.algo)), nullptr, o.algo}, {"-G", n(digest(o.device)), nullptr, o.device},
          {"--provider", n(digest(o.provider)), nullptr, o.provider}, {"--skew", o.skew, real}};
}

/// Whether every rank was given the same flags; rank 0 names the first that differs, with
/// a rank that differs from it. A rank given another root, say, would run another call: over
/// tcp, small broadcasts whose ranks each named themselves root moved no data and every
/// rank checked its own as right (a black-box test); the library cannot tell.
template <runner R>
bool flags_agree(R& r, options const& o, std::string const& program) {
  for (shared_flag const& f : shared_flags(o)) {
    if (r.combine(f.value, combine_op::min) == r.combine(f.value, combine_op::max)) continue;
    double const first = r.combine(r.rank() == 0 ? f.value : 0, combine_op::sum);
    int const other = static_cast<int>(r.combine(f.value != first ? r.rank() : r.size(), combine_op::min));
    double const theirs = r.combine(r.rank() == other ? f.value : 0, combine_op::sum);
    if (r.rank() == 0) {
      std::string const flag = f.flag;
      std::string const given = f.text ? flag + " " + f.text(theirs) + ", rank 0 " + flag + " " + f.text(first)
                                       : "another " + flag + " than rank 0's ('" + f.own + "')";
      std::fprintf(stderr, "%s: rank %d was given %s: every rank must be given the same flags\n", program.c_str(),
                   other, given.c_str());
    }
    return false;
  }
  return true;
}

/// Rank 0's -J file can be written (checked before the sweep, which nccl-tests does not:
/// it says so after, and exits 0).
inline std::string unwritable(std::string const& path) {
  if (path.empty()) return {};
  std::string const why = examples::why_unwritable(path, examples::write_mode::in_place);
  return why.empty() ? why : "-J " + path + ": cannot write there (" + why + ")";
}

/// Buffers for the largest size, made before the first call as nccl-tests makes them: a
/// size that does not fit fails at once, naming the rank and the size, not after the sweep
/// up to it. Empty when they fit.
template <runner R>
std::string make_largest(R& r, shape const& largest) {
  try {
    r.prepare(largest, false);
    return {};
  } catch (std::exception const& e) {
    return "rank " + std::to_string(r.rank()) + ": no buffers for the largest size, " + std::to_string(largest.bytes) +
           " bytes (" + e.what() + ")";
  }
}

}  // namespace detail

// Runs the sweep on every rank; rank 0 prints the nccl-tests table (and -J JSON) to `out`.
// Arguments that cannot run end it on every rank alike, before any timed call: flags that
// differ between ranks, a root outside the group, an unwritable -J file, buffers that do
// not fit.
template <runner R>
sweep_result run_sweep(R& r, options const& o, run_info info, std::FILE* out = stdout) {
  info.nranks = r.size();
  bool const printer = r.rank() == 0;
  sweep_result result;
  result.bad_arguments = !detail::flags_agree(r, o, info.program);
  if (result.bad_arguments) return result;
  if (o.skew > 0 && !is_v_form(info.coll)) {  // the same flags for every program: refused, not ignored
    if (printer)
      std::fprintf(stderr, "%s: --skew %g: %s has even blocks (the v-forms, alltoallv and allgatherv, take it)\n",
                   info.program.c_str(), o.skew, std::string(name(info.coll)).c_str());
    result.bad_arguments = true;
    return result;
  }
  if (has_root(info.coll) && (o.root < 0 || o.root >= info.nranks)) {
    if (printer) std::fprintf(stderr, "%s: root %d is not a rank of %d\n", info.program.c_str(), o.root, info.nranks);
    result.bad_arguments = true;
    return result;
  }
  std::size_t const type_size = size_of(o.type);
  auto const sizes = sweep_sizes(o);
  std::string why = printer ? detail::unwritable(o.output_file) : std::string();
  if (why.empty() && !sizes.empty()) why = detail::make_largest(r, shape_of(info.coll, sizes.back(), type_size, info.nranks));
  if (!why.empty()) std::fprintf(stderr, "%s: %s\n", info.program.c_str(), why.c_str());
  if (r.combine(why.empty() ? 0 : 1, combine_op::max) > 0) {
    result.bad_arguments = true;
    return result;
  }
  if constexpr (host_aware_runner<R>)
    if (!o.device.empty()) info.sharing_device = r.sharing_device();
  reporter rep(o, info, printer, out);
  rep.header();
  if (!sizes.empty()) detail::warm_up(r, o, shape_of(info.coll, sizes.front(), type_size, info.nranks));
  for (std::size_t bytes : sizes) {
    shape const s = shape_of(info.coll, bytes, type_size, info.nranks);
    double times[2] = {0, 0};
    std::size_t wrong[2] = {0, 0};
    for (int placement = 0; placement < (has_in_place(info.coll) ? 2 : 1); ++placement) {
      bool const in_place = placement == 1;
      r.prepare(s, in_place);
      times[placement] = detail::time_calls(r, o);
      wrong[placement] = detail::checked_call(r, o, s, in_place);
    }
    rep.add(s, times[0], wrong[0], times[1], wrong[1]);
    if (!o.device.empty()) rep.add_copy(detail::copy_time(r, o, s.bytes));
  }
  rep.footer();
  result.rows = rep.rows();
  result.wrong = rep.total_wrong();
  result.average_busbw = rep.average_busbw();
  return result;
}

}  // namespace mimatrix::perf
