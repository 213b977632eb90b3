// transport::fabric: ranks are processes, on one machine or many, connected by libfabric
// reliable-datagram endpoints (shm, tcp;ofi_rxm here; verbs;ofi_rxm or efa on clusters).
// Ranks find each other through the bootstrap store; data moves as tagged messages, and
// one-sided steps (GDRAA's writes) as RMA writes with remote CQ data into a window every
// rank registers once.
#pragma once

#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "mimatrix/core/config.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/operation.hpp"
#include "mimatrix/schedule/policy.hpp"
#include "mimatrix/transport/fwd.hpp"

// Declared only (bootstrap/env.hpp, bootstrap/store.hpp; progress_engine in
// transport/progress.hpp): every member is defined in fabric/impl/fabric.ipp, which
// header-only units include below and mimatrix::compiled compiles once.
namespace mimatrix::bootstrap {
struct identity;
class store;
}  // namespace mimatrix::bootstrap

namespace mimatrix::transport::detail::fabric {
class endpoint;
}

namespace mimatrix::transport {

/// How a fabric endpoint is opened. A field set here wins; one left unset (empty) is read
/// from the environment (the variable named beside it), else takes the default named, so
/// one binary runs on any cluster and a framework's explicit choice is never overridden.
struct fabric_options {
  /// libfabric provider, e.g. "shm", "tcp;ofi_rxm", "verbs;ofi_rxm", "efa".
  /// Empty: MIMATRIX_PROVIDER, else FI_PROVIDER, else "shm" when every rank runs on this
  /// host, else libfabric's first choice.
  std::string provider{};
  /// How long start-up (store, address exchange) may take. MIMATRIX_STARTUP_TIMEOUT_MS,
  /// else 60 s.
  std::optional<std::chrono::milliseconds> startup_timeout{};
  /// Register every buffer even when the provider does not ask for it (tests the
  /// registration path on shm and tcp). MIMATRIX_FABRIC_REGISTER=always, else false.
  std::optional<bool> register_always{};
  /// Memory for receiving recv_reduce data before it is reduced, reused in slots of the
  /// schedule's chunk size: small enough to stay in cache, large enough to keep several
  /// messages in flight. MIMATRIX_STAGING_BYTES, else 1 MiB.
  std::optional<std::size_t> staging_bytes{};
  /// Each half of the RMA window one-sided calls write into (output plus landing slots;
  /// memory is committed only where touched). Calls that do not fit, broadcasts, and
  /// every call after a failure run as messages instead. 0: no window.
  /// MIMATRIX_WINDOW_BYTES, else 128 MiB.
  std::optional<std::size_t> window_bytes{};
  /// Messages of up to 512 bytes between ranks on one host go through shared-memory
  /// mailboxes instead of the provider (a third of libfabric shm's latency). 1: always,
  /// 0: never, -1: with the shm provider only. MIMATRIX_MAILBOX=on|off|auto, else -1. Set
  /// alike on every rank.
  std::optional<int> mailbox{};
  /// Chunks of up to chunk_bytes between ranks on one host go through shared-memory rings
  /// of 4 slots a pair: the sender copies in, the receiver reduces straight out, where the
  /// provider would copy once more (shm: process_vm_readv into staging). 1: always, 0:
  /// never, -1: with the shm provider only. MIMATRIX_BULK=on|off|auto, else -1. Set alike
  /// on every rank. Memory: 4 chunks per ordered pair of this host's ranks.
  std::optional<int> bulk{};
  /// The chunk the collectives cut large messages into, for algorithms whose policy
  /// leaves it open. 0: by provider (chunk_for_provider). MIMATRIX_CHUNK_BYTES, else 0.
  /// Set alike on every rank.
  std::optional<std::size_t> chunk_bytes{};
  /// A provider call that has not returned by its collective's deadline and half a second
  /// (at least 2 s) never will: libfabric 1.17's shm spins for ever on a lock that a peer
  /// killed or stopped inside the provider kept. No call can be left and no thread unwound,
  /// so the process ends with exit code 75 and an error naming the peer (as PyTorch ends a
  /// process whose NCCL call hangs). false: the error is printed and the call waits on.
  /// MIMATRIX_STUCK_PROVIDER=exit|wait, else exit.
  std::optional<bool> exit_when_stuck{};
  /// The group's name, alike on each of its ranks. With how many endpoints of that name
  /// this process opened before through the same store (store::scope()), it keys the
  /// group's entries in the store: a process may belong to several groups over one store,
  /// each opened in the same order by its members; groups through separate stores need
  /// no names. split() names the groups it makes.
  std::string group = "world";
};

/// One rank's endpoint in a group of processes.
///
/// @code
///   mimatrix::communicator<mimatrix::transport::fabric> comm;   // RANK, WORLD_SIZE, MASTER_ADDR...
///   mimatrix::allreduce<mimatrix::transport::fabric, mimatrix::topology::ring, mimatrix::reduce::sum<float>> sum(comm);
///   sum(gradients);
/// @endcode
///
/// @par Thread Safety
/// One thread at a time (the communicator over it has the same rule), besides its
/// progress thread (progress_mode::thread). Copies share the endpoint.
class fabric {
 public:
  static constexpr const char* name = "fabric";
  /// Not every call can run one-sided steps here: runs_one_sided() answers per call and
  /// the collectives lower the others to messages.
  static constexpr bool native_one_sided = false;

