// The state the ranks of one in-process group share: a mailbox per rank, where
// senders post the address of data that receivers then read directly (zero copy) and
// writers post one-sided writes that the target applies to its own buffers, and a
// board per call where ranks check each other's signatures.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mimatrix/core/error.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/schedule/signature.hpp"
#include "mimatrix/transport/detail/inproc_pair_board.hpp"
#include "mimatrix/transport/progress.hpp"

namespace mimatrix::transport::detail {

/// What a mailbox entry asks of its target.
enum class posted_kind : std::uint8_t {
  message,  // a send: the matching recv reads `data`
  write,    // one-sided: the target copies `data` into its own `dst`, then raises flag `tag`
  notify,   // one-sided: the target raises flag `tag`
};

/// A send, write or notify waiting for its target, which reads `data` in place and then
/// sets `done`. The target owns the buffers a write lands in, so it alone copies into
/// them, while it runs call `sequence`: lifetimes are never in doubt.
struct posted_send {
  posted_kind kind = posted_kind::message;
  int source = -1;
  std::uint64_t sequence = 0;  // the call's key (inproc_world::call_key), or a p2p batch's with the target
  bool pair = false;           // a p2p batch's message: `sequence` is call_key(instance, pair epoch)
  std::uint32_t tag = 0;
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  schedule::region dst{};  // write only: in the target's buffers
  std::byte* out = nullptr;  // sync 1 of a direct collective: where the target's part lies in the writer's output
  std::size_t out_bytes = 0;
  const signature* sig = nullptr;
  std::atomic<bool> done{false};
};

/// @par Thread Safety
/// Every member may be called from any rank's thread.
class inproc_world {
 public:
  struct mailbox {
    std::mutex mutex;
    std::condition_variable changed;
    std::uint64_t generation = 0;  // bumped on every event for this rank
    std::vector<posted_send*> posted;
  };

  explicit inproc_world(int size) {
    if (size < 1)
      throw error(errc::invalid_argument, "transport::inproc: a group needs at least one rank, got " + std::to_string(size));
    for (int r = 0; r < size; ++r) boxes_.push_back(std::make_unique<mailbox>());
    opened_.assign(std::size_t(size), 0);
    const unsigned cores = std::thread::hardware_concurrency();
    spin_limit_ = cores == 0 || static_cast<unsigned>(size) <= cores ? yields_before_sleep : 0;
  }
  inproc_world(const inproc_world&) = delete;
  inproc_world& operator=(const inproc_world&) = delete;

  int size() const { return static_cast<int>(boxes_.size()); }
  /// The worlds this process made before this one: names it among them (timelines).
  std::uint64_t id() const { return id_; }

  /// How often a blocked rank yields before it sleeps. Yielding wins when a peer is
  /// microseconds away on another core; with more ranks than cores it only burns time
  /// the peer needs, so then ranks sleep at once.
  int spin_limit() const { return spin_limit_; }
  mailbox& box(int rank) { return *boxes_[rank]; }

  /// Opens an endpoint of `rank`: the number of endpoints `rank` opened here before.
  /// Ranks open their communicators on a world in one order, so the k-th of each meet,
  /// and their calls' keys never meet those of an earlier or concurrent communicator,
  /// whose sequences also start at 0. (Found by a black-box test: a communicator made
  /// while a peer still left the last one's call #0 shared its board entry, and every
  /// rank timed out saying the others never called.)
  std::uint64_t open(int rank) {
    std::lock_guard lock(board_mutex_);
    return opened_[std::size_t(rank)]++;
  }

  /// The world's key of call `sequence` of a rank's endpoint `instance` (open()).
  static constexpr std::uint64_t call_key(std::uint64_t instance, std::uint64_t sequence) {
    return (instance << sequence_bits) | (sequence & ((std::uint64_t(1) << sequence_bits) - 1));
  }
  /// 2^44 calls a communicator, 2^20 communicators a world.
  static constexpr int sequence_bits = 44;

  /// The p2p batches' pair board.
  inproc_pair_board& pairs() { return pairs_; }

  /// Wakes `rank` if it waits for an event.
  void notify(int rank) {
    mailbox& b = box(rank);
    {
      std::lock_guard lock(b.mutex);
      ++b.generation;
    }
    b.changed.notify_all();
  }

  void post(int to, posted_send* send) {
    mailbox& b = box(to);
    {
      std::lock_guard lock(b.mutex);
      b.posted.push_back(send);
      ++b.generation;
    }
    b.changed.notify_all();
  }

  /// Takes `send` back if no receiver has claimed it; false if one is reading it now.
  bool withdraw(int to, posted_send* send) {
    mailbox& b = box(to);
    std::lock_guard lock(b.mutex);
    for (auto it = b.posted.begin(); it != b.posted.end(); ++it)
      if (*it == send) {
        b.posted.erase(it);
        return true;
      }
    return false;
  }

