// SGD against an independent double-precision reference of torch.optim.SGD's update, and
// the learning rate schedules against their closed forms.
#include "optim/sgd.hpp"
#include "optim/schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace MIMATRIX_UNIT_ID {

using namespace mimatrix::resnet;
using optim::sgd;
using optim::sgd_settings;

// Float updates against the double reference; values and gradients are O(1).
constexpr double tolerance = 1e-6;

// PyTorch 1.13's SGD step (torch/optim/sgd.py, _single_tensor_sgd) for one parameter,
// written out plainly in double, sharing no code with sgd.hpp.
struct reference_sgd {
  sgd_settings s;
  std::vector<double> buf;
  bool started = false;

  void step(std::vector<double>& value, const std::vector<double>& grad, double lr) {
    std::vector<double> d(grad);
    for (std::size_t i = 0; i < d.size(); ++i) d[i] += double{s.weight_decay} * value[i];
    if (s.momentum != 0) {
      if (!started) {
        buf = d;
        started = true;
      } else {
        for (std::size_t i = 0; i < d.size(); ++i) buf[i] = double{s.momentum} * buf[i] + (1 - double{s.dampening}) * d[i];
      }
      for (std::size_t i = 0; i < d.size(); ++i) d[i] = s.nesterov ? d[i] + double{s.momentum} * buf[i] : buf[i];
    }
    for (std::size_t i = 0; i < d.size(); ++i) value[i] -= lr * d[i];
  }
};

class sgd_test : public testing::TestWithParam<sgd_settings> {
 protected:
  void SetUp() override {
    const auto seed = std::random_device{}();
    rng.seed(seed);
    RecordProperty("seed", std::to_string(seed));  // fresh data each run; the seed reproduces it
  }
  float uniform() { return std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng); }
  std::mt19937 rng;
};

// Three steps, fresh gradients and a different rate each, on parameters of 1, 7 and 37
// elements (a vector loop's remainder, a whole vector and more).
TEST_P(sgd_test, three_steps_match_the_reference) {
  const sgd_settings settings = GetParam();
  std::vector<nn::parameter> params{nn::parameter("a", {1}), nn::parameter("b", {7}), nn::parameter("c", {37})};
  std::vector<std::vector<double>> expected;
  std::vector<reference_sgd> reference(params.size(), reference_sgd{settings, {}, false});
  for (nn::parameter& p : params) {
    for (float& v : p.value.data) v = uniform();
    expected.emplace_back(p.value.data.begin(), p.value.data.end());
  }
  sgd opt({&params[0], &params[1], &params[2]}, settings);
  const float rates[] = {0.1f, 0.05f, 0.2f};
  for (int k = 0; k < 3; ++k) {
    for (std::size_t j = 0; j < params.size(); ++j) {
      for (float& g : params[j].grad.data) g = uniform();
      reference[j].step(expected[j], {params[j].grad.data.begin(), params[j].grad.data.end()}, double{rates[k]});
    }
    opt.step(rates[k]);
    for (std::size_t j = 0; j < params.size(); ++j)
      for (std::size_t i = 0; i < expected[j].size(); ++i)
        ASSERT_NEAR(params[j].value.data[i], expected[j][i], tolerance) << "step " << k << " parameter " << j << " element " << i;
  }
  EXPECT_EQ(opt.steps(), 3);
  EXPECT_EQ(opt.momentum_buffers().size(), settings.momentum != 0 ? params.size() : 0U);
}

INSTANTIATE_TEST_SUITE_P(
    settings, sgd_test,
    testing::Values(sgd_settings{0, 0, 0, false},         // plain
                    sgd_settings{0.9f, 0, 0, false},      // momentum
                    sgd_settings{0.9f, 0, 0, true},       // Nesterov
                    sgd_settings{0, 0, 0.01f, false},     // weight decay alone
                    sgd_settings{0.9f, 0, 5e-4f, true},   // the trainer's default
                    sgd_settings{0.9f, 0.3f, 0, false},   // dampening
                    sgd_settings{0.8f, 0.5f, 0.05f, false}),
    [](const testing::TestParamInfo<sgd_settings>& info) {
      const sgd_settings& s = info.param;
      return std::string(s.momentum != 0 ? (s.nesterov ? "nesterov" : "momentum") : "plain") +
             (s.dampening != 0 ? "_dampening" : "") + (s.weight_decay != 0 ? "_decay" : "");
    });

