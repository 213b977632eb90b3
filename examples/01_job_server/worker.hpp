// The worker side of the job server, for any trainer to include: connect and
// authenticate, wait for a generation's assignment, meet the generation's ranks through
// the server's store (a bootstrap::store), send heartbeats with the last step's
// statistics, and hear of a revoked generation (abort the communicator; then wait for the
// next assignment). Blocking calls; a thread reads the server and another beats.
#pragma once

#include <boost/asio.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <random>
#include <string>
#include <thread>
#include <sys/socket.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "auth.hpp"
#include "mimatrix/bootstrap/env.hpp"
#include "mimatrix/bootstrap/store.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "protocol.hpp"

namespace mimatrix::job {

struct worker_settings {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;
  std::string secret;
  worker_info info;
  std::chrono::milliseconds heartbeat{200};
  /// After the connection is lost, how long to keep reconnecting (a restarted server
  /// takes its workers back); 0: not at all. Training goes on meanwhile: the server is
  /// not on a step's path.
  std::chrono::milliseconds reconnect_for{0};
  /// How long connecting and authenticating may take: a server that accepts but never
  /// answers (stopped, or not a job server) is an error, not a hang.
  std::chrono::milliseconds answer_within{10000};
};

/// @par Thread Safety
/// Every member may be called from any thread; on_revoke's callback runs on the reader
/// thread.
class worker_client {
 public:
  /// Connects and authenticates; throws std::runtime_error with the server's reason.
  explicit worker_client(worker_settings s) : settings_(std::move(s)), socket_(io_) {
    // host:pid alone is not unique: containers on one host network each run as pid 1 (a
    // black-box test: two such workers were one member of the saved generation).
    if (settings_.info.key.empty())
      settings_.info.key = settings_.info.host + ":" + std::to_string(::getpid()) + ":" + std::to_string(std::random_device{}());
    join();
    reader_ = std::thread([this] { read_loop(); });
    if (settings_.heartbeat.count() > 0) beater_ = std::thread([this] { beat_loop(); });
  }
  worker_client(const worker_client&) = delete;
  worker_client& operator=(const worker_client&) = delete;
  ~worker_client() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    boost::system::error_code ignored;
    socket_.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
    if (beater_.joinable()) beater_.join();
    if (reader_.joinable()) reader_.join();
    socket_.close(ignored);
  }

  std::uint64_t id() const { return id_.load(); }
  /// Requests that waited for the server's answer (store operations); heartbeats and
  /// reports do not wait, so a training step that makes none has the server off its path.
  std::uint64_t requests_made() const { return requests_.load(); }
  /// Times the connection was lost and made again.
  int reconnections() const { return reconnections_.load(); }
  std::string where() const { return "tcp://" + settings_.address + ":" + std::to_string(settings_.port); }

