// What the engine hands a transport to start a p2p batch (transport::runs_batches): the
// batch's ops, the memory of each, and the pair epoch of each peer it names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "mimatrix/schedule/p2p.hpp"
#include "mimatrix/schedule/signature.hpp"

namespace mimatrix::transport {

struct batch_call {
  /// kind p2p; `sequence` is this rank's own batch number (not alike across ranks), which
  /// names the batch in errors.
  signature sig{};
  std::span<const schedule::p2p::op> ops{};
  /// Entry k's memory (op k's buffer; a send's is only read), host memory.
  std::span<std::byte* const> entries{};
  /// (peer, pair epoch) for each distinct peer the batch names other than this rank.
  std::span<const std::pair<int, std::uint64_t>> epochs{};
};

}  // namespace mimatrix::transport
