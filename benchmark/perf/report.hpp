// nccl-tests' report: the same columns, widths, footer and bandwidth definitions, so scripts
// written for nccl-tests read mimatrix's and the baselines' output unchanged. JSON for -J.
#pragma once

#include "args.hpp"
#include "datatype.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mimatrix::perf {

enum class collective {
  allreduce, reduce_scatter, allgather, broadcast, reduce, gather, scatter, alltoall,
  allgatherv, alltoallv
};

// The v-forms, whose blocks differ per rank (--skew, splits.hpp).
inline bool is_v_form(collective c) { return c == collective::allgatherv || c == collective::alltoallv; }

// Sizes of one sweep step the way nccl-tests derives them from the requested bytes.
struct shape {
  std::size_t count = 0;        // per-rank parameter count handed to the collective call
  std::size_t bytes = 0;        // the "size" column: max(send, receive) bytes of a rank
  std::size_t send_count = 0;   // elements a rank sends
  std::size_t recv_count = 0;   // elements a rank receives (a v-form's: with even blocks)
};

inline shape shape_of(collective c, std::size_t requested_bytes, std::size_t type_size, int nranks) {
  auto const n = static_cast<std::size_t>(nranks);
  shape s;
  switch (c) {
    case collective::allgather:
    case collective::reduce_scatter:
    case collective::gather:
    case collective::scatter:
    case collective::alltoall:  // nccl-tests: count = bytes / size / nranks, the size the whole buffer
    case collective::allgatherv:  // as their even forms: count is a block's mean (splits.hpp)
    case collective::alltoallv:
      s.count = requested_bytes / type_size / n;
      s.send_count =
          c == collective::allgather || c == collective::gather || c == collective::allgatherv ? s.count : s.count * n;
      s.recv_count = c == collective::reduce_scatter || c == collective::scatter ? s.count : s.count * n;
      s.bytes = s.count * n * type_size;
      break;
    default:
      s.count = requested_bytes / type_size;
      s.send_count = s.recv_count = s.count;
      s.bytes = s.count * type_size;
      break;
  }
  return s;
}

// algbw in GB/s (1e9) over the bytes nccl-tests counts, and busbw = algbw * factor:
// allreduce 2(n-1)/n; allgather, reduce_scatter, gather, scatter and alltoall (n-1)/n;
// broadcast and reduce 1.
inline double bus_factor(collective c, int nranks) {
  double const n = nranks;
  switch (c) {
    case collective::allreduce: return 2.0 * (n - 1) / n;
    case collective::broadcast:
    case collective::reduce: return 1.0;
    default: return (n - 1) / n;
  }
}

inline std::string_view name(collective c) {
  switch (c) {
    case collective::allreduce: return "allreduce";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::allgather: return "allgather";
    case collective::broadcast: return "broadcast";
    case collective::reduce: return "reduce";
    case collective::gather: return "gather";
    case collective::scatter: return "scatter";
    case collective::alltoall: return "alltoall";
    case collective::allgatherv: return "allgatherv";
    case collective::alltoallv: return "alltoallv";
  }
  return "?";
}

inline bool has_redop(collective c) {
  return c == collective::allreduce || c == collective::reduce_scatter || c == collective::reduce;
}
inline bool has_root(collective c) {
  return c == collective::broadcast || c == collective::reduce || c == collective::gather || c == collective::scatter;
}
// An alltoall never runs in place (as NCCL's, and an alltoallv as mimatrix's): its in-place
// columns say N/A.
inline bool has_in_place(collective c) { return c != collective::alltoall && c != collective::alltoallv; }

struct timing {
  double time_us = 0;
  double algbw = 0;  // GB/s
  double busbw = 0;  // GB/s
  std::size_t wrong = 0;
};

struct row {
  shape s;
  timing out_of_place, in_place;
  double copy_us = -1;  // -G: one device-to-device copy of the size; negative: not measured
};

struct run_info {
  std::string program;  // e.g. "mpi_allreduce_perf"
  std::string library;  // e.g. "OpenMPI 4.1.4", "gloo tcp ring", "mimatrix shm ring"
  collective coll = collective::allreduce;
  int nranks = 1;
  int sharing_device = 0;  // -G: the ranks that share one device (those of a host); 0: all
};

