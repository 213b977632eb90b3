// The separately compiled part of mimatrix, for one translation unit (asio's
// impl/src.hpp): options, the communicator's state, the collective engines, the
// runtime-typed entry's core, the kernel table, the bindings of inproc, and of ring, mesh
// and BiGraph with their algorithms (detail/impl/compiled_engines.hpp), all in
// impl/src_core.hpp; and transport::fabric with its binding, in impl/src_fabric.hpp,
// unless MIMATRIX_COMPILED_FABRIC is 0. Build it with MIMATRIX_SEPARATE_COMPILATION
// defined, as every unit that uses it must be; the target mimatrix::compiled does both,
// with each of the two parts its own unit.
#pragma once

#include "mimatrix/impl/src_core.hpp"

#if !defined(MIMATRIX_COMPILED_FABRIC) || MIMATRIX_COMPILED_FABRIC
#include "mimatrix/impl/src_fabric.hpp"
#endif
