// Tests of bootstrap/store.hpp: the bounds every store keeps, on memory, file and tcp
// stores alike.
#include "mimatrix/bootstrap/store.hpp"

#include <gtest/gtest.h>

#include "mimatrix/bootstrap/file_store.hpp"
#include "mimatrix/bootstrap/memory_store.hpp"
#include "mimatrix/bootstrap/tcp_store.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using namespace std::chrono_literals;
using mimatrix::errc;
using mimatrix::bootstrap::max_key_bytes;
using mimatrix::bootstrap::max_value_bytes;
using mimatrix::bootstrap::store;

/// The message of what `set` throws, checking that it is invalid_argument.
template <class F>
std::string refusal(F set) {
  try {
    set();
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

TEST(store, every_store_refuses_a_value_or_key_over_its_bound_naming_the_key_and_the_store) {
  const auto dir = std::filesystem::temp_directory_path() / ("mimatrix-store-bounds-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::vector<std::unique_ptr<store>> stores;
  stores.push_back(std::make_unique<mimatrix::bootstrap::memory_store>());
  stores.push_back(std::make_unique<mimatrix::bootstrap::file_store>(dir.string()));
  stores.push_back(std::make_unique<mimatrix::bootstrap::tcp_store>("127.0.0.1", 0, true, 2s));
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

}  // namespace
