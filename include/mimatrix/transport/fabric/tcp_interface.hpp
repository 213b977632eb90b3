// Which interface libfabric's tcp provider uses (FI_TCP_IFACE): the job's, not the first
// it finds (issue 53: a job told MASTER_ADDR=127.0.0.1 listened on eth0's address). Set
// before libfabric is loaded, as the provider reads it once; the user's own value wins.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "mimatrix/bootstrap/detail/interfaces.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/bootstrap/socket_interface.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::transport::detail::fabric {

/// The host of the job's tcp store as the environment names it (MIMATRIX_STORE=tcp://host:
/// port, else MASTER_ADDR); "" for another store, none, or a malformed one (open_store
/// says what is wrong with it).
inline std::string store_host(const bootstrap::env_lookup& get) {
  if (const char* spec = get("MIMATRIX_STORE"); spec && *spec) {
    const std::string_view text(spec);
    if (!text.starts_with("tcp://")) return {};
    try {
      return bootstrap::detail::split_host_port(text.substr(6), "MIMATRIX_STORE").first;
    } catch (const error&) {
      return {};
    }
  }
  const char* addr = get("MASTER_ADDR");
  return addr ? addr : "";
}

/// What FI_TCP_IFACE should be set to: nullopt to leave it (the user set it, or nothing
/// names an interface); else the interface MIMATRIX_SOCKET_IFNAME names; else the one
/// holding the store host's address, or on its subnet (a rank on another host): `lo` for
/// MASTER_ADDR=127.0.0.1. Throws what socket_interface throws, naming `rank`.
inline std::optional<std::string> tcp_interface_for(int rank, const bootstrap::env_lookup& get) {
  if (const char* own = get("FI_TCP_IFACE"); own && *own) return std::nullopt;
  if (auto named = bootstrap::socket_interface(rank, get)) return named;
  const std::string host = store_host(get);
  if (host.empty()) return std::nullopt;
  const std::string found = bootstrap::detail::interface_reaching(host);
  return found.empty() ? std::nullopt : std::optional<std::string>(found);
}

/// Sets FI_TCP_IFACE as tcp_interface_for says, from this process's environment. Call
/// before libfabric is loaded: later the tcp provider has read it.
inline void choose_tcp_interface(int rank) {
  const bootstrap::env_lookup get = [](const char* name) -> const char* { return std::getenv(name); };
  if (const auto iface = tcp_interface_for(rank, get)) ::setenv("FI_TCP_IFACE", iface->c_str(), 0);
}

}  // namespace mimatrix::transport::detail::fabric
