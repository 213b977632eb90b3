// resnet_train's refusals: every numeric flag parsed whole and range-checked, naming the
// flag; --resume of a missing checkpoint or of another seed or batch; a checkpoint path
// rank 0 cannot write; a rank given no samples (which divided by zero); the progress line's
// loss is the group's mean, not rank 0's.
#include "train/options.hpp"
#include "train/run.hpp"

#include <mimatrix/collectives.hpp>
#include <mimatrix/communicator.hpp>
#include <mimatrix/transport/inproc.hpp>

#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

namespace MIMATRIX_UNIT_ID {

namespace mx = mimatrix;
namespace rt = mimatrix::resnet::train;
using mx::transport::inproc;

rt::options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "resnet_train");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return rt::parse_options(int(argv.size()), argv.data());
}

// The message of parse's refusal ("" if it took the arguments).
std::string refusal(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(options, numbers_are_parsed_whole_and_the_error_names_the_flag_and_value) {
  EXPECT_EQ(parse({"--batch", "12"}).batch, 12);
  EXPECT_EQ(parse({"--lr", "0.05"}).lr, 0.05);
  EXPECT_EQ(parse({"--threads", "0"}).threads, 0);  // documented: cores / local ranks
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--batch", "abc"}, {"--batch", "12x"}, {"--batch", ""}, {"--batch", "0"}, {"--batch", "-3"},
           {"--batch", "99999999999999999999"}, {"--bucket-kib", "-1"}, {"--image-size", "0"}, {"--image-size", "-5"},
           {"--test-samples", "-1"}, {"--threads", "-1"}, {"--lr", "-1"}, {"--lr", "0"}, {"--lr", "nan"},
           {"--lr", "0.1x"}, {"--momentum", "2"}, {"--seed", "-1"}, {"--epochs", "0"}, {"--steps", "-1"},
           {"--log-every", "1.5"}}) {
    const std::string why = refusal({flag, value});
    EXPECT_NE(why.find(flag), std::string::npos) << flag << " " << value << ": " << why;
    EXPECT_NE(why.find(value), std::string::npos) << flag << " " << value << ": " << why;
  }
}

struct temporary_dir {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("run_test." + std::to_string(::getpid()));
  temporary_dir() { std::filesystem::create_directories(path); }
  ~temporary_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

rt::options small_run(std::int64_t batch) {
  rt::options o;
  o.batch = batch;
  o.epochs = 1;
  o.steps = 1;
  o.eval = false;
  return o;
}

rt::session small_session(const rt::options& o) {
  return rt::session(o, rt::synthetic_set(16, 8, o.seed), rt::synthetic_set(16, 8, o.seed + 1), 10);
}

TEST(resume, a_missing_checkpoint_is_an_error_not_a_fresh_start) {
  temporary_dir dir;
  rt::options o = small_run(4);
  o.checkpoint = (dir.path / "absent.ckpt").string();
  o.resume = true;
  auto s = small_session(o);
  try {
    s.resume_from_checkpoint();
    FAIL() << "resumed from nothing";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.ckpt"), std::string::npos) << e.what();
  }
}

TEST(resume, another_seed_or_batch_than_the_checkpoints_is_refused_naming_both) {
  temporary_dir dir;
  rt::options o = small_run(4);
  o.seed = 7;
  o.checkpoint = (dir.path / "run.ckpt").string();
  small_session(o).save_checkpoint_now();
  o.resume = true;
  EXPECT_TRUE(small_session(o).resume_from_checkpoint());
  for (const auto& [seed, batch, flag, saved, given] :
       std::vector<std::tuple<std::uint64_t, std::int64_t, std::string, std::string, std::string>>{
           {8, 4, "--seed", "7", "8"}, {7, 8, "--batch", "4", "8"}}) {
    rt::options other = o;
    other.seed = seed;
    other.batch = batch;
    auto s = small_session(other);
    try {
      s.resume_from_checkpoint();
      FAIL() << flag << " changed silently";
    } catch (const std::invalid_argument& e) {
      const std::string why = e.what();
      EXPECT_NE(why.find(flag + " " + saved), std::string::npos) << why;
      EXPECT_NE(why.find(flag + " " + given), std::string::npos) << why;
    }
  }
}

// Regression (a black-box test): a checkpoint past the run's last step was taken; the run
// trained nothing and said "step 15 of 9".
TEST(resume, a_checkpoint_past_the_runs_last_step_is_refused) {
  temporary_dir dir;
  rt::options o = small_run(4);
  o.steps = 0;  // 4 steps an epoch (16 samples by 4)
  o.epochs = 2;
  o.checkpoint = (dir.path / "run.ckpt").string();
  auto saved = small_session(o);
  saved.step = 8;  // the end of epoch 2
  saved.save_checkpoint_now();
  o.resume = true;
  EXPECT_TRUE(small_session(o).resume_from_checkpoint());  // at the end: nothing left, taken
  o.epochs = 1;
  try {
    small_session(o).resume_from_checkpoint();
    ADD_FAILURE() << "a checkpoint at step 8 was taken by a run of 4 steps";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is at step 8, past this run's 4 steps"), std::string::npos) << e.what();
  }
}

TEST(checkpoint_path, one_rank_0_cannot_write_fails_before_training) {
  temporary_dir dir;
  rt::options o = small_run(4);
  EXPECT_NO_THROW(rt::check_checkpoint_writable(o));  // none asked
  o.checkpoint = (dir.path / "x.ckpt").string();
  EXPECT_NO_THROW(rt::check_checkpoint_writable(o));
  EXPECT_FALSE(std::filesystem::exists(o.checkpoint + ".tmp"));  // the probe leaves nothing
  o.checkpoint = (dir.path / "missing" / "x.ckpt").string();
  EXPECT_THROW(rt::check_checkpoint_writable(o), std::runtime_error);
  // Regression (a black-box test): a directory was taken, and the first epoch's save failed.
  o.checkpoint = dir.path.string();
  try {
    rt::check_checkpoint_writable(o);
    ADD_FAILURE() << "a directory was taken as --checkpoint";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("Is a directory"), std::string::npos) << e.what();
  }
}

