// Whether a program can write the file a flag names, asked before the work that ends in
// writing it (a checkpoint, the job server's state, a -J report): a run that fails at its
// end, or writes nothing and says nothing, has lost its time (black-box tests found both).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace mimatrix::examples {

/// How the program writes the file.
enum class write_mode {
  in_place,          // opens the file itself: it, where it exists, or its directory must be writable
  through_temporary  // writes `path`.tmp and renames it over: its directory must be writable
};

/// Why a file cannot be written at `path` ("" when it can): the system's reason, taken at
/// once (a later call may change errno).
inline std::string why_unwritable(const std::string& path, write_mode mode) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  // A directory cannot be opened or renamed over as a file (a black-box test: a
  // --checkpoint naming one failed only after the first epoch).
  if (exists && S_ISDIR(st.st_mode)) return std::strerror(EISDIR);
  const bool ok = mode == write_mode::in_place && exists ? ::access(path.c_str(), W_OK) == 0
                                                         : ::access(dir.c_str(), W_OK | X_OK) == 0;
  return ok ? std::string() : std::string(std::strerror(errno));
}

}  // namespace mimatrix::examples
