// MIMATRIX_SOCKET_IFNAME (as NCCL_SOCKET_IFNAME): the interface the job's sockets use, the
// rendezvous store's listener and libfabric tcp's endpoints (issue 53: listen only where
// asked). Unset, the store listens on MASTER_ADDR's address and tcp follows it.
#pragma once

#include <optional>
#include <string>

#include "mimatrix/bootstrap/detail/interfaces.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::bootstrap {

/// The interface MIMATRIX_SOCKET_IFNAME names, checked; nullopt when unset or empty.
/// Throws errc::invalid_argument naming `rank`, the variable and this host's interfaces
/// when it names none with an address.
inline std::optional<std::string> socket_interface(int rank, const env_lookup& get) {
  const char* name = get("MIMATRIX_SOCKET_IFNAME");
  if (!name || !*name) return std::nullopt;
  if (detail::address_of_interface(name).empty())
    throw error(errc::invalid_argument, "rank " + std::to_string(rank) + ": MIMATRIX_SOCKET_IFNAME='" + name +
                                            "' is not an interface of this host with an address; it takes one of: " +
                                            detail::interface_names());
  return std::string(name);
}

/// Where the job store's server listens: the address of MIMATRIX_SOCKET_IFNAME's
/// interface, else `host` (what the ranks are told: MASTER_ADDR), never every address.
inline std::string store_listen_address(int rank, const std::string& host, const env_lookup& get) {
  const auto named = socket_interface(rank, get);
  return named ? detail::address_of_interface(*named) : host;
}

}  // namespace mimatrix::bootstrap
