// The MiMatrix job server: workers connect, authenticate and register; the server forms
// generations (ranks, placement, shards, local batches), serves their rendezvous store,
// watches heartbeats, and on a death or a late joiner revokes the generation and forms the
// next one. It never carries gradients. One thread, Boost.Asio C++20 coroutines: every
// handler runs to its next co_await, so the state needs no locks.
#pragma once

#include <boost/asio.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "auth.hpp"
#include "balance.hpp"
#include "cluster.hpp"
#include "protocol.hpp"
#include "server_settings.hpp"
#include "session.hpp"
#include "state_file.hpp"

namespace mimatrix::job {

namespace asio = boost::asio;
using asio::ip::tcp;
using clock = std::chrono::steady_clock;

/// What monitoring reads of the server: the generation and every worker's last report.
struct worker_view {
  std::uint64_t id = 0;
  std::string host;
  bool member = false;  // of the running generation (else waiting)
  std::uint32_t rank = 0, local_batch = 0;
  heartbeat last;       // its last statistics in this generation
  double seen_ms_ago = 0;
};
struct server_view {
  std::uint64_t generation = 0, completed_step = 0;
  bool running = false;
  std::uint64_t generations_revoked = 0, workers_rejected = 0;
  std::vector<worker_view> workers;
};

/// @par Thread Safety
/// Runs on one io_context thread; status() and the test accessors are for that thread
/// (or after run() returned).
class job_server {
 public:
  job_server(asio::io_context& io, server_settings s)
      : io_(io),
        settings_(std::move(s)),
        acceptor_(io, tcp::endpoint(asio::ip::make_address(settings_.address), settings_.port)),
        tick_(io) {
    if (settings_.secret.empty()) throw std::runtime_error("job server: an empty secret would let anyone in");
    load_state();
    detail::close_on_exec(acceptor_.native_handle());
    asio::co_spawn(io_, accept_loop(), asio::detached);
    asio::co_spawn(io_, watchdog(), asio::detached);
  }

  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::uint64_t generation() const { return generation_; }
  std::size_t members() const { return members_.size(); }

  /// The state monitoring shows (/metrics, the status page).
  server_view view() const {
    server_view v;
    v.generation = generation_;
    v.completed_step = completed_step();
    v.running = running_;
    v.generations_revoked = revoked_;
    v.workers_rejected = rejected_;
    const auto now = clock::now();
    for (const auto& s : sessions_) {
      if (!s->registered || !s->role_worker) continue;
      worker_view w;
      w.id = s->id;
      w.host = s->info.host;
      w.member = s->in_generation(generation_);
      w.rank = s->rank;
      w.local_batch = s->batch;
      w.last = s->last;
      w.seen_ms_ago = std::chrono::duration<double, std::milli>(now - s->last_seen).count();
      v.workers.push_back(std::move(w));
    }
    return v;
  }

  /// The group as `job_server status` prints it.
  std::string status() const {
    std::ostringstream o;
    o << "generation " << generation_ << (running_ ? " running" : done_ ? " done" : " forming") << ", "
      << members_.size() << " ranks, last completed step " << completed_step() << "\n";
    const auto now = clock::now();
    for (const auto& m : members_) {
      o << "  rank " << m->rank << "  worker " << m->id << "  " << m->info.host << "  step " << m->last.step
        << "  step " << m->last.step_ms << " ms  allreduce " << m->last.allreduce_ms << " ms  busbw "
        << m->last.busbw_gbps << " GB/s  loss " << m->last.loss << "  batch " << m->batch << "  seen "
        << std::chrono::duration_cast<std::chrono::milliseconds>(now - m->last_seen).count() << " ms ago\n";
    }
    for (const auto& w : sessions_)
      if (w->registered && w->role_worker && !w->in_generation(generation_))
        o << "  waiting: worker " << w->id << "  " << w->info.host << "\n";
    return o.str();
  }

 private:
  using session = detail::session;
  using session_ptr = detail::session_ptr;

  struct pending_get {
    std::weak_ptr<session> who;
    std::uint64_t id;
    std::string key;
    clock::time_point deadline;
  };

