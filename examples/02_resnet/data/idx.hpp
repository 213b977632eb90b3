// IDX files (the MNIST container: big-endian dims, then unsigned bytes), gzip-compressed
// or plain, read and written through zlib; anything malformed is refused with a reason.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimatrix::resnet::data {

/// An IDX array of unsigned bytes: dims outermost first, data row-major.
/// @par Thread Safety
/// A plain value: distinct objects are independent, one object is not synchronized.
struct idx_array {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};

namespace detail {

struct gz_closer {
  void operator()(gzFile_s* f) const noexcept { gzclose(f); }
};
using gz_file = std::unique_ptr<gzFile_s, gz_closer>;

[[noreturn]] inline void idx_fail(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("idx " + path.string() + ": " + what);
}

inline std::string gz_reason(gzFile_s* f) {
  int code = Z_OK;
  const char* message = gzerror(f, &code);
  return code == Z_OK || message == nullptr || *message == '\0' ? std::string{} : std::string(" (zlib: ") + message + ")";
}

// Reads up to n bytes; returns how many came (fewer only at the end of the stream).
inline std::size_t gz_read(gzFile_s* f, std::uint8_t* out, std::size_t n, const std::filesystem::path& path) {
  std::size_t got = 0;
  while (got < n) {
    // gzread takes an unsigned and returns an int: read in chunks well under INT_MAX.
    const auto want = static_cast<unsigned>(std::min<std::size_t>(n - got, std::size_t{1} << 26));
    const int r = gzread(f, out + got, want);
    if (r < 0) idx_fail(path, "read error" + gz_reason(f));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

}  // namespace detail

/// The largest payload read_idx accepts; a header claiming more is refused before allocating.
inline constexpr std::uint64_t idx_max_bytes = std::uint64_t{1} << 34;

/// Reads an IDX file of unsigned bytes (type 0x08), gzip-compressed or plain (zlib reads
/// both). Throws std::runtime_error naming the file and the fault: missing, bad magic,
/// other element type, truncated, trailing bytes, corrupt compression.
[[nodiscard]] inline idx_array read_idx(const std::filesystem::path& path) {
  detail::gz_file f{gzopen(path.c_str(), "rb")};
  if (!f) detail::idx_fail(path, "cannot open");
  gzbuffer(f.get(), 1u << 20);

  std::uint8_t magic[4] = {};
  if (detail::gz_read(f.get(), magic, 4, path) != 4) detail::idx_fail(path, "truncated: shorter than the 4-byte magic" + detail::gz_reason(f.get()));
  char hex[16];
  std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", magic[0], magic[1], magic[2], magic[3]);
  if (magic[0] != 0 || magic[1] != 0) detail::idx_fail(path, std::string("bad magic 0x") + hex + " (an IDX file starts with two zero bytes)");
  if (magic[2] != 0x08) detail::idx_fail(path, std::string("magic 0x") + hex + ": element type unsupported (only unsigned byte, 0x08)");
  const unsigned ndims = magic[3];
  if (ndims == 0 || ndims > 8) detail::idx_fail(path, std::to_string(ndims) + " dimensions (expected 1 to 8)");

  idx_array out;
  std::uint64_t bytes = 1;
  for (unsigned i = 0; i < ndims; ++i) {
    std::uint8_t be[4] = {};
    if (detail::gz_read(f.get(), be, 4, path) != 4) detail::idx_fail(path, "truncated in the header, at dimension " + std::to_string(i) + detail::gz_reason(f.get()));
    const std::uint32_t d = std::uint32_t{be[0]} << 24 | std::uint32_t{be[1]} << 16 | std::uint32_t{be[2]} << 8 | be[3];
    out.dims.push_back(d);
    // Checked per factor so a lying header can neither overflow nor make us allocate.
    if (d != 0 && bytes > idx_max_bytes / d) detail::idx_fail(path, "header claims more than " + std::to_string(idx_max_bytes) + " bytes");
    bytes *= d;
  }

  // Grown as data arrives, so a truncated file costs what it holds, not what it claims.
  std::size_t got = 0;
  while (got < bytes) {
    const std::size_t next = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, got + (std::size_t{1} << 24)));
    out.data.resize(next);
    const std::size_t r = detail::gz_read(f.get(), out.data.data() + got, next - got, path);
    got += r;
    if (got < next) {
      detail::idx_fail(path, "truncated: header claims " + std::to_string(bytes) + " bytes of data, file has " + std::to_string(got) +
                                 detail::gz_reason(f.get()));
    }
  }
  std::uint8_t extra[64];
  if (const std::size_t n = detail::gz_read(f.get(), extra, sizeof extra, path); n != 0) {
    detail::idx_fail(path, "trailing bytes after the " + std::to_string(bytes) + " bytes of data the header claims");
  }
  return out;
}

/// Writes an IDX file of unsigned bytes, gzip-compressed or plain. Throws
/// std::runtime_error naming the file when dims and data disagree or the write fails.
inline void write_idx(const std::filesystem::path& path, const idx_array& a, bool compress = true) {
  std::uint64_t bytes = 1;
  for (const std::uint32_t d : a.dims) bytes *= d;
  if (a.dims.empty() || a.dims.size() > 8) detail::idx_fail(path, std::to_string(a.dims.size()) + " dimensions (expected 1 to 8)");
  if (bytes != a.data.size()) detail::idx_fail(path, "dims give " + std::to_string(bytes) + " bytes, data has " + std::to_string(a.data.size()));

  // "T": zlib's transparent mode writes the bytes as they are.
  detail::gz_file f{gzopen(path.c_str(), compress ? "wb" : "wbT")};
  if (!f) detail::idx_fail(path, "cannot create");
  std::vector<std::uint8_t> header{0, 0, 0x08, static_cast<std::uint8_t>(a.dims.size())};
  for (const std::uint32_t d : a.dims) {
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  const auto put = [&](const std::uint8_t* p, std::size_t n) {
    while (n > 0) {
      const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n, std::size_t{1} << 26));
      if (gzwrite(f.get(), p, chunk) != static_cast<int>(chunk)) detail::idx_fail(path, "write failed" + detail::gz_reason(f.get()));
      p += chunk;
      n -= chunk;
    }
  };
  put(header.data(), header.size());
  put(a.data.data(), a.data.size());
  if (gzclose(f.release()) != Z_OK) detail::idx_fail(path, "write failed on close");
}

}  // namespace mimatrix::resnet::data
