// Checkpoints of a training run: named float tensors and integer counters in one
// CRC-checked file, written atomically (a temporary, then a rename) and validated on load.
#pragma once

#include <zlib.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mimatrix::resnet::train {

// The file is written in the host's byte order and read as little-endian IEEE floats.
static_assert(std::endian::native == std::endian::little,
              "checkpoint.hpp writes little-endian files by copying memory: port it before using a big-endian host");
static_assert(std::numeric_limits<float>::is_iec559, "checkpoint.hpp stores IEEE 754 binary32 floats");

/// The file format, version 1 (all integers little-endian):
///
///   "MIMXCKPT"                      8 bytes of magic
///   u32 version                     1
///   u64 tensor count, u64 counter count
///   per tensor:  u32 name length, name bytes, u64 element count, float32 elements
///   per counter: u32 name length, name bytes, i64 value
///   u32 CRC-32 (zlib's crc32) of every byte before it
struct checkpoint_format {
  static constexpr std::string_view magic = "MIMXCKPT";
  static constexpr std::uint32_t version = 1;
  static constexpr std::uint32_t max_name_bytes = 4096;  // names are short; a larger one is corruption
};

/// A checkpoint in memory: the run's tensors (parameter values, batch-norm running mean and
/// variance, momentum buffers) and counters (epoch, step, seed, global batch), by name.
/// @par Thread Safety
/// A plain value.
struct checkpoint {
  std::map<std::string, std::vector<float>> tensors;
  std::map<std::string, std::int64_t> counters;
};

/// A tensor to save without copying it into a `checkpoint` first.
/// @par Thread Safety
/// A view: the data must stay unchanged while it is saved.
struct tensor_view {
  std::string name;
  std::span<const float> data;
};