  /// Rank, size and store from the environment (see bootstrap/env.hpp, rendezvous.hpp).
  MIMATRIX_DECL explicit fabric(fabric_options options = {});

  /// An explicit identity and store (nullptr: open the store the environment names).
  MIMATRIX_DECL fabric(const bootstrap::identity& id, std::shared_ptr<bootstrap::store> store,
                       fabric_options options = {});

  /// The color of split() that groups the ranks on one host (as MPI_COMM_TYPE_SHARED).
  static constexpr int same_host = std::numeric_limits<int>::min();

  /// As MPI_Comm_split and ncclCommSplit: collective over this group, every rank with a
  /// color (< 0: none, as MPI_UNDEFINED; same_host: this host's ranks) and a key. Ranks of one color form a new group,
  /// ranked by key, ties by rank here, with its own endpoint over the same store and
  /// options; ranks on one host are its local ranks. None for a negative color. A
  /// same_host group turns mailboxes and bulk rings that are left to `auto` on, whatever
  /// the provider: shared memory reaches all its ranks (and so does CUDA IPC).
  /// Throws what start-up throws, on every rank of the new group.
  MIMATRIX_DECL std::optional<fabric> split(int color, int key) const;
  /// The calls started on this group and on `other` from now on, until the next
  /// share_fate(), share a fate: once one fails here, every other that has sent nothing
  /// yet fails here too (its peers learn of it). The parts of one call split across groups
  /// (detail/across_hosts.hpp) must not run on what an earlier part failed to make.
  MIMATRIX_DECL void share_fate(fabric& other);
  /// abort() of this group, here, aborts `part` too: a group split from this one that runs
  /// parts of its calls (detail/across_hosts.hpp), whose calls in flight would otherwise
  /// wait out their deadlines. Before any call on `part`.
  MIMATRIX_DECL void abort_with(const fabric& part);
  /// Ends every call in flight and every later one with `aborted`, on every rank of the
  /// group (as ncclCommAbort): `why` reaches them in the error. From any thread.
  MIMATRIX_DECL void abort(const std::string& why);
  /// A failure known before anyone waits (as ncclCommGetAsyncError): an abort, a call that
  /// failed here or on another rank, or a peer on this host whose process has ended.
  /// Reads the provider's queue once. From any thread.
  MIMATRIX_DECL std::optional<error> async_error();

  /// The rendezvous store the group met through (a split group shares it).
  MIMATRIX_DECL std::shared_ptr<bootstrap::store> store() const;
  /// This rank's identity in the group: rank, size, local rank and size.
  MIMATRIX_DECL bootstrap::identity identity() const;

  /// The chunk that suits a provider (fabric_options::chunk_bytes = 0).
  MIMATRIX_DECL static std::size_t chunk_for_provider(const std::string& provider);

  MIMATRIX_DECL int rank() const;
  MIMATRIX_DECL int size() const;
  /// This process's rank in the group the first split() was made on (its own rank if none).
  MIMATRIX_DECL int world_rank() const;
  /// The group's name and how many endpoints of that name this process opened before
  /// ("world/0", "world/0split0/color1/0"): alike on its ranks, unlike any other group here.
  MIMATRIX_DECL std::string group() const;
  /// The provider libfabric opened, e.g. "shm" or "tcp;ofi_rxm".
  MIMATRIX_DECL const std::string& provider() const;
  /// Buffers registered so far, and lookups the cache answered (FI_MR_LOCAL providers).
  MIMATRIX_DECL std::size_t registrations() const;
  MIMATRIX_DECL std::size_t registration_hits() const;
  /// Registrations the cache holds now.
  MIMATRIX_DECL std::size_t live_registrations() const;

