// The endpoint's domain and wire-up: provider selection, opening fabric, domain,
// completion queue, address vector and endpoint, then the exchange of addresses and RMA
// windows through the rendezvous store, and the first barrier.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mimatrix/bootstrap/rendezvous.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/log.hpp"
#include "mimatrix/transport/fabric/endpoint.hpp"
#include "mimatrix/transport/fabric/error.hpp"
#include "mimatrix/transport/fabric/library.hpp"
#include "mimatrix/transport/fabric/shm_leftovers.hpp"
#include "mimatrix/transport/fabric/window.hpp"
#include "mimatrix/transport/fabric/wire.hpp"

namespace mimatrix::transport::detail::fabric {

inline endpoint::endpoint(const bootstrap::identity& id, std::shared_ptr<bootstrap::store> store, settings with)
    : rank_(id.rank), size_(id.size), store_(std::move(store)), settings_(std::move(with)), identity_(id) {
  if (size_ > wire::max_ranks)
    throw error(errc::invalid_argument, "transport::fabric: " + std::to_string(size_) + " ranks exceed the " +
                                            std::to_string(wire::max_ranks) + " a tag can name");
  try {
    open();
    exchange_addresses();
    // From here provider calls may wait on peers; on_stuck reads local_processes_, now set.
    watch_ = std::make_unique<provider_watch>(std::chrono::milliseconds(100), settings_.startup_timeout,
                                              [this](const char* call, int peer, std::chrono::milliseconds inside) {
                                                on_stuck(call, peer, inside);
                                              });
    exchange_windows();
    chunk_bytes_ = settings_.chunk_bytes ? settings_.chunk_bytes : chunk_for_provider(provider_);
    if (settings_.mailbox == 1 || (settings_.mailbox < 0 && provider_ == "shm"))
      mailboxes_ = std::make_unique<local_mailboxes>(rank_, size_, *store_, prefix_, settings_.startup_timeout);
    if (settings_.bulk == 1 || (settings_.bulk < 0 && provider_ == "shm")) {
      try {
        bulk_ = std::make_unique<local_mailboxes>(rank_, size_, *store_, prefix_ + "bulk/", settings_.startup_timeout,
                                                  local_mailboxes::geometry{chunk_bytes_, settings_.bulk_slots});
      } catch (const error& e) {  // most likely the chunk the user set: name it
        throw error(e.code(), e.reason() + " (the bulk rings hold " + std::to_string(settings_.bulk_slots) +
                                  " chunks of MIMATRIX_CHUNK_BYTES=" + std::to_string(chunk_bytes_) +
                                  " for each peer on this host: set a smaller chunk, or MIMATRIX_BULK=off)");
      }
    }
    for (int k = 0; k < control_receives; ++k) post_control_receive(acquire(nullptr, 0));
    bootstrap::barrier(*store_, prefix_ + "ready", size_, settings_.startup_timeout);
  } catch (...) {
    close();
    throw;
  }
}

inline std::string endpoint::available_providers() {
  const library& lib = libfabric();
  fi_info* hints = lib.allocinfo();
  hints->caps = FI_TAGGED;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  fi_info* list = nullptr;
  std::set<std::string> names;
  if (lib.getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &list) == 0)
    for (fi_info* i = list; i; i = i->next) names.insert(i->fabric_attr->prov_name);
  lib.freeinfo(list);
  lib.freeinfo(hints);
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

/// The provider chosen by `hints` again, now also moving device memory (FI_HMEM, whose
/// buffers it needs registered: FI_MR_HMEM), where MIMATRIX_DEVICE_HMEM asks and the
/// provider can; info_ is kept as it is otherwise. FI_HMEM's registrations name their
/// interface from API 1.10 on.
inline void endpoint::ask_for_device_memory(fi_info* hints) {
  const std::string chosen = info_->fabric_attr->prov_name;
  const std::string_view want = device_hmem();
  if (want == "0" || want == "off" || (want != "on" && chosen == "shm")) return;
  const library& lib = libfabric(rank_);
  fi_info* with = lib.dupinfo(hints);
  if (!with) return;
  with->caps = info_->caps & (FI_TAGGED | FI_RMA | FI_WRITE | FI_REMOTE_WRITE);
  with->caps |= FI_HMEM;
  with->domain_attr->mr_mode |= FI_MR_HMEM;
  free(with->fabric_attr->prov_name);
  with->fabric_attr->prov_name = strdup(chosen.c_str());
  fi_info* found = nullptr;
  if (lib.getinfo(FI_VERSION(1, 10), nullptr, nullptr, 0, with, &found) == 0 && found) {
    lib.freeinfo(info_);
    info_ = found;
    hmem_ = true;
  }
  lib.freeinfo(with);
}

inline void endpoint::open() {
  const library& lib = libfabric(rank_);  // loaded here, by the process's first endpoint
  fi_info* hints = lib.allocinfo();
  if (!hints) throw error(errc::transport, "transport::fabric: fi_allocinfo failed");
  hints->caps = FI_TAGGED | (settings_.window_bytes ? FI_RMA | FI_WRITE | FI_REMOTE_WRITE : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  // The registration modes this endpoint knows how to honour.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
  if (!settings_.provider.empty()) hints->fabric_attr->prov_name = strdup(settings_.provider.c_str());
  int ret = lib.getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info_);
  if ((ret != 0 || !info_) && settings_.window_bytes) {
    // A provider without RMA writes still runs everything as messages.
    hints->caps = FI_TAGGED;
    settings_.window_bytes = 0;
    ret = lib.getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info_);
  }
  if (ret == 0 && info_) ask_for_device_memory(hints);
  lib.freeinfo(hints);
  if (ret != 0 || !info_) {
    const char* filter = std::getenv("FI_PROVIDER");
    throw error(errc::transport,
                "rank " + std::to_string(rank_) + ": transport::fabric: libfabric offers no provider " +
                    (settings_.provider.empty() ? std::string("at all") : "named '" + settings_.provider + "'") +
                    " with reliable datagram endpoints and tagged messages (" +
                    explain_fabric_call("fi_getinfo", ret, "") + "); available: " + available_providers() +
                    (filter ? std::string("; FI_PROVIDER=") + filter + " filters the list" : ""));
  }
  provider_ = info_->fabric_attr->prov_name;
  const error_context where{rank_};
  check_fabric_call(lib.fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric", provider_, where);
  check_fabric_call(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain", provider_, where);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.wait_obj = FI_WAIT_NONE;
  cq_attr.size = 4096;
  check_fabric_call(fi_cq_open(domain_, &cq_attr, &cq_, nullptr), "fi_cq_open", provider_, where);
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  av_attr.count = static_cast<std::size_t>(size_);
  if (const int av = fi_av_open(domain_, &av_attr, &av_, nullptr); av != 0) {
    const std::size_t most = info_->domain_attr->ep_cnt;
    if (most && std::size_t(size_) > most)  // shm: its peers on one host (256 in libfabric 1.17)
      throw error(errc::invalid_argument,
                  "rank " + std::to_string(rank_) + ": transport::fabric: provider '" + provider_ + "' connects at most " +
                      std::to_string(most) + " endpoints, and this job has " + std::to_string(size_) +
                      " ranks (WORLD_SIZE); use fewer ranks per communicator or another provider (" +
                      explain_fabric_call("fi_av_open", av, provider_) + ")");
    check_fabric_call(av, "fi_av_open", provider_, where);
  }
  // Else a recycled pid fails in fi_enable, and killed ranks' regions fill /dev/shm.
  if (const std::size_t removed = remove_stale_shm_regions(); removed > 0)
    log(log_level::info, "rank " + std::to_string(rank_) + ": removed " + std::to_string(removed) +
                             " file(s) of ended processes from /dev/shm");
  check_fabric_call(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint", provider_, where);
  check_fabric_call(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)", provider_, where);
  check_fabric_call(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)", provider_, where);
  check_fabric_call(fi_enable(ep_), "fi_enable", provider_, where);
  const bool rma = (info_->caps & FI_RMA) && settings_.window_bytes && info_->domain_attr->cq_data_size >= 8;
  mr_ = std::make_unique<registration_cache>(
      domain_, provider_, settings_.register_always || (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0,
      FI_SEND | FI_RECV | (rma ? FI_WRITE : 0));
  if (rma)
    window_ = std::make_unique<rma_window>(domain_, provider_, rank_, settings_.window_bytes,
                                           (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0,
                                           (info_->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0);
  carries_signature_ = info_->domain_attr->cq_data_size >= 8;
  inject_bytes_ = info_->tx_attr->inject_size;
  pongs_.assign(std::size_t(size_), 0);
  peer_calls_.assign(std::size_t(size_), 0);
}

/// How many endpoints of group `name` this process opened before through stores of
/// `scope` (store::scope()): the ranks of a group open theirs in the same order, whatever
/// other groups each belongs to. Counted per store, as a store is a namespace: process 0
/// in {0,1} through one store and then {0,2} through another, process 2 only in {0,2},
/// meet under world/0 there (issue 53: a count per name alone gave world/1 and world/0).
inline int next_instance_of(const std::string& scope, const std::string& name) {
  static std::mutex guard;
  static std::map<std::pair<std::string, std::string>, int> opened;
  std::lock_guard lock(guard);
  return opened[{scope, name}]++;
}

/// For bootstrap::all_gather's `gone`: whether rank r, which claimed its rank under
/// `prefix`, has ended: on this host by its process (published there as mark/<r>), on
/// another by the store, which sets lost/<r> when its connection ends without a word
/// (store::set_when_gone, where the store can tell). Found by a black-box test: a rank
/// killed while the group met left the others waiting out the start-up deadline (60 s),
/// then saying only that it did not publish.
inline std::function<std::string(int)> ended_or_lost(bootstrap::store& s, const std::string& prefix) {
  return [&s, prefix, self = bootstrap::detail::process_mark::self()](int r) -> std::string {
    using bootstrap::text_of;
    try {
      const auto mark = bootstrap::detail::process_mark::decode(
          text_of(s.get(prefix + "mark/" + std::to_string(r), std::chrono::milliseconds(0))));
      if (!mark || !self.can_check(*mark)) return text_of(s.get(prefix + "lost/" + std::to_string(r), {}));
      if (mark->ended()) return "(pid " + std::to_string(mark->pid) + " on this host) exited or was killed";
    } catch (const error&) {  // not published or not lost, or the store is gone: the deadline decides
    }
    return {};
  };
}

/// What the store sets as lost/<rank> should this process go without a word.
inline std::string lost_text(const std::string& where) {
  return "(" + bootstrap::this_process() + ") lost its connection to the rendezvous store at " + where +
         " without closing its communicator (it exited or was killed, or its host went down)";
}

inline void endpoint::exchange_addresses() {
  if (settings_.group.empty() || settings_.group.find('\n') != std::string::npos)
    throw error(errc::invalid_argument, "rank " + std::to_string(rank_) +
                                            ": transport::fabric: a group's name must be one line, not empty");
  const int instance = next_instance_of(store_->scope(), settings_.group);
  prefix_ = "mimatrix/fabric/" + settings_.group + "/" + std::to_string(instance) + "/";
  // Before anything is published: a second process started with this RANK fails here.
  bootstrap::claim_rank(*store_, prefix_ + "claim", rank_, settings_.startup_timeout);
  const std::string me = bootstrap::detail::process_mark::self().encode();
  store_->set(prefix_ + "mark/" + std::to_string(rank_), bootstrap::bytes_of(me));
  // Peers on other hosts cannot see this process: the store tells them. lost/any is a
  // counter's text ("1"), which calls and goodbyes read with add_within: bounded, as a
  // stopped rank 0 (the store's host) may not answer.
  const std::string lost = lost_text(store_->where());
  store_->set_when_gone(prefix_ + "lost/" + std::to_string(rank_), bootstrap::bytes_of(lost));
  store_->set_when_gone(prefix_ + "lost/any", {std::byte{'1'}});
  std::vector<std::byte> name(256);
  std::size_t len = name.size();
  int ret = fi_getname(&ep_->fid, name.data(), &len);
  if (ret == -FI_ETOOSMALL) {
    name.resize(len);
    ret = fi_getname(&ep_->fid, name.data(), &len);
  }
  check_fabric_call(ret, "fi_getname", provider_, {rank_});
  name.resize(len);
  // The provider travels with the address: ranks that picked different providers
  // would otherwise fail later with an unreadable address. So does the process, which
  // peers on this host watch for its end.
  const auto self = bootstrap::detail::process_mark::self();
  const std::string agreed = agreed_settings();
  const std::string tagged = provider_ + '\n' + self.encode() + '\n' + agreed + '\n';
  std::vector<std::byte> mine(tagged.size() + name.size());
  std::memcpy(mine.data(), tagged.data(), tagged.size());
  std::memcpy(mine.data() + tagged.size(), name.data(), name.size());
  std::vector<std::size_t> skips(static_cast<std::size_t>(size_));
  const auto check = [&](int peer, const std::vector<std::byte>& bytes) {
    const auto* text = reinterpret_cast<const char*>(bytes.data());
    const auto* last = text + bytes.size();
    const auto* end = std::find(text, last, '\n');
    const std::string theirs(text, end);
    if (theirs != provider_)
      throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": transport::fabric: this rank uses provider '" +
                                      provider_ + "' but rank " + std::to_string(peer) + " uses '" + theirs +
                                      "'; set MIMATRIX_PROVIDER alike on every rank");
    const auto* mark_end = std::find(end + 1, last, '\n');
    const auto* agreed_end = std::find(std::min(mark_end + 1, last), last, '\n');
    if (agreed_end == last)
      throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": transport::fabric: rank " +
                                      std::to_string(peer) + " published a malformed address");
    if (const auto mark = bootstrap::detail::process_mark::decode({end + 1, std::size_t(mark_end - end - 1)});
        peer != rank_ && mark && self.can_check(*mark))
      local_processes_.emplace_back(peer, *mark);
    check_agreement(agreed, std::string(mark_end + 1, agreed_end), peer);
    skips[std::size_t(peer)] = static_cast<std::size_t>(agreed_end - text) + 1;
  };
  std::vector<std::vector<std::byte>> all;
  // Every rank checks every address first: each sees the same disagreement, and none
  // leaves (rank 0 takes the tcp store with it) before the others have read theirs.
  try {
    // Rank 0's entry first, this rank's own published before: a rank started with a
    // larger WORLD_SIZE than rank 0 would otherwise wait for ranks that never come.
    if (rank_ != 0) {
      store_->set(prefix_ + "addr/" + std::to_string(rank_), mine);
      check(0, store_->get(prefix_ + "addr/0", settings_.startup_timeout));
    }
    all = bootstrap::all_gather(*store_, prefix_ + "addr", rank_, size_, mine, settings_.startup_timeout,
                                ended_or_lost(*store_, prefix_));
    local_processes_.clear();  // rank 0's, once more below
    for (int peer = 0; peer < size_; ++peer) check(peer, all[std::size_t(peer)]);
  } catch (const error& e) {
    if (e.code() != errc::mismatch) throw;  // a rank that never came: no one to wait for
    try {
      bootstrap::barrier(*store_, prefix_ + "disagree", size_,
                         std::min(settings_.startup_timeout, std::chrono::milliseconds(5000)));
    } catch (const error&) {  // a rank that does not come: the disagreement is still the news
    }
    throw;
  }
  peers_.assign(std::size_t(size_), FI_ADDR_NOTAVAIL);
  for (int peer = 0; peer < size_; ++peer) {
    const auto& bytes = all[std::size_t(peer)];
    const int inserted =
        fi_av_insert(av_, bytes.data() + skips[std::size_t(peer)], 1, &peers_[std::size_t(peer)], 0, nullptr);
    if (inserted != 1)
      check_fabric_call(inserted < 0 ? inserted : -FI_EADDRNOTAVAIL, "fi_av_insert", provider_, {rank_, peer});
  }
}

inline std::optional<endpoint::split_part> endpoint::split(int color, int key) {
  const std::string name = prefix_ + "split/" + std::to_string(splits_++);
  const std::string mine = std::to_string(color) + " " + std::to_string(key) + " " +
                           local_mailboxes::detect_host_identity();  // one line: hostname, boot and /dev/shm ids
  const auto all = bootstrap::all_gather(*store_, name, rank_, size_, bootstrap::bytes_of(mine),
                                         settings_.startup_timeout, ended_or_lost(*store_, prefix_));
  const bool by_host = color == std::numeric_limits<int>::min();  // fabric::same_host
  if (color < 0 && !by_host) return std::nullopt;
  const std::string own_host = local_mailboxes::detect_host_identity();
  struct member {
    int key, rank;
    std::string host;
  };
  std::vector<member> members;
  for (int r = 0; r < size_; ++r) {
    std::istringstream in(bootstrap::text_of(all[std::size_t(r)]));
    int c = 0, k = 0;
    std::string host;
    if (!(in >> c >> k) || !std::getline(in >> std::ws, host))
      throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": transport::fabric: split: rank " +
                                      std::to_string(r) + " published a malformed color and key");
    if (by_host ? c == color && host == own_host : c == color) members.push_back({k, r, host});
  }
  if (by_host) color = std::min_element(members.begin(), members.end(), [](const member& a, const member& b) {
                         return a.rank < b.rank;
                       })->rank;  // the host's first rank names its group
  std::stable_sort(members.begin(), members.end(),
                   [](const member& a, const member& b) { return a.key != b.key ? a.key < b.key : a.rank < b.rank; });
  split_part part;
  part.id.launcher = identity_.launcher;
  part.id.world_rank = identity_.world_rank < 0 ? rank_ : identity_.world_rank;
  part.id.size = int(members.size());
  part.id.local_size = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i].rank == rank_) {
      part.id.rank = int(i);
      part.id.local_rank = part.id.local_size;
    }
    if (members[i].host == own_host) ++part.id.local_size;
  }
  // The parent's name and instance, the split's number and the color: alike on the
  // color's ranks, unlike any other group's.
  const std::string instance = prefix_.substr(prefix_.rfind('/', prefix_.size() - 2) + 1);
  part.group = settings_.group + "/" + instance + "split" + name.substr(name.rfind('/') + 1) +
               (by_host ? "/host" : "/color") + std::to_string(color);
  return part;
}

