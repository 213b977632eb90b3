// The plain part of every collective: argument checks with messages that say what was
// wrong and on which rank, plans in the communicator's cache, and the hand-off to the
// transport. Compiled once rather than per transport, topology and algorithm: it reaches
// those through the plain functions of a transport_face and a schedule_source.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "mimatrix/core/config.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/operation.hpp"
#include "mimatrix/detail/uneven_layouts.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/transport/fwd.hpp"

namespace mimatrix::detail {

class communicator_state;

/// A transport as the engine calls it (transport::backend, erased).
struct transport_face {
  void* transport = nullptr;
  int rank = 0;
  int size = 1;
  std::unique_ptr<operation> (*start)(void* transport, std::shared_ptr<const schedule::schedule> plan,
                                      const std::byte* input, std::byte* output, const signature& sig,
                                      const reduce::host_kernels& kernels, std::chrono::milliseconds timeout) = nullptr;
  /// transport::runs_on_device; null: the engine stages device buffers through the host.
  std::unique_ptr<operation> (*start_on_device)(void* transport, std::shared_ptr<const schedule::schedule> plan,
                                                const std::byte* input, std::byte* output, const signature& sig,
                                                const reduce::host_kernels& kernels, std::chrono::milliseconds timeout,
                                                const device::stream& stream) = nullptr;
  void (*fail)(void* transport, const signature& sig, errc code, const std::string& why) = nullptr;
  /// transport::reaches_peers_device_memory; null: never.
  bool (*reaches_peers_device_memory)(const void* transport, const device::stream& stream) = nullptr;
  /// transport::runs_as_built_on_device; null: none.
  bool (*runs_as_built)(const void* transport, const schedule::schedule& plan, const device::stream& stream) = nullptr;
  /// transport::runs_one_sided_sometimes; null when it runs every one-sided step or none.
  bool (*runs_one_sided)(const void* transport, const schedule::descriptor& d, std::size_t scratch_bytes) = nullptr;
  /// transport::runs_batches; null: the transport runs no p2p batch.
  std::unique_ptr<operation> (*start_batch)(void* transport, std::shared_ptr<const schedule::schedule> plan,
                                            const transport::batch_call& call,
                                            std::chrono::milliseconds timeout) = nullptr;
  void (*fail_batch)(void* transport, const transport::batch_call& call, errc code, const std::string& why) = nullptr;
  bool native_one_sided = false;                   // transport::runs_one_sided
  transport::progress_engine* progress = nullptr;  // transport::has_progress_engine
};

/// An algorithm bound to a topology: builds a rank's schedule for a call.
struct schedule_source {
  std::shared_ptr<const void> bound;  // what `build` reads: the algorithm and the topology
  schedule::schedule (*build)(const void* bound, const schedule::descriptor& d, int rank) = nullptr;
  /// The algorithm chooses per call and says so itself (algorithm::automatic); otherwise
  /// the engine says, at MIMATRIX_DEBUG=INFO, which algorithm the collective's type fixed.
  bool chooses = false;
  /// topology::digest_of and algorithm::digest_of together: stamped on every schedule
  /// built (schedule::agreement), for the ranks to compare.
  std::uint64_t agreement = 0;
  /// What a choosing algorithm builds for a call on device memory that every peer reaches
  /// (transport_face::reaches_peers_device_memory), where memory traffic decides; null:
  /// the same as `build`.
  schedule::schedule (*build_on_shared_device)(const void* bound, const schedule::descriptor& d, int rank) = nullptr;
};

/// A call checked and planned once, for a persistent call to start many times
/// (engine_core::prepare).
struct prepared_call;

/// @par Thread Safety
/// As its communicator: one thread at a time.
class engine_core {
 public:
  MIMATRIX_DECL engine_core(communicator_state& comm, const transport_face& transport, schedule_source source);
  MIMATRIX_DECL engine_core(engine_core&&) noexcept;
  MIMATRIX_DECL ~engine_core();

  /// Checks the arguments, then starts the call; counts are in elements of `kernels`'
  /// type. A deadline of its own if `timeout` is set, else the communicator's. With
  /// `stream`, the buffers are device memory of its port and the call is ordered on it.
  /// `tag` is the caller's label of the call (call_options::tag), which every rank must
  /// give alike. `barrier`: barrier() calls it, which the call's record says.
  MIMATRIX_DECL request start(schedule::collective kind, const void* in, std::size_t in_count, void* out,
                              std::size_t out_count, int root, const reduce::host_kernels& kernels,
                              std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                              const device::stream* stream = nullptr, std::uint32_t tag = 0, bool barrier = false);

  /// Checks the arguments and plans the call once, as MPI_Allreduce_init: start(prepared)
  /// then skips the checks, the plan lookup and the choice of plan. Throws
  /// invalid_argument naming the rank; no call is started, so the peers are not told.
  MIMATRIX_DECL std::shared_ptr<const prepared_call> prepare(
      schedule::collective kind, const void* in, std::size_t in_count, void* out, std::size_t out_count, int root,
      const reduce::host_kernels& kernels, std::optional<std::chrono::milliseconds> timeout = std::nullopt,
      const device::stream* stream = nullptr, std::uint32_t tag = 0);
  /// A v-form: the call `kind` with per-rank blocks as this rank sees them (`args`, from
  /// detail/uneven_layouts.hpp; its buffers' sizes follow from them). Otherwise as start()
  /// and prepare(); a problem in `args` is refused as a bad argument is. It runs
  /// algorithm::uneven_exchange whatever the engine's algorithm.
  MIMATRIX_DECL request start_uneven(schedule::collective kind, const void* in, void* out, const uneven_args& args,
                                     int root, const reduce::host_kernels& kernels,
                                     std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                                     const device::stream* stream = nullptr, std::uint32_t tag = 0);
  MIMATRIX_DECL std::shared_ptr<const prepared_call> prepare_uneven(
      schedule::collective kind, const void* in, void* out, const uneven_args& args, int root,
      const reduce::host_kernels& kernels, std::optional<std::chrono::milliseconds> timeout = std::nullopt,
      const device::stream* stream = nullptr, std::uint32_t tag = 0);
  /// Starts a prepared call, as MPI_Start: a new sequence number, the same buffers.
  MIMATRIX_DECL request start(const prepared_call& call);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace mimatrix::detail

#if MIMATRIX_HEADER_ONLY
#include "mimatrix/detail/impl/engine_core.ipp"
#endif
