// The job server's state file: the generation, its members (key, rank, batch) and the last
// step every member completed, so that a restarted server takes its workers back.
#pragma once

#include "../writable_path.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
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
  const auto bad = [&](const std::string& what) {
    return std::runtime_error("job server: the state file '" + path + "' " + what);
  };
  while (in >> word) {
    if (word == "generation") in >> s.generation;
    else if (word == "completed_step") in >> s.completed_step;
    else if (word == "member") {
      saved_member m;
      in >> m.rank >> m.batch >> m.key >> m.host;
      s.members.push_back(std::move(m));
    } else {
      throw bad("holds an unknown entry '" + word + "'");
    }
    if (!in) throw bad("has a '" + word + "' line that does not read (numbers, then words)");
  }
  // A member list a generation could have: ranks 0..n-1 once each, batches above 0, keys
  // once each (a black-box test: duplicate ranks, a rank 5 of 2 and batch 'x' were taken).
  std::vector<bool> seen(s.members.size());
  for (std::size_t i = 0; i < s.members.size(); ++i) {
    const saved_member& m = s.members[i];
    if (m.rank >= s.members.size() || seen[m.rank])
      throw bad("has rank " + std::to_string(m.rank) + " twice or past its " + std::to_string(s.members.size()) + " members");
    seen[m.rank] = true;
    if (m.batch == 0) throw bad("gives rank " + std::to_string(m.rank) + " batch 0");
    for (std::size_t j = 0; j < i; ++j)
      if (s.members[j].key == m.key) throw bad("has the worker key '" + m.key + "' twice");
  }
  return s;
}

/// Why the state file at `path` could not be written, or "" when it can.
inline std::string state_file_unwritable(const std::string& path) {
  return examples::why_unwritable(path, examples::write_mode::through_temporary);
}

/// Writes the state file whole, then renames it over the old one. A member whose key or
/// host holds a space or a newline (which the file cannot hold) is left out.
/// Why it could not, or "" when it did (the reason taken where the write failed).
inline std::string write_state_file(const std::string& path, const saved_state& s) {
  const std::string temporary = path + ".tmp";
  std::FILE* f = std::fopen(temporary.c_str(), "w");
  if (!f) return temporary + ": " + std::strerror(errno);
  std::string text = "mimatrix-job-state 1\ngeneration " + std::to_string(s.generation) + "\ncompleted_step " +
                     std::to_string(s.completed_step) + "\n";
  for (const auto& m : s.members)
    if (m.key.find_first_of(" \n") == std::string::npos && m.host.find_first_of(" \n") == std::string::npos)
      text += "member " + std::to_string(m.rank) + " " + std::to_string(m.batch) + " " + m.key + " " + m.host + "\n";
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0;
  const int write_error = errno;
  if (std::fclose(f) != 0 || !written) return temporary + ": " + std::strerror(written ? errno : write_error);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) return "renaming " + temporary + ": " + std::strerror(errno);
  return {};
}

}  // namespace mimatrix::job
