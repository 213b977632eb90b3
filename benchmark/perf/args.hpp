// Command line of the perf binaries: nccl-tests' flags and defaults, plus mimatrix's own.
#pragma once

#include "datatype.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mimatrix::perf {

// How per-rank times become the reported one (nccl-tests -a).
enum class time_average { rank0 = 0, mean = 1, min = 2, max = 3 };

struct options {
  std::size_t min_bytes = 32u << 20;  // nccl-tests defaults: one 32 MiB size
  std::size_t max_bytes = 32u << 20;
  std::size_t step_bytes = 1u << 20;
  std::size_t step_factor = 1;  // > 1 multiplies, else step_bytes adds
  int iters = 20;
  int warmup_iters = 5;
  int warmup_ms = 100;  // mimatrix's own: calls of the first size before the sweep (driver.hpp)
  bool check = true;
  dtype type = dtype::float32;
  redop op = redop::sum;
  int root = 0;
  time_average average = time_average::mean;
  int blocking = 0;  // accepted for nccl-tests compatibility; every runner call blocks anyway
  std::string output_file;  // -J: JSON report
  // mimatrix's own
  int ranks = 0;  // 0: the launcher's world size
  std::string provider;
  std::string algo;
  bool persistent = false;  // --persistent 1: calls started as persistent ones (MPI_Start)
  std::string device;  // -G: buffers in device memory of this port ("host", "cuda"); empty: host memory
  double skew = 0;  // --skew: the v-forms' uneven blocks (splits.hpp); 0: even
  std::vector<std::string> argv;  // the command line as given, for the JSON report
};

// The size sweep nccl-tests runs: min, then *factor or +step, while <= max.
inline std::vector<std::size_t> sweep_sizes(options const& o) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    std::size_t const next = o.step_factor > 1 ? s * o.step_factor : s + o.step_bytes;
    if (next <= s) break;  // step 0, factor 1 with step 0, or overflow
    s = next;
  }
  return sizes;
}

// "8", "1K", "64M", "1.5G": powers of 1024 as nccl-tests' parsesize.
inline std::optional<std::size_t> parse_size(std::string_view s) {
  std::string const str(s);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(str.c_str(), &end);
  if (end == str.c_str() || errno != 0 || !(v >= 0)) return std::nullopt;
  std::string_view rest(end);
  if (!rest.empty()) {
    switch (rest[0]) {
      case 'K': case 'k': v *= 1024.0; break;
      case 'M': case 'm': v *= 1024.0 * 1024.0; break;
      case 'G': case 'g': v *= 1024.0 * 1024.0 * 1024.0; break;
      default: return std::nullopt;
    }
    rest.remove_prefix(1);
    if (rest == "B" || rest == "b" || rest == "iB") rest = {};
    if (!rest.empty()) return std::nullopt;
  }
  if (!(v < 0x1p63)) return std::nullopt;  // past 8 EiB, inf or nan: no size_t holds it
  return static_cast<std::size_t>(v);
}

inline void print_usage(std::FILE* f, std::string_view program) {
  std::fprintf(f,
      "USAGE: %.*s\n"
      "  -b,--minbytes <min size in bytes, K/M/G suffixes>      (32M)\n"
      "  -e,--maxbytes <max size in bytes>                      (32M)\n"
      "  -i,--stepbytes <increment size>                        (1M)\n"
      "  -f,--stepfactor <increment factor>                     (1: use -i)\n"
      "  -n,--iters <iteration count>                           (20)\n"
      "  -w,--warmup_iters <warmup iteration count>             (5)\n"
      "  -W,--warmup_ms <ms> before the sweep, calls of the first size for this long (100):\n"
      "                     a transport's one-time costs (libfabric rxm's buffer pools)\n"
      "  -c,--check <0/1>                                       (1)\n"
      "  -d,--datatype <int8|uint8|int32|int64|half|float|double|bfloat16>  (float; the MPI baseline takes uint32 and uint64 too)\n"
      "  -o,--op <sum|prod|min|max|avg>                         (sum)\n"
      "  -r,--root <root>                                       (0)\n"
      "  -a,--average <0/1/2/3> report rank0/avg/min/max time   (1)\n"
      "  -z,--blocking <0/1>                                    (accepted, calls always block)\n"
      "  -J,--output_file <file> write a JSON report\n"
      "  -t,--nthreads, -g,--ngpus <1>  accepted for nccl-tests scripts; only 1 is supported\n"
      "  --ranks <n>        ranks (in-process binaries; launcher binaries check it)\n"
      "  --provider <name>  transport provider (shm, tcp, ...)\n"
      "  --algo <name>      algorithm\n"
      "  --persistent <0/1> start each size's calls as one persistent call (MPI_Start)  (0)\n"
      "  -G,--device <host|cuda>  buffers in device memory, calls on a stream: the CUDA port\n"
      "                     (built with nvcc), or the host port that stands in for it\n"
      "  --skew <S>         alltoallv, allgatherv: block i->j in proportion to 1 + S*((7i+3j)%%5)/4,\n"
      "                     a rank's blocks summing to the size  (0: even blocks)\n"
      "  -h,--help\n",
      static_cast<int>(program.size()), program.data());
}

