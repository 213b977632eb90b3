// The cluster description the job server places ranks by: one line a host, the switch it
// hangs off.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::job {

/// A cluster description: one line a host, "<host> <switch>" (a switch by any name; '#'
/// starts a comment). Switches are numbered in their order of first appearance.
inline std::vector<std::pair<std::string, std::uint32_t>> load_cluster(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("job server: cannot read the cluster description '" + path + "'");
  std::vector<std::pair<std::string, std::uint32_t>> hosts;
  std::map<std::string, std::uint32_t> switches;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host, sw, extra;
    if (!(words >> host)) continue;
    if (!(words >> sw) || (words >> extra))
      throw std::runtime_error("job server: " + path + ":" + std::to_string(n) + ": expected '<host> <switch>'");
    const auto [it, fresh] = switches.try_emplace(sw, std::uint32_t(switches.size()));
    hosts.emplace_back(host, it->second);
  }
  return hosts;
}

/// Where `host` sits in `cluster`: (switch, its line); a host it does not name comes after
/// every one it does (UINT32_MAX, SIZE_MAX).
inline std::pair<std::uint32_t, std::size_t> place_in(const std::vector<std::pair<std::string, std::uint32_t>>& cluster,
                                                      const std::string& host) {
  for (std::size_t i = 0; i < cluster.size(); ++i)
    if (cluster[i].first == host) return {cluster[i].second, i};
  return {UINT32_MAX, SIZE_MAX};
}

}  // namespace mimatrix::job
