// Exactly checkable benchmark data: every rank fills small integers that depend on its rank and
// the element index, so every collective's result is known in closed form for every dtype.
#pragma once

#include "datatype.hpp"

#include <cmath>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

namespace mimatrix::perf {

namespace detail {

// Integer ops wrap like the hardware does (int8 prod overflows on many ranks); doing it through
// the unsigned type keeps the expectation free of signed-overflow UB.
template <class T>
T combine(redop op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case redop::sum: case redop::avg: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case redop::prod: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case redop::min: return b < a ? b : a;
      case redop::max: return a < b ? b : a;
    }
    return a;
  } else {
    float const x = static_cast<float>(a), y = static_cast<float>(b);  // half/bf16 go through float
    if constexpr (std::is_same_v<T, double>) {
      switch (op) {
        case redop::sum: case redop::avg: return a + b;
        case redop::prod: return a * b;
        case redop::min: return b < a ? b : a;
        case redop::max: return a < b ? b : a;
      }
      return a;
    } else {
      switch (op) {
        case redop::sum: case redop::avg: return T(x + y);
        case redop::prod: return T(x * y);
        case redop::min: return T(y < x ? y : x);
        case redop::max: return T(x < y ? y : x);
      }
      return a;
    }
  }
}

// Exact for everything but avg of a float type, which divides by nranks.
template <class T>
bool matches(T got, T want, redop op) {
  if constexpr (std::is_integral_v<T>) {
    return got == want;
  } else {
    double const g = static_cast<double>(static_cast<float>(got)), w = static_cast<double>(static_cast<float>(want));
    if constexpr (std::is_same_v<T, double>) {
      if (op != redop::avg) return got == want;
      return std::abs(got - want) <= 1e-12 * std::abs(want);
    }
    if (op != redop::avg) return g == w;
    double const tol = std::is_same_v<T, float> ? 1e-6 : 1e-2;
    return std::abs(g - w) <= tol * std::abs(w);
  }
}

}  // namespace detail

// Rank `rank`'s input at global element `index`: 1..4 (prod: 1 or 2, so products stay small).
template <class T>
T input_value(redop op, int rank, std::size_t index) {
  auto const r = static_cast<std::size_t>(rank);
  int const v = op == redop::prod ? ((r + index) % 3 == 0 ? 2 : 1) : static_cast<int>(1 + (r * 3 + index) % 4);
  return static_cast<T>(v);
}

// The reduction of every rank's input_value at `index`.
template <class T>
T reduced_value(redop op, int nranks, std::size_t index) {
  T acc = input_value<T>(op, 0, index);
  for (int r = 1; r < nranks; ++r) acc = detail::combine(op, acc, input_value<T>(op, r, index));
  if (op == redop::avg) {
    if constexpr (std::is_integral_v<T> || std::is_same_v<T, double>) acc = static_cast<T>(acc / static_cast<T>(nranks));
    else acc = T(static_cast<float>(acc) / static_cast<float>(nranks));
  }
  return acc;
}

// Element `index` of the block rank `from` sends rank `to` in a gather, scatter or alltoall
// (an allgather's: to 0): 1..101, exact in every dtype (bfloat16 holds integers to 256). 11
// and 5 are prime to 101, so a block that lands at the wrong rank or place differs
// (input_value, modulo 4, repeats: an allgather's blocks of its global index were alike
// wherever a block's count was 1 modulo 4, one float of 2 ranks among them).
template <class T>
T block_value(int from, int to, std::size_t index) {
  return static_cast<T>(1 + (static_cast<std::size_t>(from) * 11 + static_cast<std::size_t>(to) * 5 + index) % 101);
}

// A value no correct result takes, so a collective that writes nothing is caught.
template <class T>
T sentinel_value() { return static_cast<T>(-1.0f); }

template <class T>
void fill_input(std::span<T> buf, redop op, int rank) {
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = input_value<T>(op, rank, i);
}

template <class T>
void fill_sentinel(std::span<T> buf) {
  for (auto& x : buf) x = sentinel_value<T>();
}

// Elements of `got` that differ from want(i); want returns T.
template <class T, class Want>
std::size_t count_wrong(std::span<T const> got, redop op, Want want) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += !detail::matches<T>(got[i], want(i), op);
  return wrong;
}