struct parse_result {
  options opts;
  std::string error;  // empty: ok
  bool help = false;
};

namespace detail {

struct flag {
  char short_name;
  std::string_view long_name;
};

inline constexpr flag flags[] = {
    {'b', "minbytes"}, {'e', "maxbytes"}, {'i', "stepbytes"}, {'f', "stepfactor"}, {'n', "iters"},
    {'w', "warmup_iters"}, {'c', "check"}, {'d', "datatype"}, {'o', "op"}, {'r', "root"},
    {'a', "average"}, {'z', "blocking"}, {'J', "output_file"}, {'t', "nthreads"}, {'g', "ngpus"},
    {'R', "ranks"}, {'P', "provider"}, {'A', "algo"}, {'K', "skew"},  // long-only: their letters are internal keys
    {'G', "device"}, {'W', "warmup_ms"}, {'S', "persistent"},
};

inline std::optional<long> parse_int(std::string_view s) {
  std::string const str(s);
  char* end = nullptr;
  errno = 0;
  long const v = std::strtol(str.c_str(), &end, 10);
  if (end == str.c_str() || *end != '\0' || errno != 0) return std::nullopt;
  return v;
}

// Applies one flag's value; returns an error sentence or "".
inline std::string apply(options& o, char key, std::string_view name, std::string_view v) {
  auto bad = [&](std::string_view what) {
    return "invalid value '" + std::string(v) + "' for --" + std::string(name) + ": expected " + std::string(what);
  };
  auto as_int = [&](long lo, long hi, long& out) {
    auto const x = parse_int(v);
    if (!x || *x < lo || *x > hi) return false;
    out = *x;
    return true;
  };
  long n = 0;
  switch (key) {
    case 'b': case 'e': case 'i': {
      auto const s = parse_size(v);
      if (!s) return bad("a size such as 8, 64K, 32M or 1G, below 8E bytes");
      (key == 'b' ? o.min_bytes : key == 'e' ? o.max_bytes : o.step_bytes) = *s;
      return {};
    }
    case 'f': if (!as_int(1, 1 << 20, n)) return bad("an integer >= 1"); o.step_factor = static_cast<std::size_t>(n); return {};
    case 'n': if (!as_int(1, 1 << 30, n)) return bad("an integer >= 1"); o.iters = static_cast<int>(n); return {};
    case 'w': if (!as_int(0, 1 << 30, n)) return bad("an integer >= 0"); o.warmup_iters = static_cast<int>(n); return {};
    case 'W': if (!as_int(0, 1 << 24, n)) return bad("milliseconds >= 0"); o.warmup_ms = static_cast<int>(n); return {};
    case 'c': if (!as_int(0, 1, n)) return bad("0 or 1"); o.check = n != 0; return {};
    case 'r': if (!as_int(0, 1 << 30, n)) return bad("a rank >= 0"); o.root = static_cast<int>(n); return {};
    case 'a': if (!as_int(0, 3, n)) return bad("0 (rank 0), 1 (avg), 2 (min) or 3 (max)"); o.average = static_cast<time_average>(n); return {};
    case 'z': if (!as_int(0, 1, n)) return bad("0 or 1"); o.blocking = static_cast<int>(n); return {};
    case 't': case 'g': if (!as_int(1, 1, n)) return bad("1 (one rank a process or thread)"); return {};
    case 'R': if (!as_int(1, 1 << 16, n)) return bad("a rank count >= 1"); o.ranks = static_cast<int>(n); return {};
    case 'd': {
      auto const t = parse_dtype(v);
      if (!t) return bad("int8, uint8, int32, int64, half, float, double or bfloat16 (the MPI baseline also uint32, uint64)");
      o.type = *t;
      return {};
    }
    case 'o': {
      auto const op = parse_redop(v);
      if (!op) return bad("sum, prod, min, max or avg");
      o.op = *op;
      return {};
    }
    case 'J': o.output_file = v; return {};
    case 'P': o.provider = v; return {};
    case 'A': o.algo = v; return {};
    case 'S': if (!as_int(0, 1, n)) return bad("0 or 1"); o.persistent = n != 0; return {};
    case 'K': {
      std::string const str(v);
      char* end = nullptr;
      double const x = std::strtod(str.c_str(), &end);
      if (end == str.c_str() || *end != '\0' || !(x >= 0 && x <= 1e6)) return bad("a number from 0 to 1e6");
      o.skew = x;
      return {};
    }
    case 'G':
      if (v != "host" && v != "cuda") return bad("host or cuda");
      o.device = v;
      return {};
  }
  return "internal: unhandled flag --" + std::string(name);
}

}  // namespace detail