  /// The next generation's assignment; throws mimatrix::error(timeout) after `timeout`,
  /// errc::peer_lost once the server is gone.
  assignment next_assignment(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_for(lock, timeout, [&] { return !assignments_.empty() || closed_; }))
      throw error(errc::timeout, "job server at " + where() + ": no assignment within " +
                                     std::to_string(timeout.count()) + " ms");
    if (assignments_.empty()) throw error(errc::peer_lost, "job server at " + where() + " closed: " + closed_why_);
    assignment a = std::move(assignments_.front());
    assignments_.pop_front();
    running_generation_ = a.generation;
    return a;
  }

  /// Called on the reader thread when the server revokes a generation.
  void on_revoke(std::function<void(const revoke&)> f) {
    std::lock_guard lock(mutex_);
    on_revoke_ = std::move(f);
  }
  /// The newest generation revoked (0: none).
  std::uint64_t revoked() const { return revoked_.load(); }

  /// The statistics the next heartbeats carry.
  void report(const heartbeat& h) {
    std::lock_guard lock(mutex_);
    stats_ = h;
  }
  /// Done with the job: the server lets this worker go without revoking its generation.
  void leave(std::uint64_t generation) { send(job::leave{generation}); }
  void report_failure(std::uint64_t generation, const std::string& why) {
    send(failure{generation, why.substr(0, max_text_bytes)});
  }

  /// One store request and its reply; for a generation's store (generation > 0) it ends
  /// with errc::aborted once that generation is revoked: a rendezvous with a dead rank
  /// would otherwise wait out its whole timeout.
  store_reply request(message m, std::uint64_t id, std::chrono::milliseconds timeout, std::uint64_t generation = 0) {
    ++requests_;
    std::unique_lock lock(mutex_);
    replies_.emplace(id, std::nullopt);
    lock.unlock();
    send(m);
    lock.lock();
    const auto revoked = [&] { return generation > 0 && revoked_.load() >= generation; };
    const bool got = changed_.wait_for(lock, timeout, [&] { return replies_[id].has_value() || closed_ || revoked(); });
    auto reply = std::move(replies_[id]);
    replies_.erase(id);
    if (!reply && revoked())
      throw error(errc::aborted, "job server at " + where() + " revoked generation " + std::to_string(generation) +
                                     " during its rendezvous");
    if (!got) throw error(errc::timeout, "job server at " + where() + " did not answer a store request");
    if (!reply) throw error(errc::transport, "job server at " + where() + " closed: " + closed_why_);
    return std::move(*reply);
  }
  std::uint64_t next_request_id() { return ++request_id_; }

  /// The status the server prints for `job_server status`; throws std::runtime_error when
  /// it does not answer within answer_within.
  std::string status() {
    std::unique_lock lock(mutex_);
    status_.reset();
    lock.unlock();
    send(status_request{});
    lock.lock();
    changed_.wait_for(lock, settings_.answer_within, [&] { return status_.has_value() || closed_; });
    if (!status_)
      throw std::runtime_error("job server at " + where() +
                               (closed_ ? " closed: " + closed_why_
                                        : " did not answer within " + std::to_string(settings_.answer_within.count()) + " ms"));
    return *status_;
  }

 private:
  message read_message() {
    std::array<std::byte, header_bytes> header{};
    boost::asio::read(socket_, boost::asio::buffer(header));
    const frame_header h = parse_header(header.data());
    std::vector<std::byte> payload(h.length);
    boost::asio::read(socket_, boost::asio::buffer(payload));
    return decode(h.type, payload.data(), payload.size());
  }
  void send(const message& m) {
    std::lock_guard lock(write_mutex_);
    send_unlocked(m);
  }
  void send_unlocked(const message& m) {
    const auto frame = encode(m);
    boost::system::error_code ec;
    boost::asio::write(socket_, boost::asio::buffer(frame), ec);  // a closed server shows in the reader
  }

  /// Connects, authenticates and registers within answer_within; throws
  /// std::runtime_error naming the server and the reason.
  void join() {
    std::mutex m;
    std::condition_variable cv;
    bool done = false, timed_out = false;
    // A blocked read wakes when its socket is shut down (Asio's sync reads have no timeout).
    std::thread guard([&] {
      std::unique_lock lock(m);
      if (!cv.wait_for(lock, settings_.answer_within, [&] { return done; }) && socket_.is_open()) {
        timed_out = true;
        ::shutdown(socket_.native_handle(), SHUT_RDWR);
      }
    });
    const auto finish = [&] {
      {
        std::lock_guard lock(m);
        done = true;
      }
      cv.notify_all();
      guard.join();
    };
    const auto late = [&] {
      return std::runtime_error("job server at " + where() + " did not answer within " +
                                std::to_string(settings_.answer_within.count()) + " ms");
    };
    try {
      handshake();
    } catch (const boost::system::system_error& e) {
      finish();
      if (timed_out) throw late();
      throw std::runtime_error("job server at " + where() + ": " + e.code().message());
    } catch (...) {
      finish();
      throw;
    }
    finish();
    if (timed_out) throw late();
  }
  void handshake() {
    boost::asio::ip::tcp::resolver resolver(io_);
    boost::asio::connect(socket_, resolver.resolve(settings_.address, std::to_string(settings_.port)));
    socket_.set_option(boost::asio::ip::tcp::no_delay(true));
    const message first = read_message();
    const auto* c = std::get_if<challenge>(&first);
    if (!c) throw std::runtime_error("job server at " + where() + " did not send a challenge");
    worker_info info = settings_.info;
    info.generation = running_generation_.load();  // a server that did not form it ends it
    send_unlocked(hello{answer(settings_.secret, c->nonce), info});
    const message reply = read_message();
    if (const auto* r = std::get_if<reject>(&reply)) throw std::runtime_error("job server refused: " + r->reason);
    const auto* w = std::get_if<welcome>(&reply);
    if (!w) throw std::runtime_error("job server at " + where() + " did not welcome this worker");
    id_ = w->worker_id;
  }

  /// After a lost connection: joins again until reconnect_for passes; true if it did.
  bool rejoin() {
    const auto until = std::chrono::steady_clock::now() + settings_.reconnect_for;
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return false;
      }
      try {
        std::lock_guard lock(write_mutex_);  // no heartbeat goes out half-way
        boost::system::error_code ignored;
        socket_.close(ignored);
        join();
        ++reconnections_;
        return true;
      } catch (const std::exception&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    return false;
  }

  void read_loop() {
    while (true) {
      if (read_until_lost()) break;
      if (!rejoin()) {  // a server gone for good: what waits on it ends now, not at its own timeout
        std::lock_guard lock(mutex_);
        closed_ = true;
        closed_why_ = "the connection was lost and not made again within " +
                      std::to_string(settings_.reconnect_for.count()) + " ms (reconnect_for)";
        break;
      }
    }
    changed_.notify_all();
  }

  /// Reads until the connection ends; true when it should not be made again.
  bool read_until_lost() {
    std::string why = "the connection ended";
    bool final = false;
    try {
      while (true) {
        message m = read_message();
        std::function<void(const revoke&)> callback;
        {
          std::lock_guard lock(mutex_);
          if (auto* a = std::get_if<assignment>(&m)) assignments_.push_back(std::move(*a));
          if (auto* r = std::get_if<store_reply>(&m); r && replies_.count(r->id)) replies_[r->id] = std::move(*r);
          if (auto* s = std::get_if<status_reply>(&m)) status_ = s->text;
          if (auto* r = std::get_if<reject>(&m)) why = r->reason, final = true;
          if (std::holds_alternative<revoke>(m)) callback = on_revoke_;
        }
        if (auto* r = std::get_if<revoke>(&m)) {
          {
            std::lock_guard lock(mutex_);  // a request waiting on it must not miss the change
            revoked_ = std::max(revoked_.load(), r->generation);
          }
          if (callback) callback(*r);
        }
        changed_.notify_all();
      }
    } catch (const std::exception& e) {
      if (why == "the connection ended") why = e.what();
    }
    std::lock_guard lock(mutex_);
    final = final || stopping_ || settings_.reconnect_for.count() == 0;
    if (final) {
      closed_ = true;
      closed_why_ = why;
    }
    return final;
  }

  void beat_loop() {
    std::unique_lock lock(mutex_);
    while (!stopping_ && !closed_) {
      const heartbeat h = stats_;
      lock.unlock();
      send(h);
      lock.lock();
      changed_.wait_for(lock, settings_.heartbeat, [&] { return stopping_ || closed_; });
    }
  }

  worker_settings settings_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  std::atomic<std::uint64_t> id_{0};
  std::atomic<int> reconnections_{0};
  std::mutex mutex_, write_mutex_;
  std::condition_variable changed_;
  std::deque<assignment> assignments_;
  std::map<std::uint64_t, std::optional<store_reply>> replies_;
  std::optional<std::string> status_;
  std::function<void(const revoke&)> on_revoke_;
  heartbeat stats_;
  std::atomic<std::uint64_t> revoked_{0}, request_id_{0}, requests_{0}, running_generation_{0};
  bool closed_ = false, stopping_ = false;
  std::string closed_why_;
  std::thread reader_, beater_;
};

