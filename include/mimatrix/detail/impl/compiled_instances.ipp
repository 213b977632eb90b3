// Separate compilation: defines the bindings that compiled_engines.hpp declares extern.
#pragma once

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/detail/bindings.hpp"
#include "mimatrix/detail/impl/compiled_engines.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/inproc.hpp"
#if MIMATRIX_COMPILED_FABRIC_ON
#include "mimatrix/transport/fabric.hpp"
#endif

MIMATRIX_COMPILED_TRANSPORTS(MIMATRIX_COMPILED_FACE)
MIMATRIX_COMPILED_TOPOLOGIES(MIMATRIX_COMPILED_AUTOMATIC)
MIMATRIX_COMPILED_ALGORITHMS(MIMATRIX_COMPILED_BINDING)
