// The separately compiled part of mimatrix, for one translation unit (asio's
// impl/src.hpp): the kernel table, transport::fabric, and the collective engines and
// runtime-typed entries over inproc and fabric on ring, mesh and BiGraph
// (detail/impl/compiled_engines.hpp); fabric's part only unless MIMATRIX_COMPILED_FABRIC
// is 0. Build it with MIMATRIX_SEPARATE_COMPILATION defined,
// as every unit that uses it must be; the target mimatrix::compiled does both.
#pragma once

#include "mimatrix/core/config.hpp"

#if MIMATRIX_HEADER_ONLY
#error "mimatrix/impl/src.hpp is for separate compilation: define MIMATRIX_SEPARATE_COMPILATION in every unit"
#endif

#include "mimatrix/detail/impl/compiled_instances.ipp"
#include "mimatrix/reduce/impl/host_kernels.ipp"

#if !defined(MIMATRIX_COMPILED_FABRIC) || MIMATRIX_COMPILED_FABRIC
#include "mimatrix/transport/fabric/impl/fabric.ipp"
#endif
