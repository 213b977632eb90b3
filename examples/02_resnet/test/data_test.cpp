// The ResNet trainer's data pipeline: IDX round trips exactly and refuses malformed files
// with a reason; the real Fashion-MNIST loads whole; shuffles, shards and augmented
// batches depend on (seed, epoch, sample) only.
#include "data/idx.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "data/batches.hpp"
#include "data/fashion_mnist.hpp"

namespace mimatrix::resnet::data {
namespace {

namespace fs = std::filesystem;

class temp_dir {
 public:
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "mimatrix-resnet-data-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

idx_array random_array(std::vector<std::uint32_t> dims) {
  std::mt19937 rng(std::random_device{}());
  idx_array a;
  a.dims = std::move(dims);
  a.data.resize(std::accumulate(a.dims.begin(), a.dims.end(), std::size_t{1}, std::multiplies<>()));
  for (auto& b : a.data) b = static_cast<std::uint8_t>(rng());
  return a;
}

// The message of what read_idx threw, or "" when it did not.
std::string refusal(const fs::path& path) {
  try {
    (void)read_idx(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(idx, gzip_round_trip_is_exact) {
  temp_dir dir;
  for (const auto& dims : std::vector<std::vector<std::uint32_t>>{{1}, {257}, {5, 3, 7}, {2, 28, 28}, {0, 4}}) {
    const idx_array a = random_array(dims);
    const fs::path path = dir.path() / "a.gz";
    write_idx(path, a);
    const auto raw = read_bytes(path);
    ASSERT_GE(raw.size(), 2u);
    EXPECT_EQ(raw[0], 0x1f) << "not gzip";
    EXPECT_EQ(raw[1], 0x8b) << "not gzip";
    const idx_array b = read_idx(path);
    EXPECT_EQ(b.dims, a.dims);
    EXPECT_EQ(b.data, a.data);
  }
}

TEST(idx, plain_round_trip_is_exact) {
  temp_dir dir;
  const idx_array a = random_array({4, 6});
  const fs::path path = dir.path() / "a";
  write_idx(path, a, false);
  const auto raw = read_bytes(path);
  ASSERT_EQ(raw.size(), 4u + 2 * 4 + 24);
  EXPECT_EQ(raw[2], 0x08);
  EXPECT_EQ(raw[3], 2);
  EXPECT_EQ(raw[7], 4);  // big-endian dims
  EXPECT_EQ(raw[11], 6);
  const idx_array b = read_idx(path);
  EXPECT_EQ(b.dims, a.dims);
  EXPECT_EQ(b.data, a.data);
}

TEST(idx, refuses_bad_magic) {
  temp_dir dir;
  const fs::path path = dir.path() / "bad-magic";
  write_bytes(path, {0x08, 0x03, 0x00, 0x01, 0, 0, 0, 1, 7});
  const std::string why = refusal(path);
  EXPECT_NE(why.find("bad magic 0x08030001"), std::string::npos) << why;
  EXPECT_NE(why.find(path.string()), std::string::npos) << why;

  write_bytes(path, {0x00, 0x00, 0x0d, 0x01, 0, 0, 0, 1, 0, 0, 0, 0});  // floats
  EXPECT_NE(refusal(path).find("element type unsupported"), std::string::npos) << refusal(path);
  write_bytes(path, {0x00, 0x00, 0x08, 0x00});
  EXPECT_NE(refusal(path).find("0 dimensions"), std::string::npos) << refusal(path);
  write_bytes(path, {0x00, 0x00});
  EXPECT_NE(refusal(path).find("truncated"), std::string::npos) << refusal(path);
}

TEST(idx, refuses_truncated_and_trailing) {
  temp_dir dir;
  const fs::path path = dir.path() / "cut";
  // The header claims 2 x 3 bytes; 5 follow.
  write_bytes(path, {0x00, 0x00, 0x08, 0x02, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5});
  std::string why = refusal(path);
  EXPECT_NE(why.find("truncated: header claims 6 bytes of data, file has 5"), std::string::npos) << why;
  EXPECT_NE(why.find(path.string()), std::string::npos) << why;

  write_bytes(path, {0x00, 0x00, 0x08, 0x02, 0, 0, 0, 2});  // ends inside the dims
  EXPECT_NE(refusal(path).find("truncated in the header"), std::string::npos) << refusal(path);

  write_bytes(path, {0x00, 0x00, 0x08, 0x01, 0, 0, 0, 2, 1, 2, 3});
  EXPECT_NE(refusal(path).find("trailing bytes"), std::string::npos) << refusal(path);

  // A header that claims terabytes is refused before anything is allocated.
  write_bytes(path, {0x00, 0x00, 0x08, 0x03, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
  EXPECT_NE(refusal(path).find("header claims more than"), std::string::npos) << refusal(path);

  // A gzip stream cut in half.
  const fs::path gz = dir.path() / "cut.gz";
  write_idx(gz, random_array({64, 64}));
  auto raw = read_bytes(gz);
  raw.resize(raw.size() / 2);
  write_bytes(gz, raw);
  why = refusal(gz);
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  EXPECT_NE(why.find(gz.string()), std::string::npos) << why;

  EXPECT_NE(refusal(dir.path() / "missing.gz").find("cannot open"), std::string::npos);
}

TEST(fashion_mnist, loads_a_directory_and_checks_labels) {
  temp_dir dir;
  for (const char* set : {"train", "t10k"}) {
    write_idx(fashion_mnist_file(dir.path(), set, "images"), random_array({3, 28, 28}));
    idx_array labels{{3}, {0, 9, 4}};
    write_idx(fashion_mnist_file(dir.path(), set, "labels"), labels);
  }
  ASSERT_TRUE(fashion_mnist_present(dir.path()));
  const fashion_mnist f = load_fashion_mnist(dir.path());
  EXPECT_EQ(f.test.count, 3u);
  EXPECT_EQ(f.train.images.size(), 3u * 28 * 28);
  EXPECT_EQ(f.train.labels, (std::vector<std::uint8_t>{0, 9, 4}));

  idx_array labels{{3}, {0, 10, 4}};
  write_idx(fashion_mnist_file(dir.path(), "train", "labels"), labels);
  try {
    (void)load_fashion_mnist(dir.path());
    ADD_FAILURE() << "label 10 accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("label 10 of sample 1 is not in 0..9"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fashion_mnist_present(dir.path() / "nowhere"));
}

TEST(fashion_mnist, the_real_data_set) {
  using k = fashion_mnist_constants;
  if (!fashion_mnist_present()) GTEST_SKIP() << "Fashion-MNIST not in " << fashion_mnist_default_dir() << " (apt-get install dataset-fashion-mnist)";
  const fashion_mnist f = load_fashion_mnist();
  EXPECT_EQ(f.train.count, k::train_count);
  EXPECT_EQ(f.test.count, k::test_count);
  for (const dataset* d : {&f.train, &f.test}) {
    EXPECT_EQ(d->channels, 1u);
    EXPECT_EQ(d->height, 28u);
    EXPECT_EQ(d->width, 28u);
    EXPECT_EQ(d->images.size(), d->count * 28 * 28);
    std::vector<std::size_t> per_class(k::classes);
    for (const std::uint8_t label : d->labels) ++per_class.at(label);
    for (const std::size_t n : per_class) EXPECT_EQ(n, d->count / k::classes);
  }
  // The constants are the train set's: normalized, it has mean 0 and std 1.
  double sum = 0, squares = 0;
  float lowest = 0;
  for (const float v : f.train.images) {
    sum += v;
    squares += double{v} * v;
    lowest = std::min(lowest, v);
  }
  const double n = static_cast<double>(f.train.images.size());
  EXPECT_NEAR(sum / n, 0.0, 1e-5);
  EXPECT_NEAR(std::sqrt(squares / n - (sum / n) * (sum / n)), 1.0, 1e-5);
  EXPECT_FLOAT_EQ(lowest, k::black);
}

TEST(batches, the_epoch_order_is_a_deterministic_permutation) {
  const auto a = epoch_order(1000, 42, 3);
  EXPECT_EQ(a, epoch_order(1000, 42, 3));
  EXPECT_NE(a, epoch_order(1000, 42, 4));
  EXPECT_NE(a, epoch_order(1000, 43, 3));
  EXPECT_EQ(std::set<std::uint32_t>(a.begin(), a.end()).size(), 1000u);
  EXPECT_EQ(*std::max_element(a.begin(), a.end()), 999u);
  EXPECT_TRUE(epoch_order(0, 1, 1).empty());
  // Pinned: the order must not change with the compiler or standard library.
  EXPECT_EQ(epoch_order(8, 42, 0), (std::vector<std::uint32_t>{4, 3, 7, 2, 6, 1, 5, 0}));
}

TEST(batches, shards_partition_the_epoch) {
  for (const std::uint32_t samples : {0u, 1u, 7u, 1000u, 60000u}) {
    const auto order = epoch_order(samples, 7, 2);
    for (const std::uint32_t ranks : {1u, 2u, 3u}) {
      std::vector<std::uint32_t> seen;
      std::uint64_t at = 0;
      for (std::uint32_t r = 0; r < ranks; ++r) {
        const shard s = shard_of(samples, r, ranks);
        EXPECT_EQ(s.begin, at) << "gap or overlap before rank " << r;
        EXPECT_LE(s.size(), samples / ranks + 1);
        EXPECT_GE(s.size(), samples / ranks);
        at = s.end;
        for (std::uint64_t step = 0; step < steps_in(s, 32); ++step) {
          const auto b = batch_indices(order, s, step, 32);
          EXPECT_LE(b.size(), 32u);
          seen.insert(seen.end(), b.begin(), b.end());
        }
        EXPECT_TRUE(batch_indices(order, s, steps_in(s, 32), 32).empty());
      }
      EXPECT_EQ(at, samples);
      EXPECT_EQ(seen, order) << samples << " samples, " << ranks << " ranks";
    }
  }
  EXPECT_THROW((void)shard_of(10, 3, 3), std::invalid_argument);
  const auto order = epoch_order(10, 1, 1);
  EXPECT_THROW((void)batch_indices(order, shard{5, 11}, 0, 4), std::invalid_argument);
}

// A 1 x 6 x 5 image of distinct nonzero values.
std::vector<float> ramp(std::size_t h = 6, std::size_t w = 5) {
  std::vector<float> v(h * w);
  std::iota(v.begin(), v.end(), 1.0f);
  return v;
}

TEST(batches, a_flip_mirrors) {
  const std::size_t h = 6, w = 5;
  const auto in = ramp();
  std::vector<float> out(in.size());
  apply_transform(in, out, 1, h, w, sample_transform{0, 0, true}, 0.0f);
  for (std::size_t y = 0; y < h; ++y) {
    for (std::size_t x = 0; x < w; ++x) EXPECT_EQ(out[y * w + x], in[y * w + (w - 1 - x)]);
  }
  std::vector<float> back(in.size());
  apply_transform(out, back, 1, h, w, sample_transform{0, 0, true}, 0.0f);
  EXPECT_EQ(back, in);
}

TEST(batches, a_crop_shifts_with_zeros_entering) {
  const std::size_t h = 6, w = 5;
  const auto in = ramp();
  for (int dy = -4; dy <= 4; ++dy) {
    for (int dx = -4; dx <= 4; ++dx) {
      std::vector<float> out(in.size());
      apply_transform(in, out, 1, h, w, sample_transform{dy, dx, false}, 0.0f);
      std::size_t zeros = 0;
      for (std::size_t y = 0; y < h; ++y) {
        for (std::size_t x = 0; x < w; ++x) {
          const int sy = static_cast<int>(y) + dy, sx = static_cast<int>(x) + dx;
          const bool inside = sy >= 0 && sy < static_cast<int>(h) && sx >= 0 && sx < static_cast<int>(w);
          EXPECT_EQ(out[y * w + x], inside ? in[static_cast<std::size_t>(sy) * w + static_cast<std::size_t>(sx)] : 0.0f);
          zeros += out[y * w + x] == 0.0f;
        }
      }
      const std::size_t kept = (h - static_cast<std::size_t>(std::abs(dy))) * (w - std::min<std::size_t>(w, static_cast<std::size_t>(std::abs(dx))));
      EXPECT_EQ(zeros, h * w - kept) << dy << ", " << dx;
    }
  }
}

TEST(batches, transforms_stay_within_the_padding_and_cover_it) {
  const augmentation a;
  std::set<int> dys, dxs;
  int flips = 0;
  for (std::uint64_t i = 0; i < 4000; ++i) {
    const sample_transform t = transform_for(a, 5, 1, i);
    ASSERT_LE(std::abs(t.dy), 4);
    ASSERT_LE(std::abs(t.dx), 4);
    dys.insert(t.dy);
    dxs.insert(t.dx);
    flips += t.flip;
  }
  EXPECT_EQ(dys.size(), 9u);
  EXPECT_EQ(dxs.size(), 9u);
  EXPECT_NEAR(flips, 2000, 200);
  const sample_transform none = transform_for(augmentation{false, 4, 0.0f}, 5, 1, 3);
  EXPECT_EQ(none.dy, 0);
  EXPECT_EQ(none.dx, 0);
  EXPECT_FALSE(none.flip);
}

dataset small_set(std::size_t count) {
  dataset d;
  d.count = count;
  d.channels = 1;
  d.height = 28;
  d.width = 28;
  d.images.resize(count * 28 * 28);
  std::iota(d.images.begin(), d.images.end(), 1.0f);
  for (std::size_t i = 0; i < count; ++i) d.labels.push_back(static_cast<std::uint8_t>(i % 10));
  return d;
}

TEST(batches, the_same_seed_gives_the_same_batch_whatever_the_split) {
  const dataset d = small_set(50);
  const augmentation a{true, 4, fashion_mnist_constants::black};
  const auto order = epoch_order(50, 11, 2);
  batch one, again, other_epoch;
  const auto indices = std::span<const std::uint32_t>(order).first(16);
  assemble_batch(d, indices, a, 11, 2, one);
  assemble_batch(d, indices, a, 11, 2, again);
  assemble_batch(d, indices, a, 11, 3, other_epoch);
  EXPECT_EQ(one.size, 16u);
  EXPECT_EQ(one.images.size(), 16u * 28 * 28);
  EXPECT_EQ(one.images, again.images);
  EXPECT_EQ(one.labels, again.labels);
  EXPECT_NE(one.images, other_epoch.images);
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(one.labels[i], d.labels[indices[i]]);

  // Each sample is what its own transform makes of it, in whichever batch it lands.
  batch single;
  for (std::size_t i = 0; i < 16; ++i) {
    assemble_batch(d, indices.subspan(i, 1), a, 11, 2, single);
    const std::vector<float> want(one.images.begin() + static_cast<std::ptrdiff_t>(i * 784),
                                  one.images.begin() + static_cast<std::ptrdiff_t>((i + 1) * 784));
    EXPECT_EQ(single.images, want) << "sample " << indices[i];
  }

  const std::uint32_t past[] = {50};
  EXPECT_THROW(assemble_batch(d, past, a, 11, 2, single), std::invalid_argument);
}

}  // namespace
}  // namespace mimatrix::resnet::data
