// The host port's shareable "device" blocks: each a memfd that another process on the
// node opens through /proc/<owner>/fd/<fd>, checking the file's name first (an fd number,
// once its owner freed the block, may hold another file).
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>

#include "mimatrix/core/error.hpp"
#include "mimatrix/device/port.hpp"

namespace mimatrix::device::host_blocks {

/// What shared_memory::handle holds for a host_port's block.
struct handle_fields {
  std::uint64_t magic;
  std::int64_t owner, fd;
  std::uint64_t id, bytes;
};
static_assert(sizeof(handle_fields) <= sizeof(shared_memory::handle));
inline constexpr std::uint64_t handle_magic = 0x6d696d6174726978;  // "mimatrix"

/// mmap cannot map nothing: an empty block takes a byte.
inline std::size_t mapped_bytes(std::size_t bytes) { return bytes ? bytes : 1; }

/// The memfd's name, which an importer checks.
inline std::string block_name(long pid, std::uint64_t id) {
  return "mimatrix-block-" + std::to_string(pid) + "-" + std::to_string(id);
}

inline error allocation_error(const char* call, std::size_t bytes) {
  return error(std::error_code(errno, std::generic_category()),
               "device::host_port: " + std::string(call) + " of a " + std::to_string(bytes) + "-byte device block");
}

/// What our fd is open on: "/memfd:<name> (deleted)" for a memfd.
inline std::string opened_name(int fd) {
  char name[512];
  const ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), name, sizeof name - 1);
  return n < 0 ? std::string() : std::string(name, std::size_t(n));
}

/// Maps a peer's block through its owner's /proc/<pid>/fd.
inline void* map_peer_block(const handle_fields& h) {
  const std::string path = "/proc/" + std::to_string(h.owner) + "/fd/" + std::to_string(h.fd);
  const auto failure = [&](const std::string& why) {
    return error(errc::transport, "device::host_port: cannot import block " + std::to_string(h.id) + " (" +
                                      std::to_string(h.bytes) + " bytes) of process " + std::to_string(h.owner) +
                                      " through " + path + ": " + why + " (has the process exited or freed the block?)");
  };
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw failure(std::strerror(errno));
  const std::string name = opened_name(fd);
  if (name.find("/memfd:" + block_name(h.owner, h.id) + " ") != 0) {
    ::close(fd);
    throw failure("it holds " + name + ", not the block");
  }
  void* at = ::mmap(nullptr, mapped_bytes(h.bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int mmap_errno = errno;
  ::close(fd);  // the mapping keeps the memory
  if (at == MAP_FAILED) throw failure(std::string("mmap: ") + std::strerror(mmap_errno));
  return at;
}

}  // namespace mimatrix::device::host_blocks
