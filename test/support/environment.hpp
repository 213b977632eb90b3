// An environment as a table, for the functions that read variables through an env_lookup
// (open_store, socket_interface, tcp_interface_for), and an identity to read it as.
#pragma once

#include <map>
#include <string>

#include "mimatrix/bootstrap/env.hpp"

namespace mimatrix::test {

using environment = std::map<std::string, std::string>;

/// Looks variables up in `vars`, which must outlive the lookup.
inline bootstrap::env_lookup lookup(const environment& vars) {
  return [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

/// Rank `rank` of `size`, as torchrun would start it.
inline bootstrap::identity rank_of(int rank, int size) {
  bootstrap::identity id;
  id.rank = rank;
  id.size = size;
  id.launcher = "torchrun";
  return id;
}

}  // namespace mimatrix::test
