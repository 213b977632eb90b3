// The listening socket of the rendezvous store's server: every address, IPv4 and IPv6.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>

#include <netinet/in.h>
#include <sys/socket.h>

#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/core/error.hpp"

namespace mimatrix::bootstrap::detail {

/// A non-blocking socket listening on `port` (0: one the kernel picks) of every address.
/// Throws errc::transport naming the port, and what to change when it is taken.
inline unique_fd listen_on_any_address(int port) {
  const int one = 1, zero = 0;
  auto fail = [&](int e) -> error {
    std::string hint = e == EADDRINUSE ? " (another job or store is using it: choose another MASTER_PORT)" : "";
    return error(errc::transport, "rank 0 could not serve the rendezvous store on port " + std::to_string(port) +
                                      ": " + errno_text(e) + hint);
  };
  // Dual-stack IPv6 first, so that clients reach it by IPv4 or IPv6 addresses alike.
  unique_fd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd) {
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      if (::listen(fd.get(), SOMAXCONN) != 0) throw fail(errno);
      set_nonblocking(fd.get(), true);
      return fd;
    }
    if (errno == EADDRINUSE || errno == EACCES) throw fail(errno);
  }
  fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw fail(errno);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw fail(errno);
  if (::listen(fd.get(), SOMAXCONN) != 0) throw fail(errno);
  set_nonblocking(fd.get(), true);
  return fd;
}

}  // namespace mimatrix::bootstrap::detail
