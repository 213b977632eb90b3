// The separately compiled part of mimatrix without transport::fabric (impl/src.hpp has
// the list). Its own unit in mimatrix::compiled, so that a program that never uses fabric
// links no fabric code.
#pragma once

#include "mimatrix/core/config.hpp"

#if MIMATRIX_HEADER_ONLY
#error "mimatrix/impl/src_core.hpp is for separate compilation: define MIMATRIX_SEPARATE_COMPILATION in every unit"
#endif

#include "mimatrix/core/impl/operation.ipp"
#include "mimatrix/core/impl/options.ipp"
#include "mimatrix/detail/impl/collectives_core.ipp"
#include "mimatrix/detail/impl/communicator_state.ipp"
#include "mimatrix/detail/impl/compiled_instances.ipp"
#include "mimatrix/detail/impl/engine_core.ipp"
#include "mimatrix/detail/impl/p2p_core.ipp"
#include "mimatrix/reduce/impl/host_kernels.ipp"
