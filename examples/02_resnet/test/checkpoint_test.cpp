// Checkpoints: bit-exact round trips, every truncation and every flipped byte refused,
// bad magic, version and counts, restore's checks, and saves that fail leaving the old file.
#include "train/checkpoint.hpp"

#include "optim/sgd.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace MIMATRIX_UNIT_ID {

using namespace mimatrix::resnet;
using train::checkpoint;
namespace fs = std::filesystem;

class checkpoint_test : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "mimatrix_checkpoint_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir = pattern;
    const auto seed = std::random_device{}();
    rng.seed(seed);
    RecordProperty("seed", std::to_string(seed));  // fresh data each run; the seed reproduces it
  }
  void TearDown() override { fs::remove_all(dir); }

  std::vector<float> random_floats(std::size_t n) {
    std::uniform_real_distribution<float> uniform(-10.0f, 10.0f);
    std::vector<float> v(n);
    for (float& x : v) x = uniform(rng);
    return v;
  }

  // A checkpoint with awkward floats (a NaN with a payload, -0, infinity, a subnormal), an
  // empty tensor, and counters at the int64 extremes.
  checkpoint sample() {
    checkpoint ck;
    ck.tensors["conv1.weight"] = random_floats(27);
    ck.tensors["bn1.running_var"] = random_floats(16);
    ck.tensors["empty"] = {};
    ck.tensors["special"] = {std::bit_cast<float>(0x7fc01234u), -0.0f, std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::denorm_min()};
    ck.counters = {{"epoch", 3},
                   {"step", 1234},
                   {"seed", std::numeric_limits<std::int64_t>::min()},
                   {"global_batch", std::numeric_limits<std::int64_t>::max()}};
    return ck;
  }

  static std::vector<char> read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void write_bytes(const fs::path& p, const std::vector<char>& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  // load_checkpoint's error text; fails the test if it loads.
  static std::string load_error(const fs::path& p) {
    try {
      (void)train::load_checkpoint(p);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    ADD_FAILURE() << p << " loaded";
    return {};
  }

  static void expect_bit_exact(const checkpoint& a, const checkpoint& b) {
    ASSERT_EQ(a.tensors.size(), b.tensors.size());
    for (const auto& [name, data] : a.tensors) {
      ASSERT_TRUE(b.tensors.contains(name)) << name;
      const std::vector<float>& other = b.tensors.at(name);
      ASSERT_EQ(data.size(), other.size()) << name;
      for (std::size_t i = 0; i < data.size(); ++i)
        EXPECT_EQ(std::bit_cast<std::uint32_t>(data[i]), std::bit_cast<std::uint32_t>(other[i])) << name << "[" << i << "]";
    }
    EXPECT_EQ(a.counters, b.counters);
  }

  fs::path dir;
  std::mt19937 rng;
};

TEST_F(checkpoint_test, round_trip_is_bit_exact) {
  const checkpoint ck = sample();
  const fs::path path = dir / "run.ckpt";
  train::save_checkpoint(path, ck);
  EXPECT_FALSE(fs::exists(dir / "run.ckpt.tmp"));
  expect_bit_exact(ck, train::load_checkpoint(path));

  // Saved from views, without copying into a checkpoint: the same contents.
  const std::vector<train::tensor_view> views{{"b", ck.tensors.at("special")}, {"a", ck.tensors.at("conv1.weight")}};
  train::save_checkpoint(dir / "views.ckpt", views, ck.counters);
  const checkpoint loaded = train::load_checkpoint(dir / "views.ckpt");
  checkpoint expected;
  expected.tensors = {{"a", ck.tensors.at("conv1.weight")}, {"b", ck.tensors.at("special")}};
  expected.counters = ck.counters;
  expect_bit_exact(expected, loaded);

  // Nothing at all.
  train::save_checkpoint(dir / "nothing.ckpt", checkpoint{});
  EXPECT_EQ(fs::file_size(dir / "nothing.ckpt"), 8U + 4 + 8 + 8 + 4);
  expect_bit_exact(checkpoint{}, train::load_checkpoint(dir / "nothing.ckpt"));
}

TEST_F(checkpoint_test, save_refuses_repeated_and_long_names) {
  const std::vector<float> data(3);
  const std::vector<train::tensor_view> twice{{"w", data}, {"w", data}};
  EXPECT_THROW(train::save_checkpoint(dir / "x.ckpt", twice, {}), std::invalid_argument);
  checkpoint ck;
  ck.tensors[std::string(5000, 'n')] = data;
  EXPECT_THROW(train::save_checkpoint(dir / "x.ckpt", ck), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir / "x.ckpt"));
  EXPECT_FALSE(fs::exists(dir / "x.ckpt.tmp"));
}