inline std::string endpoint::agreed_settings() const {
  const auto on = [&](int v) { return v == 1 || (v < 0 && provider_ == "shm") ? "on" : "off"; };
  return "WORLD_SIZE=" + std::to_string(size_) + " MIMATRIX_MAILBOX=" + on(settings_.mailbox) + " MIMATRIX_BULK=" + on(settings_.bulk) +
         " MIMATRIX_CHUNK_BYTES=" +
         std::to_string(settings_.chunk_bytes ? settings_.chunk_bytes : chunk_for_provider(provider_)) +
         " bulk_slots=" + std::to_string(settings_.bulk_slots) + " MIMATRIX_ALGO=" + algorithm_rules() +
         " MIMATRIX_DEVICE_IPC=" + (device_ipc() ? "on" : "off") +
         " MIMATRIX_DEVICE_HMEM=" + (hmem_ ? "on" : "off");  // what the provider granted
}

/// MIMATRIX_ALGO without its spaces ("unset" when it is): ranks that pin different
/// algorithms would run schedules that never meet.
inline std::string endpoint::algorithm_rules() {
  const char* v = std::getenv("MIMATRIX_ALGO");
  if (!v) return "unset";
  std::string rules;
  for (const char* c = v; *c; ++c)
    if (!std::isspace(static_cast<unsigned char>(*c))) rules += *c;
  return rules.empty() ? "unset" : rules;
}

