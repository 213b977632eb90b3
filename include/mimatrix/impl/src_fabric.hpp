// transport::fabric's separately compiled part (impl/src.hpp has the list): its own unit
// in mimatrix::compiled, linked only into programs that use fabric (impl/src_core.hpp).
#pragma once

#include "mimatrix/core/config.hpp"

#if MIMATRIX_HEADER_ONLY
#error "mimatrix/impl/src_fabric.hpp is for separate compilation: define MIMATRIX_SEPARATE_COMPILATION in every unit"
#endif

#include "mimatrix/detail/bindings.hpp"
#include "mimatrix/detail/impl/compiled_engines.hpp"
#include "mimatrix/transport/fabric.hpp"
#include "mimatrix/transport/fabric/impl/fabric.ipp"

MIMATRIX_COMPILED_FACE(::mimatrix::transport::fabric)
