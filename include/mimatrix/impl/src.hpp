// The separately compiled part of mimatrix, for one translation unit (asio's
// impl/src.hpp): options, the communicator's state, the collective engines, the
// runtime-typed entry's core, the kernel table, transport::fabric, and the bindings of
// inproc and fabric, and of ring, mesh and BiGraph with their algorithms
// (detail/impl/compiled_engines.hpp); fabric's part only unless MIMATRIX_COMPILED_FABRIC
// is 0. Build it with MIMATRIX_SEPARATE_COMPILATION defined, as every unit that uses it
// must be; the target mimatrix::compiled does both.
#pragma once

#include "mimatrix/core/config.hpp"

#if MIMATRIX_HEADER_ONLY
#error "mimatrix/impl/src.hpp is for separate compilation: define MIMATRIX_SEPARATE_COMPILATION in every unit"
#endif

#include "mimatrix/core/impl/options.ipp"
#include "mimatrix/detail/impl/collectives_core.ipp"
#include "mimatrix/detail/impl/communicator_state.ipp"
#include "mimatrix/detail/impl/compiled_instances.ipp"
#include "mimatrix/detail/impl/engine_core.ipp"
#include "mimatrix/reduce/impl/host_kernels.ipp"

#if !defined(MIMATRIX_COMPILED_FABRIC) || MIMATRIX_COMPILED_FABRIC
#include "mimatrix/transport/fabric/impl/fabric.ipp"
#endif