// By hand, value 1, grad 0.5 each step, momentum 0.9, Nesterov, lr 0.1:
//   step 1: buf = 0.5,                 d = 0.5 + 0.9*0.5   = 0.95,   value = 0.905
//   step 2: buf = 0.9*0.5 + 0.5 = 0.95, d = 0.5 + 0.9*0.95 = 1.355,  value = 0.7695
//   step 3: buf = 0.9*0.95 + 0.5 = 1.355, d = 0.5 + 0.9*1.355 = 1.7195, value = 0.59755
TEST(sgd, nesterov_by_hand) {
  nn::parameter p("w", {1});
  p.value.data[0] = 1;
  sgd opt({&p}, {0.9f, 0, 0, true});
  const double expected[] = {0.905, 0.7695, 0.59755};
  const double buffers[] = {0.5, 0.95, 1.355};
  for (int k = 0; k < 3; ++k) {
    p.grad.data[0] = 0.5f;
    opt.step(0.1f);
    EXPECT_NEAR(p.value.data[0], expected[k], tolerance) << "step " << k;
    EXPECT_NEAR(opt.momentum_buffers()[0][0], buffers[k], tolerance) << "step " << k;
  }
}

// A run resumed from saved buffers and step count takes exactly the steps it would have.
TEST(sgd, resumed_buffers_continue_the_run) {
  const sgd_settings settings{0.9f, 0, 5e-4f, true};
  nn::parameter a("a", {5}), b("a", {5});
  for (std::size_t i = 0; i < 5; ++i) a.value.data[i] = b.value.data[i] = 0.1f * static_cast<float>(i);
  const auto grads = [](nn::parameter& p, int k) {
    for (std::size_t i = 0; i < p.grad.size(); ++i) p.grad.data[i] = std::sin(static_cast<float>(5 * k) + static_cast<float>(i));
  };
  sgd through({&a}, settings);
  for (int k = 0; k < 3; ++k) {
    grads(a, k);
    through.step(0.1f);
  }
  sgd first({&b}, settings);
  grads(b, 0);
  first.step(0.1f);
  const std::vector<float> saved(first.momentum_buffers()[0].begin(), first.momentum_buffers()[0].end());
  sgd resumed({&b}, settings);
  std::copy(saved.begin(), saved.end(), resumed.momentum_buffers()[0].begin());
  resumed.resume_at(first.steps());
  for (int k = 1; k < 3; ++k) {
    grads(b, k);
    resumed.step(0.1f);
  }
  EXPECT_EQ(a.value.data, b.value.data);  // bit for bit
  EXPECT_EQ(resumed.steps(), 3);
}

template <class F>
std::string invalid_argument_text(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no std::invalid_argument";
  return {};
}

TEST(sgd, refuses_what_pytorch_refuses) {
  nn::parameter p("w", {3});
  EXPECT_NE(invalid_argument_text([&] { sgd({&p}, {0, 0, 0, true}); }).find("Nesterov momentum requires"), std::string::npos);
  EXPECT_NE(invalid_argument_text([&] { sgd({&p}, {0.9f, 0.1f, 0, true}); }).find("zero dampening"), std::string::npos);
  EXPECT_NE(invalid_argument_text([&] { sgd({&p}, {-0.1f, 0, 0, false}); }).find("momentum"), std::string::npos);
  EXPECT_NE(invalid_argument_text([&] { sgd({&p}, {0.9f, 0, -1e-4f, false}); }).find("weight decay"), std::string::npos);
  EXPECT_NE(invalid_argument_text([&] { sgd({nullptr}, {}); }).find("null"), std::string::npos);
  EXPECT_NE(invalid_argument_text([&] { sgd({&p, &p}, {}); }).find("'w' is listed twice"), std::string::npos);
  p.grad.data.resize(2);
  EXPECT_NE(invalid_argument_text([&] { sgd({&p}, {}); }).find("'w' has 3 values but 2 gradients"), std::string::npos);
  p.grad.data.resize(3);
  sgd opt({&p}, {});
  EXPECT_NE(invalid_argument_text([&] { opt.step(-0.1f); }).find("learning rate"), std::string::npos);
  EXPECT_NE(invalid_argument_text([&] { opt.step(std::numeric_limits<float>::quiet_NaN()); }).find("learning rate"), std::string::npos);
  EXPECT_EQ(opt.steps(), 0);
  EXPECT_THROW(opt.resume_at(-1), std::invalid_argument);
}

TEST(schedule, linear_scaling) {
  EXPECT_DOUBLE_EQ(optim::linear_scaled_lr(0.1, 8192, 256), 3.2);
  EXPECT_DOUBLE_EQ(optim::linear_scaled_lr(0.1, 128, 256), 0.05);
  EXPECT_THROW((void)optim::linear_scaled_lr(0.1, 0, 256), std::invalid_argument);
  EXPECT_THROW((void)optim::linear_scaled_lr(0.1, 256, -1), std::invalid_argument);
}

