// Every rank of a group must train with the same recipe: ranks given different --epochs or
// --log-every make different collectives, and the group fails with a mismatch that names
// calls, not flags (a black-box test: under the job server it then waited out the timeout).
#pragma once

#include "train/options.hpp"

#include <mimatrix/collectives.hpp>
#include <mimatrix/core/error.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace mimatrix::resnet::train {

/// The flags that change what a step computes or which collectives a run makes, as text.
/// Not those of one process (--data, --threads, --progress, --job-server), nor --checkpoint's
/// path (a disk of each host's own), only whether it is given: rank 0 saves, so a path given
/// to another rank alone saved nothing, without a word (a black-box test).
inline std::vector<std::pair<const char*, std::string>> recipe_flags(const options& o) {
  const auto n = [](auto v) { return std::to_string(v); };
  return {{"--model", o.model},
          {"--synthetic", n(o.synthetic)},
          {"--image-size", n(o.image_size)},
          {"--epochs", n(o.epochs)},
          {"--steps", n(o.steps)},
          {"--batch", n(o.batch)},
          {"--lr", n(o.lr)},
          {"--lr-reference-batch", n(o.lr_reference_batch)},
          {"--momentum", n(o.momentum)},
          {"--nesterov", n(o.nesterov)},
          {"--weight-decay", n(o.weight_decay)},
          {"--schedule", o.schedule},
          {"--warmup-epochs", n(o.warmup_epochs)},
          {"--seed", n(o.seed)},
          {"--no-augment", n(!o.augment)},
          {"--bucket-kib", n(o.bucket_kib)},
          {"--no-overlap", n(!o.overlap)},
          {"--measure-every", n(o.measure_every)},
          {"--sync-bn", n(o.sync_bn)},
          {"--sfb", o.sfb},
          {"--no-eval", n(!o.eval)},
          {"--test-samples", n(o.test_samples)},
          {"--stop-after", n(o.stop_after)},
          {"--log-every", n(o.log_every)},
          {"--device", o.device},
          {"--tf32", n(o.tf32)},
          {"--checkpoint", o.checkpoint.empty() ? "(none)" : "(given)"}};
}

inline std::int64_t flag_digest(const std::string& text) {  // FNV-1a
  std::uint64_t h = 14695981039346656037ull;
  for (char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return static_cast<std::int64_t>(h >> 1);  // non-negative: a sum of one rank's and zeros stays exact
}

/// Throws invalid_argument on every rank alike, naming the first flag that differs, this
/// rank's value and a rank whose value differs from rank 0's. Two collectives when all agree.
template <class Transport>
void check_flags_agree(collectives<Transport>& coll, const options& opt, int rank, int ranks) {
  const auto flags = recipe_flags(opt);
  std::vector<std::int64_t> mine, low, high;
  for (const auto& f : flags) mine.push_back(flag_digest(f.second));
  low = high = mine;
  coll.allreduce(mine.data(), low.data(), mine.size(), dtype::int64, reduce::op_kind::min).wait();
  coll.allreduce(mine.data(), high.data(), mine.size(), dtype::int64, reduce::op_kind::max).wait();
  std::size_t k = 0;
  while (k < flags.size() && low[k] == high[k]) ++k;
  if (k == flags.size()) return;
  // Rank 0's value, then the lowest rank whose value is another.
  std::int64_t first = rank == 0 ? mine[k] : 0, other = 0;
  coll.allreduce(&first, &first, 1, dtype::int64, reduce::op_kind::sum).wait();
  other = mine[k] != first ? rank : ranks;
  coll.allreduce(&other, &other, 1, dtype::int64, reduce::op_kind::min).wait();
  throw error(errc::invalid_argument, "rank " + std::to_string(rank) + " (" + flags[k].first + " " + flags[k].second +
                                          "): rank " + std::to_string(other) + " was given another " + flags[k].first +
                                          " than rank 0; every rank must be given the same training flags");
}

}  // namespace mimatrix::resnet::train