  /// Tells the registration cache that [data, data + bytes) is about to be freed (as
  /// ncclCommDeregister): its registrations are dropped, so memory allocated later at
  /// the same address is registered afresh instead of reaching the provider's old pages.
  /// Needed only by providers that register buffers (FI_MR_LOCAL: verbs, efa) and only
  /// for memory that is freed while the communicator lives. Returns the registrations
  /// dropped; those a call in flight may use are closed when it ends.
  MIMATRIX_DECL std::size_t deregister(const void* data, std::size_t bytes);
  /// Each half of the RMA window all ranks share (0: none; one-sided steps become messages).
  MIMATRIX_DECL std::size_t window_bytes() const;
  /// Calls that ran their one-sided steps as RMA writes.
  MIMATRIX_DECL std::size_t one_sided_calls() const;
  /// Whether small messages to ranks on this host go through shared-memory mailboxes.
  MIMATRIX_DECL bool uses_mailboxes() const;
  /// Whether chunks to ranks on this host go through shared-memory rings (fabric_options::bulk).
  MIMATRIX_DECL bool uses_bulk_rings() const;

  /// The tuning the collectives give algorithms that leave it open (fabric_options::chunk_bytes).
  MIMATRIX_DECL schedule::policy suggested_policy() const;

  /// Whether call `d`, whose schedules need at most `scratch_bytes` of scratch on any
  /// rank, runs its one-sided steps as RMA writes. Every rank answers alike, except after
  /// a failure, which ends one-sided calls (a late write of the failed call may land).
  /// Broadcast is left out: its root may run calls ahead of the others, and a later
  /// write could land in a half a peer still reads.
  MIMATRIX_DECL bool runs_one_sided(const schedule::descriptor& d, std::size_t scratch_bytes) const;

  /// Whether every peer reads and writes this rank's device memory of `caller`'s port
  /// directly: all are on this host, with mailboxes, and the port shares memory (CUDA
  /// IPC) unless MIMATRIX_DEVICE_IPC=0. GDRAA's collectives then run as one pass a rank,
  /// which algorithm::automatic takes on device memory. Alike on every rank.
  MIMATRIX_DECL bool reaches_peers_device_memory(const device::stream& caller) const;

  /// Whether a call of `plan` on `caller`'s device memory runs the plan as built, its
  /// one-sided steps as synchronizations, with no RMA window (GDRAA's collectives as one
  /// pass a rank where every peer reaches this rank's memory): the collectives then run
  /// it unlowered at any size. Alike on every rank.
  MIMATRIX_DECL bool runs_as_built(const schedule::schedule& plan, const device::stream& caller) const;

  /// The calls in flight on this endpoint, and who advances them.
  MIMATRIX_DECL progress_engine& progress();

  /// Starts executing `plan`: it posts what it can now.
  MIMATRIX_DECL std::unique_ptr<mimatrix::detail::operation> start(std::shared_ptr<const schedule::schedule> plan,
                                                                   const std::byte* input, std::byte* output,
                                                                   const signature& sig,
                                                                   const reduce::host_kernels& kernels,
                                                                   std::chrono::milliseconds timeout);

  /// As above, on device memory of `caller`'s port, ordered on `caller` as NCCL's calls
  /// are: staged through host memory on a stream of this rank's own, without blocking
  /// the caller (transport/host_staging.hpp). Starts the progress thread (as NCCL's proxy
  /// thread): a caller that only synchronizes its stream never calls test() or wait().
  MIMATRIX_DECL std::unique_ptr<mimatrix::detail::operation> start(std::shared_ptr<const schedule::schedule> plan,
                                                                   const std::byte* input, std::byte* output,
                                                                   const signature& sig,
                                                                   const reduce::host_kernels& kernels,
                                                                   std::chrono::milliseconds timeout,
                                                                   const device::stream& caller);

  /// This rank will not take part in call `sig`: every peer fails it with `code` at once.
  MIMATRIX_DECL void fail(const signature& sig, errc code, const std::string& why);

 private:
  MIMATRIX_DECL static fabric_options resolve(fabric_options o, const bootstrap::identity& id);

  std::shared_ptr<device::rank_streams> device_;  // made by the first call on device memory
  std::shared_ptr<detail::fabric::endpoint> endpoint_;  // after device_: goes first
  fabric_options options_;  // as resolved: a split group opens with them
};

}  // namespace mimatrix::transport

#if MIMATRIX_HEADER_ONLY
#include "mimatrix/transport/fabric/impl/fabric.ipp"
#endif
