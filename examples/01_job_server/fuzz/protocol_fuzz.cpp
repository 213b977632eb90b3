// libFuzzer target for the job server's wire protocol (protocol.hpp): any bytes are a
// refused frame or a message that re-encodes to exactly those bytes.
#include "protocol.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace job = mimatrix::job;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);

  // The server parses a header alone before it has read the payload.
  if (size >= job::header_bytes) {
    try {
      (void)job::parse_header(bytes);
    } catch (const job::protocol_error&) {
    }
  }

  // Only protocol_error is a refusal; any other exception escapes and libFuzzer reports it.
  std::optional<job::message> decoded;
  try {
    decoded = job::decode_frame(bytes, size);
  } catch (const job::protocol_error&) {
    return 0;
  }

  // The encoding is canonical (fixed widths, no padding, every byte used), so an accepted
  // frame must come back byte for byte; a difference means decode and encode disagree.
  const auto again = job::encode(*decoded);
  if (again.size() != size || (size != 0 && std::memcmp(again.data(), data, size) != 0)) __builtin_trap();
  return 0;
}
