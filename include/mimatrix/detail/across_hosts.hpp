// An allreduce on device buffers over a communicator whose ranks reach the device memory
// of the ranks on their own host (CUDA IPC) but not of the others', as NCCL runs it (and
// Horovod's hierarchical allreduce): within each host the ranks reduce-scatter through
// each other's memory, the ranks of one local index allreduce their share across the
// hosts through the network, and within each host they allgather again. All three are
// queued on the caller's stream, one behind the other, with no host wait. Only a 1/L
// share of the buffer crosses the network (and the host staging, where the network
// cannot read device memory) where the flat call moves all of it. The count % L elements
// past the last whole share go in one flat call of their own. A broadcast crosses the
// network once a host, to the root's local index there, and then goes within each host;
// an allgather, where ranks are numbered host by host, broadcasts each host's parts
// across the hosts and gathers them within each host; a reduce-scatter, there too,
// reduce-scatters each host's parts within each host into scratch, and the scratch
// across the hosts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "mimatrix/communicator.hpp"
#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/log.hpp"
#include "mimatrix/core/operation.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/detail/bindings.hpp"
#include "mimatrix/detail/buffer_overlap.hpp"
#include "mimatrix/detail/collectives_core.hpp"
#include "mimatrix/detail/composed_call.hpp"
#include "mimatrix/detail/stream_scratch.hpp"
#include "mimatrix/device/port.hpp"
#include "mimatrix/reduce/host_kernels.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/backend.hpp"

namespace mimatrix::detail {

template <transport::backend Transport>
class across_hosts {
 public:
  /// A transport that groups ranks by host, reaches peers' device memory, and makes the
  /// groups' calls share their failures.
  static constexpr bool splits_by_host = requires(Transport& t) {
    Transport::same_host;
    t.share_fate(t);
    t.abort_with(t);
  } && transport::reaches_peers_device_memory<Transport>;

  /// Whether a call on device buffers on `stream` over `comm` may run across hosts as
  /// above: the transport reaches some of the peers' device memory at most. The same
  /// answer on every rank. For transports that split_by_host only, as the rest.
  static bool may_apply(communicator<Transport>& comm, const device::stream& stream) {
    return comm.size() > 2 && !comm.transport().reaches_peers_device_memory(stream);
  }

  /// Splits `comm` by host and by local index: collective, every rank at the same call.
  /// Null where the split does not pay on some rank (hosts of different sizes, one rank a
  /// host, one host, or a host whose ranks do not reach each other's device memory): every
  /// rank then runs its calls flat.
  static std::unique_ptr<across_hosts> split(communicator<Transport>& comm, collectives_core& whole,
                                             const device::stream& stream) {
    std::unique_ptr<across_hosts> made(new across_hosts(comm));
    const int local = made->local_->size(), hosts = made->hosts_->size();
    std::int32_t pays = local > 1 && local < comm.size() && hosts * local == comm.size() &&
                        made->local_->transport().reaches_peers_device_memory(stream);
    std::int32_t everywhere = 0;
    whole.allreduce(&pays, &everywhere, 1, dtype::int32, reduce::op_kind::min, {}).wait();
    if (!everywhere) return nullptr;
    // Where every rank lies: its host's index among the ranks of its local index, and
    // that local index. The same table on every rank.
    const std::int32_t mine[2] = {made->hosts_->rank(), made->local_->rank()};
    made->where_.resize(2 * std::size_t(comm.size()));
    whole.allgather(mine, made->where_.data(), 2, dtype::int32, {}).wait();
    for (int g = 0; g < comm.size(); ++g)
      made->host_major_ &= made->where_[2 * std::size_t(g)] * local + made->where_[2 * std::size_t(g) + 1] == g;
    if (comm.rank() == 0)
      log(log_level::info, "calls on device buffers across " + std::to_string(hosts) + " hosts of " +
                               std::to_string(local) +
                               " ranks: within each host through device memory; allreduce a share a rank across the "
                               "hosts, broadcast once a host, allgather and reduce-scatter " +
                               (made->host_major_ ? "once a host and a part" : "flat (ranks not numbered host by host)"));
    return made;
  }