namespace detail {

// nccl-tests' getFloatStr: fixed width, fewer decimals as the value grows, then exponent.
inline std::string float_str(double value, int width) {
  int power = 0;
  for (std::uint64_t v = 1; value >= static_cast<double>(v) && power < 30; v *= 10) ++power;
  char buf[64];
  if (power < width - 2) std::snprintf(buf, sizeof buf, "%*.2f", width, value);
  else if (power < width - 1) std::snprintf(buf, sizeof buf, "%*.1f", width, value);
  else if (power < width + 1) std::snprintf(buf, sizeof buf, "%*.0f", width, value);
  else std::snprintf(buf, sizeof buf, "%*.1e", width, value);
  return buf;
}

inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); out += b; }
        else out += c;
    }
  }
  return out + "\"";
}

inline std::string json_number(double v) {
  if (v != v) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6f", v);
  return b;
}

inline std::string now_string() {
  char b[64];
  std::time_t const t = std::time(nullptr);
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return b;
}

}  // namespace detail

// Prints on rank 0 only: the driver constructs it everywhere and passes `active` = rank == 0.
class reporter {
 public:
  reporter(options const& o, run_info info, bool active, std::FILE* out = stdout)
      : opts_(o), info_(std::move(info)), active_(active), out_(out), start_(detail::now_string()) {}