namespace detail {

[[noreturn]] inline void checkpoint_fail(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("checkpoint " + path.string() + ": " + what);
}

inline std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

// crc32 takes an unsigned length: feed it in chunks well under its limit.
inline std::uint32_t crc_update(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, std::size_t{1} << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

// Writes bytes and keeps the running CRC of everything written.
class checked_writer {
 public:
  checked_writer(std::FILE* f, const std::filesystem::path& path) : f_(f), path_(path) {}

  void bytes(const void* p, std::size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, f_) != n) checkpoint_fail(path_, "write failed: " + errno_text(errno));
    crc_ = crc_update(crc_, p, n);
  }
  template <class T>
  void value(T v) {
    bytes(&v, sizeof v);
  }
  void name(const std::string& s) {
    value(static_cast<std::uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  [[nodiscard]] std::uint32_t crc() const noexcept { return crc_; }

 private:
  std::FILE* f_;
  const std::filesystem::path& path_;
  std::uint32_t crc_ = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
};

// Reads bytes, keeps the running CRC, and refuses any read past the bytes the file has
// (less its CRC trailer), so no claimed size is allocated before it is known to fit.
class checked_reader {
 public:
  checked_reader(std::FILE* f, const std::filesystem::path& path, std::uint64_t payload_bytes)
      : f_(f), path_(path), left_(payload_bytes) {}

  void bytes(void* p, std::size_t n, const std::string& what) {
    need(n, what);
    if (n != 0 && std::fread(p, 1, n, f_) != n) checkpoint_fail(path_, "read failed in " + what);
    crc_ = crc_update(crc_, p, n);
    left_ -= n;
    offset_ += n;
  }
  template <class T>
  T value(const std::string& what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  std::string name(const std::string& what) {
    const auto n = value<std::uint32_t>(what + " name length");
    if (n > checkpoint_format::max_name_bytes)
      checkpoint_fail(path_, what + " name length " + std::to_string(n) + " at offset " +
                                 std::to_string(offset_ - 4) + " exceeds " +
                                 std::to_string(checkpoint_format::max_name_bytes) + " (corrupt)");
    std::string s(n, '\0');
    bytes(s.data(), n, what + " name");
    return s;
  }
  // Throws unless n more bytes are there.
  void need(std::uint64_t n, const std::string& what) const {
    if (n > left_)
      checkpoint_fail(path_, "truncated: " + what + " at offset " + std::to_string(offset_) + " needs " +
                                 std::to_string(n) + " bytes, " + std::to_string(left_) + " remain before the CRC");
  }
  [[nodiscard]] std::uint64_t left() const noexcept { return left_; }
  [[nodiscard]] std::uint32_t crc() const noexcept { return crc_; }

 private:
  std::FILE* f_;
  const std::filesystem::path& path_;
  std::uint64_t left_;
  std::uint64_t offset_ = 0;
  std::uint32_t crc_ = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
};

// Makes the rename itself durable. Best effort: some file systems refuse fsync on a
// directory, and by then the new checkpoint is complete and in place either way.
inline void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace detail

/// Writes `tensors` and `counters` to `path` atomically: to `path` + ".tmp", flushed and
/// fsync'ed, then renamed over `path`, so a crash at any moment leaves either the old
/// checkpoint or the new one, never a torn file. Throws std::invalid_argument for a
/// duplicate or over-long name, std::runtime_error naming the file when writing fails (the
/// temporary is removed and `path` is untouched). One writer per path at a time (rank 0):
/// the temporary's name is fixed, so two concurrent saves to one path would share it.
inline void save_checkpoint(const std::filesystem::path& path, std::span<const tensor_view> tensors,
                            const std::map<std::string, std::int64_t>& counters) {
  std::set<std::string_view> names;
  for (const tensor_view& t : tensors) {
    if (!names.insert(t.name).second)
      throw std::invalid_argument("checkpoint " + path.string() + ": tensor '" + t.name + "' given twice");
  }
  for (const auto& [name, value] : counters) names.insert(name);  // counters are a map: unique
  for (std::string_view name : names) {
    if (name.size() > checkpoint_format::max_name_bytes)
      throw std::invalid_argument("checkpoint " + path.string() + ": name of " + std::to_string(name.size()) +
                                  " bytes exceeds " + std::to_string(checkpoint_format::max_name_bytes));
  }

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    detail::file_ptr f(std::fopen(tmp.c_str(), "wb"));
    if (!f) detail::checkpoint_fail(tmp, "cannot create: " + detail::errno_text(errno));
    try {
      detail::checked_writer out(f.get(), tmp);
      out.bytes(checkpoint_format::magic.data(), checkpoint_format::magic.size());
      out.value(checkpoint_format::version);
      out.value(static_cast<std::uint64_t>(tensors.size()));
      out.value(static_cast<std::uint64_t>(counters.size()));
      for (const tensor_view& t : tensors) {
        out.name(t.name);
        out.value(static_cast<std::uint64_t>(t.data.size()));
        out.bytes(t.data.data(), t.data.size_bytes());
      }
      for (const auto& [name, value] : counters) {
        out.name(name);
        out.value(value);
      }
      const std::uint32_t crc = out.crc();
      out.bytes(&crc, sizeof crc);
      // Data on disk before the rename publishes it: otherwise a crash could leave the new
      // name on an empty or partial file.
      if (std::fflush(f.get()) != 0 || ::fsync(::fileno(f.get())) != 0)
        detail::checkpoint_fail(tmp, "flush failed: " + detail::errno_text(errno));
      if (std::fclose(f.release()) != 0) detail::checkpoint_fail(tmp, "close failed: " + detail::errno_text(errno));
    } catch (...) {
      f.reset();
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    detail::checkpoint_fail(path, "cannot rename " + tmp.string() + " over it: " + ec.message());
  }
  detail::sync_directory(path.parent_path());
}

/// Writes a `checkpoint` (tensors in name order), as the overload above.
inline void save_checkpoint(const std::filesystem::path& path, const checkpoint& ck) {
  std::vector<tensor_view> views;
  views.reserve(ck.tensors.size());
  for (const auto& [name, data] : ck.tensors) views.push_back({name, data});
  save_checkpoint(path, views, ck.counters);
}

/// Reads and validates a checkpoint: magic, version, every size against the bytes the file
/// has (before allocating), unique names, no trailing bytes, and the CRC. Throws
/// std::runtime_error naming the file and the fault.
inline checkpoint load_checkpoint(const std::filesystem::path& path) {
  std::error_code ec;
  const std::uintmax_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) detail::checkpoint_fail(path, "cannot read: " + ec.message());
  detail::file_ptr f(std::fopen(path.c_str(), "rb"));
  if (!f) detail::checkpoint_fail(path, "cannot open: " + detail::errno_text(errno));

  constexpr std::uint64_t header_bytes = checkpoint_format::magic.size() + 4 + 8 + 8;
  constexpr std::uint64_t crc_bytes = 4;
  // Magic and version first, so a foreign file is called that, not "truncated".
  char head[12] = {};
  const std::size_t got = std::fread(head, 1, sizeof head, f.get());
  const std::string_view seen(head, std::min<std::size_t>(got, checkpoint_format::magic.size()));
  if (seen != checkpoint_format::magic.substr(0, seen.size()))
    detail::checkpoint_fail(path, "bad magic (not a mimatrix checkpoint)");
  if (got < sizeof head) detail::checkpoint_fail(path, "truncated: " + std::to_string(file_bytes) + " bytes");
  std::uint32_t version = 0;
  std::memcpy(&version, head + checkpoint_format::magic.size(), sizeof version);
  if (version != checkpoint_format::version)
    detail::checkpoint_fail(path, "unsupported version " + std::to_string(version) + " (this build reads " +
                                      std::to_string(checkpoint_format::version) + ")");
  if (file_bytes < header_bytes + crc_bytes)
    detail::checkpoint_fail(path, "truncated: " + std::to_string(file_bytes) + " bytes, the header and CRC need " +
                                      std::to_string(header_bytes + crc_bytes));
  std::rewind(f.get());

  detail::checked_reader in(f.get(), path, file_bytes - crc_bytes);
  in.bytes(head, sizeof head, "magic and version");
  const auto tensor_count = in.value<std::uint64_t>("tensor count");
  const auto counter_count = in.value<std::uint64_t>("counter count");
  // The smallest entries (empty name; no elements) bound the counts by the bytes left.
  constexpr std::uint64_t min_tensor_bytes = 4 + 8, min_counter_bytes = 4 + 8;
  if (tensor_count > in.left() / min_tensor_bytes ||
      counter_count > (in.left() - tensor_count * min_tensor_bytes) / min_counter_bytes)
    detail::checkpoint_fail(path, "counts of " + std::to_string(tensor_count) + " tensors and " +
                                      std::to_string(counter_count) + " counters cannot fit in " +
                                      std::to_string(file_bytes) + " bytes (truncated or corrupt)");

  checkpoint ck;
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    const std::string what = "tensor " + std::to_string(i);
    std::string name = in.name(what);
    const auto count = in.value<std::uint64_t>("tensor '" + name + "' element count");
    if (count > in.left() / sizeof(float))
      detail::checkpoint_fail(path, "tensor '" + name + "' claims " + std::to_string(count) + " elements, but only " +
                                        std::to_string(in.left()) + " bytes remain (truncated or corrupt)");
    std::vector<float> data(static_cast<std::size_t>(count));
    in.bytes(data.data(), data.size() * sizeof(float), "tensor '" + name + "' data");
    if (!ck.tensors.emplace(std::move(name), std::move(data)).second)
      detail::checkpoint_fail(path, "tensor " + std::to_string(i) + " repeats a name (corrupt)");
  }
  for (std::uint64_t i = 0; i < counter_count; ++i) {
    std::string name = in.name("counter " + std::to_string(i));
    const auto value = in.value<std::int64_t>("counter '" + name + "' value");
    if (!ck.counters.emplace(std::move(name), value).second)
      detail::checkpoint_fail(path, "counter " + std::to_string(i) + " repeats a name (corrupt)");
  }
  if (in.left() != 0)
    detail::checkpoint_fail(path, std::to_string(in.left()) + " unexpected bytes before the CRC (corrupt)");
  std::uint32_t stored = 0;
  if (std::fread(&stored, 1, sizeof stored, f.get()) != sizeof stored) detail::checkpoint_fail(path, "read failed in CRC");
  if (stored != in.crc())
    detail::checkpoint_fail(path, "CRC mismatch (stored " + std::to_string(stored) + ", computed " +
                                      std::to_string(in.crc()) + "): the file is corrupt");
  return ck;
}

/// Copies the saved tensor `name` into `into` (a parameter's value, a running statistic, a
/// momentum buffer). Throws std::runtime_error if the checkpoint lacks it or its size differs.
inline void restore(const checkpoint& ck, const std::string& name, std::span<float> into) {
  const auto it = ck.tensors.find(name);
  if (it == ck.tensors.end()) throw std::runtime_error("checkpoint has no tensor '" + name + "'");
  if (it->second.size() != into.size())
    throw std::runtime_error("checkpoint tensor '" + name + "' has " + std::to_string(it->second.size()) +
                             " elements, the destination " + std::to_string(into.size()));
  std::copy(it->second.begin(), it->second.end(), into.begin());
}

/// The saved counter `name`; throws std::runtime_error if the checkpoint lacks it.
[[nodiscard]] inline std::int64_t counter(const checkpoint& ck, const std::string& name) {
  const auto it = ck.counters.find(name);
  if (it == ck.counters.end()) throw std::runtime_error("checkpoint has no counter '" + name + "'");
  return it->second;
}

}  // namespace mimatrix::resnet::train