// Every proper prefix of a checkpoint is refused, naming the file.
TEST_F(checkpoint_test, every_truncation_is_refused) {
  const fs::path good = dir / "good.ckpt", cut = dir / "cut.ckpt";
  train::save_checkpoint(good, sample());
  const std::vector<char> bytes = read_bytes(good);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(cut, {bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n)});
    const std::string error = load_error(cut);
    EXPECT_NE(error.find(cut.string()), std::string::npos) << n << " bytes: " << error;
  }
  write_bytes(cut, {bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2)});
  EXPECT_NE(load_error(cut).find("truncated"), std::string::npos) << load_error(cut);
  write_bytes(cut, {bytes.begin(), bytes.begin() + 5});
  EXPECT_NE(load_error(cut).find("truncated"), std::string::npos) << load_error(cut);
  // Bytes appended after the CRC are refused too.
  std::vector<char> longer = bytes;
  longer.insert(longer.end(), {0, 0, 0, 0});
  write_bytes(cut, longer);
  EXPECT_NE(load_error(cut).find("unexpected bytes"), std::string::npos) << load_error(cut);
}

// A flipped bit anywhere (header, names, sizes, data, the CRC itself) is refused.
TEST_F(checkpoint_test, every_flipped_byte_is_refused) {
  const fs::path good = dir / "good.ckpt", bad = dir / "bad.ckpt";
  train::save_checkpoint(good, sample());
  const std::vector<char> bytes = read_bytes(good);
  std::uniform_int_distribution<int> bit(0, 7);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::vector<char> flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit(rng)));
    write_bytes(bad, flipped);
    EXPECT_THROW((void)train::load_checkpoint(bad), std::runtime_error) << "byte " << i;
  }
  // In the data, only the CRC can tell.
  std::vector<char> flipped = bytes;
  flipped[bytes.size() - 10] = static_cast<char>(flipped[bytes.size() - 10] ^ 0x10);  // in the last counter's value
  write_bytes(bad, flipped);
  EXPECT_NE(load_error(bad).find("CRC mismatch"), std::string::npos) << load_error(bad);
}

TEST_F(checkpoint_test, bad_magic_and_version) {
  const fs::path path = dir / "x.ckpt";
  train::save_checkpoint(path, sample());
  std::vector<char> bytes = read_bytes(path);
  std::vector<char> other = bytes;
  other[0] = 'X';
  write_bytes(path, other);
  EXPECT_NE(load_error(path).find("bad magic"), std::string::npos) << load_error(path);
  write_bytes(path, {'P', 'K', 3});  // short and foreign: bad magic, not truncated
  EXPECT_NE(load_error(path).find("bad magic"), std::string::npos) << load_error(path);
  other = bytes;
  other[8] = 2;  // version 2
  write_bytes(path, other);
  EXPECT_NE(load_error(path).find("unsupported version 2 (this build reads 1)"), std::string::npos) << load_error(path);
  EXPECT_NE(load_error(dir / "absent.ckpt").find("absent.ckpt: cannot read"), std::string::npos);
}

// Sizes that cannot fit in the file are refused before anything is allocated for them.
TEST_F(checkpoint_test, oversized_counts_are_refused_before_allocating) {
  const auto header = [](std::uint64_t tensors, std::uint64_t counters) {
    std::vector<char> b{'M', 'I', 'M', 'X', 'C', 'K', 'P', 'T', 1, 0, 0, 0};
    for (const std::uint64_t v : {tensors, counters})
      for (int k = 0; k < 8; ++k) b.push_back(static_cast<char>(v >> (8 * k)));
    return b;
  };
  const fs::path path = dir / "x.ckpt";
  std::vector<char> bytes = header(std::uint64_t{1} << 60, 0);
  bytes.resize(bytes.size() + 64);
  write_bytes(path, bytes);
  EXPECT_NE(load_error(path).find("cannot fit"), std::string::npos) << load_error(path);
  bytes = header(0, ~std::uint64_t{0});
  bytes.resize(bytes.size() + 64);
  write_bytes(path, bytes);
  EXPECT_NE(load_error(path).find("cannot fit"), std::string::npos) << load_error(path);
  // One tensor "w" claiming 2^61 elements.
  bytes = header(1, 0);
  bytes.insert(bytes.end(), {1, 0, 0, 0, 'w'});
  for (int k = 0; k < 8; ++k) bytes.push_back(static_cast<char>((std::uint64_t{1} << 61) >> (8 * k)));
  bytes.resize(bytes.size() + 64);
  write_bytes(path, bytes);
  EXPECT_NE(load_error(path).find("tensor 'w' claims 2305843009213693952 elements"), std::string::npos)
      << load_error(path);
  // A name length beyond any real name.
  bytes = header(1, 0);
  bytes.insert(bytes.end(), {0, 0, 0, 1});
  bytes.resize(bytes.size() + 64);
  write_bytes(path, bytes);
  EXPECT_NE(load_error(path).find("name length 16777216"), std::string::npos) << load_error(path);
}

