// libfabric return codes and completion errors turned into mimatrix::error, with the
// provider's own words, the call that failed and, where known, the peer and step.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <string>
#include <string_view>

#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/fabric/library.hpp"

namespace mimatrix::transport::detail::fabric {

/// Errors that mean the peer went away rather than that the transport misbehaved.
inline bool is_peer_loss(int fi_errno) {
  switch (fi_errno < 0 ? -fi_errno : fi_errno) {
    case FI_ECONNRESET:
    case FI_ECONNREFUSED:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ESHUTDOWN:
      return true;
    default:
      return false;
  }
}

/// "fi_domain failed: No data available (-61), provider shm".
inline std::string explain_fabric_call(std::string_view call, long ret, std::string_view provider) {
  std::string s(call);
  s += " failed: ";
  s += libfabric().strerror(static_cast<int>(ret < 0 ? -ret : ret));  // after a libfabric call: loaded
  s += " (" + std::to_string(ret) + ")";
  if (!provider.empty()) {
    s += ", provider ";
    s += provider;
  }
  return s;
}

/// Throws when a libfabric call returned an error code.
inline void check_fabric_call(long ret, std::string_view call, std::string_view provider, const error_context& where = {}) {
  if (ret >= 0) return;
  throw error(is_peer_loss(static_cast<int>(ret)) ? errc::peer_lost : errc::transport,
              describe(where, explain_fabric_call(call, ret, provider)));
}

/// The text of a completion error: libfabric's name for it and the provider's detail.
inline std::string explain_completion(fid_cq* cq, const fi_cq_err_entry& e, std::string_view provider) {
  std::string s = libfabric().strerror(e.err);
  char detail[256] = {};
  if (const char* p = fi_cq_strerror(cq, e.prov_errno, e.err_data, detail, sizeof detail); p && *p) {
    s += " (";
    s += provider;
    s += ": ";
    s += p;
    s += ")";
  }
  return s;
}

}  // namespace mimatrix::transport::detail::fabric