  void log(const std::string& line) const {
    if (!settings_.quiet) std::fprintf(stderr, "job_server: %s\n", line.c_str());
  }

  asio::awaitable<void> accept_loop() {
    while (true) {
      tcp::socket socket = co_await acceptor_.async_accept(asio::use_awaitable);
      socket.set_option(tcp::no_delay(true));
      detail::close_on_exec(socket.native_handle());
      auto s = std::make_shared<session>(std::move(socket));
      boost::system::error_code ec;
      const auto remote = s->socket.remote_endpoint(ec);
      s->peer = ec ? "?" : remote.address().to_string() + ":" + std::to_string(remote.port());
      sessions_.push_back(s);
      asio::co_spawn(io_, detail::write_outbox(s), asio::detached);
      asio::co_spawn(io_, reader(s), asio::detached);
    }
  }

  asio::awaitable<void> reader(session_ptr s) {
    std::string why;
    try {
      s->challenge = random_nonce();
      s->send(challenge{s->challenge});
      std::array<std::byte, header_bytes> header{};
      std::vector<std::byte> payload;
      while (!s->closed) {
        co_await asio::async_read(s->socket, asio::buffer(header), asio::use_awaitable);
        const frame_header h = parse_header(header.data());
        payload.resize(h.length);
        co_await asio::async_read(s->socket, asio::buffer(payload), asio::use_awaitable);
        handle(s, decode(h.type, payload.data(), payload.size()));
      }
    } catch (const protocol_error& e) {
      why = std::string("broke the protocol: ") + e.what();
    } catch (const boost::system::system_error& e) {
      why = e.code() == asio::error::eof ? "closed the connection" : "connection failed: " + e.code().message();
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!s->closed) close(s, why);
  }

  /// Ends a session: a reason to the client when it can still read one, a log line, and
  /// a new generation if it was a member of the running one.
  void close(const session_ptr& s, const std::string& why) {
    if (s->closed) return;
    if (s->registered || !why.empty()) s->send(reject{why});
    if (!s->registered) ++rejected_;
    s->closed = true;
    s->wake.cancel_one();
    boost::system::error_code ignored;
    s->socket.shutdown(tcp::socket::shutdown_receive, ignored);
    // An observer (a status query) that hangs up is done, not news: no line for each query.
    const bool observer_done = s->registered && !s->role_worker && why == "closed the connection";
    if (!observer_done)
      log((s->registered ? "worker " + std::to_string(s->id) + " (" + s->info.host + ")" : "connection " + s->peer) +
          ": " + why);
    sessions_.erase(std::remove(sessions_.begin(), sessions_.end(), s), sessions_.end());
    if (s->in_generation(generation_) && running_ && !s->left) {
      revoke_all("rank " + std::to_string(s->rank) + " (worker " + std::to_string(s->id) + ", " + s->info.host +
                 ") " + why);
    }
    // A closed session is no rank any more (status lists only live ones); its last step
    // stays the generation's once every member has left: the job is done.
    if (std::find(members_.begin(), members_.end(), s) != members_.end()) {
      resume_step_ = std::max(resume_step_, s->left ? completed_step() : resume_step_);
      std::erase(members_, s);
      if (members_.empty() && running_ && s->left) {
        running_ = false;
        done_ = true;
        log("generation " + std::to_string(generation_) + " done: every member left");
        save_state();
      }
    }
  }