// Accepts "-b 8", "-b8", "--minbytes 8", "--minbytes=8". Never exits; see parse_or_exit.
inline parse_result parse(std::vector<std::string_view> const& args) {
  parse_result r;
  for (auto a : args) r.opts.argv.emplace_back(a);
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "-h" || a == "--help") { r.help = true; return r; }
    detail::flag const* f = nullptr;
    std::optional<std::string_view> inline_value;
    if (a.starts_with("--")) {
      std::string_view name = a.substr(2);
      if (auto eq = name.find('='); eq != std::string_view::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      for (auto const& fl : detail::flags) if (fl.long_name == name) f = &fl;
    } else if (a.size() >= 2 && a[0] == '-') {
      char const c = a[1];
      if (c != 'R' && c != 'P' && c != 'A' && c != 'K')
        for (auto const& fl : detail::flags) if (fl.short_name == c) f = &fl;
      if (a.size() > 2) inline_value = a.substr(2);
    }
    if (!f) { r.error = "unknown option '" + std::string(a) + "'"; return r; }
    std::string_view value;
    if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      r.error = "option '" + std::string(a) + "' needs a value";
      return r;
    }
    if (auto e = detail::apply(r.opts, f->short_name, f->long_name, value); !e.empty()) { r.error = e; return r; }
  }
  auto& o = r.opts;
  if (o.min_bytes > o.max_bytes) r.error = "minbytes (" + std::to_string(o.min_bytes) + ") is larger than maxbytes (" + std::to_string(o.max_bytes) + ")";
  else if (o.step_factor <= 1 && o.step_bytes == 0 && o.min_bytes != o.max_bytes) r.error = "stepbytes is 0 and stepfactor is 1: the sweep would not advance";
  else if (o.step_factor > 1 && o.min_bytes == 0 && o.max_bytes != 0) r.error = "minbytes 0 with stepfactor " + std::to_string(o.step_factor) + " stays 0: start at a size above 0, or step with -i";
  return r;
}

// For main(): prints usage and exits 0 on -h, 2 on a bad command line.
inline options parse_or_exit(int argc, char** argv) {
  std::vector<std::string_view> args(argv, argv + argc);
  auto r = parse(args);
  std::string_view const program = argc > 0 ? std::string_view(argv[0]) : "perf";
  if (r.help) { print_usage(stdout, program); std::exit(0); }
  if (!r.error.empty()) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(), r.error.c_str());
    print_usage(stderr, program);
    std::exit(2);
  }
  return r.opts;
}

}  // namespace mimatrix::perf