inline void endpoint::check_agreement(const std::string& mine, const std::string& theirs, int peer) const {
  if (mine == theirs) return;
  std::istringstream a(mine), b(theirs);
  std::string x, y;
  while (a >> x) {
    if (!(b >> y)) y.clear();
    if (x == y) continue;
    const auto eq = x.find('=');
    const std::string name = x.substr(0, eq);
    const std::string other = y.rfind(name + "=", 0) == 0 ? y.substr(eq + 1) : "'" + y + "'";
    throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": transport::fabric: this rank has " + name + "=" +
                                    x.substr(eq + 1) + " but rank " + std::to_string(peer) + " has " + other +
                                    " (from the environment or fabric_options); set it alike on every rank");
  }
  throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": transport::fabric: rank " + std::to_string(peer) +
                                  " has settings '" + theirs + "' where this rank has '" + mine + "'");
}

inline void endpoint::exchange_windows() {
  window_announcement mine = window_ ? window_->announcement() : window_announcement{};
  std::vector<std::byte> bytes(sizeof mine);
  std::memcpy(bytes.data(), &mine, sizeof mine);
  const auto all = bootstrap::all_gather(*store_, prefix_ + "window", rank_, size_, bytes, settings_.startup_timeout,
                                         ended_or_lost(*store_, prefix_));
  peer_windows_.assign(std::size_t(size_), {});
  std::uint64_t smallest = window_ ? mine.half_bytes : 0;
  for (int peer = 0; peer < size_; ++peer) {
    const auto& b = all[std::size_t(peer)];
    if (b.size() != sizeof(window_announcement))
      throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": transport::fabric: rank " +
                                      std::to_string(peer) + " sent a malformed window announcement");
    std::memcpy(&peer_windows_[std::size_t(peer)], b.data(), b.size());
    smallest = std::min<std::uint64_t>(smallest, peer_windows_[std::size_t(peer)].half_bytes);
  }
  window_half_bytes_ = static_cast<std::size_t>(smallest);
}

}  // namespace mimatrix::transport::detail::fabric