  void handle(const session_ptr& s, message m) {
    s->last_seen = clock::now();
    if (!s->registered) {
      auto* h = std::get_if<hello>(&m);
      if (!h) return close(s, "sent a " + std::to_string(unsigned(kind_of(m))) + " message before authenticating");
      if (!verify(settings_.secret, s->challenge, h->mac)) return close(s, "failed authentication");
      s->registered = true;
      s->id = ++last_id_;
      s->info = h->info;
      s->role_worker = h->info.accelerators != observer_mark;
      s->speed = throughput_estimate(h->info.throughput);  // declared: the first measurement replaces it
      s->send(welcome{s->id});
      if (s->role_worker) {
        log("worker " + std::to_string(s->id) + " joined from " + s->info.host + " (" + s->peer + ")");
        if (!first_waiting_) first_waiting_ = clock::now();
        end_a_generation_not_running_here(*s);
      }
      return;
    }
    std::visit(
        [&](auto& body) {
          using T = std::decay_t<decltype(body)>;
          if constexpr (std::is_same_v<T, heartbeat>) {
            if (body.generation == generation_ && s->in_generation(generation_)) s->last = body;
            s->speed.add(body.throughput, s->last_seen, throughput_half_life());
          } else if constexpr (std::is_same_v<T, failure>) {
            if (body.generation == generation_ && running_ && s->in_generation(generation_))
              revoke_all("rank " + std::to_string(s->rank) + " reported: " + body.reason);
          } else if constexpr (std::is_same_v<T, store_set>) {
            store_[body.key] = std::move(body.value);
            s->send(store_reply{body.id, store_reply::outcome::ok, {}, 0, {}});
            answer_gets(body.key);
          } else if constexpr (std::is_same_v<T, store_add>) {
            std::int64_t& counter = counters_[body.key];
            counter += body.delta;
            s->send(store_reply{body.id, store_reply::outcome::ok, {}, counter, {}});
          } else if constexpr (std::is_same_v<T, store_get>) {
            if (auto it = store_.find(body.key); it != store_.end())
              s->send(store_reply{body.id, store_reply::outcome::ok, it->second, 0, {}});
            else
              gets_.push_back({s, body.id, body.key, clock::now() + std::chrono::milliseconds(body.timeout_ms)});
          } else if constexpr (std::is_same_v<T, leave>) {
            s->left = true;  // done: the others finish too, and nothing is revoked
            close(s, "left: its work is done");
          } else if constexpr (std::is_same_v<T, status_request>) {
            s->send(status_reply{status()});
          } else {
            close(s, "sent a message only the server sends (kind " + std::to_string(unsigned(kind_of(m))) + ")");
          }
        },
        m);
  }

  void answer_gets(const std::string& key) {
    const auto it = store_.find(key);
    std::erase_if(gets_, [&](const pending_get& g) {
      if (g.key != key) return false;
      if (auto who = g.who.lock()) who->send(store_reply{g.id, store_reply::outcome::ok, it->second, 0, {}});
      return true;
    });
  }

  asio::awaitable<void> watchdog() {
    while (true) {
      tick_.expires_after(tick_period);
      co_await tick_.async_wait(asio::use_awaitable);
      const auto now = clock::now();
      // A server that did not run (stopped, or starved of the CPU) cannot tell a silent
      // worker from one whose heartbeats wait unread in its socket: the time it was away
      // is not the workers' (a black-box test: SIGSTOP for 5 s, and at SIGCONT a healthy
      // worker was closed for missed heartbeats before its backlog was read).
      if (const auto away = now - last_tick_ - tick_period; away > std::chrono::milliseconds(100))
        for (const auto& s : sessions_) {
          s->connected = std::min(now, s->connected + away);
          s->last_seen = std::min(now, s->last_seen + away);
        }
      last_tick_ = now;
      for (const auto& s : std::vector<session_ptr>(sessions_)) {
        if (!s->registered && now - s->connected > settings_.hello_deadline)
          close(s, "did not authenticate within " + std::to_string(settings_.hello_deadline.count()) + " ms");
        else if (s->in_generation(generation_) && now - s->last_seen > settings_.heartbeat_deadline)
          close(s, "missed heartbeats for " + std::to_string(settings_.heartbeat_deadline.count()) + " ms");
      }
      std::erase_if(gets_, [&](const pending_get& g) {
        if (now < g.deadline) return false;
        if (auto who = g.who.lock())
          who->send(store_reply{g.id, store_reply::outcome::timeout, {}, 0, "no rank set it in time"});
        return true;
      });
      maybe_form(now);
      if (running_ && settings_.rebalance_every.count() > 0 && now - formed_at_ >= settings_.rebalance_every) {
        formed_at_ = now;
        if (const std::string why = imbalance(); imbalance_seen_.confirm(!why.empty())) revoke_all(why);
      }
      if (running_ && completed_step() != saved_step_ && now - saved_at_ > std::chrono::seconds(1)) {
        saved_at_ = now;
        save_state();
      }
    }
  }

