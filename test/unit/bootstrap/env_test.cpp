// Tests of bootstrap/env.hpp: each launcher's variables, the order they are tried in, and
// a message naming the variable and its value for every malformed case.
#include "mimatrix/bootstrap/env.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace MIMATRIX_UNIT_ID {

using mimatrix::errc;
using mimatrix::bootstrap::identity;
using mimatrix::bootstrap::identity_from_environment;

identity read(const std::map<std::string, std::string>& vars) {
  return identity_from_environment([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

/// The message of the invalid_argument error reading `vars` throws.
std::string failure(const std::map<std::string, std::string>& vars) {
  try {
    read(vars);
  } catch (const mimatrix::error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

void expect_identity(const identity& id, int rank, int size, int local_rank, int local_size, const char* launcher) {
  EXPECT_EQ(id.rank, rank);
  EXPECT_EQ(id.size, size);
  EXPECT_EQ(id.local_rank, local_rank);
  EXPECT_EQ(id.local_size, local_size);
  EXPECT_EQ(id.launcher, launcher);
}

TEST(identity_from_environment, nothing_set_is_rank_0_of_1) { expect_identity(read({}), 0, 1, 0, 1, "none"); }

TEST(identity_from_environment, torchrun) {
  expect_identity(read({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}}), 5, 8, 1,
                  4, "torchrun");
}

TEST(identity_from_environment, openmpi) {
  expect_identity(read({{"OMPI_COMM_WORLD_RANK", "3"},
                        {"OMPI_COMM_WORLD_SIZE", "6"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}}),
                  3, 6, 0, 3, "openmpi");
}

TEST(identity_from_environment, slurm_with_tasks_per_node) {
  expect_identity(read({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "3"},
                        {"SLURM_NTASKS_PER_NODE", "4"}}),
                  7, 8, 3, 4, "slurm");
}

TEST(identity_from_environment, slurm_reads_the_first_number_of_tasks_per_node) {
  expect_identity(read({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "2"},
                        {"SLURM_TASKS_PER_NODE", "3(x2),1"}}),
                  2, 7, 2, 3, "slurm");
  expect_identity(read({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2"}}), 0, 2, 0, 2,
                  "slurm");
}

TEST(identity_from_environment, pmi_without_local_variables_is_one_rank_a_node) {
  expect_identity(read({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}), 1, 2, 0, 1, "pmi");
}

TEST(identity_from_environment, torchrun_variables_win_over_the_others) {
  expect_identity(read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "10"},
                        {"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "5"}}),
                  1, 2, 0, 1, "torchrun");
  expect_identity(read({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "10"}, {"OMPI_COMM_WORLD_RANK", "4"},
                        {"OMPI_COMM_WORLD_SIZE", "5"}}),
                  4, 5, 0, 1, "openmpi");
}

TEST(identity_from_environment, a_value_that_is_not_an_integer_is_named) {
  const std::string m = failure({{"RANK", "two"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(m.find("RANK='two'"), std::string::npos) << m;
  EXPECT_NE(m.find("not an integer"), std::string::npos) << m;
  EXPECT_NE(failure({{"RANK", "1"}, {"WORLD_SIZE", "4x"}}).find("WORLD_SIZE='4x'"), std::string::npos);
  EXPECT_NE(failure({{"RANK", ""}, {"WORLD_SIZE", "4"}}).find("RANK=''"), std::string::npos);
  EXPECT_NE(failure({{"PMI_RANK", "0"}, {"PMI_SIZE", " 2"}}).find("PMI_SIZE=' 2'"), std::string::npos);
  EXPECT_NE(failure({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "a"}}).find("LOCAL_RANK='a'"),
            std::string::npos);
  EXPECT_NE(failure({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "(x2)"}})
                .find("SLURM_TASKS_PER_NODE"),
            std::string::npos);
}

TEST(identity_from_environment, rank_not_below_size_is_named) {
  const std::string m = failure({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_NE(m.find("OMPI_COMM_WORLD_RANK='4'"), std::string::npos) << m;
  EXPECT_NE(m.find("OMPI_COMM_WORLD_SIZE='4'"), std::string::npos) << m;
  EXPECT_NE(m.find("[0, 4)"), std::string::npos) << m;
  EXPECT_NE(failure({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}).find("RANK='-1'"), std::string::npos);
  const std::string local = failure({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_NE(local.find("LOCAL_RANK='2'"), std::string::npos) << local;
}

TEST(identity_from_environment, size_below_one_is_named) {
  const std::string m = failure({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}});
  EXPECT_NE(m.find("SLURM_NTASKS='0'"), std::string::npos) << m;
  EXPECT_NE(m.find("at least 1"), std::string::npos) << m;
  EXPECT_NE(failure({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_WORLD_SIZE", "0"}}).find("LOCAL_WORLD_SIZE='0'"),
            std::string::npos);
}

TEST(identity_from_environment, half_a_pair_is_named) {
  const std::string m = failure({{"RANK", "3"}});
  EXPECT_NE(m.find("RANK='3'"), std::string::npos) << m;
  EXPECT_NE(m.find("WORLD_SIZE is not"), std::string::npos) << m;
  const std::string size_only = failure({{"PMI_SIZE", "4"}});
  EXPECT_NE(size_only.find("PMI_SIZE='4'"), std::string::npos) << size_only;
  EXPECT_NE(size_only.find("PMI_RANK is not"), std::string::npos) << size_only;
}

TEST(identity_from_environment, reads_the_process_environment) {
  // Nothing in a test run sets these; if a launcher did, the result must still be valid.
  const identity id = identity_from_environment();
  EXPECT_GE(id.rank, 0);
  EXPECT_LT(id.rank, id.size);
}

}  // namespace