// OneCycleLR's closed form, for a step in phase 1 ([0, e1]) or phase 2 ((e1, T-1]).
double one_cycle_formula(double max_lr, double total, double step) {
  const double initial = max_lr / 25, min = initial / 1e4, e1 = 0.3 * total - 1, e2 = total - 1;
  const auto anneal = [](double start, double end, double pct) {
    return end + (start - end) / 2 * (1 + std::cos(std::numbers::pi * pct));
  };
  return step <= e1 ? anneal(initial, max_lr, step / e1) : anneal(max_lr, min, (step - e1) / (e2 - e1));
}

TEST(schedule, one_cycle_matches_pytorch) {
  const double max_lr = 0.4;
  for (const std::int64_t total : {1000, 97, 10}) {
    const optim::one_cycle s(max_lr, total);
    SCOPED_TRACE("total_steps " + std::to_string(total));
    EXPECT_NEAR(s.lr(0), max_lr / 25, 1e-15);
    EXPECT_NEAR(s.lr(total - 1), max_lr / 25 / 1e4, 1e-15);
    // For these totals the peak is the last whole step in phase 1: 299, 28 (e1 = 28.1), 2.
    const auto peak = static_cast<std::int64_t>(std::floor(0.3 * static_cast<double>(total) - 1));
    EXPECT_DOUBLE_EQ(s.phase1_end(), 0.3 * static_cast<double>(total) - 1);
    for (std::int64_t i = 1; i <= peak; ++i) EXPECT_GT(s.lr(i), s.lr(i - 1)) << "step " << i;
    for (std::int64_t i = peak + 1; i < total; ++i) EXPECT_LT(s.lr(i), s.lr(i - 1)) << "step " << i;
    for (std::int64_t i = 0; i <= total; ++i) {
      EXPECT_NEAR(s.lr(i), one_cycle_formula(max_lr, static_cast<double>(total), static_cast<double>(i)), 1e-15) << "step " << i;
      EXPECT_LE(s.lr(i), max_lr);
    }
    EXPECT_NO_THROW((void)s.lr(total));  // PyTorch's last scheduler step
    EXPECT_THROW((void)s.lr(total + 1), std::out_of_range);
    EXPECT_THROW((void)s.lr(-1), std::out_of_range);
  }
  const optim::one_cycle s(max_lr, 1000);
  EXPECT_DOUBLE_EQ(s.lr(299), max_lr);  // e1 = 299 exactly
  EXPECT_NEAR(optim::one_cycle(max_lr, 1000).lr(0), 0.016, 1e-15);
  EXPECT_NEAR(optim::one_cycle(1.0, 201).lr(200), 4e-6, 1e-18);
  // Halfway through phase 2, (649 - 299) / (999 - 299) = 0.5, the cosine is at its middle.
  EXPECT_NEAR(s.lr(649), (max_lr + max_lr / 25 / 1e4) / 2, 1e-12);
}

TEST(schedule, one_cycle_refuses_bad_settings) {
  EXPECT_THROW(optim::one_cycle(0.1, 0), std::invalid_argument);
  EXPECT_THROW(optim::one_cycle(0.1, 100, {1.5, 25, 1e4}), std::invalid_argument);
  EXPECT_THROW(optim::one_cycle(0.1, 100, {1.0, 25, 1e4}), std::invalid_argument);  // no annealing phase
  EXPECT_THROW(optim::one_cycle(0.1, 4, {0.25, 25, 1e4}), std::invalid_argument);   // e1 = 0: PyTorch divides by 0
  EXPECT_THROW(optim::one_cycle(0.0, 100), std::invalid_argument);
}

