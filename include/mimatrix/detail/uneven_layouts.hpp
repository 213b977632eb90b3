// The v-forms' arguments (MPI's counts and displacements) checked and turned into the
// layout a rank's schedule is built from (schedule::uneven), or into what is wrong with
// them, named as the caller named the argument.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mimatrix/schedule/uneven.hpp"

namespace mimatrix {
/// Per-rank counts or displacements of a v-form, in elements (a std::vector or an array).
using counts_view = std::span<const std::size_t>;
}  // namespace mimatrix

namespace mimatrix::detail {

/// A v-form's layout on one rank, or the problem with its arguments.
struct uneven_args {
  std::shared_ptr<const schedule::uneven> layout;
  std::string problem;  // empty: none
};

namespace uneven_detail {

/// The layout where `many` is known to every rank alike (agreed: its counts' digest) or
/// only here (agreed 0).
inline uneven_args made(schedule::blocks many, bool agreed, schedule::blocks received = {}) {
  auto l = std::make_shared<schedule::uneven>();
  l->agreed = agreed ? schedule::counts_digest(many.counts) & ((std::uint64_t(1) << 38) - 1) : 0;
  l->many = std::move(many);
  l->received = std::move(received);
  return {std::move(l), {}};
}

inline uneven_args refused(std::string why) { return {nullptr, std::move(why)}; }

/// `own` elements at this rank's index, none elsewhere: what a rank off the root knows.
inline schedule::blocks only_own(int rank, int p, std::size_t own) {
  schedule::blocks b{std::vector<std::size_t>(std::size_t(p), 0), {}};
  b.counts[std::size_t(rank)] = own;
  return b.spelled();
}

/// Why `name`[rank] is not `want` elements, the length of the buffer `buffer` names.
inline std::optional<std::string> own_count_problem(const schedule::blocks& b, int rank, std::size_t want,
                                                    const std::string& name, const std::string& buffer) {
  if (b.count(rank) == want) return std::nullopt;
  return name + "[" + std::to_string(rank) + "] is " + std::to_string(b.count(rank)) + " but " + buffer + " is " +
         std::to_string(want) + "; they count this rank's own block and must be alike";
}

inline std::optional<std::string> root_problem(int root, int p) {
  if (root >= 0 && root < p) return std::nullopt;
  return "root " + std::to_string(root) + " is outside a group of " + std::to_string(p);
}

}  // namespace uneven_detail

/// MPI_Allgatherv: `counts` and the output's `displs` alike on every rank but for the
/// displacements; this rank sends `in_count` = counts[rank].
inline uneven_args allgatherv_layout(int rank, int p, std::size_t in_count, counts_view counts, counts_view displs) {
  using namespace uneven_detail;
  schedule::blocks many{{counts.begin(), counts.end()}, {displs.begin(), displs.end()}};
  if (auto why = schedule::blocks_problem(many, p, true, "counts")) return refused(*why);
  many = many.spelled();
  if (auto why = own_count_problem(many, rank, in_count, "counts", "in_count")) return refused(*why);
  return made(std::move(many), true);
}

/// MPI_Reduce_scatter: the input holds the blocks back to back, rank j's result counts[j].
inline uneven_args reduce_scatter_v_layout(int p, counts_view counts) {
  using namespace uneven_detail;
  schedule::blocks many{{counts.begin(), counts.end()}, {}};
  if (auto why = schedule::blocks_problem(many, p, false, "counts")) return refused(*why);
  return made(many.spelled(), true);
}

/// gatherv's and scatterv's layout: `counts` and `displs` are read on the root only,
/// where they must not overlap if the call writes them (`writes_blocks`, gatherv); `own`
/// is this rank's one-block buffer's length, named `own_name`.
inline uneven_args rooted_layout(int rank, int p, std::size_t own, counts_view counts, counts_view displs, int root,
                                 bool writes_blocks, const std::string& own_name) {
  using namespace uneven_detail;
  if (auto why = root_problem(root, p)) return refused(*why);
  if (rank != root) return made(only_own(rank, p, own), false);
  schedule::blocks many{{counts.begin(), counts.end()}, {displs.begin(), displs.end()}};
  if (auto why = schedule::blocks_problem(many, p, writes_blocks, "counts")) return refused(*why);
  many = many.spelled();
  if (auto why = own_count_problem(many, rank, own, "counts", own_name)) return refused(*why);
  return made(std::move(many), false);
}

/// MPI_Gatherv.
inline uneven_args gatherv_layout(int rank, int p, std::size_t in_count, counts_view counts, counts_view displs,
                                  int root) {
  return rooted_layout(rank, p, in_count, counts, displs, root, true, "in_count");
}

/// MPI_Scatterv.
inline uneven_args scatterv_layout(int rank, int p, counts_view counts, counts_view displs, std::size_t out_count,
                                   int root) {
  return rooted_layout(rank, p, out_count, counts, displs, root, false, "out_count");
}

/// MPI_Alltoallv, and c10d's all_to_all_single with split sizes (no displacements).
inline uneven_args alltoallv_layout(int rank, int p, counts_view send_counts, counts_view send_displs,
                                    counts_view recv_counts, counts_view recv_displs) {
  using namespace uneven_detail;
  schedule::blocks sent{{send_counts.begin(), send_counts.end()}, {send_displs.begin(), send_displs.end()}};
  schedule::blocks received{{recv_counts.begin(), recv_counts.end()}, {recv_displs.begin(), recv_displs.end()}};
  if (auto why = schedule::blocks_problem(sent, p, false, "send_counts")) return refused(*why);
  if (auto why = schedule::blocks_problem(received, p, true, "recv_counts")) return refused(*why);
  sent = sent.spelled();
  received = received.spelled();
  if (auto why = own_count_problem(received, rank, sent.count(rank), "recv_counts", "send_counts[" +
                                                                                       std::to_string(rank) + "]"))
    return refused(*why);
  return made(std::move(sent), false, std::move(received));
}

}  // namespace mimatrix::detail
