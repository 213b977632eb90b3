// Splitting `count` elements into nearly equal blocks, and blocks into chunks.
#pragma once

#include <algorithm>
#include <cstddef>

#include "mimatrix/algorithm/policy.hpp"
#include "mimatrix/schedule/schedule.hpp"

namespace mimatrix::algorithm::detail {

/// `count` elements in `parts` blocks; the first count % parts blocks get one more.
struct block_partition {
  std::size_t count = 0;
  std::size_t parts = 1;

  std::size_t length(std::size_t b) const { return count / parts + (b < count % parts ? 1 : 0); }
  std::size_t start(std::size_t b) const { return b * (count / parts) + std::min(b, count % parts); }
};

/// One block cut into chunks of at most `chunk_elems` elements.
struct chunking {
  std::size_t block_elems = 0;
  std::size_t chunk_elems = 1;

  std::size_t chunks() const { return (block_elems + chunk_elems - 1) / chunk_elems; }
  std::size_t start(std::size_t c) const { return c * chunk_elems; }
  std::size_t length(std::size_t c) const { return std::min(chunk_elems, block_elems - start(c)); }
};

inline std::size_t chunk_elems_for(const policy& tuning, std::size_t elem_size) {
  return std::max<std::size_t>(1, chunk_bytes_of(tuning) / elem_size);
}

/// Chunk `c` of `r` as `ch` cuts it, `ch` counting in units of `unit` bytes (an element).
inline schedule::region chunk_of(schedule::region r, const chunking& ch, std::size_t c, std::size_t unit) {
  return {r.where, r.offset + ch.start(c) * unit, ch.length(c) * unit};
}

/// `r` cut into chunks of at most `chunk_elems` elements of `elem_size` bytes, in order:
/// calls `f(chunk, c)` for c = 0, 1, ... (a message each, in gather and scatter).
template <class F>
void for_each_chunk(schedule::region r, std::size_t chunk_elems, std::size_t elem_size, F&& f) {
  const chunking ch{r.bytes / elem_size, chunk_elems};
  for (std::size_t c = 0; c < ch.chunks(); ++c) f(chunk_of(r, ch, c, elem_size), c);
}

/// Elements [first, first + n) of a buffer, as a byte region.
inline schedule::region elements(schedule::buffer where, std::size_t first, std::size_t n, std::size_t elem_size) {
  return {where, first * elem_size, n * elem_size};
}

}  // namespace mimatrix::algorithm::detail
