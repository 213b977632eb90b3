// The calls a rank ran lately, by sequence, as their packed signatures: what it answers a
// peer whose stalled call asks which call it runs as that sequence (endpoint_control.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "mimatrix/schedule/signature.hpp"

namespace mimatrix::transport::detail::fabric {

/// One call as its peers would see it in a message: its signature, packed with the
/// algorithm that runs it and the parameters that must agree (wire::pack).
struct call_record {
  schedule::signature sig;
  std::uint64_t packed = 0;
  std::string algorithm;
  std::uint64_t agreement = 0;
  bool kept = false;  // a call's, not the empty slot's
};

/// The latest `kept` calls' records, a slot a sequence modulo `kept`: a peer asks while it
/// waits in a call, and a rank runs fewer calls at once than this. Every call adds one, so
/// adding allocates nothing once the slots' names have their room.
class call_records {
 public:
  static constexpr std::size_t kept = 256;

  void add(const schedule::signature& sig, std::uint64_t packed, std::string_view algorithm, std::uint64_t agreement) {
    call_record& r = records_[sig.sequence % kept];
    r.sig = sig;
    r.packed = packed;
    r.algorithm.assign(algorithm);
    r.agreement = agreement;
    r.kept = true;
  }
  /// The record of call `sequence`, or null if this rank has not run it (or long ago).
  const call_record* find(std::uint64_t sequence) const {
    const call_record& r = records_[sequence % kept];
    return r.kept && r.sig.sequence == sequence ? &r : nullptr;
  }

 private:
  std::array<call_record, kept> records_{};
};

}  // namespace mimatrix::transport::detail::fabric