  std::vector<session_ptr> candidates() const {
    std::vector<session_ptr> c;
    for (const auto& s : sessions_)
      if (s->registered && s->role_worker && !s->closed) c.push_back(s);
    return c;
  }

  void maybe_form(clock::time_point now) {
    auto ready = candidates();
    const std::size_t all = ready.size();
    if (all > settings_.global_batch) ready.resize(settings_.global_batch);  // a sample a rank at least
    if (!saved_.empty() && !adopt_saved(ready, now)) return;
    if (running_) {
      for (const auto& s : ready)
        if (!s->in_generation(generation_)) {  // a late joiner: admitted at the next generation, formed now
          revoke_all("worker " + std::to_string(s->id) + " (" + s->info.host + ") joins");
          break;
        }
      return;
    }
    if (ready.empty()) return;
    const int n = int(ready.size());
    const bool waited = first_waiting_ && now - *first_waiting_ >= settings_.form_after;
    if (n >= settings_.expected || (n >= settings_.minimum && (waited || generation_ > 0))) {
      if (all > ready.size())
        log(std::to_string(all - ready.size()) + " worker(s) wait: a global batch of " +
            std::to_string(settings_.global_batch) + " gives at most " + std::to_string(ready.size()) + " ranks");
      form(ready);
    }
  }

  void revoke_all(const std::string& why) {
    if (!running_) return;
    log("generation " + std::to_string(generation_) + " revoked: " + why);
    for (const auto& m : members_) m->send(revoke{generation_, why});
    // Its rendezvous will not complete: waiting gets end now, not at their timeouts.
    const std::string prefix = "g" + std::to_string(generation_) + "/";
    std::erase_if(gets_, [&](const pending_get& g) {
      if (g.key.rfind(prefix, 0) != 0) return false;
      if (auto who = g.who.lock())
        who->send(store_reply{g.id, store_reply::outcome::error, {}, 0, "generation " + std::to_string(generation_) + " was revoked"});
      return true;
    });
    running_ = false;
    ++revoked_;
    maybe_form(clock::now());
  }

  std::pair<std::uint32_t, std::size_t> place_of(const std::string& host) const {
    return place_in(settings_.cluster, host);
  }

  /// A worker that (re)joins running a generation that is not running here with it as a
  /// member: one an earlier server formed (restarted without --state-file, it had formed
  /// its own generation 1 from workers still running the old one, a black-box test), or
  /// one revoked while the worker was away. It is told to end it, and the next generation
  /// forms above it (a worker skips an assignment for a generation it saw revoked).
  void end_a_generation_not_running_here(session& s) {
    const std::uint64_t g = s.info.generation;
    if (g == 0) return;
    const auto member = [&](const std::string& key) {
      return std::any_of(members_.begin(), members_.end(), [&](const session_ptr& m) { return m->info.key == key; }) ||
             std::any_of(saved_.begin(), saved_.end(), [&](const saved_member& m) { return m.key == key; });
    };
    if (g == generation_ && member(s.info.key)) return;
    floor_ = std::max(floor_, g);
    const bool known = first_generation_ > 0 && g >= first_generation_ && g <= generation_;
    const std::string why = known ? "generation " + std::to_string(g) + " is over"
                                  : "the job server does not know generation " + std::to_string(g) +
                                        " (it restarted without --state-file): a new one forms";
    log("worker " + std::to_string(s.id) + " (" + s.info.host + ") came running generation " + std::to_string(g) +
        ": " + why);
    s.send(revoke{g, why});
  }

