// Tests of bootstrap/store.hpp: the bounds every store keeps, on memory, file and tcp
// stores alike.
#include "mimatrix/bootstrap/store.hpp"

#include <gtest/gtest.h>

#include "mimatrix/bootstrap/file_store.hpp"
#include "mimatrix/bootstrap/memory_store.hpp"
#include "mimatrix/bootstrap/tcp_store.hpp"
#include "support/refusal.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace MIMATRIX_UNIT_ID {

using namespace std::chrono_literals;
using mimatrix::errc;
using mimatrix::bootstrap::max_key_bytes;
using mimatrix::bootstrap::max_value_bytes;
using mimatrix::bootstrap::store;

using mimatrix::test::refusal;

/// A memory store, a file store in `dir` (emptied first) and a tcp store serving itself.
std::vector<std::unique_ptr<store>> every_store(const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  std::vector<std::unique_ptr<store>> stores;
  stores.push_back(std::make_unique<mimatrix::bootstrap::memory_store>());
  stores.push_back(std::make_unique<mimatrix::bootstrap::file_store>(dir.string()));
  stores.push_back(std::make_unique<mimatrix::bootstrap::tcp_store>("127.0.0.1", 0, true, 2s));
  return stores;
}

TEST(store, every_store_refuses_a_value_or_key_over_its_bound_naming_the_key_and_the_store) {
  const auto dir = std::filesystem::temp_directory_path() / ("mimatrix-store-bounds-" + std::to_string(::getpid()));
  const auto stores = every_store(dir);
  const std::vector<std::byte> over(max_value_bytes + 1);
  for (auto& s : stores) {
    SCOPED_TRACE(s->where());
    std::string m = refusal([&] { s->set("huge", over); });
    EXPECT_NE(m.find("'huge' (" + std::to_string(max_value_bytes + 1) + " bytes) is over the " +
                     std::to_string(max_value_bytes)),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(s->where()), std::string::npos) << m;
    EXPECT_THROW(s->get("huge", 0ms), mimatrix::error);  // nothing stored

    m = refusal([&] { s->set(std::string(max_key_bytes + 1, 'k'), {}); });
    EXPECT_NE(m.find("a key of " + std::to_string(max_key_bytes + 1) + " bytes"), std::string::npos) << m;

    s->set("fine", {std::byte{1}});  // still usable
    EXPECT_EQ(s->get("fine", 0ms).size(), 1u);
  }
  std::filesystem::remove_all(dir);
}

TEST(store, erase_prefix_removes_the_keys_under_it_and_no_other_on_every_store) {
  const auto dir = std::filesystem::temp_directory_path() / ("mimatrix-store-erase-" + std::to_string(::getpid()));
  const auto stores = every_store(dir);
  for (auto& s : stores) {
    SCOPED_TRACE(s->where());
    for (const char* key : {"g/1/addr/0", "g/1/addr/1", "g/1/odd key%", "g/10/addr/0", "g/2/addr/0", "h"})
      s->set(key, {std::byte{7}});
    s->add("g/1/goodbye", 3);
    EXPECT_EQ(s->erase_prefix("g/1/"), 4);
    for (const char* gone : {"g/1/addr/0", "g/1/addr/1", "g/1/odd key%", "g/1/goodbye"})
      EXPECT_THROW(s->get(gone, 0ms), mimatrix::error) << gone;
    for (const char* kept : {"g/10/addr/0", "g/2/addr/0", "h"}) EXPECT_EQ(s->get(kept, 0ms).size(), 1u) << kept;
    EXPECT_EQ(s->erase_prefix("g/1/"), 0);
    EXPECT_EQ(s->add("g/1/goodbye", 1), 1);  // a counter erased starts again from 0
    EXPECT_EQ(s->erase_prefix(""), 4);       // everything, and on a file store no lock file
    EXPECT_THROW(s->get("h", 0ms), mimatrix::error);
  }
  std::filesystem::remove_all(dir);
}

TEST(store, what_a_tcp_store_erases_no_longer_counts_against_its_bound) {
  mimatrix::bootstrap::detail::tcp_server_limits limits;
  limits.stored_bytes = 4096;
  auto server = std::make_shared<mimatrix::bootstrap::detail::tcp_server>("127.0.0.1", 0, limits);
  mimatrix::bootstrap::tcp_store s("127.0.0.1", server, 2s);
  const std::vector<std::byte> value(1200);
  for (int round = 0; round < 10; ++round) {  // 36 KB set in all, never over 4 KB at once
    const std::string group = "round/" + std::to_string(round) + "/";
    for (int k = 0; k < 3; ++k) s.set(group + std::to_string(k), value);
    EXPECT_EQ(s.erase_prefix(group), 3);
  }
  for (int k = 0; k < 3; ++k) s.set("full/" + std::to_string(k), value);
  EXPECT_THROW(s.set("full/3", value), mimatrix::error);  // the bound still holds
}

}  // namespace