  /// As collectives_core::allreduce, composed as above; `whole` runs the remainder.
  request allreduce(collectives_core& whole, const void* input, void* output, std::size_t count, dtype type,
                    reduce::op_kind op, const call_options& given) {
    using schedule::collective;
    const call_options options = parts_options(given);
    const auto ranks = static_cast<std::size_t>(local_->size());
    const std::size_t share = count / ranks, shared = share * ranks, bytes = size_of(type);
    const auto* in = static_cast<const std::byte*>(input);
    auto* out = static_cast<std::byte*>(output);
    composed_call call = begin("an allreduce of " + std::to_string(count) + " elements", collective::allreduce, count,
                               type, 0, input, output, options);
    // avg sums at both stages and divides once by all the ranks, as the flat call does
    // (averaging at each stage would round twice, and an integer's mean would drift).
    const reduce::op_kind stage_op = op == reduce::op_kind::avg ? reduce::op_kind::sum : op;
    if (share) {
      std::byte* mine = out + std::size_t(local_->rank()) * share * bytes;
      call.part(local_calls_, collective::reduce_scatter, "its reduce-scatter within the host",
                [&] { return local_calls_.reduce_scatter(in, mine, share, type, stage_op, options); });
      call.part(hosts_calls_, collective::allreduce, "its share's allreduce across the hosts", [&] {
        request r = hosts_calls_.allreduce(mine, mine, share, type, stage_op, options);
        if (op == reduce::op_kind::avg) {  // queued after the share's allreduce, before the allgather reads it
          const device::stream& s = *options.stream;
          s.device->finalize(s.handle, reduce::host_kernels_for(type, op), mine, share * bytes, size_);
        }
        return r;
      });
      call.part(local_calls_, collective::allgather, "its allgather within the host",
                [&] { return local_calls_.allgather(mine, out, share, type, options); });
    }
    if (count > shared)
      call.part(whole, collective::allreduce, "its allreduce of the elements past the last whole share", [&] {
        return whole.allreduce(in + shared * bytes, out + shared * bytes, count - shared, type, op, options);
      });
    return call.finish();
  }

  /// As collectives_core::broadcast: across the hosts among the ranks of the root's local
  /// index, then within each host from that rank.
  request broadcast(collectives_core& whole, const void* input, void* output, std::size_t count, dtype type, int root,
                    const call_options& given) {
    if (root < 0 || root >= size_ || !count) return whole.broadcast(input, output, count, type, root, given);
    call_options options = parts_options(given);
    // The parts carry the world's root in their tag, which peers compare: ranks that named
    // roots of one local index on different hosts ran matching parts, and a host-mate of
    // the one that differed took the other root's data without a word (a black-box test).
    options.tag = given.tag ^ (0x9e3779b9u * std::uint32_t(root + 1));
    const std::int32_t root_host = where_[2 * std::size_t(root)], root_local = where_[2 * std::size_t(root) + 1];
    const bool carries = local_->rank() == root_local;  // this host's rank that the network reaches
    composed_call call = begin("a broadcast of " + std::to_string(count) + " elements from rank " + std::to_string(root),
                               schedule::collective::broadcast, count, type, root, rank_ == root ? input : nullptr,
                               output, options);
    // A mismatch of that tag means ranks named different roots: the error says so.
    const std::string tagged = " (its tag " + std::to_string(options.tag) + " carries root " + std::to_string(root) +
                               ": another tag there is another root, or another call_options::tag)";
    if (carries)
      call.part(hosts_calls_, schedule::collective::broadcast, "its broadcast across the hosts" + tagged, [&] {
        return hosts_calls_.broadcast(rank_ == root ? input : nullptr, output, count, type, root_host, options);
      });
    call.part(local_calls_, schedule::collective::broadcast, "its broadcast within the host" + tagged, [&] {
      return local_calls_.broadcast(carries ? output : nullptr, output, count, type, root_local, options);
    });
    return call.finish();
  }

  /// As collectives_core::reduce_scatter, where gathers(): for each host k in turn, the
  /// ranks of each host reduce-scatter host k's parts of their inputs within the host
  /// into a scratch block, part k; the ranks of each local index then reduce-scatter
  /// that block across the hosts into their outputs. A rank sends (H - 1) parts to the
  /// network, as few as any reduce-scatter can.
  request reduce_scatter(collectives_core& whole, const void* input, void* output, std::size_t count, dtype type,
                         reduce::op_kind op, const call_options& given) {
    if (!count) return whole.reduce_scatter(input, output, count, type, op, given);
    const call_options options = parts_options(given);
    const int hosts = hosts_->size(), local = local_->size();
    const std::size_t bytes = count * size_of(type);
    const auto* in = static_cast<const std::byte*>(input);
    auto* out = static_cast<std::byte*>(output);
    const device::stream& s = *options.stream;
    composed_call call = begin("a reduce-scatter of " + std::to_string(count) + " elements",
                               schedule::collective::reduce_scatter, count, type, 0, input, output, options);
    const reduce::op_kind stage_op = op == reduce::op_kind::avg ? reduce::op_kind::sum : op;
    std::optional<std::size_t> slot;
    if (!call.refused()) try {
        slot = scratch_.take(*s.device, bytes * std::size_t(hosts));
      } catch (const error& e) {
        call.refuse(e.reason());
      }
    std::byte* staged = slot ? scratch_.at(*slot) : nullptr;
    for (int k = 0; k < hosts; ++k)
      call.part(local_calls_, schedule::collective::reduce_scatter,
                "its reduce-scatter within the host of host " + std::to_string(k) + "'s parts", [&] {
                  return local_calls_.reduce_scatter(in + std::size_t(k) * std::size_t(local) * bytes,
                                                     staged + std::size_t(k) * bytes, count, type, stage_op, options);
                });
    call.part(hosts_calls_, schedule::collective::reduce_scatter, "its reduce-scatter across the hosts", [&] {
      request r = hosts_calls_.reduce_scatter(staged, out, count, type, stage_op, options);
      if (op == reduce::op_kind::avg) s.device->finalize(s.handle, reduce::host_kernels_for(type, op), out, bytes, size_);
      return r;
    });
    if (!slot) return call.finish();  // refused: throws
    std::function<void()> spoil = [spoiled = scratch_.spoiled(*slot)] { *spoiled = true; };  // parts may still write it
    scratch_.release_after(*slot, s.handle);
    return call.finish(std::move(spoil));
  }

