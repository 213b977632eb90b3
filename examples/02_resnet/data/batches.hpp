// The epoch's order, a rank's shard of it, and batches assembled from it as NCHW floats
// with random crop and flip; every choice is a function of (seed, epoch, sample), never of
// the rank count, so a run gives the same samples however the job is split.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/fashion_mnist.hpp"

namespace mimatrix::resnet::data {

namespace detail {

// splitmix64 (Steele, Lea, Flood): our own generator, because std::shuffle and the
// std distributions differ between standard libraries, and every rank must agree.
constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = state += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t s = a ^ (b * 0xd6e8feb86659fd93ull);
  return splitmix64(s);
}

// Uniform in [0, n), n > 0, without modulo bias: redraw the top sliver that would
// favour small values.
inline std::uint64_t below(std::uint64_t& state, std::uint64_t n) noexcept {
  const std::uint64_t limit = ~std::uint64_t{0} - ~std::uint64_t{0} % n;
  for (;;) {
    if (const std::uint64_t r = splitmix64(state); r < limit) return r % n;
  }
}

// Separate streams for the shuffle and the augmentation, so neither shifts the other.
inline constexpr std::uint64_t shuffle_stream = 0x53485546464c45ull, augment_stream = 0x4155474d454e54ull;

}  // namespace detail

/// The epoch's permutation of sample indices 0..samples-1: the same on every rank for the
/// same (seed, epoch), on any platform (Fisher-Yates on splitmix64).
[[nodiscard]] inline std::vector<std::uint32_t> epoch_order(std::uint32_t samples, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::uint32_t> order(samples);
  for (std::uint32_t i = 0; i < samples; ++i) order[i] = i;
  std::uint64_t state = detail::mix(detail::mix(seed, detail::shuffle_stream), epoch);
  for (std::uint32_t i = samples; i > 1; --i) std::swap(order[i - 1], order[detail::below(state, i)]);
  return order;
}

/// A rank's positions in the epoch's order, [begin, end). The job server's assignment
/// gives one directly (shard{a.shard_begin, a.shard_end}); shard_of splits evenly.
struct shard {
  std::uint64_t begin = 0, end = 0;
  [[nodiscard]] std::uint64_t size() const noexcept { return end - begin; }
};

/// Rank's contiguous part of samples positions split among size ranks: sizes differ by at
/// most one, the first samples % size ranks get the extra one.
[[nodiscard]] inline shard shard_of(std::uint64_t samples, std::uint32_t rank, std::uint32_t size) {
  if (size == 0 || rank >= size) {
    throw std::invalid_argument("shard_of: rank " + std::to_string(rank) + " of " + std::to_string(size) + " ranks");
  }
  const std::uint64_t base = samples / size, extra = samples % size;
  const std::uint64_t begin = base * rank + std::min<std::uint64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

/// How many batches of batch_size the shard gives an epoch (the last may be short).
[[nodiscard]] inline std::uint64_t steps_in(const shard& s, std::uint64_t batch_size) noexcept {
  return batch_size == 0 ? 0 : (s.size() + batch_size - 1) / batch_size;
}

/// The sample indices of the shard's step-th batch: order[begin + step * batch_size, ...),
/// cut at the shard's end.
[[nodiscard]] inline std::span<const std::uint32_t> batch_indices(std::span<const std::uint32_t> order, const shard& s, std::uint64_t step,
                                                                  std::uint64_t batch_size) {
  if (s.begin > s.end || s.end > order.size()) {
    throw std::invalid_argument("batch_indices: shard [" + std::to_string(s.begin) + ", " + std::to_string(s.end) + ") outside the order of " +
                                std::to_string(order.size()) + " samples");
  }
  const std::uint64_t first = std::min(s.end, s.begin + step * batch_size);
  const std::uint64_t last = std::min(s.end, first + batch_size);
  return order.subspan(first, last - first);
}

/// Random crop after padding each side by pad pixels of fill, then a horizontal flip with
/// probability 1/2. fill is in the images' (normalized) units: pass
/// fashion_mnist_constants::black for torchvision's pad-with-black-then-normalize.
struct augmentation {
  bool enabled = true;
  int pad = 4;
  float fill = 0.0f;
};

/// What one sample gets: out(c, y, x) = in(c, y + dy, x' + dx), x' = flip ? W-1-x : x,
/// and fill where that falls outside the image.
struct sample_transform {
  int dy = 0, dx = 0;
  bool flip = false;
};

/// The transform of sample index in the epoch: a function of (seed, epoch, index) only.
[[nodiscard]] inline sample_transform transform_for(const augmentation& a, std::uint64_t seed, std::uint64_t epoch, std::uint64_t index) noexcept {
  if (!a.enabled) return {};
  std::uint64_t state = detail::mix(detail::mix(detail::mix(seed, detail::augment_stream), epoch), index);
  const auto span = static_cast<std::uint64_t>(2 * a.pad + 1);
  sample_transform t;
  t.dy = static_cast<int>(detail::below(state, span)) - a.pad;
  t.dx = static_cast<int>(detail::below(state, span)) - a.pad;
  t.flip = (detail::splitmix64(state) & 1) != 0;
  return t;
}

/// Writes one CHW image transformed by t into dst (same shape as src).
inline void apply_transform(std::span<const float> src, std::span<float> dst, std::size_t channels, std::size_t height, std::size_t width,
                            const sample_transform& t, float fill) noexcept {
  const auto h = static_cast<std::ptrdiff_t>(height), w = static_cast<std::ptrdiff_t>(width);
  for (std::size_t c = 0; c < channels; ++c) {
    const float* in = src.data() + c * height * width;
    float* out = dst.data() + c * height * width;
    for (std::ptrdiff_t y = 0; y < h; ++y) {
      const std::ptrdiff_t sy = y + t.dy;
      for (std::ptrdiff_t x = 0; x < w; ++x) {
        const std::ptrdiff_t sx = (t.flip ? w - 1 - x : x) + t.dx;
        out[y * w + x] = sy >= 0 && sy < h && sx >= 0 && sx < w ? in[sy * w + sx] : fill;
      }
    }
  }
}

/// A batch: size images NCHW, contiguous, and their labels.
/// @par Thread Safety
/// A plain value; assemble_batch reuses its buffers, so give each thread its own.
struct batch {
  std::size_t size = 0, channels = 0, height = 0, width = 0;
  std::vector<float> images;
  std::vector<std::uint8_t> labels;
};

/// Fills out with the samples at indices, each transformed by transform_for(a, seed,
/// epoch, index). Throws std::invalid_argument on an index past the set.
inline void assemble_batch(const dataset& d, std::span<const std::uint32_t> indices, const augmentation& a, std::uint64_t seed, std::uint64_t epoch,
                           batch& out) {
  out.size = indices.size();
  out.channels = d.channels;
  out.height = d.height;
  out.width = d.width;
  const std::size_t n = d.image_size();
  out.images.resize(indices.size() * n);
  out.labels.resize(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::uint32_t index = indices[i];
    if (index >= d.count) {
      throw std::invalid_argument("assemble_batch: sample " + std::to_string(index) + " of a set of " + std::to_string(d.count));
    }
    apply_transform(d.image(index), std::span<float>(out.images).subspan(i * n, n), d.channels, d.height, d.width,
                    transform_for(a, seed, epoch, index), a.fill);
    out.labels[i] = d.labels[index];
  }
}

}  // namespace mimatrix::resnet::data
