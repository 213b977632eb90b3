// What the faces of the transports (backend.hpp, fabric.hpp) and of the collectives name,
// declared only: where their definitions are compiled elsewhere
// (MIMATRIX_SEPARATE_COMPILATION), a user's unit parses no schedule, kernel or progress
// machinery.
#pragma once

#include <cstdint>

namespace mimatrix::schedule {
enum class collective : std::uint8_t;
struct descriptor;
struct schedule;
struct signature;
struct uneven;
}  // namespace mimatrix::schedule

namespace mimatrix {
using schedule::signature;
}  // namespace mimatrix

namespace mimatrix::reduce {
struct host_kernels;
}  // namespace mimatrix::reduce

namespace mimatrix::device {
struct stream;
class rank_streams;
}  // namespace mimatrix::device

namespace mimatrix::transport {
class progress_engine;
struct batch_call;
}  // namespace mimatrix::transport
