// The layers of include/mimatrix/, read from every header's #include lines: a folder
// includes only folders below it, so transports and algorithms stay apart, and nothing in
// core/ knows what a schedule is. And every header stays small enough to read whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace {

namespace fs = std::filesystem;

/// Bottom to top. Folders of one rank never include each other; the collectives (the
/// top-level headers and detail/) are one layer.
const std::map<std::string, int> rank_of = {
    {"core", 0},      {"reduce", 1},    {"bootstrap", 1}, {"schedule", 2}, {"device", 2},   {"topology", 3}, {"model", 3},
    {"algorithm", 4}, {"transport", 4}, {"detail", 5},    {"top", 5},      {"impl", 6},
};

/// "transport" for mimatrix/transport/fabric/endpoint.hpp, "top" for mimatrix/allreduce.hpp.
std::string layer_of(const std::string& path_in_include) {
  const fs::path p(path_in_include);
  auto it = p.begin();
  ++it;  // "mimatrix"
  const std::string first = it->string();
  return ++it == p.end() ? "top" : first;
}

/// Calls `f(path in include/, stream)` for every header; returns how many.
template <class F>
int for_each_header(F&& f) {
  const fs::path root = MIMATRIX_INCLUDE_DIR;
  int headers = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root / "mimatrix")) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".hpp" && ext != ".ipp" && ext != ".cuh")) continue;
    ++headers;
    std::ifstream in(entry.path());
    f(fs::relative(entry.path(), root).generic_string(), in);
  }
  return headers;
}

TEST(layering, no_header_includes_a_layer_above_its_own_or_beside_it) {
  const int headers = for_each_header([](const std::string& self, std::ifstream& in) {
    const std::string from = layer_of(self);
    ASSERT_TRUE(rank_of.count(from)) << self << ": folder '" << from << "' has no layer in this test";
    std::string line;
    while (std::getline(in, line)) {
      const std::string prefix = "#include \"mimatrix/";
      if (line.rfind(prefix, 0) != 0) continue;
      const std::string target = line.substr(10, line.find('"', 10) - 10);
      const std::string to = layer_of(target);
      ASSERT_TRUE(rank_of.count(to)) << self << " includes " << target << " in an unknown folder";
      const bool collectives_layer = (to == "top" || to == "detail") && (from == "top" || from == "detail");
      if (to == from || collectives_layer) continue;
      EXPECT_LT(rank_of.at(to), rank_of.at(from)) << self << " (" << from << ") includes " << target << " (" << to
                                                  << "): an include upward or sideways";
    }
  });
  EXPECT_GT(headers, 50);
}

// Issue 10 item 6: a header holds one idea; past 500 lines it is split by idea (as
// step_executor.hpp and detail/step_failure.hpp are).
TEST(layering, no_header_is_over_500_lines) {
  const int headers = for_each_header([](const std::string& self, std::ifstream& in) {
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) ++lines;
    EXPECT_LE(lines, 500) << self << " has " << lines << " lines";
  });
  EXPECT_GT(headers, 50);
}

}  // namespace