  void form(std::vector<session_ptr> group) {
    std::stable_sort(group.begin(), group.end(), [&](const session_ptr& a, const session_ptr& b) {
      const auto pa = place_of(a->info.host), pb = place_of(b->info.host);
      if (pa != pb) return pa < pb;
      return a->info.host != b->info.host ? a->info.host < b->info.host : a->id < b->id;
    });
    // The keys of older generations go: a store holds one generation's rendezvous.
    for (auto it = store_.begin(); it != store_.end();) it = it->first.rfind("g", 0) == 0 ? store_.erase(it) : ++it;
    counters_.clear();
    resume_step_ = completed_step();
    generation_ = std::max(generation_, floor_) + 1;
    if (first_generation_ == 0) first_generation_ = generation_;
    members_ = group;
    std::vector<std::optional<double>> known;
    std::vector<std::string> hosts;
    std::vector<std::uint32_t> switches;
    for (const auto& m : group) {
      known.push_back(m->speed.known()), hosts.push_back(m->info.host);
      if (!settings_.cluster.empty()) {
        const std::uint32_t sw = place_of(m->info.host).first;
        if (sw == UINT32_MAX) log("worker " + std::to_string(m->id) + "'s host " + m->info.host + " is not in the cluster description");
        switches.push_back(sw);
      }
    }
    const split sp = split_by_throughput(speeds_for_split(known), settings_.global_batch, settings_.samples);
    for (std::size_t r = 0; r < group.size(); ++r) {
      auto& m = *group[r];
      m.member_of = generation_;
      m.rank = std::uint32_t(r);
      m.batch = sp.batch[r];
      m.last = heartbeat{};
      m.last_seen = clock::now();
      m.send(assignment{generation_, std::uint32_t(r), std::uint32_t(group.size()), hosts, sp.shard[r].first,
                        sp.shard[r].second, sp.batch[r], resume_step_, switches});
    }
    running_ = true;
    done_ = false;
    formed_at_ = clock::now();
    imbalance_seen_ = imbalance_streak{settings_.rebalance_confirmations};
    first_waiting_.reset();
    log("generation " + std::to_string(generation_) + " formed: " + std::to_string(group.size()) + " ranks");
    save_state();
  }

  // ---- the state file (state_file.hpp) -----------------------------------------------

  /// Reads the state file, if there is one: the generation its workers run goes on once
  /// they are all back.
  void load_state() {
    if (settings_.state_file.empty()) return;
    // Refused at start: a file never written loses the restart it is for, without a word.
    if (const std::string why = state_file_unwritable(settings_.state_file); !why.empty())
      throw std::runtime_error("job server: cannot write the state file '" + settings_.state_file + "': " + why);
    std::optional<saved_state> state = read_state_file(settings_.state_file);
    if (!state) return;
    std::uint64_t batches = 0;
    for (const auto& m : state->members) batches += m.batch;
    if (!state->members.empty() && batches != settings_.global_batch)
      throw std::runtime_error("job server: the state file '" + settings_.state_file + "' saved local batches summing to " +
                               std::to_string(batches) + ", but --batch is " + std::to_string(settings_.global_batch));
    generation_ = first_generation_ = state->generation;
    resume_step_ = state->completed_step;
    saved_ = std::move(state->members);
    restarted_at_ = clock::now();
    if (!saved_.empty())
      log("restarted: waiting for the " + std::to_string(saved_.size()) + " workers of generation " +
          std::to_string(generation_));
  }

  void save_state() {
    if (settings_.state_file.empty()) return;
    saved_step_ = completed_step();
    saved_state state{generation_, saved_step_, {}};
    for (const auto& m : members_) state.members.push_back({m->rank, m->batch, m->info.key, m->info.host});
    const std::string why = write_state_file(settings_.state_file, state);
    if (why.empty())
      state_write_failed_ = false;
    else if (!std::exchange(state_write_failed_, true))  // said once a run of failures
      log("cannot write the state file '" + settings_.state_file + "': " + why +
          " (a restart would not find this generation)");
  }