/// A generation's rendezvous store, served by the job server: every key is the
/// generation's own ("g<generation>/key"), so ranks of different generations never meet.
class job_store final : public bootstrap::store {
 public:
  job_store(worker_client& client, std::uint64_t generation)
      : client_(client), generation_(generation), prefix_("g" + std::to_string(generation) + "/") {}

  void set(const std::string& key, const std::vector<std::byte>& value) override {
    check_entry(key, value.size());
    const auto id = client_.next_request_id();
    expect_ok(client_.request(store_set{id, prefix_ + key, value}, id, std::chrono::seconds(30), generation_), key);
  }
  std::vector<std::byte> get(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto id = client_.next_request_id();
    const auto ms = std::uint32_t(std::min<std::int64_t>(timeout.count(), 0x7fffffff));
    auto reply = client_.request(store_get{id, prefix_ + key, ms}, id, timeout + std::chrono::seconds(5), generation_);
    if (reply.result == store_reply::outcome::timeout)
      throw error(errc::timeout, "key '" + key + "' was not set within " + std::to_string(timeout.count()) +
                                     " ms in the rendezvous store at " + where());
    expect_ok(reply, key);
    return std::move(reply.value);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return add_within(key, delta, std::chrono::seconds(30));
  }
  std::int64_t add_within(const std::string& key, std::int64_t delta, std::chrono::milliseconds timeout) override {
    const auto id = client_.next_request_id();
    auto reply = client_.request(store_add{id, prefix_ + key, delta}, id, timeout, generation_);
    expect_ok(reply, key);
    return reply.number;
  }
  std::string where() const override { return "job server " + client_.where() + " (" + prefix_ + ")"; }

