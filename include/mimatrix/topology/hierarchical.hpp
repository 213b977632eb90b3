// topology::hierarchical: ranks grouped into nodes of equal size, with one topology
// inside every node (Local, over its L ranks) and one across nodes (Global, over the
// node count) for every rail, the ranks that share a local rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/topology/layout.hpp"
#include "mimatrix/topology/ring.hpp"

namespace mimatrix::topology {

/// Nodes of L ranks each. With an explicit node size, node k holds ranks [k·L, (k+1)·L);
/// from host names (one per rank, as a bootstrap provides), the ranks that name the same
/// host form a node, numbered in order of first appearance, its ranks in rank order.
///
///   node 0: ranks 0 1 2 3      local ranks 0 1 2 3     rail j: the ranks with local
///   node 1: ranks 4 5 6 7      local ranks 0 1 2 3     rank j, one per node
///
/// @par Thread Safety
/// Immutable after construction: safe to share between threads.
template <layout Local = ring, layout Global = ring>
class hierarchical {
 public:
  static constexpr std::string_view name = "hierarchical";

  /// Every rank its own node.
  hierarchical() = default;

  /// Nodes of `node_size` consecutive ranks.
  explicit hierarchical(int node_size, Local local = {}, Global global = {})
      : node_size_(node_size), local_(std::move(local)), global_(std::move(global)) {
    if (node_size < 1)
      throw error(errc::invalid_argument,
                  "topology::hierarchical: a node needs at least one rank, got node size " + std::to_string(node_size));
  }

  /// hosts[r] names the host of rank r. Throws invalid_argument unless every host holds
  /// the same number of ranks.
  explicit hierarchical(const std::vector<std::string>& hosts, Local local = {}, Global global = {})
      : local_(std::move(local)), global_(std::move(global)) {
    if (hosts.empty()) throw error(errc::invalid_argument, "topology::hierarchical: the host list is empty");
    std::unordered_map<std::string, int> node_of_host;
    std::vector<std::string> names;
    for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
      const auto [it, fresh] = node_of_host.try_emplace(hosts[std::size_t(r)], static_cast<int>(members_.size()));
      if (fresh) {
        members_.emplace_back();
        names.push_back(hosts[std::size_t(r)]);
      }
      node_.push_back(it->second);
      local_rank_.push_back(static_cast<int>(members_[std::size_t(it->second)].size()));
      members_[std::size_t(it->second)].push_back(r);
    }
    node_size_ = static_cast<int>(members_.front().size());
    for (const auto& m : members_)
      if (static_cast<int>(m.size()) != node_size_) {
        std::string counts;
        for (std::size_t k = 0; k < members_.size(); ++k)
          counts += (k ? ", " : "") + ("\"" + names[k] + "\" " + std::to_string(members_[k].size()));
        throw error(errc::invalid_argument,
                    "topology::hierarchical: every host must run the same number of ranks, but the hosts run " +
                        counts);
      }
  }

  /// Throws invalid_argument unless `size` ranks split into whole nodes and the local and
  /// global topologies hold a node and the node count.
  void check(int size) const {
    if (size < 1)
      throw error(errc::invalid_argument,
                  "topology::hierarchical: a group needs at least one rank, got " + std::to_string(size));
    if (!members_.empty() && static_cast<int>(node_.size()) != size)
      throw error(errc::invalid_argument, "topology::hierarchical: the host list names " +
                                              std::to_string(node_.size()) + " ranks but the group has " +
                                              std::to_string(size));
    if (size % node_size_ != 0)
      throw error(errc::invalid_argument, "topology::hierarchical: a group of " + std::to_string(size) +
                                              " ranks does not split into nodes of " + std::to_string(node_size_));
    local_.check(node_size_);
    global_.check(size / node_size_);
  }

  /// L, the ranks of every node.
  int local_size() const { return node_size_; }
  /// The nodes of a group of `size` ranks.
  int node_count(int size) const { return size / node_size_; }
  int node_of(int rank) const { return members_.empty() ? rank / node_size_ : node_[std::size_t(rank)]; }
  int local_rank(int rank) const { return members_.empty() ? rank % node_size_ : local_rank_[std::size_t(rank)]; }
  /// The rank with local rank `local_rank` on node `node`.
  int rank_at(int node, int local_rank) const {
    return members_.empty() ? node * node_size_ + local_rank : members_[std::size_t(node)][std::size_t(local_rank)];
  }

  /// The ranks of node `node`, by local rank.
  std::vector<int> node_ranks(int node) const {
    std::vector<int> ranks;
    for (int j = 0; j < node_size_; ++j) ranks.push_back(rank_at(node, j));
    return ranks;
  }
  /// Rail `local_rank` of a group of `size`: its rank on every node, by node.
  std::vector<int> rail_ranks(int local_rank, int size) const {
    std::vector<int> ranks;
    for (int k = 0; k < node_count(size); ++k) ranks.push_back(rank_at(k, local_rank));
    return ranks;
  }

  /// Where every one of `size` ranks sits, and the local and global topologies, once
  /// check(size) has passed (topology::digest_of).
  std::uint64_t digest(int size) const {
    mimatrix::digest d;
    d.mix(name).mix(std::uint64_t(node_size_));
    for (int r = 0; r < size; ++r)
      d.mix(std::uint64_t(node_of(r))).mix(std::uint64_t(local_rank(r)));
    return d.mix(digest_of(local_, node_size_)).mix(digest_of(global_, node_count(size))).value();
  }

  /// The topology inside every node, over local ranks.
  const Local& local_topology() const { return local_; }
  /// The topology of every rail, over node indices.
  const Global& global_topology() const { return global_; }

 private:
  int node_size_ = 1;
  Local local_{};
  Global global_{};
  // From host names only (empty otherwise): node and local rank of each rank, ranks of each node.
  std::vector<int> node_, local_rank_;
  std::vector<std::vector<int>> members_;
};

}  // namespace mimatrix::topology