  void header() {
    if (!active_) return;
    auto const& o = opts_;
    std::fprintf(out_, "# mimatrix perf (nccl-tests columns) %s\n", info_.library.c_str());
    std::fprintf(out_, "# Collective test starting: %s\n", info_.program.c_str());
    std::fprintf(out_, "# nRanks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d\n",
                 info_.nranks, o.min_bytes, o.max_bytes, o.step_factor > 1 ? o.step_factor : o.step_bytes,
                 o.step_factor > 1 ? "factor" : "bytes", o.warmup_iters, o.iters, o.check ? 1 : 0);
    if (!o.provider.empty() || !o.algo.empty())
      std::fprintf(out_, "# provider: %s algo: %s\n", o.provider.empty() ? "default" : o.provider.c_str(),
                   o.algo.empty() ? "default" : o.algo.c_str());
    if (is_v_form(info_.coll))
      std::fprintf(out_, "# skew: %g (%s; count: a block's mean)\n", o.skew,
                   o.skew > 0 ? "block i->j in proportion to 1 + skew*((7i+3j)%5)/4" : "even blocks");
    std::fprintf(out_, "#\n");
    std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "");
    std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size", "count", "type",
                 "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::fprintf(out_, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)", "(elements)", "", "",
                 "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(out_);
  }

  // Times in seconds a call; fills bandwidths, prints the row, and keeps it for the footer and JSON.
  void add(shape const& s, double out_of_place_s, std::size_t out_of_place_wrong, double in_place_s, std::size_t in_place_wrong) {
    row r{s, make(s, out_of_place_s, out_of_place_wrong), make(s, in_place_s, in_place_wrong)};
    rows_.push_back(r);
    if (!active_) return;
    auto const root = has_root(info_.coll) ? opts_.root : -1;
    std::string_view const op = has_redop(info_.coll) ? name(opts_.op) : "none";
    std::string_view const type = name(opts_.type);
    std::fprintf(out_, "%12zu  %12zu  %8.*s  %6.*s  %6d", s.bytes, s.count, static_cast<int>(type.size()), type.data(),
                 static_cast<int>(op.size()), op.data(), root);
    for (auto const* t : {&r.out_of_place, &r.in_place}) {
      if (t == &r.in_place && !has_in_place(info_.coll)) {
        std::fprintf(out_, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
        continue;
      }
      auto const time = detail::float_str(t->time_us, 7), alg = detail::float_str(t->algbw, 6), bus = detail::float_str(t->busbw, 6);
      if (opts_.check) std::fprintf(out_, "  %7s  %6s  %6s  %6g", time.c_str(), alg.c_str(), bus.c_str(), static_cast<double>(t->wrong));
      else std::fprintf(out_, "  %7s  %6s  %6s    N/A", time.c_str(), alg.c_str(), bus.c_str());
    }
    std::fprintf(out_, "\n");
    std::fflush(out_);
  }

  // The last row's device-to-device copy time, in seconds (negative: none).
  void add_copy(double seconds) {
    if (!rows_.empty()) rows_.back().copy_us = seconds * 1e6;
  }

  [[nodiscard]] std::size_t total_wrong() const {
    std::size_t w = 0;
    for (auto const& r : rows_) w += r.out_of_place.wrong + r.in_place.wrong;
    return w;
  }

  // nccl-tests averages busbw over every printed column, out-of-place and in-place.
  [[nodiscard]] double average_busbw() const {
    if (rows_.empty()) return 0;
    double sum = 0;
    for (auto const& r : rows_) sum += r.out_of_place.busbw + r.in_place.busbw;
    return sum / ((has_in_place(info_.coll) ? 2.0 : 1.0) * static_cast<double>(rows_.size()));
  }

  [[nodiscard]] std::vector<row> const& rows() const { return rows_; }

  void footer() {
    if (!active_) return;
    traffic_limit();
    std::size_t const wrong = total_wrong();
    std::fprintf(out_, "# %-20s : %zu %s\n", "Out of bounds values", wrong, wrong ? "FAILED" : "OK");
    std::fprintf(out_, "# %-20s : %g \n", "Avg bus bandwidth", average_busbw());
    std::fprintf(out_, "#\n");
    std::fprintf(out_, "# Collective test concluded: %s\n", info_.program.c_str());
    std::fflush(out_);
    if (!opts_.output_file.empty()) write_json();
  }

  // -G: each call against the memory traffic it must make when the ranks share one device,
  // in device-to-device copies of the size (a copy reads and writes it: 2 x size bytes).
  // An allreduce reads every shard of every input and writes every output: 2n x size, n
  // copies. A reduce-scatter reads every input and writes every output: (n+1) x size, (n+1)/2
  // copies. An allgather or broadcast reads each input once and writes every output,
  // (n+1)/2 copies; in place a rank's own output holds its part already, n/2 copies. A
  // reduce reads every input and writes the root's output: (n+1)/2 copies. A gather or
  // scatter reads and writes the size once: 1 copy, (n-1)/n in place. An alltoall reads and
  // writes every rank's whole buffer: n copies. The copy is measured on rank 0 alone; "x limit" is the call's time over the limit (1.00 is
  // the bound; issue 13's goal is 1.25 for an allreduce of 2 ranks at 256 MiB).
  [[nodiscard]] double copies_in_limit(bool in_place) const {
    double const n = info_.nranks;
    switch (info_.coll) {
      case collective::allreduce: return n;
      case collective::reduce_scatter:
      case collective::reduce: return (n + 1) / 2;
      case collective::gather:
      case collective::scatter: return in_place ? (n - 1) / n : 1;
      case collective::alltoall:
      case collective::alltoallv: return n;
      default: return (in_place ? n : n + 1) / 2;
    }
  }

  void traffic_limit() const {
    bool any = false;
    for (auto const& r : rows_) any |= r.copy_us > 0;
    if (!any) return;
    if (info_.sharing_device > 0 && info_.sharing_device != info_.nranks) {  // the network's part is not in it
      std::fprintf(out_, "#\n# Memory-traffic limit: not shown, the %d ranks share a device %d at a time (hosts); it "
                         "bounds ranks that all share one\n#\n", info_.nranks, info_.sharing_device);
      return;
    }
    std::fprintf(out_, "#\n# Memory-traffic limit, %d ranks sharing one device: %g device-to-device copies of the size",
                 info_.nranks, copies_in_limit(false));
    if (copies_in_limit(true) != copies_in_limit(false)) std::fprintf(out_, " (%g in place)", copies_in_limit(true));
    std::fprintf(out_, "\n# %10s  %9s  %9s  %12s  %9s\n", "size", "copy", "limit", "out-of-place", "in-place");
    std::fprintf(out_, "# %10s  %9s  %9s  %12s  %9s\n", "(B)", "(us)", "(us)", "(x limit)", "(x limit)");
    for (auto const& r : rows_) {
      if (r.copy_us <= 0) continue;
      double const limit = r.copy_us * copies_in_limit(false);
      char in_place[32] = "N/A";
      if (has_in_place(info_.coll))
        std::snprintf(in_place, sizeof in_place, "%.2f", r.in_place.time_us / (r.copy_us * copies_in_limit(true)));
      std::fprintf(out_, "# %10zu  %9s  %9s  %12.2f  %9s\n", r.s.bytes, detail::float_str(r.copy_us, 9).c_str(),
                   detail::float_str(limit, 9).c_str(), r.out_of_place.time_us / limit, in_place);
    }
    std::fprintf(out_, "#\n");
  }

  // The -J file: the run's parameters and one object per row, nccl-tests' key names.
  void write_json() const {
    std::FILE* f = std::fopen(opts_.output_file.c_str(), "w");
    if (!f) {
      std::fprintf(out_, "# skipping json output; %s not accessible\n", opts_.output_file.c_str());
      return;
    }
    auto const& o = opts_;
    std::string s = "{\"version\":2,\"start_time\":" + detail::json_string(start_) + ",\"args\":[";
    for (std::size_t i = 0; i < o.argv.size(); ++i) s += (i ? "," : "") + detail::json_string(o.argv[i]);
    s += "],\"program\":" + detail::json_string(info_.program) + ",\"library\":" + detail::json_string(info_.library);
    s += ",\"collective\":" + detail::json_string(name(info_.coll));
    s += ",\"config\":{\"nranks\":" + std::to_string(info_.nranks) + ",\"minimum_bytes\":" + std::to_string(o.min_bytes) +
         ",\"maximum_bytes\":" + std::to_string(o.max_bytes);
    s += o.step_factor > 1 ? ",\"step_factor\":" + std::to_string(o.step_factor) : ",\"step_bytes\":" + std::to_string(o.step_bytes);
    s += ",\"warmup_iters\":" + std::to_string(o.warmup_iters) + ",\"iterations\":" + std::to_string(o.iters) +
         ",\"validation\":" + std::to_string(o.check ? 1 : 0) + ",\"datatype\":" + detail::json_string(name(o.type)) +
         ",\"redop\":" + detail::json_string(name(o.op)) + ",\"root\":" + std::to_string(o.root) +
         ",\"average\":" + std::to_string(static_cast<int>(o.average)) + ",\"provider\":" + detail::json_string(o.provider) +
         ",\"algo\":" + detail::json_string(o.algo) +
         (is_v_form(info_.coll) ? ",\"skew\":" + detail::json_number(o.skew) : std::string()) + "},\"results\":[";
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      auto const& r = rows_[i];
      s += (i ? "," : "");
      s += "{\"size\":" + std::to_string(r.s.bytes) + ",\"count\":" + std::to_string(r.s.count) +
           ",\"type\":" + detail::json_string(name(o.type)) +
           ",\"redop\":" + detail::json_string(has_redop(info_.coll) ? name(o.op) : "none") +
           ",\"root\":" + std::to_string(has_root(info_.coll) ? o.root : -1);
      for (auto const& [key, t] : {std::pair<char const*, timing const*>{"out_of_place", &r.out_of_place},
                                    std::pair<char const*, timing const*>{"in_place", &r.in_place}}) {
        if (t == &r.in_place && !has_in_place(info_.coll)) {
          s += ",\"in_place\":null";
          continue;
        }
        s += ",\"" + std::string(key) + "\":{\"time\":" + detail::json_number(t->time_us) +
             ",\"alg_bw\":" + detail::json_number(t->algbw) + ",\"bus_bw\":" + detail::json_number(t->busbw) +
             ",\"nwrong\":" + (o.check ? std::to_string(t->wrong) : std::string("null")) + "}";
      }
      if (r.copy_us > 0) s += ",\"device_copy_time\":" + detail::json_number(r.copy_us);
      s += ",\"actual_iterations\":" + std::to_string(o.iters) + "}";
    }
    s += "],\"out_of_bounds\":{\"count\":" + std::to_string(total_wrong()) + ",\"okay\":" + (total_wrong() ? "false" : "true") +
         "},\"average_bus_bandwidth\":{\"bandwidth\":" + detail::json_number(average_busbw()) +
         ",\"okay\":\"unchecked\"},\"end_time\":" + detail::json_string(detail::now_string()) + "}\n";
    std::fputs(s.c_str(), f);
    std::fclose(f);
    std::fprintf(out_, "# Wrote JSON output to %s\n", opts_.output_file.c_str());
  }

 private:
  [[nodiscard]] timing make(shape const& s, double seconds, std::size_t wrong) const {
    timing t;
    t.time_us = seconds * 1e6;
    t.algbw = seconds > 0 ? static_cast<double>(s.bytes) / 1e9 / seconds : 0;
    t.busbw = t.algbw * bus_factor(info_.coll, info_.nranks);
    t.wrong = wrong;
    return t;
  }

  options const& opts_;
  run_info info_;
  bool active_;
  std::FILE* out_;
  std::string start_;
  std::vector<row> rows_;
};

}  // namespace mimatrix::perf
