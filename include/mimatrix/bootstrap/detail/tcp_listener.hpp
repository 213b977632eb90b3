// The listening socket of the rendezvous store's server: on one address, the one the ranks
// are told (MASTER_ADDR) or the named interface's (issue 53: it listened on every address).
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::bootstrap::detail {

/// A non-blocking socket listening on `port` (0: one the kernel picks) of `address` (a
/// name or a numeric address of this host; of a name's addresses, the first that binds).
/// Throws errc::transport naming the address and the port, and what to change.
inline unique_fd listen_on(const std::string& address, int port) {
  const std::string where = "rank 0 could not serve the rendezvous store on " + address + " port " +
                            std::to_string(port) + ": ";
  auto fail = [&](int e) -> error {
    const std::string hint =
        e == EADDRINUSE ? " (another job or store is using it: choose another MASTER_PORT)"
        : e == EADDRNOTAVAIL
            ? " (not an address of this host: MASTER_ADDR must name rank 0's host, or name the interface to "
              "listen on with MIMATRIX_SOCKET_IFNAME)"
            : "";
    return error(errc::transport, where + errno_text(e) + hint);
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &found); rc != 0)
    throw error(errc::transport, where + "the address does not resolve (" + ::gai_strerror(rc) + ")");
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  int last = EADDRNOTAVAIL;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    unique_fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) { last = errno; continue; }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last = errno;
      if (last == EADDRINUSE || last == EACCES) break;  // the next address would not help
      continue;
    }
    if (::listen(fd.get(), SOMAXCONN) != 0) throw fail(errno);
    set_nonblocking(fd.get(), true);
    return fd;
  }
  throw fail(last);
}

}  // namespace mimatrix::bootstrap::detail
