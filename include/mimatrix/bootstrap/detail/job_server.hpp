// The server of the job's tcp store (what open_store opens for MASTER_PORT or
// MIMATRIX_STORE=tcp://) belongs to rank 0's process, not to one communicator: it serves
// from the first store opened on its port until the process exits. Stopped with each
// communicator instead, it went while the other ranks, out of the tear-down first, were
// already in the next communicator's rendezvous on it; and a second communicator alive at
// once could not bind the port the first held.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mimatrix/bootstrap/detail/tcp_server.hpp"

namespace mimatrix::bootstrap::detail {

/// The servers this process runs for job stores, by port.
struct job_servers {
  std::mutex mutex;
  pid_t owner = ::getpid();
  std::map<int, std::shared_ptr<tcp_server>> by_port;
  // A forked child's copies of its parent's servers: without their threads, and with the
  // parent's sockets (stopping one would stop the parent's). Never stopped.
  std::vector<std::shared_ptr<tcp_server>> inherited;

  /// At exit: the server stops once no store holds it, answering for up to
  /// tcp_server_limits::drain the ranks still saying goodbye.
  void stop() {
    std::map<int, std::shared_ptr<tcp_server>> stopping;  // released after the lock
    std::lock_guard lock(mutex);
    if (owner == ::getpid()) stopping.swap(by_port);
  }
};

/// This process's job servers, stopped at exit. Never destroyed: see `inherited`.
inline job_servers& job_servers_here() {
  static job_servers& all = *new job_servers;
  static const struct stop_at_exit {
    ~stop_at_exit() { all.stop(); }
  } stopper;
  return all;
}

/// The server on `port` this process runs for the job's store, else a new one bound there,
/// on `address` alone, that serves until the process exits. Throws what tcp_server throws
/// (the port is taken, the address is not this host's).
inline std::shared_ptr<tcp_server> job_server(const std::string& address, int port) {
  job_servers& all = job_servers_here();
  std::lock_guard lock(all.mutex);
  if (all.owner != ::getpid()) {
    for (auto& entry : all.by_port) all.inherited.push_back(std::move(entry.second));
    all.by_port.clear();
    all.owner = ::getpid();
  }
  std::shared_ptr<tcp_server>& server = all.by_port[port];
  if (!server) server = std::make_shared<tcp_server>(address, port);
  return server;
}

}  // namespace mimatrix::bootstrap::detail
