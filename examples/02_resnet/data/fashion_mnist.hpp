// Fashion-MNIST's train and test sets, loaded from its four IDX files: images as float32
// normalized with the train set's mean and std, labels as uint8 classes 0..9.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/idx.hpp"

namespace mimatrix::resnet::data {

/// An image classification set in memory: count images of channels x height x width,
/// each stored CHW, one after another.
/// @par Thread Safety
/// A plain value: concurrent reads are safe, writes are not synchronized.
struct dataset {
  std::size_t count = 0, channels = 0, height = 0, width = 0;
  std::vector<float> images;
  std::vector<std::uint8_t> labels;

  [[nodiscard]] std::size_t image_size() const noexcept { return channels * height * width; }
  [[nodiscard]] std::span<const float> image(std::size_t i) const noexcept {
    return std::span<const float>(images).subspan(i * image_size(), image_size());
  }
};

/// The constants of the set: pixel mean and standard deviation over all 47,040,000 pixels
/// of the 60,000 train images, on the [0, 1] scale (pixel / 255). The test set uses the
/// train set's, as a trained model would see it.
struct fashion_mnist_constants {
  static constexpr std::size_t classes = 10, height = 28, width = 28;
  static constexpr std::size_t train_count = 60000, test_count = 10000;
  static constexpr float mean = 0.28604060f;
  static constexpr float stddev = 0.35302424f;
  /// A black pixel (raw 0) after normalization, about -0.8103: the value that "zero
  /// padding" in pixel space becomes (torchvision pads before it normalizes).
  static constexpr float black = (0.0f - mean) / stddev;
};

/// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* fashion_mnist_debian_dir = "/usr/share/datasets/fashion-mnist";

/// $MIMATRIX_FASHION_MNIST_DIR when set, else the Debian path.
[[nodiscard]] inline std::filesystem::path fashion_mnist_default_dir() {
  const char* env = std::getenv("MIMATRIX_FASHION_MNIST_DIR");
  return env != nullptr && *env != '\0' ? std::filesystem::path(env) : std::filesystem::path(fashion_mnist_debian_dir);
}

/// The file of a set ("train" or "t10k") and kind ("images" or "labels"): the .gz one, or
/// the plain one where only that exists.
[[nodiscard]] inline std::filesystem::path fashion_mnist_file(const std::filesystem::path& dir, const std::string& set, const std::string& kind) {
  const std::string stem = set + "-" + kind + (kind == "images" ? "-idx3-ubyte" : "-idx1-ubyte");
  const std::filesystem::path gz = dir / (stem + ".gz"), plain = dir / stem;
  return !std::filesystem::exists(gz) && std::filesystem::exists(plain) ? plain : gz;
}

/// True when the directory holds all four files (tests skip without them).
[[nodiscard]] inline bool fashion_mnist_present(const std::filesystem::path& dir = fashion_mnist_default_dir()) {
  for (const char* set : {"train", "t10k"}) {
    for (const char* kind : {"images", "labels"}) {
      if (!std::filesystem::exists(fashion_mnist_file(dir, set, kind))) return false;
    }
  }
  return true;
}

/// Loads one set ("train" or "t10k") and checks it: N x 28 x 28 images, N labels in 0..9.
/// Throws std::runtime_error naming the file and what was wrong.
[[nodiscard]] inline dataset load_fashion_mnist_set(const std::filesystem::path& dir, const std::string& set) {
  using k = fashion_mnist_constants;
  const std::filesystem::path images_path = fashion_mnist_file(dir, set, "images");
  const std::filesystem::path labels_path = fashion_mnist_file(dir, set, "labels");
  const idx_array images = read_idx(images_path);
  if (images.dims.size() != 3 || images.dims[1] != k::height || images.dims[2] != k::width) {
    detail::idx_fail(images_path, "expected N x 28 x 28 images, got " + std::to_string(images.dims.size()) + " dimensions");
  }
  idx_array labels = read_idx(labels_path);
  if (labels.dims.size() != 1 || labels.dims[0] != images.dims[0]) {
    detail::idx_fail(labels_path, "expected " + std::to_string(images.dims[0]) + " labels, one per image");
  }
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= k::classes) detail::idx_fail(labels_path, "label " + std::to_string(labels.data[i]) + " of sample " + std::to_string(i) + " is not in 0..9");
  }

  dataset out;
  out.count = images.dims[0];
  out.channels = 1;
  out.height = k::height;
  out.width = k::width;
  out.images.resize(images.data.size());
  // One multiply-add a pixel: (p / 255 - mean) / std.
  constexpr float scale = 1.0f / (255.0f * k::stddev), shift = -k::mean / k::stddev;
  for (std::size_t i = 0; i < images.data.size(); ++i) out.images[i] = static_cast<float>(images.data[i]) * scale + shift;
  out.labels = std::move(labels.data);
  return out;
}

/// Fashion-MNIST's two sets.
struct fashion_mnist {
  dataset train, test;
};

/// Loads both sets from dir (default: $MIMATRIX_FASHION_MNIST_DIR, else the Debian path).
[[nodiscard]] inline fashion_mnist load_fashion_mnist(const std::filesystem::path& dir = fashion_mnist_default_dir()) {
  return {load_fashion_mnist_set(dir, "train"), load_fashion_mnist_set(dir, "t10k")};
}

}  // namespace mimatrix::resnet::data
