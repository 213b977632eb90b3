// The rendezvous store over a directory on a shared file system: one file a key. What
// MIMATRIX_STORE=file:/path opens, for clusters where ranks share a file system but no
// rank can be told in advance where rank 0 runs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mimatrix/bootstrap/detail/counter.hpp"
#include "mimatrix/bootstrap/detail/fd.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"

namespace mimatrix::bootstrap {

/// A store whose keys are files in one directory.
///
/// A value is written to a temporary name and renamed into place, so readers see all of it
/// or nothing; add() holds an flock() on `<dir>/.lock` while it reads and rewrites its key.
/// get() polls for the file, sleeping between looks (1 ms, doubling up to 20 ms). The
/// directory itself is not removed (erase_prefix() empties it of keys): give each job its own.
///
/// @par Thread Safety
/// One object may be shared by threads; many processes, on many hosts, may share the
/// directory.
class file_store final : public store {
 public:
  /// Uses `directory`, creating it (and its parents) when missing. Throws
  /// errc::invalid_argument naming the path when it cannot be created or is not a directory.
  explicit file_store(std::string directory) : directory_(std::move(directory)) {
    while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
    if (directory_.empty()) throw error(errc::invalid_argument, "file store: the directory is empty");
    make_directories();
  }

  void set(const std::string& key, const std::vector<std::byte>& value) override {
    check_entry(key, value.size());
    write_file(key, value);
  }

  std::vector<std::byte> get(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto deadline = deadline_after(timeout);  // saturated: never overflows
    auto pause = std::chrono::milliseconds(1);
    std::vector<std::byte> value;
    for (;;) {
      if (read_file(key, value)) return value;
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero())
        throw error(errc::timeout, "key '" + key + "' was not set in the rendezvous store at " + where() +
                                       " within " + std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, left));
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
    }
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    const std::string lock_path = directory_ + "/.lock";
    detail::unique_fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!lock) fail("open " + lock_path, errno);
    while (::flock(lock.get(), LOCK_EX) != 0)
      if (errno != EINTR) fail("lock " + lock_path, errno);
    std::vector<std::byte> value;
    read_file(key, value);
    std::int64_t now = 0;
    if (!detail::parse_counter(value, now))
      throw error(errc::invalid_argument,
                  "add to key '" + key + "' in the rendezvous store at " + where() + ": its value is not a counter");
    now = static_cast<std::int64_t>(static_cast<std::uint64_t>(now) + static_cast<std::uint64_t>(delta));
    write_file(key, detail::counter_bytes(now));
    return now;  // the lock is released when `lock` closes
  }

  /// Unlinks the files of the keys under `prefix`. An encoded name never starts with '.',
  /// so the lock and temporary files are never among them.
  std::int64_t erase_prefix(const std::string& prefix) override {
    const std::string encoded = path_of(prefix).substr(directory_.size() + 1, 3 * prefix.size());
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(directory_.c_str()), ::closedir);
    if (!dir) fail("open directory " + directory_, errno);
    std::int64_t erased = 0;
    while (const dirent* entry = ::readdir(dir.get())) {
      const std::string_view name = entry->d_name;
      if (name.starts_with('.') || !name.starts_with(encoded)) continue;
      if (::unlinkat(::dirfd(dir.get()), entry->d_name, 0) == 0) ++erased;
      else if (errno != ENOENT) fail("unlink " + directory_ + "/" + std::string(name), errno);
    }
    return erased;
  }

  std::string where() const override { return "file:" + directory_; }

  /// The directory: every file_store on it in this process shares its keys.
  std::string scope() const override { return where(); }

  /// The file that holds `key`: its bytes outside [A-Za-z0-9_-] become %XX.
  std::string path_of(const std::string& key) const {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string name = directory_ + "/";
    for (unsigned char ch : key) {
      if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-') {
        name += static_cast<char>(ch);
      } else {
        name += '%';
        name += hex[ch >> 4];
        name += hex[ch & 15];
      }
    }
    if (key.empty()) name += "%";  // the empty key still needs a name of its own
    return name;
  }

 private:
  [[noreturn]] void fail(const std::string& what, int e) const {
    throw error(errc::transport, "rendezvous store at " + where() + ": " + what + ": " + detail::errno_text(e));
  }

  void make_directories() {
    for (std::size_t at = 1;; ++at) {
      at = directory_.find('/', at);
      const std::string part = directory_.substr(0, at);
      if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST)
        throw error(errc::invalid_argument,
                    "file store: cannot create directory '" + part + "': " + detail::errno_text(errno));
      if (at == std::string::npos) break;
    }
    struct stat info {};
    if (::stat(directory_.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
      throw error(errc::invalid_argument, "file store: '" + directory_ + "' is not a directory");
  }

  /// A name no other writer uses, on any host sharing the directory.
  std::string temporary_name() const {
    static std::atomic<std::uint64_t> counter{0};
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const auto thread = std::hash<std::thread::id>{}(std::this_thread::get_id());
    return directory_ + "/.tmp." + host + "." + std::to_string(::getpid()) + "." + std::to_string(thread) + "." +
           std::to_string(counter.fetch_add(1));
  }

  void write_file(const std::string& key, const std::vector<std::byte>& value) const {
    const std::string temporary = temporary_name();
    {
      detail::unique_fd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!fd) fail("create " + temporary + " for key '" + key + "'", errno);
      if (!detail::write_all(fd.get(), value.data(), value.size())) {
        const int e = errno;
        ::unlink(temporary.c_str());
        fail("write " + temporary + " for key '" + key + "'", e);
      }
    }
    if (::rename(temporary.c_str(), path_of(key).c_str()) != 0) {
      const int e = errno;
      ::unlink(temporary.c_str());
      fail("rename " + temporary + " to " + path_of(key), e);
    }
  }

  /// The value of `key` into `out`; false when it is not set.
  bool read_file(const std::string& key, std::vector<std::byte>& out) const {
    const std::string path = path_of(key);
    detail::unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      if (errno == ENOENT) return false;
      fail("open " + path + " for key '" + key + "'", errno);
    }
    out.clear();
    std::byte buffer[64 * 1024];
    for (;;) {
      const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("read " + path + " for key '" + key + "'", errno);
      if (n == 0) return true;
      out.insert(out.end(), buffer, buffer + n);
    }
  }

  std::string directory_;
};

}  // namespace mimatrix::bootstrap
