// algorithm::selection: the rules of MIMATRIX_ALGO, which pins the algorithm of a
// collective, optionally for a range of message sizes (like NCCL_ALGO).
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::algorithm {

/// Message sizes from `first` to `last` bytes, both included.
struct byte_range {
  std::uint64_t first = 0;
  std::uint64_t last = std::numeric_limits<std::uint64_t>::max();

  constexpr bool contains(std::uint64_t bytes) const { return first <= bytes && bytes <= last; }
  constexpr std::uint64_t width() const { return last - first; }
  friend bool operator==(const byte_range&, const byte_range&) = default;
};

/// One rule: `collective[@range]:algorithm`.
struct selection_rule {
  std::optional<schedule::collective> kind;  // empty: every collective ("*")
  std::optional<byte_range> bytes;           // empty: every size
  std::string algorithm;
  std::string text;  // as written, for messages
};

/// The rules of a MIMATRIX_ALGO string. Grammar (spaces around tokens are ignored,
/// names are case-insensitive, empty rules are skipped):
///
///   rules      := rule (';' rule)*
///   rule       := collective ['@' range] ':' algorithm
///   collective := allreduce | reduce_scatter | allgather | broadcast | reduce | gather
///                 | scatter | alltoall | '*'
///   range      := size | size '-' size | size '-' | '-' size     (bytes, both ends included)
///   size       := digits [K | M | G]                              (powers of 1024)
///
/// e.g. `allreduce:ring; allreduce@0-8K:recursive_doubling; broadcast@64K-:ring`.
///
/// Sizes are compared with model::message_bytes(), nccl-tests' "size": the message for
/// allreduce and broadcast, the whole input of reduce_scatter, the whole output of
/// allgather. When several rules match a call, the most specific wins: a ranged rule
/// over an unranged one, then the narrower range, then a named collective over '*',
/// then the later rule.
///
/// @par Thread Safety
/// Immutable after parsing: safe to share between threads.
class selection {
 public:
  selection() = default;

  /// Throws mimatrix::error (invalid_argument) naming the bad part and what was expected.
  static selection parse(std::string_view text, std::string_view source = "MIMATRIX_ALGO") {
    selection s;
    std::size_t index = 0;
    for (std::size_t begin = 0; begin <= text.size();) {
      std::size_t end = text.find(';', begin);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view rule = trim(text.substr(begin, end - begin));
      if (!rule.empty()) s.rules_.push_back(parse_rule(rule, ++index, source));
      begin = end + 1;
    }
    return s;
  }

  /// The rules in MIMATRIX_ALGO, or none when it is unset or empty.
  static selection from_environment() {
    const char* v = std::getenv("MIMATRIX_ALGO");
    return v ? parse(v) : selection{};
  }

  bool empty() const { return rules_.empty(); }
  const std::vector<selection_rule>& rules() const { return rules_; }

  /// The most specific rule for a call, or null when none matches.
  const selection_rule* match(schedule::collective kind, std::uint64_t bytes) const {
    const selection_rule* best = nullptr;
    for (const auto& r : rules_) {
      if (r.kind && *r.kind != kind) continue;
      if (r.bytes && !r.bytes->contains(bytes)) continue;
      if (!best || !more_specific(*best, r)) best = &r;  // a later rule wins a tie
    }
    return best;
  }

 private:
  static bool more_specific(const selection_rule& a, const selection_rule& b) {
    if (a.bytes.has_value() != b.bytes.has_value()) return a.bytes.has_value();
    if (a.bytes && a.bytes->width() != b.bytes->width()) return a.bytes->width() < b.bytes->width();
    return a.kind.has_value() && !b.kind.has_value();
  }

  static std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  }

  static std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  }

  [[noreturn]] static void fail(std::string_view source, std::size_t index, std::string_view rule,
                                const std::string& what) {
    throw error(errc::invalid_argument, std::string(source) + ": rule " + std::to_string(index) + " '" +
                                            std::string(rule) + "': " + what);
  }

  static selection_rule parse_rule(std::string_view rule, std::size_t index, std::string_view source) {
    selection_rule r;
    r.text = rule;
    const std::size_t colon = rule.find(':');
    if (colon == std::string_view::npos)
      fail(source, index, rule, "no ':' found; expected collective[@range]:algorithm, like allreduce@0-8K:ring");
    r.algorithm = lower(trim(rule.substr(colon + 1)));
    if (r.algorithm.empty())
      fail(source, index, rule, "the algorithm after ':' is missing; expected a name like ring");
    for (char c : r.algorithm)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
        fail(source, index, rule, "'" + r.algorithm + "' is not an algorithm name; expected letters, digits and '_'");

    std::string_view head = trim(rule.substr(0, colon));
    std::optional<std::string_view> range;
    if (const std::size_t at = head.find('@'); at != std::string_view::npos) {
      range = trim(head.substr(at + 1));
      head = trim(head.substr(0, at));
    }
    const std::string kind = lower(head);
    std::string known;
    for (int k = 0; k < schedule::collective_kinds; ++k) {
      const auto c = static_cast<schedule::collective>(k);
      if (kind == schedule::to_string(c)) r.kind = c;
      known += std::string(schedule::to_string(c)) + ", ";
    }
    if (!r.kind && kind != "*")
      fail(source, index, rule, "'" + std::string(head) + "' is not a collective; expected " + known + "or *");
    if (range) r.bytes = parse_range(*range, rule, index, source);
    return r;
  }

  static byte_range parse_range(std::string_view text, std::string_view rule, std::size_t index,
                                std::string_view source) {
    if (text.empty()) fail(source, index, rule, "the range after '@' is empty; expected sizes like 0-8K, 64K- or -1M");
    byte_range range;
    const std::size_t dash = text.find('-');
    if (dash == std::string_view::npos) {
      range.first = range.last = parse_size(trim(text), rule, index, source);
      return range;
    }
    const std::string_view lo = trim(text.substr(0, dash)), hi = trim(text.substr(dash + 1));
    if (lo.empty() && hi.empty()) fail(source, index, rule, "the range '-' has no ends; expected sizes like 0-8K");
    if (!lo.empty()) range.first = parse_size(lo, rule, index, source);
    if (!hi.empty()) range.last = parse_size(hi, rule, index, source);
    if (range.first > range.last)
      fail(source, index, rule, "the range '" + std::string(text) + "' ends before it starts; expected low-high");
    return range;
  }

  static std::uint64_t parse_size(std::string_view text, std::string_view rule, std::size_t index,
                                  std::string_view source) {
    const std::string expected = "'" + std::string(text) +
                                 "' is not a byte size; expected digits with an optional K, M or G suffix, like 8K";
    std::uint64_t value = 0;
    std::size_t i = 0;
    constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      const auto digit = static_cast<std::uint64_t>(text[i] - '0');
      if (value > (max - digit) / 10) fail(source, index, rule, "'" + std::string(text) + "' is too large a byte size");
      value = value * 10 + digit;
    }
    if (i == 0) fail(source, index, rule, expected);
    int shift = 0;
    if (i < text.size()) {
      switch (std::toupper(static_cast<unsigned char>(text[i]))) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        default: fail(source, index, rule, expected);
      }
      if (++i != text.size()) fail(source, index, rule, expected);
    }
    if (shift && value > (max >> shift)) fail(source, index, rule, "'" + std::string(text) + "' is too large a byte size");
    return value << shift;
  }

  std::vector<selection_rule> rules_;
};

}  // namespace mimatrix::algorithm
