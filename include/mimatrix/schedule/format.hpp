// Human-readable dumps of schedules: one line a step (to_text) and a Graphviz picture of
// a whole group with its dependency and message edges (to_dot).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <tuple>

#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::schedule {

constexpr std::string_view to_string(buffer b) {
  switch (b) {
    case buffer::input: return "input";
    case buffer::output: return "output";
    case buffer::scratch: return "scratch";
    default: return "entry";  // a buffer table's (schedule::entry)
  }
}

/// "output[0,4096)": the buffer and the half-open byte range.
inline std::string to_string(const region& r) {
  std::string s(to_string(r.where));
  if (is_entry(r.where)) s += ' ' + std::to_string(entry_index(r.where));
  s += '[';
  s += std::to_string(r.offset);
  s += ',';
  s += std::to_string(r.offset + r.bytes);
  s += ')';
  return s;
}

/// "recv_reduce from peer 2, tag 7, src output[0,64), dst output[0,64)": only the fields
/// the kind uses. One-sided: "write to peer 1, tag 0, src input[0,16), dst peer's
/// scratch[0,16)", "notify peer 3, tag 2", "wait tag 1 for 3 flags".
inline std::string to_string(const step& st) {
  std::string s(to_string(st.kind));
  if (is_communication(st.kind) || is_one_sided(st.kind)) {
    s += st.kind == step_kind::send || st.kind == step_kind::write ? " to peer "
         : st.kind == step_kind::notify                            ? " peer "
                                                                   : " from peer ";
    s += std::to_string(st.peer);
    s += ", tag ";
    s += std::to_string(st.tag);
    if (st.kind != step_kind::notify) s += ',';
  }
  if (st.kind == step_kind::wait) {
    s += " tag " + std::to_string(st.tag) + " for " + std::to_string(st.count) + (st.count == 1 ? " flag" : " flags");
    return s;
  }
  if (st.kind == step_kind::notify || st.kind == step_kind::wait) return s;
  if (st.kind == step_kind::send || st.kind == step_kind::recv_reduce || st.kind == step_kind::reduce ||
      st.kind == step_kind::copy || st.kind == step_kind::write || st.kind == step_kind::reduce_slots) {
    s += " src ";
    s += to_string(st.src);
    if (st.kind == step_kind::reduce_slots && st.dst.bytes)
      s += " (" + std::to_string(st.src.bytes / st.dst.bytes) + " slots)";
  }
  if (st.kind != step_kind::send) {
    if (st.kind != step_kind::recv && st.kind != step_kind::finalize) s += ',';
    s += st.kind == step_kind::write ? " dst peer's " : " dst ";
    s += to_string(st.dst);
  }
  return s;
}

inline std::string to_string(const descriptor& d) {
  std::string s = call_name(d);
  s += " size " + std::to_string(d.size);
  if (d.layout) {
    const auto list = [](const blocks& b) {
      std::string text;
      for (std::size_t j = 0; j < b.counts.size(); ++j)
        text += (j ? "," : "") + std::to_string(b.counts[j]) + (b.displs.empty() ? "" : "@" + std::to_string(b.displs[j]));
      return "[" + text + "]";
    };
    s += " counts " + list(d.layout->many);
    if (d.kind == collective::alltoall) s += " received " + list(d.layout->received);
  } else {
    s += " count " + std::to_string(d.count);
  }
  s += " elem_size " + std::to_string(d.elem_size);
  if (has_root(d.kind)) s += " root " + std::to_string(d.root);
  return s;
}

/// One header line, then one line a step:
///   `  3: send to peer 1, tag 0, src input[0,64) <- {0, 2}`
inline std::string to_text(const schedule& s) {
  std::string out = "# " + to_string(s.desc) + " | rank " + std::to_string(s.rank) + " | " +
                    (s.algorithm.empty() ? std::string("(unnamed)") : s.algorithm) + " | scratch " +
                    std::to_string(s.scratch_bytes) + " bytes | " + std::to_string(s.steps.size()) +
                    " steps\n";
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    out += "  " + std::to_string(i) + ": " + to_string(s.steps[i]);
    if (const auto deps = s.deps(step_id(i)); !deps.empty()) {
      out += " <- {";
      for (std::size_t k = 0; k < deps.size(); ++k) {
        if (k) out += ", ";
        out += std::to_string(deps[k]);
      }
      out += '}';
    }
    out += '\n';
  }
  return out;
}

namespace detail {
inline std::string dot_escape(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (c == '"' || c == '\\') s += '\\';
    s += c;
  }
  return s;
}
inline std::string dot_node(int rank, std::size_t step) {
  return "r" + std::to_string(rank) + "s" + std::to_string(step);
}
}  // namespace detail

/// Graphviz DOT for a group (group[r] is rank r): a cluster a rank, dependency edges
/// solid, a dashed edge from each send to the recv it meets and a dotted one from each
/// write or notify to the wait that counts its flag. Render with `dot -Tsvg`.
inline std::string to_dot(std::span<const schedule> group) {
  std::string out = "digraph schedule {\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n";
  // (sender, receiver, tag) -> receiving step, to draw message edges.
  std::map<std::tuple<int, int, std::uint32_t>, std::size_t> recvs;
  std::map<std::tuple<int, std::uint32_t>, std::size_t> waits;  // (rank, tag) -> wait step
  for (const auto& s : group) {
    out += "  subgraph cluster_" + std::to_string(s.rank) + " {\n    label=\"rank " +
           std::to_string(s.rank) + " (" + detail::dot_escape(s.algorithm) + ")\";\n";
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      const auto& st = s.steps[i];
      out += "    " + detail::dot_node(s.rank, i) + " [label=\"" + std::to_string(i) + ": " +
             detail::dot_escape(to_string(st)) + "\"];\n";
      for (step_id d : s.deps(step_id(i)))
        out += "    " + detail::dot_node(s.rank, d) + " -> " + detail::dot_node(s.rank, i) + ";\n";
      if (st.kind == step_kind::recv || st.kind == step_kind::recv_reduce)
        recvs.emplace(std::tuple{st.peer, s.rank, st.tag}, i);
      if (st.kind == step_kind::wait) waits.emplace(std::tuple{s.rank, st.tag}, i);
    }
    out += "  }\n";
  }
  for (const auto& s : group)
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      const auto& st = s.steps[i];
      if (is_one_sided(st.kind)) {
        auto w = waits.find({st.peer, st.tag});
        if (w != waits.end())
          out += "  " + detail::dot_node(s.rank, i) + " -> " + detail::dot_node(st.peer, w->second) +
                 " [style=dotted];\n";
        continue;
      }
      if (st.kind != step_kind::send) continue;
      auto it = recvs.find({s.rank, st.peer, st.tag});
      if (it == recvs.end()) continue;  // unmatched: verify() reports it
      out += "  " + detail::dot_node(s.rank, i) + " -> " + detail::dot_node(st.peer, it->second) +
             " [style=dashed];\n";
    }
  out += "}\n";
  return out;
}

}  // namespace mimatrix::schedule