TEST(train_group, a_rank_with_no_samples_is_refused_by_every_rank) {
  // As from a job server's assignment: local batches 0 and 4 of a global 4.
  const rt::options o = small_run(4);
  std::vector<std::string> errors(2);
  mx::transport::run_inproc(2, [&](int rank, inproc::world& world) {
    omp_set_num_threads(1);
    mx::communicator<inproc> comm(world, rank);
    auto s = small_session(o);
    try {
      rt::train_group(s, comm, rank == 0 ? 0 : 4);
    } catch (const std::invalid_argument& e) {
      errors[std::size_t(rank)] = e.what();
    }
  });
  for (const auto& why : errors) EXPECT_NE(why.find("rank 0 of 2 has local batch 0"), std::string::npos) << why;
}

TEST(train_group, the_mean_loss_weighs_each_rank_by_its_samples) {
  // Three ranks: 1.0 over 1 sample, 6.0 over 2, 2.0 over 1: (1 + 6 + 2) / 4, not rank 0's 1.
  const double sums[3][2] = {{1.0, 1}, {6.0, 2}, {2.0, 1}};
  std::vector<double> means(3);
  mx::transport::run_inproc(3, [&](int rank, inproc::world& world) {
    mx::communicator<inproc> comm(world, rank);
    mx::collectives<inproc> coll(comm);
    rt::step_statistics st;
    st.loss_sum = sums[rank][0];
    st.samples = std::int64_t(sums[rank][1]);
    means[std::size_t(rank)] = rt::group_mean_loss(coll, st);
  });
  for (double m : means) EXPECT_EQ(m, 9.0 / 4.0);
}

