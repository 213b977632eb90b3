// main() of mimatrix's <collective>_perf programs (collective_perf.cpp, compiled once for
// the ten): nccl-tests' flags and columns, over transport::fabric.
#pragma once

#include "report.hpp"

namespace mimatrix::perf {

/// Parses nccl-tests' flags, starts local ranks for `--ranks N` without a launcher, and
/// sweeps `c` over the sizes; the program's exit code.
int collective_main(collective c, int argc, char** argv, const char* program);

}  // namespace mimatrix::perf
