// Who this process is in the job (rank, size, rank on its node), read from the variables
// that torchrun, mimatrix-run, Open MPI, Slurm and PMI launchers export.
#pragma once

#include <charconv>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

#include "mimatrix/core/error.hpp"

namespace mimatrix::bootstrap {

/// This process's place in the job.
///
/// @par Thread Safety
/// A plain value: distinct objects may be used from any threads.
struct identity {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the processes on this node
  int local_size = 1;
  std::string launcher = "none";  // "torchrun", "openmpi", "slurm", "pmi" or "none"
  int world_rank = -1;  // the rank in the group this one was split from, first of all; -1: `rank`
};

/// Looks a variable up: `std::getenv`, or a table in tests. Null when unset.
using env_lookup = std::function<const char*(const char*)>;

namespace detail {

/// The integer in `value`, all of it; throws naming the variable otherwise.
inline int parse_env_int(const char* name, const char* value) {
  const std::string_view text(value);
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
    throw error(errc::invalid_argument,
                std::string("environment variable ") + name + "='" + value + "' is not an integer");
  return v;
}

/// Slurm's SLURM_TASKS_PER_NODE is "2(x3),1": the first number is this job's tasks on
/// the first nodes, which is what a homogeneous job has everywhere.
inline int parse_tasks_per_node(const char* name, const char* value) {
  std::string_view text(value);
  const auto stop = text.find_first_of("(,");
  return parse_env_int(name, std::string(text.substr(0, stop)).c_str());
}

struct launcher_vars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;  // may be null: the launcher does not say
  const char* local_size;
};

inline void check_identity(const identity& id, const launcher_vars& v, const env_lookup& get) {
  auto shown = [&](const char* name) { return std::string(name) + "='" + get(name) + "'"; };
  if (id.size < 1)
    throw error(errc::invalid_argument, "environment variable " + shown(v.size) + " must be at least 1 (" +
                                            v.launcher + " launcher)");
  if (id.rank < 0 || id.rank >= id.size)
    throw error(errc::invalid_argument, "environment variable " + shown(v.rank) + " is outside [0, " +
                                            std::to_string(id.size) + ") given " + shown(v.size) + " (" +
                                            v.launcher + " launcher)");
}

}  // namespace detail

/// This process's identity from the variables `get` returns, trying in order:
///   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE                    (torchrun, mimatrix-run)
///   OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}                 (Open MPI)
///   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
///     (or the first number of SLURM_TASKS_PER_NODE)                   (Slurm srun)
///   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS               (MPICH/Hydra PMI)
/// None set: rank 0 of 1. A launcher that does not say the local rank and size is taken
/// to run one rank a node (local rank 0 of 1). Throws errc::invalid_argument naming the
/// variable and its value when a value is not an integer, only one of a rank/size pair is
/// set, the size is below 1 or the rank is not below the size.
inline identity identity_from_environment(const env_lookup& get) {
  static constexpr detail::launcher_vars launchers[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
  };
  for (const auto& v : launchers) {
    const char* rank = get(v.rank);
    const char* size = get(v.size);
    if (!rank && !size) continue;
    if (!rank || !size) {
      const char* set = rank ? v.rank : v.size;
      const char* unset = rank ? v.size : v.rank;
      throw error(errc::invalid_argument, std::string("environment variable ") + set + "='" + get(set) +
                                              "' is set but " + unset + " is not (" + v.launcher +
                                              " launcher): set both or neither");
    }
    identity id;
    id.launcher = v.launcher;
    id.rank = detail::parse_env_int(v.rank, rank);
    id.size = detail::parse_env_int(v.size, size);
    detail::check_identity(id, v, get);

    const char* local_rank = get(v.local_rank);
    const char* local_size_name = v.local_size;
    const char* local_size = get(local_size_name);
    if (!local_size && std::string_view(v.launcher) == "slurm") {
      local_size_name = "SLURM_TASKS_PER_NODE";
      local_size = get(local_size_name);
    }
    if (local_rank) id.local_rank = detail::parse_env_int(v.local_rank, local_rank);
    if (local_size)
      id.local_size = local_size_name == std::string_view("SLURM_TASKS_PER_NODE")
                          ? detail::parse_tasks_per_node(local_size_name, local_size)
                          : detail::parse_env_int(local_size_name, local_size);
    else if (local_rank)  // a local rank without a count: at least that many on this node
      id.local_size = id.local_rank + 1;
    if (id.local_size < 1)
      throw error(errc::invalid_argument, std::string("environment variable ") + local_size_name + "='" +
                                              local_size + "' must be at least 1 (" + v.launcher + " launcher)");
    if (id.local_rank < 0 || id.local_rank >= id.local_size)
      throw error(errc::invalid_argument,
                  std::string("environment variable ") + v.local_rank + "='" + (local_rank ? local_rank : "") +
                      "' is outside [0, " + std::to_string(id.local_size) + ") (" + v.launcher + " launcher)");
    return id;
  }
  return identity{};
}

/// This process's identity from its environment (`std::getenv`).
inline identity identity_from_environment() {
  return identity_from_environment([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace mimatrix::bootstrap
