// device::import_table: a peer's block is found open by its handle; a newer block of the
// same owner retires every open block it overlaps (the owner freed them), and nothing
// else; process_exports does the same for this process's own blocks;
// device::this_process() names this process, and a forked child another.
#include "mimatrix/device/import_table.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

namespace mimatrix::device {
namespace MIMATRIX_UNIT_ID {

shared_memory block(std::uint64_t owner, std::uint64_t base, std::uint64_t bytes, unsigned char tag) {
  shared_memory b{{}, owner, base, bytes};
  b.handle[0] = std::byte{tag};
  return b;
}
std::byte* address(std::uintptr_t a) { return reinterpret_cast<std::byte*>(a); }
std::set<std::byte*> addresses(const std::vector<import_table::opened>& blocks) {
  std::set<std::byte*> out;
  for (const auto& b : blocks) out.insert(b.at);
  return out;
}

TEST(import_table, a_block_is_found_by_its_handle_once_added) {
  import_table t;
  const shared_memory a = block(1, 0x1000, 0x100, 1);
  EXPECT_EQ(t.find(a), nullptr);
  EXPECT_TRUE(t.add(a, address(0xa000)).empty());
  EXPECT_EQ(t.find(a), address(0xa000));
  EXPECT_EQ(t.find(block(1, 0x1000, 0x100, 2)), nullptr);  // another allocation at its address
  EXPECT_EQ(t.find(block(2, 0x1000, 0x100, 1)), nullptr);  // another owner's
  EXPECT_EQ(t.size(), 1u);
}

TEST(import_table, a_newer_block_retires_every_block_of_its_owner_it_overlaps) {
  import_table t;
  const std::uint64_t owner = 7;
  t.add(block(owner, 0x1000, 0x100, 1), address(0xa000));  // ends where the next starts
  t.add(block(owner, 0x1100, 0x100, 2), address(0xb000));  // overlapped at its end
  t.add(block(owner, 0x1300, 0x100, 3), address(0xc000));  // inside the new block
  t.add(block(owner, 0x1480, 0x100, 4), address(0xd000));  // overlapped at its start
  t.add(block(owner, 0x1600, 0x100, 5), address(0xe000));  // past the new one's end
  t.add(block(owner + 1, 0x1200, 0x400, 6), address(0xf000));  // another owner's, same range
  ASSERT_EQ(t.size(), 6u);

  const auto retired = t.add(block(owner, 0x11ff, 0x301, 9), address(0x9000));  // [0x11ff, 0x1500)
  EXPECT_EQ(addresses(retired), (std::set<std::byte*>{address(0xb000), address(0xc000), address(0xd000)}));
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t.find(block(owner, 0x1000, 0x100, 1)), address(0xa000));
  EXPECT_EQ(t.find(block(owner, 0x1600, 0x100, 5)), address(0xe000));
  EXPECT_EQ(t.find(block(owner + 1, 0x1200, 0x400, 6)), address(0xf000));
  EXPECT_EQ(t.find(block(owner, 0x11ff, 0x301, 9)), address(0x9000));
}

TEST(import_table, blocks_that_only_touch_the_new_one_stay) {
  import_table t;
  t.add(block(4, 0x1000, 0x100, 1), address(0xa000));
  t.add(block(4, 0x1200, 0x100, 2), address(0xb000));
  EXPECT_TRUE(t.add(block(4, 0x1100, 0x100, 3), address(0xc000)).empty());  // [0x1100, 0x1200)
  EXPECT_EQ(t.size(), 3u);
}

TEST(import_table, the_same_address_reallocated_retires_the_old_block) {
  import_table t;
  t.add(block(3, 0x1000, 0x100, 1), address(0xa000));
  const auto retired = t.add(block(3, 0x1000, 0x100, 2), address(0xb000));
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0].at, address(0xa000));
  EXPECT_EQ(retired[0].bytes, 0x100u);
  EXPECT_EQ(t.find(block(3, 0x1000, 0x100, 2)), address(0xb000));
  EXPECT_EQ(t.size(), 1u);
}

TEST(import_table, an_empty_block_still_holds_its_address) {
  import_table t;
  t.add(block(3, 0x1000, 0, 1), address(0xa000));
  EXPECT_TRUE(t.add(block(3, 0x1001, 0, 2), address(0xb000)).empty());
  EXPECT_EQ(t.add(block(3, 0x1000, 0, 3), address(0xc000)).size(), 1u);
}

TEST(import_table, take_all_hands_every_open_block_over_and_forgets_them) {
  import_table t;
  t.add(block(1, 0x1000, 0x10, 1), address(0xa000));
  t.add(block(2, 0x1000, 0x10, 2), address(0xb000));
  EXPECT_EQ(addresses(t.take_all()), (std::set<std::byte*>{address(0xa000), address(0xb000)}));
  EXPECT_EQ(t.size(), 0u);
}

TEST(process_exports, finds_a_block_by_handle_and_forgets_those_a_newer_one_overlaps) {
  process_exports exports;  // not the process's: a test of its own
  std::byte memory[0x400];
  exports.record(block(1, 0, 0x100, 1), memory);
  exports.record(block(1, 0, 0x100, 2), memory + 0x100);
  EXPECT_EQ(exports.find(block(1, 0, 0x100, 1)), memory);
  EXPECT_EQ(exports.find(block(1, 0, 0x100, 3)), nullptr);
  exports.record(block(1, 0, 0x100, 1), memory);  // the same block again: kept
  EXPECT_EQ(exports.size(), 2u);
  exports.record(block(1, 0, 0x80, 3), memory + 0xc0);  // over both
  EXPECT_EQ(exports.find(block(1, 0, 0x100, 1)), nullptr);
  EXPECT_EQ(exports.find(block(1, 0, 0x100, 2)), nullptr);
  EXPECT_EQ(exports.find(block(1, 0, 0x80, 3)), memory + 0xc0);
  EXPECT_EQ(exports.size(), 1u);
}

TEST(this_process, is_the_same_in_one_process_and_another_in_a_forked_child) {
  const std::uint64_t mine = this_process();
  EXPECT_EQ(this_process(), mine);
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  const pid_t child = ::fork();  // no thread of this test runs: safe to fork
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::uint64_t its = this_process();
    ::_exit(::write(ends[1], &its, sizeof its) == ssize_t(sizeof its) ? 0 : 1);
  }
  std::uint64_t childs = mine;
  EXPECT_EQ(::read(ends[0], &childs, sizeof childs), ssize_t(sizeof childs));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_NE(childs, mine);
  ::close(ends[0]);
  ::close(ends[1]);
}

}  // namespace
}  // namespace mimatrix::device