TEST(train_group, the_step_line_prints_the_groups_mean_loss_not_rank_0s) {
  // Local batches 1 and 3 of 4: the ranks' slices differ, and so do their losses.
  rt::options o = small_run(4);
  o.steps = 2;
  o.log_every = 1;
  std::vector<std::vector<rt::step_statistics>> seen(2);
  std::string failure;  // the capture ends before any check: a failure's report is stdout too
  testing::internal::CaptureStdout();
  try {
    mx::transport::run_inproc(2, [&](int rank, inproc::world& world) {
      omp_set_num_threads(1);
      mx::communicator<inproc> comm(world, rank);
      auto s = small_session(o);
      for (auto& label : s.train_set.labels) label %= 10;  // synthetic labels are ImageNet's
      rt::train_group(s, comm, rank == 0 ? 1 : 3,
                      [&](const rt::step_report& r) { seen[std::size_t(rank)].push_back(r.stats); });
    });
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const std::string out = testing::internal::GetCapturedStdout();
  ASSERT_EQ(failure, "") << out;
  std::istringstream lines(out);
  std::size_t checked = 0;
  for (std::string line; std::getline(lines, line);) {
    long long step = 0, steps = 0;
    double printed = 0;
    if (std::sscanf(line.c_str(), "  step %lld/%lld: loss %lf (group mean)", &step, &steps, &printed) != 3) continue;
    ASSERT_GE(step, 1);
    ASSERT_LE(std::size_t(step), seen[0].size());
    const auto& mine = seen[0][std::size_t(step - 1)];
    const auto& other = seen[1][std::size_t(step - 1)];
    const double mean = (mine.loss_sum + other.loss_sum) / double(mine.samples + other.samples);
    const double own = mine.loss_sum / double(mine.samples);
    EXPECT_NEAR(printed, mean, 1e-4) << line;
    ASSERT_GT(std::abs(own - mean), 1e-3) << "rank 0's loss is the mean: the check tells nothing";
    ++checked;
  }
  EXPECT_EQ(checked, 2u) << out;
}

/// Runs train_group on 2 inproc ranks (local batch 2 each) after `setup(rank, session)`;
/// returns stdout, and each rank's error ("" when it ended well).
std::string train_two(const rt::options& o, const std::function<void(int, rt::session&)>& setup,
                      std::vector<std::string>& errors, std::vector<std::int64_t>* steps = nullptr) {
  errors.assign(2, "");
  if (steps) steps->assign(2, 0);
  testing::internal::CaptureStdout();
  mx::transport::run_inproc(2, [&](int rank, inproc::world& world) {
    omp_set_num_threads(1);
    mx::communicator<inproc> comm(world, rank);
    auto s = small_session(o);
    for (auto& label : s.train_set.labels) label %= 10;
    setup(rank, s);
    try {
      rt::train_group(s, comm, 2);
    } catch (const std::exception& e) {
      errors[std::size_t(rank)] = e.what();
    }
    if (steps) (*steps)[std::size_t(rank)] = s.step;
  });
  return testing::internal::GetCapturedStdout();
}

// Regression (a black-box test): ranks given different --log-every made different
// collectives; one failed at step 5 with a mismatch naming calls, the other waited.
TEST(train_group, ranks_given_different_flags_both_fail_naming_the_flag) {
  rt::options o = small_run(4);
  std::vector<std::string> errors;
  train_two(o, [](int rank, rt::session& s) { s.opt.log_every = rank + 1; }, errors);
  for (const auto& why : errors)
    EXPECT_NE(why.find("was given another --log-every than rank 0; every rank must be given the same training flags"),
              std::string::npos)
        << why;
  // --batch too, before the shares are summed against it (which said only "sum to 4, not --batch 8").
  train_two(o, [](int rank, rt::session& s) { s.opt.batch = rank == 0 ? 4 : 8; }, errors);
  for (const auto& why : errors) EXPECT_NE(why.find("was given another --batch than rank 0"), std::string::npos) << why;
  // A checkpoint given to rank 1 alone: rank 0, which saves, has none (nothing was saved).
  train_two(o, [](int rank, rt::session& s) { s.opt.checkpoint = rank == 1 ? "/tmp/unused.ckpt" : ""; }, errors);
  for (const auto& why : errors)
    EXPECT_NE(why.find("was given another --checkpoint than rank 0"), std::string::npos) << why;
}

// Regression (a black-box test): a revoke during an epoch's end (its last step counted)
// lost that epoch's test, line and checkpoint: the next group went on from the next epoch.
TEST(train_group, an_epoch_end_a_revoke_cut_short_comes_first_in_the_next_group) {
  rt::options o = small_run(4);
  o.epochs = 2;
  std::vector<std::string> errors;
  std::vector<std::int64_t> steps;
  // Both at step 1, the end of epoch 1, which neither finished.
  std::string out = train_two(o, [](int, rt::session& s) { s.step = 1; }, errors, &steps);
  EXPECT_EQ(errors, std::vector<std::string>(2, "")) << out;
  EXPECT_NE(out.find("epoch 1/2: loss n/a train-acc n/a test-acc n/a images/s n/a"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 2/2: loss "), std::string::npos) << out;
  EXPECT_EQ(steps, std::vector<std::int64_t>(2, 2));
  // Where one rank finished it, it is not done again.
  out = train_two(o, [](int rank, rt::session& s) { s.step = 1, s.epoch_ended_at = rank == 1 ? 1 : 0; }, errors);
  EXPECT_EQ(out.find("epoch 1/2"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 2/2: loss "), std::string::npos) << out;
}

// Regression (a black-box test): --stop-after counted a group's epochs, so a generation
// re-formed mid-run ran one epoch more than asked.
TEST(train_group, stop_after_counts_the_epochs_of_the_run_not_of_the_group) {
  rt::options o = small_run(4);
  o.epochs = 4;
  o.stop_after = 2;
  std::vector<std::string> errors;
  std::vector<std::int64_t> steps;
  // One epoch ended in an earlier group: this one runs one more, and stops.
  const std::string out = train_two(
      o, [](int, rt::session& s) { s.step = s.epoch_ended_at = 1, s.epochs_ended = 1; }, errors, &steps);
  EXPECT_EQ(errors, std::vector<std::string>(2, "")) << out;
  EXPECT_EQ(steps, std::vector<std::int64_t>(2, 2)) << out;
}

// Regression (a black-box test): after a re-formation the epoch line's loss, accuracy and
// images/s were of the new group's steps only, with nothing to say so.
TEST(train_group, an_epoch_line_of_a_group_formed_mid_epoch_says_which_steps_it_covers) {
  rt::options o = small_run(4);
  o.steps = 0;  // all: 16 samples by 4, 4 steps an epoch
  std::vector<std::string> errors;
  std::string out = train_two(o, [](int, rt::session& s) { s.step = 2; }, errors);
  EXPECT_EQ(errors, std::vector<std::string>(2, "")) << out;
  EXPECT_NE(out.find("epoch 1/1: loss "), std::string::npos) << out;
  EXPECT_NE(out.find("(figures of the epoch's last 2 of 4 steps)"), std::string::npos) << out;
  out = train_two(o, [](int, rt::session&) {}, errors);
  EXPECT_NE(out.find("epoch 1/1: loss "), std::string::npos) << out;
  EXPECT_EQ(out.find("figures of"), std::string::npos) << out;
}

// Regression (a black-box test): the trainer reported no allreduce bandwidth to the job
// server (busbw 0 in status and metrics). A step that waited for the whole allreduce after
// backward (every step without overlap; every --measure-every-th with it) times it.
TEST(train_group, steps_that_wait_for_the_whole_allreduce_report_its_bus_bandwidth) {
  for (const bool overlap : {false, true}) {
    rt::options o = small_run(4);
    o.steps = 4;
    o.overlap = overlap;
    o.measure_every = 2;
    std::vector<std::vector<rt::step_report>> seen(2);
    std::vector<std::size_t> parameters(2);
    mx::transport::run_inproc(2, [&](int rank, inproc::world& world) {
      omp_set_num_threads(1);
      mx::communicator<inproc> comm(world, rank);
      auto s = small_session(o);
      for (auto& label : s.train_set.labels) label %= 10;
      parameters[std::size_t(rank)] = s.net.parameter_count();
      rt::train_group(s, comm, 2, [&](const rt::step_report& r) { seen[std::size_t(rank)].push_back(r); });
    });
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_EQ(seen[std::size_t(rank)].size(), 4u);
      for (const auto& r : seen[std::size_t(rank)]) {
        const bool whole = !overlap || r.step % 2 == 0;  // steps 2 and 4 are the measured ones
        const double expected =
            whole ? rt::allreduce_busbw_gbps(double(parameters[std::size_t(rank)]) * sizeof(float), 2, r.stats.wait_ms)
                  : 0.0;
        EXPECT_EQ(r.busbw_gbps, expected) << "overlap " << overlap << ", rank " << rank << ", step " << r.step;
        if (whole && r.stats.wait_ms > 0) {
          EXPECT_GT(r.busbw_gbps, 0.0);
        }
      }
    }
  }
  // nccl-tests' factor 2(p-1)/p: 1 GB over 4 ranks in 1 s is 1.5 GB/s of bus bandwidth.
  EXPECT_DOUBLE_EQ(rt::allreduce_busbw_gbps(1e9, 4, 1000.0), 1.5);
  EXPECT_EQ(rt::allreduce_busbw_gbps(1e9, 1, 1000.0), 0.0);
}

}  // namespace
