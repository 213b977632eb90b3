// This host's network interfaces and their addresses (getifaddrs): which interface holds
// an address, or the subnet it is on, and the addresses of a named interface.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace mimatrix::bootstrap::detail {

/// One IPv4 or IPv6 address of an interface that is up.
struct interface_address {
  std::string name;  // "lo", "eth0"
  sockaddr_storage address{};
  sockaddr_storage netmask{};
};

/// Every IPv4 and IPv6 address of this host's interfaces that are up, in getifaddrs' order.
inline std::vector<interface_address> interface_addresses() {
  std::vector<interface_address> found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return found;
  const std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> held(list, &::freeifaddrs);
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const std::size_t size = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    interface_address a;
    a.name = i->ifa_name;
    std::memcpy(&a.address, i->ifa_addr, size);
    if (i->ifa_netmask) std::memcpy(&a.netmask, i->ifa_netmask, size);
    found.push_back(a);
  }
  return found;
}

/// The bytes of an IPv4 or IPv6 address, and how many.
inline const unsigned char* address_bytes(const sockaddr_storage& a, std::size_t& n) {
  if (a.ss_family == AF_INET) {
    n = 4;
    return reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in&>(a).sin_addr);
  }
  n = 16;
  return reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr);
}

/// Whether `a` is `on`'s address (`subnet`: or on its subnet).
inline bool holds(const interface_address& on, const sockaddr_storage& a, bool subnet) {
  if (on.address.ss_family != a.ss_family) return false;
  std::size_t n = 0;
  const unsigned char* mine = address_bytes(on.address, n);
  const unsigned char* mask = address_bytes(on.netmask, n);
  const unsigned char* theirs = address_bytes(a, n);
  for (std::size_t k = 0; k < n; ++k)
    if ((mine[k] ^ theirs[k]) & (subnet ? mask[k] : 0xff)) return false;
  return true;
}

/// The interface that holds one of `host`'s addresses (a name or a numeric address), else
/// the one whose subnet holds one (a rank on another host than the address), else "".
inline std::string interface_reaching(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return {};
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> held(found, &::freeaddrinfo);
  const auto interfaces = interface_addresses();
  for (const bool subnet : {false, true})
    for (const addrinfo* a = found; a; a = a->ai_next) {
      sockaddr_storage address{};
      std::memcpy(&address, a->ai_addr, a->ai_addrlen);
      for (const auto& i : interfaces)
        if (holds(i, address, subnet)) return i.name;
    }
  return {};
}

/// The numeric text of an address ("127.0.0.1", "fe80::1%eth0").
inline std::string numeric_address(const sockaddr_storage& a) {
  char text[NI_MAXHOST] = {};
  const socklen_t size = a.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  ::getnameinfo(reinterpret_cast<const sockaddr*>(&a), size, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
  return text;
}

/// The address to listen on of interface `name`: its first IPv4 address, else its first
/// IPv6 address that is not link-local, else its first one; "" when it has none.
inline std::string address_of_interface(const std::string& name) {
  const interface_address* best = nullptr;
  const auto rank = [](const interface_address& a) {
    if (a.address.ss_family == AF_INET) return 0;
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a.address).sin6_addr;
    return IN6_IS_ADDR_LINKLOCAL(&v6) ? 2 : 1;
  };
  const auto interfaces = interface_addresses();
  for (const auto& a : interfaces)
    if (a.name == name && (!best || rank(a) < rank(*best))) best = &a;
  return best ? numeric_address(best->address) : std::string();
}

/// The names of the interfaces that have an address, once each: "lo, eth0".
inline std::string interface_names() {
  std::vector<std::string> names;
  for (const auto& a : interface_addresses())
    if (std::find(names.begin(), names.end(), a.name) == names.end()) names.push_back(a.name);
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

}  // namespace mimatrix::bootstrap::detail