// Type-erased forms over raw buffers, for runners that hold bytes and a run-time dtype.
// The layouts are nccl-tests': `count` is the per-rank parameter count of the collective.
namespace bytes {

template <class T>
std::span<T> as(void* p, std::size_t n) { return {static_cast<T*>(p), n}; }
template <class T>
std::span<T const> as(void const* p, std::size_t n) { return {static_cast<T const*>(p), n}; }

// Input of an allreduce / reduce / broadcast (whole buffer) or a reduce_scatter (count * nranks).
inline void fill_input(dtype t, void* buf, std::size_t n, redop op, int rank) {
  visit(t, [&]<class T>(type_tag<T>) { perf::fill_input<T>(as<T>(buf, n), op, rank); });
}

inline void fill_sentinel(dtype t, void* buf, std::size_t n) {
  visit(t, [&]<class T>(type_tag<T>) { perf::fill_sentinel<T>(as<T>(buf, n)); });
}

// allreduce output: element i is the reduction over ranks at i.
inline std::size_t check_allreduce(dtype t, void const* out, std::size_t count, redop op, int nranks) {
  return visit(t, [&]<class T>(type_tag<T>) {
    return count_wrong<T>(as<T>(out, count), op, [&](std::size_t i) { return reduced_value<T>(op, nranks, i); });
  });
}

// reduce_scatter output of `rank`: its block of the reduction of count * nranks elements.
inline std::size_t check_reduce_scatter(dtype t, void const* out, std::size_t count, redop op, int nranks, int rank) {
  std::size_t const base = count * static_cast<std::size_t>(rank);
  return visit(t, [&]<class T>(type_tag<T>) {
    return count_wrong<T>(as<T>(out, count), op, [&](std::size_t i) { return reduced_value<T>(op, nranks, base + i); });
  });
}

// broadcast output: root's input.
inline std::size_t check_broadcast(dtype t, void const* out, std::size_t count, redop op, int root) {
  return visit(t, [&]<class T>(type_tag<T>) {
    return count_wrong<T>(as<T>(out, count), op, [&](std::size_t i) { return input_value<T>(op, root, i); });
  });
}

// reduce output on the root: an allreduce's (the other ranks' output is not checked).
inline std::size_t check_reduce(dtype t, void const* out, std::size_t count, redop op, int nranks, int rank, int root) {
  return rank == root ? check_allreduce(t, out, count, op, nranks) : 0;
}

// `blocks` blocks, block b of extent(b) = {offset, count} elements holding
// block_value(ends(b).first, ends(b).second, i): a v-form's blocks (splits.hpp).
template <class Extent, class Ends>
void fill_blocks_at(dtype t, void* buf, std::size_t blocks, Extent extent, Ends ends) {
  visit(t, [&]<class T>(type_tag<T>) {
    for (std::size_t b = 0; b < blocks; ++b) {
      auto const [at, count] = extent(b);
      auto const [from, to] = ends(b);
      std::span<T> const s = as<T>(static_cast<T*>(buf) + at, count);
      for (std::size_t i = 0; i < count; ++i) s[i] = block_value<T>(from, to, i);
    }
  });
}

// Wrong elements of blocks filled as fill_blocks_at fills them.
template <class Extent, class Ends>
std::size_t check_blocks_at(dtype t, void const* out, std::size_t blocks, Extent extent, Ends ends) {
  return visit(t, [&]<class T>(type_tag<T>) {
    std::size_t wrong = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      auto const [at, count] = extent(b);
      auto const [from, to] = ends(b);
      wrong += count_wrong<T>(as<T>(static_cast<T const*>(out) + at, count), redop::sum,
                              [&](std::size_t i) { return block_value<T>(from, to, i); });
    }
    return wrong;
  });
}

// `blocks` blocks of `count` elements back to back, as fill_blocks_at fills them: an
// allgather's or gather's input (one block), a scatter's on the root, an alltoall's.
template <class Ends>
void fill_blocks(dtype t, void* buf, std::size_t count, std::size_t blocks, Ends ends) {
  fill_blocks_at(t, buf, blocks, [count](std::size_t b) { return std::pair{b * count, count}; }, ends);
}

// Wrong elements of `blocks` blocks filled as fill_blocks fills them.
template <class Ends>
std::size_t check_blocks(dtype t, void const* out, std::size_t count, std::size_t blocks, Ends ends) {
  return check_blocks_at(t, out, blocks, [count](std::size_t b) { return std::pair{b * count, count}; }, ends);
}

}  // namespace bytes

}  // namespace mimatrix::perf
