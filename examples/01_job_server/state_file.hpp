// The job server's state file: the generation, its members (key, rank, batch) and the last
// step every member completed, so that a restarted server takes its workers back.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimatrix::job {

/// A member of the saved generation: its rank and batch, and the worker key it comes back with.
struct saved_member {
  std::uint32_t rank = 0, batch = 0;
  std::string key, host;
};

/// @par Thread Safety
/// A plain value.
struct saved_state {
  std::uint64_t generation = 0, completed_step = 0;
  std::vector<saved_member> members;
};

/// Reads the state file at `path`: nothing if there is none; throws if it is not one.
inline std::optional<saved_state> read_state_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string word;
  int version = 0;
  if (!(in >> word >> version) || word != "mimatrix-job-state" || version != 1)
    throw std::runtime_error("job server: '" + path + "' is not a job state file");
  saved_state s;
  while (in >> word) {
    if (word == "generation") in >> s.generation;
    else if (word == "completed_step") in >> s.completed_step;
    else if (word == "member") {
      saved_member m;
      in >> m.rank >> m.batch >> m.key >> m.host;
      s.members.push_back(std::move(m));
    } else {
      throw std::runtime_error("job server: '" + path + "' holds an unknown entry '" + word + "'");
    }
  }
  return s;
}

/// Writes the state file whole, then renames it over the old one. A member whose key or
/// host holds a space or a newline (which the file cannot hold) is left out.
inline void write_state_file(const std::string& path, const saved_state& s) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << "mimatrix-job-state 1\ngeneration " << s.generation << "\ncompleted_step " << s.completed_step << "\n";
    for (const auto& m : s.members)
      if (m.key.find_first_of(" \n") == std::string::npos && m.host.find_first_of(" \n") == std::string::npos)
        out << "member " << m.rank << " " << m.batch << " " << m.key << " " << m.host << "\n";
  }
  std::rename(temporary.c_str(), path.c_str());
}

}  // namespace mimatrix::job
