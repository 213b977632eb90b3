// engine_core's definitions: in every unit when header-only, once with separate compilation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/algorithm/uneven_exchange.hpp"
#include "mimatrix/core/log.hpp"
#include "mimatrix/detail/buffer_overlap.hpp"
#include "mimatrix/detail/communicator_state.hpp"
#include "mimatrix/detail/engine_core.hpp"
#include "mimatrix/detail/flight_recorder.hpp"
#include "mimatrix/detail/forgets_root_on_failure.hpp"
#include "mimatrix/detail/plan_cache.hpp"
#include "mimatrix/detail/recorded_operation.hpp"
#include "mimatrix/detail/staged_call.hpp"
#include "mimatrix/device/port.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/schedule/lower.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/dump_request.hpp"

namespace mimatrix::detail {

/// The elements of a block (descriptor::count) of a call whose buffers hold `in_count`
/// and `out_count` elements on this rank; a count that does not fit is found by check().
inline std::size_t block_count(schedule::collective kind, int size, std::size_t in_count, std::size_t out_count) {
  switch (kind) {
    case schedule::collective::allgather:
    case schedule::collective::reduce:
    case schedule::collective::gather: return in_count;
    case schedule::collective::alltoall: return in_count / std::size_t(size);
    default: return out_count;
  }
}

/// A call checked and planned (engine_core::prepare), or one being started.
struct prepared_call {
  schedule::collective kind;
  const void* in;
  std::size_t in_count;
  void* out;
  std::size_t out_count;
  int root;
  const reduce::host_kernels* kernels;
  std::optional<std::chrono::milliseconds> timeout;
  const device::stream* stream;
  std::uint32_t tag;
  bool barrier;
  std::shared_ptr<const schedule::schedule> plan{};
  bool lowered = false;  // plan is the lowering of one-sided steps
  std::optional<device::stream> owned_stream{};  // a persistent call's copy of the caller's
  std::shared_ptr<const schedule::uneven> layout{};  // a v-form's blocks, as this rank sees them

  bool rooted() const { return schedule::has_root(kind); }
  /// Calls where a rank may end without a message that proves its peers ran the same
  /// call (those with a root, alltoallv): they fold their shape into the history.
  bool folds_history() const { return rooted() || (layout && !layout->agreed); }
  /// The count the signature carries: a v-form's is its counts' digest.
  std::size_t signed_count(int size) const {
    return layout ? layout->agreed : block_count(kind, size, in_count, out_count);
  }
  schedule::descriptor descriptor(int size) const {
    return {kind,        size, layout ? 0 : block_count(kind, size, in_count, out_count), kernels->elem_size,
            rooted() ? root : 0, layout};
  }
};

struct engine_core::impl {
  impl(communicator_state& c, const transport_face& t, schedule_source s)
      : comm(c), alive(c.liveness()), transport(t), source(std::move(s)), owner(c.plans().new_owner()),
        shared_device_owner(source.build_on_shared_device ? c.plans().new_owner() : owner) {}

  std::optional<std::string> check(const schedule::descriptor& d, const void* in, std::size_t in_count, void* out,
                                   std::size_t out_count) const;
  /// What is wrong with `call`'s arguments, if anything.
  std::optional<std::string> problem(const prepared_call& call, const schedule::descriptor& desc) const;
  /// Takes the call's sequence number (and the history of broadcast roots) and signs it.
  signature take_signature(const prepared_call& call);
  /// Tells the peers this rank will not run `call`, and throws `why` as invalid_argument.
  [[noreturn]] void refuse(const prepared_call& call, const signature& sig, const std::string& why);
  /// Starts planned `call` as the call `sig` names: in the flight record and before the
  /// call hooks where they are on (`began`: when the caller called).
  request launch(const prepared_call& call, std::shared_ptr<const schedule::schedule> plan, const signature& sig,
                 const schedule::descriptor& desc, std::chrono::steady_clock::time_point began);
  /// Whether a call on `stream` takes the schedules built for device memory that every
  /// peer reaches (schedule_source::build_on_shared_device). Alike on every rank.
  bool on_shared_device(const device::stream* stream) const {
    return stream && source.build_on_shared_device && transport.reaches_peers_device_memory &&
           transport.reaches_peers_device_memory(transport.transport, *stream);
  }
  /// Of this call's plans, the one the transport runs.
  std::shared_ptr<const schedule::schedule> pick(const plan_set& p, const schedule::descriptor& d,
                                                 const device::stream* stream) const;
  /// The communicator's cache holds the plans; the last call's stay here too, since
  /// training repeats one size.
  const plan_set& plan_for(const schedule::descriptor& d, bool shared_device);
  /// Lowering needs every rank's schedule (a wait's receives come from its writers).
  plan_set build(const schedule::descriptor& d, bool shared_device) const;
  schedule::schedule build(const schedule::descriptor& d, int rank, bool shared_device) const {
    schedule::schedule s = (shared_device ? source.build_on_shared_device : source.build)(source.bound.get(), d, rank);
    s.agreement = source.agreement;
    return s;
  }

