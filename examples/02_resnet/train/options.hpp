// resnet_train's command line: the model, the recipe, the data, and how ranks meet.
#pragma once

#include "../../strict_number.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mimatrix::resnet::train {

using examples::parse_integer;
using examples::parse_number;

struct options {
  std::string model = "resnet20";
  std::string data_dir;       // Fashion-MNIST; empty: $MIMATRIX_FASHION_MNIST_DIR or Debian's
  bool synthetic = false;     // ImageNet-shaped random data (ResNet-50 throughput only)
  std::int64_t image_size = 224;  // synthetic images' side
  std::int64_t epochs = 30;
  std::int64_t steps = 0;     // cap on the steps of an epoch (0: the whole training set)
  std::int64_t batch = 128;   // global batch B, split among the ranks
  double lr = 0.1;            // peak learning rate at the reference batch
  std::int64_t lr_reference_batch = 128;  // linear scaling: peak = lr * B / reference
  float momentum = 0.9f;
  bool nesterov = true;
  float weight_decay = 5e-4f;
  std::string schedule = "onecycle";
  std::int64_t warmup_epochs = 0;
  std::uint64_t seed = 1;
  bool augment = true;
  std::size_t bucket_kib = 0;     // wait-free backpropagation's bucket size (0: a 16th of the gradients)
  bool overlap = true;            // wait-free backpropagation (false: allreduce after backward)
  bool progress_thread = true;    // drive the collectives while backward computes
  std::int64_t measure_every = 16;  // every n-th step runs without overlap, to measure what it hides
  bool sync_bn = false;
  std::string sfb = "auto";  // sufficient-factor broadcasting of the classifier: auto, on, off
  bool eval = true;
  std::int64_t test_samples = 0;  // 0: the whole test set
  std::string checkpoint;         // saved at every epoch's end by rank 0
  bool resume = false;            // start from the checkpoint when it exists
  std::int64_t stop_after = 0;    // end after this many epochs of this run (0: at the last)
  int threads = 0;                // oneDNN's threads a rank (0: cores / local ranks)
  std::string job_server;         // host:port: take ranks, batches and recovery from it
  std::int64_t reconnect_ms = 0;  // with job_server: how long to rejoin a restarted server (0: not)
  std::int64_t log_every = 0;     // a progress line every n steps (0: per epoch only)
  std::string device = "cpu";     // cpu (oneDNN) or cuda (cuDNN, cuBLAS; one GPU a rank)
  bool tf32 = false;              // GPU: TF32 tensor cores for convolutions and products
};

inline void print_usage() {
  std::printf(
      "resnet_train [--model resnet20|resnet32|resnet56|resnet50] [--data DIR | --synthetic [--image-size 224]]\n"
      "             [--epochs 30] [--steps N] [--batch 128] [--lr 0.1] [--lr-reference-batch 128]\n"
      "             [--momentum 0.9] [--nesterov|--no-nesterov] [--weight-decay 5e-4]\n"
      "             [--schedule onecycle|cosine|step|constant] [--warmup-epochs 0] [--seed 1] [--no-augment]\n"
      "             [--bucket-kib 0=auto] [--no-overlap] [--progress thread|caller] [--measure-every 16]\n"
      "             [--sync-bn] [--sfb auto|on|off] [--no-eval] [--test-samples N]\n"
      "             [--checkpoint FILE [--resume]] [--stop-after EPOCHS] [--threads N]\n"
      "             [--job-server HOST:PORT [--reconnect-ms MS]] [--log-every N] [--device cpu|cuda [--tf32]]\n"
      "Ranks: alone, under mimatrix-run/torchrun/srun (RANK, WORLD_SIZE, ...), or from the job server\n"
      "(--job-server; secret in MIMATRIX_JOB_SECRET).\n");
}

inline options parse_options(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") print_usage(), std::exit(0);
    else if (a == "--model") o.model = value();
    else if (a == "--data") o.data_dir = value();
    else if (a == "--synthetic") o.synthetic = true;
    else if (a == "--image-size") o.image_size = parse_integer(a, value(), 1, 1 << 14);
    else if (a == "--epochs") o.epochs = parse_integer(a, value(), 1);
    else if (a == "--steps") o.steps = parse_integer(a, value(), 0);
    else if (a == "--batch") o.batch = parse_integer(a, value(), 1);
    else if (a == "--lr") o.lr = parse_number(a, value(), 0, 1e6, true);
    else if (a == "--lr-reference-batch") o.lr_reference_batch = parse_integer(a, value(), 1);
    else if (a == "--momentum") o.momentum = float(parse_number(a, value(), 0, 1));
    else if (a == "--nesterov") o.nesterov = true;
    else if (a == "--no-nesterov") o.nesterov = false;
    else if (a == "--weight-decay") o.weight_decay = float(parse_number(a, value(), 0, 1));
    else if (a == "--schedule") o.schedule = value();
    else if (a == "--warmup-epochs") o.warmup_epochs = parse_integer(a, value(), 0);
    else if (a == "--seed") o.seed = std::uint64_t(parse_integer(a, value(), 0));
    else if (a == "--no-augment") o.augment = false;
    else if (a == "--bucket-kib") o.bucket_kib = std::size_t(parse_integer(a, value(), 0, std::int64_t{1} << 30));
    else if (a == "--no-overlap") o.overlap = false;
    else if (a == "--progress") {
      const std::string v = value();
      if (v != "thread" && v != "caller") throw std::invalid_argument("--progress takes thread or caller, not " + v);
      o.progress_thread = v == "thread";
    } else if (a == "--measure-every") o.measure_every = parse_integer(a, value(), 0);
    else if (a == "--sync-bn") o.sync_bn = true;
    else if (a == "--sfb") {
      o.sfb = value();
      if (o.sfb != "auto" && o.sfb != "on" && o.sfb != "off")
        throw std::invalid_argument("--sfb takes auto, on or off, not " + o.sfb);
    } else if (a == "--no-eval") o.eval = false;
    else if (a == "--test-samples") o.test_samples = parse_integer(a, value(), 0);
    else if (a == "--checkpoint") o.checkpoint = value();
    else if (a == "--resume") o.resume = true;
    else if (a == "--stop-after") o.stop_after = parse_integer(a, value(), 0);
    else if (a == "--threads") o.threads = int(parse_integer(a, value(), 0, 4096));
    else if (a == "--job-server") o.job_server = value();
    else if (a == "--reconnect-ms") o.reconnect_ms = parse_integer(a, value(), 0);
    else if (a == "--log-every") o.log_every = parse_integer(a, value(), 0);
    else if (a == "--device") {
      o.device = value();
      if (o.device != "cpu" && o.device != "cuda") throw std::invalid_argument("--device takes cpu or cuda, not " + o.device);
    } else if (a == "--tf32") o.tf32 = true;
    else throw std::invalid_argument("unknown option " + a + " (see --help)");
  }
  if (o.batch <= 0 || o.epochs <= 0 || o.steps < 0) throw std::invalid_argument("--batch and --epochs must be positive");
  if (o.resume && o.checkpoint.empty()) throw std::invalid_argument("--resume needs --checkpoint FILE");
  return o;
}

}  // namespace mimatrix::resnet::train