  /// Records that `rank` entered `call` (call_key: `sig.sequence` of one of its
  /// communicators), waking ranks that wait for it;
  /// returns a failure if its signature differs from one already there, recorded
  /// for every rank to see.
  /// `algorithm` and `agreement` (the schedule's name and schedule::agreement) must agree
  /// too: ranks of one shape that run different algorithms, or one algorithm on different
  /// topologies, would each wait for messages the others never send.
  std::optional<failure> join(int rank, std::uint64_t call, const signature& sig, std::string_view algorithm = {},
                              std::uint64_t agreement = 0) {
    std::optional<failure> result;
    {
      std::lock_guard lock(board_mutex_);
      entry& e = board(call);
      e.joined[rank] = sig;
      e.algorithms[rank] = algorithm;
      e.agreements[rank] = agreement;
      if (e.failed) return e.failed;
      for (int other = 0; other < size(); ++other) {
        if (!e.joined[other]) continue;
        std::string why;
        if (!(*e.joined[other] == sig))
          why = "rank " + std::to_string(rank) + " called " + to_string(sig) + " but rank " + std::to_string(other) +
                " called " + to_string(*e.joined[other]);
        else if (e.algorithms[other] != algorithm)
          why = "rank " + std::to_string(rank) + " runs " + to_string(sig) + " with algorithm '" +
                std::string(algorithm) + "' but rank " + std::to_string(other) + " with '" + e.algorithms[other] +
                "' (each rank's call_options::algorithm, typed algorithm, or what automatic chose for its memory)";
        else if (e.agreements[other] != agreement)
          why = "rank " + std::to_string(rank) + " runs " + to_string(sig) + " by '" + std::string(algorithm) +
                "' with other parameters than rank " + std::to_string(other) +
                " (the topology's: ring order, node size, BiGraph shape; or the algorithm's: rank order, chunk); "
                "every rank must build its collective alike";
        if (why.empty()) continue;
        e.failed = failure{errc::mismatch, why};
        result = e.failed;
        break;
      }
    }
    notify_everyone();
    return result;
  }

  /// Records the first failure of call `sequence` and wakes every rank.
  void fail(std::uint64_t sequence, failure f) {
    {
      std::lock_guard lock(board_mutex_);
      entry& e = board(sequence);
      if (!e.failed) e.failed = std::move(f);
    }
    notify_everyone();
  }

  std::optional<failure> failed(std::uint64_t sequence) {
    std::lock_guard lock(board_mutex_);
    auto it = board_.find(sequence);
    return it == board_.end() ? std::nullopt : it->second.failed;
  }

  /// Ranks that have not entered call `sequence`, as "1, 4"; empty when all have.
  std::string missing(std::uint64_t sequence) {
    std::lock_guard lock(board_mutex_);
    std::string list;
    const entry& e = board(sequence);
    for (int r = 0; r < size(); ++r)
      if (!e.joined[r]) list += (list.empty() ? "" : ", ") + std::to_string(r);
    return list;
  }

  /// A rank is done with call `sequence`; the last one frees its entry.
  void leave(std::uint64_t sequence) {
    std::lock_guard lock(board_mutex_);
    auto it = board_.find(sequence);
    if (it != board_.end() && ++it->second.left == size()) board_.erase(it);
  }

 private:
  struct entry {
    std::vector<std::optional<signature>> joined;
    std::vector<std::string> algorithms;  // by rank, as joined
    std::vector<std::uint64_t> agreements;
    std::optional<failure> failed;
    int left = 0;
  };

  entry& board(std::uint64_t sequence) {
    entry& e = board_[sequence];
    if (e.joined.empty()) {
      e.joined.resize(boxes_.size());
      e.algorithms.resize(boxes_.size());
      e.agreements.resize(boxes_.size());
    }
    return e;
  }

  void notify_everyone() {
    for (int r = 0; r < size(); ++r) notify(r);
  }

  std::vector<std::unique_ptr<mailbox>> boxes_;
  static constexpr int yields_before_sleep = 64;
  int spin_limit_ = 0;
  std::mutex board_mutex_;
  std::map<std::uint64_t, entry> board_;  // by call_key
  inproc_pair_board pairs_;
  std::vector<std::uint64_t> opened_;     // by rank: endpoints opened (open())
  std::uint64_t id_ = next_id();

  static std::uint64_t next_id() {
    static std::atomic<std::uint64_t> made{0};
    return made++;
  }
};

/// How a rank waits for its peers: yields while they are likely microseconds away, then
/// sleeps until its mailbox changes (a post, a release, a join or a failure).
class inproc_port final : public progress_port {
 public:
  inproc_port(inproc_world& world, int rank) : world_(world), rank_(rank) {}

  std::uint64_t snapshot() override {
    auto& box = world_.box(rank_);
    std::lock_guard lock(box.mutex);
    return box.generation;
  }

  void pause(std::uint64_t seen, int idle_rounds) override {
    if (idle_rounds <= world_.spin_limit()) return std::this_thread::yield();
    auto& box = world_.box(rank_);
    std::unique_lock lock(box.mutex);
    box.changed.wait_for(lock, std::chrono::milliseconds(5), [&] { return box.generation != seen; });
  }

 private:
  inproc_world& world_;
  int rank_;
};

}  // namespace mimatrix::transport::detail
