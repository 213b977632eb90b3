// mimatrix: everything a user of the host library needs, in one include.
// Backends with external dependencies (libfabric, CUDA) have headers of their own.
#pragma once

#include "mimatrix/version.hpp"

#include "mimatrix/core/dtype.hpp"
#include "mimatrix/core/error.hpp"
#include "mimatrix/core/options.hpp"
#include "mimatrix/core/signature.hpp"
#include "mimatrix/reduce/cpu.hpp"
#include "mimatrix/reduce/ops.hpp"
#include "mimatrix/schedule/schedule.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/transport/inproc.hpp"
#include "mimatrix/communicator.hpp"
#include "mimatrix/request.hpp"
#include "mimatrix/allreduce.hpp"
#include "mimatrix/reduce_scatter.hpp"
#include "mimatrix/allgather.hpp"
#include "mimatrix/broadcast.hpp"
