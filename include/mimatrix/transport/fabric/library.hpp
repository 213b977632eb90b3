// libfabric, loaded when a process opens its first fabric endpoint (dlopen), not when it
// starts. Debian's libfabric pulls in the PSM provider libraries, whose constructor spends
// about 0.2 s calibrating a clock with short sleeps before main: a process that never opens an endpoint
// (a launcher, a job server, the parent of test ranks) no longer pays it, and a program
// built with the fabric transport starts, and says what is missing, where libfabric is
// not installed. Only these five entry points are symbols; the rest of libfabric's API is
// inline calls through the objects they return.
#pragma once

#include <dlfcn.h>
#include <rdma/fabric.h>
#include <signal.h>

#include <mutex>
#include <string>

#include "mimatrix/core/error.hpp"
#include "mimatrix/transport/fabric/tcp_interface.hpp"

namespace mimatrix::transport::detail::fabric {

/// libfabric's entry points, at the symbol versions a program linked against libfabric
/// 1.17 binds (its structures are read with the layout of the headers it was built with).
struct library {
  decltype(&::fi_getinfo) getinfo;
  decltype(&::fi_freeinfo) freeinfo;
  decltype(&::fi_dupinfo) dupinfo;
  decltype(&::fi_fabric) fabric;
  decltype(&::fi_strerror) strerror;

  fi_info* allocinfo() const { return dupinfo(nullptr); }  // fi_allocinfo()
};

/// Where to look for libfabric: its soname first (the loader's search path and
/// LD_LIBRARY_PATH), then the file the build found (MIMATRIX_LIBFABRIC_FILE, set by
/// CMake's libfabric::headers), for a libfabric outside the loader's path.
inline constexpr const char* libfabric_files[] = {"libfabric.so.1",
#ifdef MIMATRIX_LIBFABRIC_FILE
                                                  MIMATRIX_LIBFABRIC_FILE,
#endif
};

/// A symbol at the version `version`, or its default version where the library has no
/// such version (a build of libfabric without symbol versions).
template <class F>
F libfabric_symbol(void* handle, const char* name, const char* version, std::string& why) {
  void* p = ::dlvsym(handle, name, version);
  if (!p) p = ::dlsym(handle, name);
  if (!p) why += (why.empty() ? "" : "; ") + std::string("no symbol ") + name;
  return reinterpret_cast<F>(p);
}

/// The program's signal handlers, put back after loading libfabric: the constructor of
/// Debian's libinfinipath (a PSM provider's library) installs its own for SIGINT, SIGTERM,
/// SIGSEGV and others, which a program's installed earlier would lose (found by
/// examples.resnet_cli: SIGTERM ended the trainer with 1, not its own 143). Loaded before
/// main, as when libfabric was linked, the program's came after and won.
class kept_signal_handlers {
 public:
  kept_signal_handlers() {
    for (int s = 1; s < NSIG; ++s) kept_[s] = ::sigaction(s, nullptr, &old_[s]) == 0;
  }
  ~kept_signal_handlers() {
    for (int s = 1; s < NSIG; ++s)
      if (kept_[s]) ::sigaction(s, &old_[s], nullptr);
  }
  kept_signal_handlers(const kept_signal_handlers&) = delete;
  kept_signal_handlers& operator=(const kept_signal_handlers&) = delete;

 private:
  struct sigaction old_[NSIG] = {};
  bool kept_[NSIG] = {};
};

/// The entry points of the first of `files` that loads. Throws errc::transport, naming
/// the rank when `rank` is one and what each file's loading said, if none does.
template <class Files>
library load_libfabric(const Files& files, int rank) {
  std::string why;
  void* handle = nullptr;
  const kept_signal_handlers kept;
  for (const char* file : files) {
    // Global, as a linked library would be: providers loaded from plugins resolve into it.
    if ((handle = ::dlopen(file, RTLD_NOW | RTLD_GLOBAL))) break;
    const char* e = ::dlerror();
    why += (why.empty() ? "" : "; ") + std::string(e ? e : file);
  }
  library found{};
  if (handle) {
    found.getinfo = libfabric_symbol<decltype(found.getinfo)>(handle, "fi_getinfo", "FABRIC_1.3", why);
    found.freeinfo = libfabric_symbol<decltype(found.freeinfo)>(handle, "fi_freeinfo", "FABRIC_1.3", why);
    found.dupinfo = libfabric_symbol<decltype(found.dupinfo)>(handle, "fi_dupinfo", "FABRIC_1.3", why);
    found.fabric = libfabric_symbol<decltype(found.fabric)>(handle, "fi_fabric", "FABRIC_1.1", why);
    found.strerror = libfabric_symbol<decltype(found.strerror)>(handle, "fi_strerror", "FABRIC_1.0", why);
  }
  if (!found.getinfo || !found.freeinfo || !found.dupinfo || !found.fabric || !found.strerror)
    throw error(errc::transport, (rank >= 0 ? "rank " + std::to_string(rank) + ": " : std::string()) +
                                     "transport::fabric: cannot load libfabric (" + why +
                                     "); install it (Debian: libfabric1) or put its directory on LD_LIBRARY_PATH");
  return found;
}

/// libfabric, loaded by the first call in the process (from any thread), after FI_TCP_IFACE
/// is chosen (tcp_interface.hpp); later calls return it at once. Throws as load_libfabric
/// and choose_tcp_interface do; a later call tries again.
inline const library& libfabric(int rank = -1) {
  static std::mutex guard;
  static library lib{};
  std::lock_guard lock(guard);
  if (!lib.getinfo) {
    choose_tcp_interface(rank);  // the tcp provider reads FI_TCP_IFACE once, when first asked
    lib = load_libfabric(libfabric_files, rank);
  }
  return lib;
}

}  // namespace mimatrix::transport::detail::fabric