  /// Whether allgather() and reduce_scatter() compose: ranks are numbered host by host (rank = host · L +
  /// local index), so that each host's parts lie together in the output.
  bool gathers() const { return host_major_; }

  /// As collectives_core::allgather, where gathers(): for each host in turn, its parts
  /// are broadcast across the hosts (each by the rank of its local index) into their
  /// place in the output, and then allgathered within each host through device memory.
  /// A rank takes (H - 1) parts from the network, as few as any allgather can.
  request allgather(collectives_core& whole, const void* input, void* output, std::size_t count, dtype type,
                    const call_options& given) {
    if (!count) return whole.allgather(input, output, count, type, given);
    const call_options options = parts_options(given);
    const int hosts = hosts_->size(), local = local_->size(), host = hosts_->rank();
    const std::size_t bytes = count * size_of(type);
    const auto* in = static_cast<const std::byte*>(input);
    auto* out = static_cast<std::byte*>(output);
    composed_call call = begin("an allgather of " + std::to_string(count) + " elements",
                               schedule::collective::allgather, count, type, 0, input, output, options);
    for (int k = 0; k < hosts; ++k) {
      std::byte* block = out + std::size_t(k) * std::size_t(local) * bytes;  // host k's parts
      std::byte* place = block + std::size_t(local_->rank()) * bytes;         // this local index's
      call.part(hosts_calls_, schedule::collective::broadcast,
                "its broadcast across the hosts of host " + std::to_string(k) + "'s parts",
                [&] { return hosts_calls_.broadcast(k == host ? in : nullptr, place, count, type, k, options); });
      call.part(local_calls_, schedule::collective::allgather,
                "its allgather within the host of host " + std::to_string(k) + "'s parts",
                [&] { return local_calls_.allgather(place, block, count, type, options); });
    }
    return call.finish();
  }

 private:
  explicit across_hosts(communicator<Transport>& comm)
      : whole_(comm),
        rank_(comm.rank()),
        size_(comm.size()),
        local_(comm.split(Transport::same_host, comm.rank())),
        hosts_(comm.split(local_->rank(), comm.rank())),
        local_calls_(calls_on(*local_)),
        hosts_calls_(calls_on(*hosts_)) {
    // communicator::abort() on `comm` ends the parts in flight and later ones too.
    comm.transport().abort_with(local_->transport());
    comm.transport().abort_with(hosts_->transport());
  }

  /// The parts' options: their deadline is the whole communicator's, as it is now.
  call_options parts_options(const call_options& given) const {
    call_options options = given;
    if (!options.timeout) options.timeout = whole_.settings().timeout;
    return options;
  }

  /// A composed call as this rank starts it, whose errors say "rank R: `what` across H
  /// hosts": its parts, and none of another call's, fail together. Buffers that no part
  /// may take refuse it whole, named as the whole call (a part would name its group's
  /// rank, collective and bytes).
  composed_call begin(const std::string& what, schedule::collective kind, std::size_t count, dtype type, int root,
                      const void* input, const void* output, const call_options& options) {
    local_->transport().share_fate(hosts_->transport());
    composed_call call("rank " + std::to_string(rank_) + ": " + what + " across " + std::to_string(hosts_->size()) +
                       " hosts");
    const schedule::descriptor d{.kind = kind, .size = size_, .count = count, .elem_size = size_of(type), .root = root};
    auto why = overlap_problem(d, rank_, input, output);
    if (!why && options.stream->device) why = device_buffer_problem(*options.stream->device, d, rank_, input, output);
    if (why) call.refuse(*why);
    return call;
  }

  static collectives_core calls_on(communicator<Transport>& c) {
    return collectives_core(c.state(), face_of(c.transport()), std::make_shared<const topology::ring>(),
                            &automatic_on<topology::ring>, suggestion_of(c.transport()));
  }

  communicator<Transport>& whole_;
  int rank_, size_;  // in the whole communicator
  // Communicators move not: made in place from split().
  std::optional<communicator<Transport>> local_;  // this host's ranks
  std::optional<communicator<Transport>> hosts_;  // the ranks of this local index, one a host
  collectives_core local_calls_, hosts_calls_;
  std::vector<std::int32_t> where_;  // by rank of the whole: its host's index in its hosts_, its local index
  bool host_major_ = true;           // rank = host · L + local index, on every rank
  stream_scratch scratch_;           // last: it waits for the parts' work, which the groups' progress ends
};

}  // namespace mimatrix::detail