 private:
  void expect_ok(const store_reply& r, const std::string& key) const {
    if (r.result != store_reply::outcome::ok)
      throw error(errc::transport, "the rendezvous store at " + where() + " refused key '" + key + "': " + r.error);
  }
  worker_client& client_;
  std::uint64_t generation_;
  std::string prefix_;
};

/// The name of a generation's group (fabric_options::group): every process opens it once,
/// whatever generations it saw before, so its store keys agree across the group.
inline std::string group_name(const assignment& a) { return "job/g" + std::to_string(a.generation); }

/// EFLOPS' BiGraph as the assignment places the ranks: the switches of its cluster
/// description, ranks switch by switch. Throws invalid_argument naming what does not fit
/// (no description, switches of unequal size or an odd number of them).
inline topology::bigraph bigraph_of(const assignment& a) {
  if (a.switches.empty())
    throw error(errc::invalid_argument, "job server: the assignment names no switches (serve with --cluster)");
  std::map<std::uint32_t, std::uint32_t> ranks_on;
  for (std::uint32_t r = 0; r < a.size; ++r) {
    if (r > 0 && a.switches[r] < a.switches[r - 1])
      throw error(errc::invalid_argument, "job server: ranks are not placed switch by switch");
    ++ranks_on[a.switches[r]];
  }
  const std::uint32_t per_switch = ranks_on.begin()->second;
  for (const auto& [sw, n] : ranks_on)
    if (n != per_switch)
      throw error(errc::invalid_argument, "job server: switch " + std::to_string(sw) + " has " + std::to_string(n) +
                                              " ranks and another " + std::to_string(per_switch) +
                                              "; a BiGraph needs the same number on each");
  return topology::bigraph(int(ranks_on.size()), int(per_switch));  // it checks the count is even
}

/// The identity an assignment gives: rank and size, and the local rank and size from the
/// hosts in rank order.
inline bootstrap::identity identity_of(const assignment& a) {
  bootstrap::identity id;
  id.rank = int(a.rank);
  id.size = int(a.size);
  id.local_rank = 0;
  id.local_size = 0;
  for (std::uint32_t r = 0; r < a.size; ++r)
    if (a.hosts[r] == a.hosts[a.rank]) {
      if (r < a.rank) ++id.local_rank;
      ++id.local_size;
    }
  id.launcher = "job_server";
  return id;
}

}  // namespace mimatrix::job