  communicator_state& comm;
  std::weak_ptr<const void> alive;  // comm's
  transport_face transport;
  schedule_source source;
  std::uint64_t owner;
  std::uint64_t shared_device_owner;  // of the plans for device memory every peer reaches
  plan_key last_key{};
  plan_set last;
  bool has_last = false;
  /// A v-form's last plan and the call it is for (its layout compared by content: an
  /// MoE layer repeats its split sizes less often than training repeats a size, but a
  /// loop of one alltoallv repeats them all).
  schedule::descriptor last_uneven{};
  std::shared_ptr<const schedule::schedule> last_uneven_plan;
  std::shared_ptr<const schedule::schedule> uneven_plan(const schedule::descriptor& d) {
    if (!last_uneven_plan || !(d == last_uneven)) {
      last_uneven_plan = std::make_shared<const schedule::schedule>(algorithm::uneven_exchange{}.build(d, transport.rank));
      last_uneven = d;
    }
    return last_uneven_plan;
  }
};

MIMATRIX_DECL engine_core::engine_core(communicator_state& comm, const transport_face& transport,
                                       schedule_source source)
    : impl_(std::make_unique<impl>(comm, transport, std::move(source))) {}

MIMATRIX_DECL engine_core::engine_core(engine_core&&) noexcept = default;
MIMATRIX_DECL engine_core::~engine_core() = default;

MIMATRIX_DECL request engine_core::start(schedule::collective kind, const void* in, std::size_t in_count, void* out,
                                         std::size_t out_count, int root, const reduce::host_kernels& kernels,
                                         std::optional<std::chrono::milliseconds> timeout,
                                         const device::stream* stream, std::uint32_t tag, bool barrier) {
  transport::dump_request::serve_if_raised();  // a signal's dump, before this call enters the record
  impl& e = *impl_;
  refuse_if_destroyed(e.alive, e.transport.rank, schedule::to_string(kind));
  const auto began = e.comm.call_hooks().empty() ? std::chrono::steady_clock::time_point{}
                                                 : std::chrono::steady_clock::now();
  prepared_call call{kind, in, in_count, out, out_count, root, &kernels, timeout, stream, tag, barrier};
  const signature sig = e.take_signature(call);
  const schedule::descriptor desc = call.descriptor(e.transport.size);
  if (auto why = e.problem(call, desc)) e.refuse(call, sig, *why);
  const plan_set& plans = e.plan_for(desc, e.on_shared_device(stream));
  auto plan = e.pick(plans, desc, stream);
  call.lowered = plans.lowered && plan == plans.lowered;
  return e.launch(call, std::move(plan), sig, desc, began);
}

MIMATRIX_DECL std::shared_ptr<const prepared_call> engine_core::prepare(
    schedule::collective kind, const void* in, std::size_t in_count, void* out, std::size_t out_count, int root,
    const reduce::host_kernels& kernels, std::optional<std::chrono::milliseconds> timeout,
    const device::stream* stream, std::uint32_t tag) {
  impl& e = *impl_;
  refuse_if_destroyed(e.alive, e.transport.rank, schedule::to_string(kind));
  auto call = std::make_shared<prepared_call>(
      prepared_call{kind, in, in_count, out, out_count, root, &kernels, timeout, nullptr, tag, false});
  if (stream) call->stream = &call->owned_stream.emplace(*stream);
  const schedule::descriptor desc = call->descriptor(e.transport.size);
  if (auto why = e.problem(*call, desc))  // no call is started: the peers are not told
    throw error(errc::invalid_argument, "rank " + std::to_string(e.transport.rank) + ", a persistent " +
                                            std::string(schedule::to_string(kind)) + ": " + *why);
  const plan_set& plans = e.plan_for(desc, e.on_shared_device(call->stream));
  call->plan = e.pick(plans, desc, call->stream);
  call->lowered = plans.lowered && call->plan == plans.lowered;
  return call;
}

/// A v-form's call as prepared_call takes it: its buffers' sizes follow from its layout
/// (none where its arguments cannot be).
inline prepared_call uneven_call(schedule::collective kind, const void* in, void* out, const uneven_args& args,
                                 int root, const reduce::host_kernels& kernels,
                                 std::optional<std::chrono::milliseconds> timeout, const device::stream* stream,
                                 std::uint32_t tag, int rank, int size) {
  prepared_call call{kind, in, 0, out, 0, root, &kernels, timeout, stream, tag, false};
  call.layout = args.layout;
  if (!call.layout) return call;
  const schedule::descriptor d = call.descriptor(size);
  call.in_count = d.input_bytes(rank) / kernels.elem_size;
  call.out_count = d.output_bytes(rank) / kernels.elem_size;
  return call;
}

MIMATRIX_DECL request engine_core::start_uneven(schedule::collective kind, const void* in, void* out,
                                                const uneven_args& args, int root,
                                                const reduce::host_kernels& kernels,
                                                std::optional<std::chrono::milliseconds> timeout,
                                                const device::stream* stream, std::uint32_t tag) {
  transport::dump_request::serve_if_raised();
  impl& e = *impl_;
  refuse_if_destroyed(e.alive, e.transport.rank, schedule::call_name(kind, true));
  const auto began = e.comm.call_hooks().empty() ? std::chrono::steady_clock::time_point{}
                                                 : std::chrono::steady_clock::now();
  prepared_call call =
      uneven_call(kind, in, out, args, root, kernels, timeout, stream, tag, e.transport.rank, e.transport.size);
  const signature sig = e.take_signature(call);
  if (!args.problem.empty()) e.refuse(call, sig, args.problem);
  const schedule::descriptor desc = call.descriptor(e.transport.size);
  if (auto why = e.problem(call, desc)) e.refuse(call, sig, *why);
  return e.launch(call, e.uneven_plan(desc), sig, desc, began);
}

MIMATRIX_DECL std::shared_ptr<const prepared_call> engine_core::prepare_uneven(
    schedule::collective kind, const void* in, void* out, const uneven_args& args, int root,
    const reduce::host_kernels& kernels, std::optional<std::chrono::milliseconds> timeout,
    const device::stream* stream, std::uint32_t tag) {
  impl& e = *impl_;
  refuse_if_destroyed(e.alive, e.transport.rank, schedule::call_name(kind, true));
  auto call = std::make_shared<prepared_call>(
      uneven_call(kind, in, out, args, root, kernels, timeout, nullptr, tag, e.transport.rank, e.transport.size));
  if (stream) call->stream = &call->owned_stream.emplace(*stream);
  const std::string name(schedule::call_name(kind, true));
  // No call is started: the peers are not told.
  const auto refuse = [&](const std::string& why) {
    throw error(errc::invalid_argument, "rank " + std::to_string(e.transport.rank) + ", a persistent " + name + ": " + why);
  };
  if (!args.problem.empty()) refuse(args.problem);
  const schedule::descriptor desc = call->descriptor(e.transport.size);
  if (auto why = e.problem(*call, desc)) refuse(*why);
  call->plan = e.uneven_plan(desc);
  return call;
}

MIMATRIX_DECL request engine_core::start(const prepared_call& call) {
  transport::dump_request::serve_if_raised();
  impl& e = *impl_;
  refuse_if_destroyed(e.alive, e.transport.rank, schedule::to_string(call.kind));
  const auto began = e.comm.call_hooks().empty() ? std::chrono::steady_clock::time_point{}
                                                 : std::chrono::steady_clock::now();
  const signature sig = e.take_signature(call);
  return e.launch(call, call.plan, sig, call.descriptor(e.transport.size), began);
}

MIMATRIX_DECL signature engine_core::impl::take_signature(const prepared_call& call) {
  const std::size_t count = call.signed_count(transport.size);
  const std::uint64_t sequence = comm.take_sequence(transport.rank, transport.progress);
  // In a call with a root some ranks only send (a broadcast's root, a gather's leaves), and
  // in alltoallv a rank's received lengths prove nothing of what it sent: they learn that
  // the ranks disagreed at their next call.
  const auto shape = [&]() -> std::uint16_t {
    if (!call.folds_history()) return 0;
    const std::uint64_t mixed =
        ((std::uint64_t(count) << 20) ^ std::uint64_t(call.root + 1) ^ (call.layout ? 0x5A5Aull << 40 : 0)) *
        0x9E3779B97F4A7C15ull;
    return static_cast<std::uint16_t>((mixed >> 48) | 1);
  };
  const std::uint16_t history = comm.take_history(shape(), sequence);
  return signature{call.kind,     call.kernels->op, call.kernels->type, count,
                   call.rooted() ? call.root : 0, sequence, call.tag, history, call.layout != nullptr};
}

MIMATRIX_DECL std::optional<std::string> engine_core::impl::problem(const prepared_call& call,
                                                                    const schedule::descriptor& desc) const {
  auto why = check(desc, call.in, call.in_count, call.out, call.out_count);
  if (!why && call.stream && !call.stream->device) why = "the device::stream names no device port";
  if (!why && call.stream) why = device_buffer_problem(*call.stream->device, desc, transport.rank, call.in, call.out);
  if (!why && call.timeout && call.timeout->count() <= 0)
    why = "call_options::timeout is " + std::to_string(call.timeout->count()) +
          " ms; a deadline must be positive (unset: the communicator's)";
  return why;
}

MIMATRIX_DECL void engine_core::impl::refuse(const prepared_call& call, const signature& sig, const std::string& why) {
  const std::string message =
      describe({transport.rank, -1, schedule::call_name(call.kind, call.layout != nullptr), static_cast<std::int64_t>(sig.sequence)}, why);
  transport.fail(transport.transport, sig, errc::invalid_argument, message);
  comm.forget_root(sig.sequence);
  throw error(errc::invalid_argument, message);
}

MIMATRIX_DECL request engine_core::impl::launch(const prepared_call& call,
                                                std::shared_ptr<const schedule::schedule> plan, const signature& sig,
                                                const schedule::descriptor& desc,
                                                std::chrono::steady_clock::time_point began) {
  const transport_face& t = transport;
  const std::uint64_t sequence = sig.sequence;
  const reduce::host_kernels& kernels = *call.kernels;
  const device::stream* const stream = call.stream;
  const auto deadline = call.timeout.value_or(comm.settings().timeout);
  const auto launch_plan = [&]() -> std::unique_ptr<operation> {
    const auto* input = static_cast<const std::byte*>(call.in);
    auto* output = static_cast<std::byte*>(call.out);
    if (!stream) return t.start(t.transport, std::move(plan), input, output, sig, kernels, deadline);
    if (t.start_on_device)
      return t.start_on_device(t.transport, std::move(plan), input, output, sig, kernels, deadline, *stream);
    return run_staged(*stream, input, desc.input_bytes(t.rank), output, desc.output_bytes(t.rank),
                      [&](const std::byte* host_in, std::byte* host_out) {
                        return t.start(t.transport, plan, host_in, host_out, sig, kernels, deadline);
                      });
  };
  transport::stall_note* note = nullptr;  // the flight record's, set before the launch
  const auto launch_call = [&] {
    auto op = launch_plan();
    if (note) op->watch_stalls(note);  // on the executor, not on a wrapper of it
    if (!call.folds_history()) return op;
    return std::unique_ptr<operation>(std::make_unique<forgets_root_on_failure>(std::move(op), comm, sequence));
  };
  flight_recorder* const flight = comm.flight();
  const bool hooked = !comm.call_hooks().empty();
  if (!hooked && !flight) return request(launch_call(), sequence);
  if (flight) {  // entered before the launch: a launch that hangs or throws is recorded too
    flight_start f;
    f.sequence = sequence;
    f.in_count = call.in_count;
    f.out_count = call.out_count;
    f.tag = call.tag;
    f.root = call.rooted() ? call.root : -1;
    f.kind = call.kind;
    f.op = kernels.op;
    f.type = kernels.type;
    f.path = !stream ? flight_path::host : t.start_on_device ? flight_path::device : flight_path::staged;
    f.barrier = call.barrier;
    f.lowered = call.lowered;
    copy_cut(f.algorithm, plan->algorithm);
    note = flight->record().start(f);
  }
  const std::string_view algorithm = plan->algorithm;  // the plan outlives the call: the executor holds it
  std::unique_ptr<operation> op;
  try {
    op = launch_call();
  } catch (const error& failed) {
    if (flight) flight->record().finish(sequence, failed.code(), failed.what());
    throw;
  }
  if (hooked) {
    call_record r;
    r.start = began;
    r.algorithm = algorithm;
    r.kind = call.kind;
    r.sequence = sequence;
    r.tag = call.tag;
    r.barrier = call.barrier;
    r.type = kernels.type;
    r.bytes = desc.largest_bytes();
    r.rank = t.rank;
    r.size = t.size;
    op = std::make_unique<recorded_operation>(std::move(op), std::move(r), comm.call_hooks());
  }
  return request(std::move(op), sequence, flight);
}

MIMATRIX_DECL std::optional<std::string> engine_core::impl::check(const schedule::descriptor& d, const void* in,
                                                                  std::size_t in_count, void* out,
                                                                  std::size_t out_count) const {
  const int p = transport.size, r = transport.rank;
  // Above this, the sizes below wrap and would be reported as nonsense.
  if (d.count > std::numeric_limits<std::size_t>::max() / d.elem_size / std::size_t(p))
    return "count " + std::to_string(d.count) + " is too large: " + std::to_string(d.count) + " elements of " +
           std::to_string(d.elem_size) + " bytes on " + std::to_string(p) + " ranks overflow a 64-bit byte count";
  const bool reads_input = d.reads_input(r);
  const std::size_t want_in = d.input_bytes(r) / d.elem_size, want_out = d.output_bytes(r) / d.elem_size;
  if (schedule::has_root(d.kind) && (d.root < 0 || d.root >= p))
    return "root " + std::to_string(d.root) + " is outside a group of " + std::to_string(p);
  if (reads_input && in_count != want_in)
    return "the input holds " + std::to_string(in_count) + " elements but " + std::to_string(want_in) +
           " are needed (output " + std::to_string(out_count) + " elements, group of " + std::to_string(p) + ")";
  if (out_count != want_out)
    return "the output holds " + std::to_string(out_count) + " elements but " + std::to_string(want_out) +
           " are needed (input " + std::to_string(in_count) + " elements, group of " + std::to_string(p) + ")";
  if (reads_input && in_count && !in) return std::string("the input is a null pointer");
  if (out_count && !out) return std::string("the output is a null pointer");
  if (!reads_input) return std::nullopt;
  return overlap_problem(d, r, in, out);
}

MIMATRIX_DECL std::shared_ptr<const schedule::schedule> engine_core::impl::pick(const plan_set& p,
                                                                                const schedule::descriptor& d,
                                                                                const device::stream* stream) const {
  if (!p.lowered) return p.as_built;
  if (stream && transport.runs_as_built && transport.runs_as_built(transport.transport, *p.as_built, *stream))
    return p.as_built;
  if (transport.runs_one_sided && transport.runs_one_sided(transport.transport, d, p.most_scratch)) return p.as_built;
  return p.lowered;
}

MIMATRIX_DECL const plan_set& engine_core::impl::plan_for(const schedule::descriptor& d, bool shared_device) {
  const plan_key key{shared_device ? shared_device_owner : owner, d.kind, d.count, d.elem_size, d.root};
  if (has_last && key == last_key) return last;
  last = comm.plans().find_or_build(key, [&] { return build(d, shared_device); });
  last_key = key;
  has_last = true;
  return last;
}

MIMATRIX_DECL plan_set engine_core::impl::build(const schedule::descriptor& d, bool shared_device) const {
  schedule::schedule mine = build(d, transport.rank, shared_device);
  if (!source.chooses && transport.rank == 0 && log_enabled(log_level::info))
    log(log_level::info, "rank 0: " + std::string(schedule::to_string(d.kind)) + " of " +
                             std::to_string(d.largest_bytes()) + " bytes on " + std::to_string(d.size) + " ranks: " +
                             mine.algorithm + " (fixed by the collective's Algorithm), " +
                             std::to_string(mine.steps.size()) + " steps");
  plan_set p;
  if (!transport.native_one_sided) {
    const bool one_sided = std::any_of(mine.steps.begin(), mine.steps.end(), [](const schedule::step& st) {
      return schedule::is_one_sided(st.kind) || st.kind == schedule::step_kind::wait;
    });
    if (one_sided) {
      std::vector<schedule::schedule> group;
      group.reserve(std::size_t(transport.size));
      for (int r = 0; r < transport.size; ++r) {
        group.push_back(r == transport.rank ? mine : build(d, r, shared_device));
        p.most_scratch = std::max(p.most_scratch, group.back().scratch_bytes);
      }
      p.lowered = std::make_shared<const schedule::schedule>(
          std::move(schedule::lower_one_sided(group)[std::size_t(transport.rank)]));
    }
  }
  p.as_built = std::make_shared<const schedule::schedule>(std::move(mine));
  return p;
}

}  // namespace mimatrix::detail
