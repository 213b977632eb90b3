// The calls a rank ran lately, by sequence, as their packed signatures: what it answers a
// peer whose stalled call asks which call it runs as that sequence (endpoint_control.hpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "mimatrix/schedule/signature.hpp"

namespace mimatrix::transport::detail::fabric {

/// One call as its peers would see it in a message: its signature, packed with the
/// algorithm that runs it and the parameters that must agree (wire::pack).
struct call_record {
  schedule::signature sig;
  std::uint64_t packed = 0;
  std::string algorithm;
  std::uint64_t agreement = 0;
};

/// The latest `kept` calls' records: a peer asks while it waits in a call, at most a
/// deadline after this rank ran it, and a rank runs fewer calls at once than this.
class call_records {
 public:
  static constexpr std::uint64_t kept = 256;

  void add(const call_record& call) {
    records_[call.sig.sequence] = call;
    while (records_.begin()->first + kept < call.sig.sequence) records_.erase(records_.begin());
  }
  /// The record of call `sequence`, or null if this rank has not run it (or long ago).
  const call_record* find(std::uint64_t sequence) const {
    const auto it = records_.find(sequence);
    return it == records_.end() ? nullptr : &it->second;
  }

 private:
  std::map<std::uint64_t, call_record> records_;
};

}  // namespace mimatrix::transport::detail::fabric