TEST_F(checkpoint_test, restore_checks_name_and_size) {
  const checkpoint ck = sample();
  std::vector<float> into(27);
  train::restore(ck, "conv1.weight", into);
  EXPECT_EQ(into, ck.tensors.at("conv1.weight"));
  std::vector<float> wrong(26);
  try {
    train::restore(ck, "conv1.weight", wrong);
    ADD_FAILURE() << "restored into the wrong size";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'conv1.weight' has 27 elements, the destination 26"), std::string::npos)
        << e.what();
  }
  try {
    train::restore(ck, "fc.bias", into);
    ADD_FAILURE() << "restored a missing tensor";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'fc.bias'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(train::counter(ck, "step"), 1234);
  EXPECT_THROW((void)train::counter(ck, "lr_step"), std::runtime_error);
}

// A save that fails leaves the previous checkpoint as it was; a torn temporary left by a
// crash does not disturb loading, and the next save replaces it.
TEST_F(checkpoint_test, failed_save_keeps_the_old_file) {
  const fs::path path = dir / "run.ckpt", tmp = dir / "run.ckpt.tmp";
  const checkpoint old_ck = sample();
  train::save_checkpoint(path, old_ck);
  checkpoint new_ck = sample();
  new_ck.counters["epoch"] = 4;

  fs::create_directory(tmp);  // the temporary cannot be created
  try {
    train::save_checkpoint(path, new_ck);
    ADD_FAILURE() << "saved through a directory";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.string() + ": cannot create"), std::string::npos) << e.what();
  }
  expect_bit_exact(old_ck, train::load_checkpoint(path));
  fs::remove(tmp);

  write_bytes(tmp, {'M', 'I', 'M', 'X'});  // a crash mid-write
  expect_bit_exact(old_ck, train::load_checkpoint(path));
  train::save_checkpoint(path, new_ck);
  EXPECT_FALSE(fs::exists(tmp));
  expect_bit_exact(new_ck, train::load_checkpoint(path));

  EXPECT_THROW(train::save_checkpoint(dir / "no" / "such" / "dir.ckpt", new_ck), std::runtime_error);
}

// The trainer's use: parameters, momentum buffers and counters out, then into a fresh model
// and optimizer, which continue exactly as the original would have.
TEST_F(checkpoint_test, resumes_an_optimizer) {
  const optim::sgd_settings settings{0.9f, 0, 5e-4f, true};
  const auto make = [] { return std::vector<nn::parameter>{nn::parameter("w", {3, 4}), nn::parameter("b", {4})}; };
  const auto fill_grads = [](std::vector<nn::parameter>& ps, int k) {
    for (nn::parameter& p : ps)
      for (std::size_t i = 0; i < p.grad.size(); ++i) p.grad.data[i] = static_cast<float>((k + 1) * (i % 5)) * 0.1f - 0.2f;
  };
  std::vector<nn::parameter> model = make(), resumed_model = make();
  for (nn::parameter& p : model) p.value.data = random_floats(p.value.size());
  optim::sgd opt({&model[0], &model[1]}, settings);
  fill_grads(model, 0);
  opt.step(0.1f);

  checkpoint ck;
  const auto buffers = opt.momentum_buffers();
  for (std::size_t i = 0; i < model.size(); ++i) {
    ck.tensors[model[i].name] = model[i].value.data;
    ck.tensors["momentum." + model[i].name].assign(buffers[i].begin(), buffers[i].end());
  }
  ck.counters["optimizer_steps"] = opt.steps();
  train::save_checkpoint(dir / "run.ckpt", ck);

  const checkpoint loaded = train::load_checkpoint(dir / "run.ckpt");
  optim::sgd resumed({&resumed_model[0], &resumed_model[1]}, settings);
  const auto into = resumed.momentum_buffers();
  for (std::size_t i = 0; i < resumed_model.size(); ++i) {
    train::restore(loaded, resumed_model[i].name, resumed_model[i].value.data);
    train::restore(loaded, "momentum." + resumed_model[i].name, into[i]);
  }
  resumed.resume_at(train::counter(loaded, "optimizer_steps"));

  for (int k = 1; k < 3; ++k) {
    fill_grads(model, k);
    opt.step(0.1f);
    fill_grads(resumed_model, k);
    resumed.step(0.1f);
  }
  for (std::size_t i = 0; i < model.size(); ++i) EXPECT_EQ(model[i].value.data, resumed_model[i].value.data) << model[i].name;
}

}  // namespace
