// The symbolic verifier's values: sets of ranks (whose contributions an element
// carries), what one element holds, and where a rank's buffers live.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mimatrix::schedule::detail {

inline constexpr std::uint32_t no_step = std::numeric_limits<std::uint32_t>::max();

/// Rank sets as handles into a pool of bitsets: set i is words [i*w, (i+1)*w). Ids below
/// `size` are the singletons. Unions are memoized by the pair of handles, because
/// schedules move whole chunks: every element of a chunk meets the same pair.
class rank_sets {
 public:
  explicit rank_sets(int size) : size_(size), words_per_(std::size_t(size + 63) / 64) {
    words_.assign(std::size_t(size) * words_per_, 0);
    counts_.assign(std::size_t(size), 1);
    for (int r = 0; r < size; ++r) words_[std::size_t(r) * words_per_ + std::size_t(r) / 64] |= bit(r);
  }

  static std::uint32_t singleton(int r) { return static_cast<std::uint32_t>(r); }
  int count(std::uint32_t id) const { return counts_[id]; }
  bool contains(std::uint32_t id, int r) const {
    return (words_[id * words_per_ + std::size_t(r) / 64] & bit(r)) != 0;
  }

  /// The union of two disjoint sets (a new handle), or `-1 - r` when both hold rank r.
  std::int64_t unite(std::uint32_t a, std::uint32_t b) {
    if (a > b) std::swap(a, b);
    const auto [it, fresh] = unions_.try_emplace((std::uint64_t(a) << 32) | b, 0);
    if (!fresh) return it->second;
    for (std::size_t k = 0; k < words_per_; ++k)
      if (const auto both = words_[a * words_per_ + k] & words_[b * words_per_ + k])
        return it->second = -1 - std::int64_t(k * 64 + std::size_t(std::countr_zero(both)));
    const auto id = static_cast<std::uint32_t>(counts_.size());
    words_.resize(words_.size() + words_per_);  // may move words_: index only after this
    for (std::size_t k = 0; k < words_per_; ++k)
      words_[id * words_per_ + k] = words_[a * words_per_ + k] | words_[b * words_per_ + k];
    counts_.push_back(counts_[a] + counts_[b]);
    return it->second = id;
  }

  /// "{0, 2}", or "61 of 64 ranks, missing 3" when large.
  std::string describe(std::uint32_t id) const {
    std::string s;
    if (counts_[id] <= 8) {
      s = "{";
      for (int r = 0; r < size_; ++r)
        if (contains(id, r)) s += (s.size() > 1 ? ", " : "") + std::to_string(r);
      return s + "}";
    }
    s = std::to_string(counts_[id]) + " of " + std::to_string(size_) + " ranks";
    for (int r = 0; r < size_; ++r)
      if (!contains(id, r)) return s + ", missing " + std::to_string(r);
    return s;
  }

 private:
  static std::uint64_t bit(int r) { return std::uint64_t(1) << (r % 64); }
  int size_;
  std::size_t words_per_;
  std::vector<std::uint64_t> words_;
  std::vector<int> counts_;
  std::unordered_map<std::uint64_t, std::int64_t> unions_;
};

/// What one element holds: which input element it came from, whose contributions it
/// carries, and how many times it was finalized.
struct value {
  std::uint32_t origin = 0;
  std::uint32_t set = 0;
  std::uint16_t finalized = 0;
  bool defined = false;
};

/// Where one rank's buffers live, in elements. Out of place: arrays input, output,
/// scratch. In place: output shares array 0 with input, at its own offset.
struct layout {
  std::size_t base[3] = {0, 0, 0};
  int array[3] = {0, 1, 2};
  std::size_t elems[3] = {0, 0, 0};
};

}  // namespace mimatrix::schedule::detail