  /// After a restart: once every worker of the saved generation is back, it goes on as
  /// it was (same ranks, batches, shards; nothing revoked) and true; if they are not all
  /// back within form_after, those that are drop the old generation and a new one forms
  /// (true); else false: wait.
  bool adopt_saved(const std::vector<session_ptr>& ready, clock::time_point now) {
    std::vector<session_ptr> back(saved_.size());
    std::size_t found = 0;
    for (std::size_t i = 0; i < saved_.size(); ++i)
      for (const auto& s : ready)
        if (s->info.key == saved_[i].key && !back[i] && std::find(back.begin(), back.end(), s) == back.end())
          back[i] = s, ++found;  // each saved member once, each worker once
    if (found == saved_.size()) {
      members_.clear();
      for (std::size_t i = 0; i < saved_.size(); ++i) {
        back[i]->member_of = generation_;
        back[i]->rank = saved_[i].rank;
        back[i]->batch = saved_[i].batch;
        members_.push_back(back[i]);
      }
      std::sort(members_.begin(), members_.end(), [](const session_ptr& a, const session_ptr& b) { return a->rank < b->rank; });
      running_ = true;
      saved_.clear();
      log("generation " + std::to_string(generation_) + " goes on after a restart: all " +
          std::to_string(members_.size()) + " workers are back");
      save_state();
      return false;
    }
    if (now - restarted_at_ < settings_.form_after) return false;
    for (const auto& s : back)
      if (s) s->send(revoke{generation_, "the job server restarted and not every worker came back"});
    saved_.clear();
    return true;
  }

  /// Why the running generation's local batches no longer follow the members' smoothed
  /// throughput (the SJSU balancing) by more than the tolerance, or "" when they do.
  std::string imbalance() const {
    std::vector<std::uint32_t> have;
    std::vector<std::optional<double>> known;
    for (const auto& m : members_) have.push_back(m->batch), known.push_back(m->speed.known());
    const auto gap = off_share(have, speeds_for_split(known), settings_.global_batch, settings_.rebalance_tolerance);
    if (!gap) return {};
    return "rebalancing: rank " + std::to_string(gap->rank) + " (" + members_[gap->rank]->info.host + ") has batch " +
           std::to_string(gap->have) + " but its throughput calls for " + std::to_string(gap->want);
  }

  std::chrono::duration<double> throughput_half_life() const {
    if (settings_.throughput_half_life.count() > 0) return settings_.throughput_half_life;
    if (settings_.rebalance_every.count() > 0) return 3 * settings_.rebalance_every;
    return std::chrono::seconds(1);
  }

  /// The last step every member of the generation completed (monotone across generations).
  std::uint64_t completed_step() const {
    if (members_.empty()) return resume_step_;
    std::uint64_t least = UINT64_MAX;
    for (const auto& m : members_) least = std::min(least, m->last.step);
    return std::max(resume_step_, least == UINT64_MAX ? 0 : least);
  }

 public:
  /// hello's accelerators field from a client that only observes (`job_server status`).
  static constexpr std::uint32_t observer_mark = 0xffffffffu;

 private:
  asio::io_context& io_;
  server_settings settings_;
  imbalance_streak imbalance_seen_{settings_.rebalance_confirmations};  // of the running generation
  tcp::acceptor acceptor_;
  asio::steady_timer tick_;
  static constexpr std::chrono::milliseconds tick_period{20};
  clock::time_point last_tick_ = clock::now();  // the watchdog's last run
  bool state_write_failed_ = false;
  std::vector<session_ptr> sessions_, members_;
  std::vector<pending_get> gets_;
  std::map<std::string, std::vector<std::byte>> store_;
  std::map<std::string, std::int64_t> counters_;
  std::uint64_t last_id_ = 0, generation_ = 0, resume_step_ = 0, revoked_ = 0, rejected_ = 0;
  bool running_ = false, done_ = false;
  std::optional<clock::time_point> first_waiting_;
  std::vector<saved_member> saved_;  // of the generation a restarted server waits for
  clock::time_point restarted_at_{}, saved_at_{}, formed_at_{};
  std::uint64_t saved_step_ = 0;
  std::uint64_t first_generation_ = 0;  // the first this process formed or took from its state file
  std::uint64_t floor_ = 0;             // the newest generation a worker came running: the next forms above it
};

}  // namespace mimatrix::job
