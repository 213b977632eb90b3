// A run's state, by name: the parameters, the batch norms' running statistics and the
// optimizer's momentum. A checkpoint saves it; a new group takes it from its most advanced
// rank, so ranks that joined late, or a step that failed on some ranks only, cannot leave
// the ranks apart.
#pragma once

#include "model/resnet.hpp"
#include "optim/sgd.hpp"

#include <mimatrix/collectives.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mimatrix::resnet::train {

/// Calls f(name, tensor) for every tensor the run carries from step to step: parameters,
/// batch norms' running statistics, momentum buffers, in one order and under one naming on
/// both backends (tensors: nn's and std::span on the CPU, nn_cuda's on the GPU), so a
/// checkpoint of either resumes on the other.
template <class Net, class Optimizer, class F>
void for_each_state(Net& net, Optimizer& optimizer, F&& f) {
  const auto& params = net.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) f("param/" + std::to_string(i) + "/" + params[i]->name, params[i]->value);
  const auto& norms = net.norms();
  for (std::size_t i = 0; i < norms.size(); ++i) {
    f("bn/" + std::to_string(i) + "/running_mean", norms[i]->running_mean());
    f("bn/" + std::to_string(i) + "/running_var", norms[i]->running_var());
  }
  auto&& buffers = optimizer.momentum_buffers();
  for (std::size_t i = 0; i < buffers.size(); ++i) f("momentum/" + std::to_string(i), buffers[i]);
}

/// Named views of every float the run carries from step to step (the CPU's).
inline std::vector<std::pair<std::string, std::span<float>>> state_of(model::resnet& net, optim::sgd& optimizer) {
  std::vector<std::pair<std::string, std::span<float>>> s;
  for_each_state(net, optimizer, [&](std::string name, auto& t) {
    if constexpr (std::is_same_v<std::decay_t<decltype(t)>, nn::tensor>)
      s.emplace_back(std::move(name), std::span<float>(t.data));
    else
      s.emplace_back(std::move(name), t);
  });
  return s;
}

namespace detail {

/// Copies `views` into one buffer, lets `collective` work on it in place (one call instead
/// of one a tensor), and copies the result back.
template <class Collective>
void through_one_buffer(std::span<const std::span<float>> views, Collective collective) {
  std::size_t total = 0;
  for (const auto& v : views) total += v.size();
  std::vector<float> flat(total);
  float* at = flat.data();
  for (const auto& v : views) at = std::copy(v.begin(), v.end(), at);
  collective(flat);
  const float* from = flat.data();
  for (const auto& v : views) {
    std::memcpy(v.data(), from, v.size() * sizeof(float));
    from += v.size();
  }
}

}  // namespace detail

/// Averages the batch norms' running statistics over the ranks (DDP keeps one rank's; the
/// mean of all is as cheap and uses every rank's batches): with local statistics each rank's
/// drift apart, and a test or a checkpoint must see one model.
template <class Collectives>
void average_running_statistics(Collectives& coll, model::resnet& net) {
  std::vector<std::span<float>> views;
  for (nn::batch_norm* bn : net.norms()) {
    views.emplace_back(bn->running_mean().data);
    views.emplace_back(bn->running_var().data);
  }
  detail::through_one_buffer(views, [&](std::vector<float>& flat) {
    coll.allreduce(flat.data(), flat.data(), flat.size(), dtype::float32, reduce::op_kind::avg).wait();
  });
}

/// Every rank leaves with the state and step count of the rank that has taken the most
/// steps (the lowest such rank): one allgather of the counts, one broadcast of the state.
/// Returns that step count.
template <class Collectives>
std::int64_t take_most_advanced_state(Collectives& coll, model::resnet& net, optim::sgd& optimizer,
                                      std::int64_t steps) {
  std::vector<std::int64_t> all(std::size_t(coll.comm().size()), 0);
  coll.allgather(&steps, all.data(), 1, dtype::int64).wait();
  const auto most = std::max_element(all.begin(), all.end());
  const int root = int(most - all.begin());
  std::vector<std::span<float>> views;
  for (const auto& [name, v] : state_of(net, optimizer)) views.push_back(v);
  detail::through_one_buffer(views, [&](std::vector<float>& flat) {
    coll.broadcast(flat.data(), flat.data(), flat.size(), dtype::float32, root).wait();
  });
  optimizer.resume_at(*most);
  return *most;
}

}  // namespace mimatrix::resnet::train