TEST(schedule, warmup_cosine) {
  // 10 warm-up steps from 0.1 * peak, then cosine to 0 at step 110.
  const optim::warmup_cosine s(0.4, {10, 0.1}, 110);
  EXPECT_NEAR(s.lr(0), 0.04, 1e-15);
  EXPECT_NEAR(s.lr(5), 0.04 + 0.36 * 0.5, 1e-15);
  EXPECT_NEAR(s.lr(9), 0.4 * (0.1 + 0.9 * 0.9), 1e-15);
  EXPECT_DOUBLE_EQ(s.lr(10), 0.4);
  EXPECT_NEAR(s.lr(60), 0.2, 1e-15);                                             // halfway: cos(pi/2)
  EXPECT_NEAR(s.lr(35), 0.4 * (1 + std::cos(std::numbers::pi / 4)) / 2, 1e-15);  // a quarter
  EXPECT_GT(s.lr(109), 0);
  EXPECT_EQ(s.lr(110), 0);
  EXPECT_EQ(s.lr(500), 0);
  for (std::int64_t i = 1; i <= 10; ++i) EXPECT_GT(s.lr(i), s.lr(i - 1)) << "step " << i;
  for (std::int64_t i = 11; i <= 110; ++i) EXPECT_LT(s.lr(i), s.lr(i - 1)) << "step " << i;
  // From 0, as HF's and timm's linear warm-ups start.
  EXPECT_EQ(optim::warmup_cosine(0.4, {4, 0}, 8).lr(0), 0);
  EXPECT_NEAR(optim::warmup_cosine(0.4, {4, 0}, 8).lr(1), 0.1, 1e-15);
  EXPECT_THROW(optim::warmup_cosine(0.4, {10, 0}, 10), std::invalid_argument);
  EXPECT_THROW(optim::warmup_cosine(0.4, {-1, 0}, 10), std::invalid_argument);
  EXPECT_THROW(optim::warmup_cosine(0.4, {1, 2.0}, 10), std::invalid_argument);
}

TEST(schedule, warmup_multistep) {
  const optim::warmup_multistep s(0.4, {5, 0}, {20, 30}, 0.1);
  EXPECT_EQ(s.lr(0), 0);
  EXPECT_NEAR(s.lr(4), 0.32, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr(5), 0.4);
  EXPECT_DOUBLE_EQ(s.lr(19), 0.4);
  EXPECT_NEAR(s.lr(20), 0.04, 1e-15);
  EXPECT_NEAR(s.lr(29), 0.04, 1e-15);
  EXPECT_NEAR(s.lr(30), 0.004, 1e-15);
  EXPECT_NEAR(s.lr(10000), 0.004, 1e-15);
  // A repeated milestone decays twice, as MultiStepLR's Counter does.
  EXPECT_NEAR(optim::warmup_multistep(1.0, {}, {3, 3}, 0.5).lr(3), 0.25, 1e-15);
  const optim::warmup_multistep constant(0.4, {});
  EXPECT_DOUBLE_EQ(constant.lr(0), 0.4);
  EXPECT_DOUBLE_EQ(constant.lr(123456), 0.4);
  EXPECT_THROW(optim::warmup_multistep(0.4, {}, {30, 20}), std::invalid_argument);
  EXPECT_THROW(optim::warmup_multistep(0.4, {}, {}, 0), std::invalid_argument);
}

TEST(schedule, make_schedule_by_name) {
  // 8 epochs of 10 steps, 2 warm-up epochs.
  const auto cosine = optim::make_schedule("cosine", 0.4, 10, 8, 2);
  EXPECT_EQ(cosine.name(), "cosine");
  EXPECT_EQ(cosine(0), 0);
  EXPECT_NEAR(cosine(10), 0.2, 1e-15);
  EXPECT_DOUBLE_EQ(cosine(20), 0.4);
  EXPECT_NEAR(cosine(50), 0.2, 1e-15);

  const auto step = optim::make_schedule("step", 0.4, 10, 8, 1, 0.25);
  EXPECT_NEAR(step(0), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(step(39), 0.4);
  EXPECT_NEAR(step(40), 0.04, 1e-15);  // epoch 4 = 50%
  EXPECT_NEAR(step(59), 0.04, 1e-15);
  EXPECT_NEAR(step(60), 0.004, 1e-15);  // epoch 6 = 75%

  const auto constant = optim::make_schedule("constant", 0.4, 10, 8);
  EXPECT_DOUBLE_EQ(constant(0), 0.4);
  EXPECT_DOUBLE_EQ(constant(79), 0.4);

  const auto onecycle = optim::make_schedule("onecycle", 0.4, 10, 8);
  const optim::one_cycle direct(0.4, 80);
  for (std::int64_t i = 0; i <= 80; ++i) EXPECT_EQ(onecycle(i), direct.lr(i)) << "step " << i;

  const std::string unknown = invalid_argument_text([] { (void)optim::make_schedule("linear", 0.4, 10, 8); });
  EXPECT_NE(unknown.find("\"linear\""), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("valid: onecycle, cosine, step, constant"), std::string::npos) << unknown;
  EXPECT_NE(invalid_argument_text([] { (void)optim::make_schedule("onecycle", 0.4, 10, 8, 2); }).find("own warm-up"),
            std::string::npos);
  EXPECT_THROW((void)optim::make_schedule("cosine", 0.4, 10, 8, 9), std::invalid_argument);
  EXPECT_THROW((void)optim::make_schedule("cosine", 0.4, 0, 8), std::invalid_argument);
}

}  // namespace
