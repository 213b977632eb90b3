// Separate compilation: defines the bindings that compiled_engines.hpp declares extern,
// but fabric's.
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

// fabric's binding is instantiated with the rest of fabric (impl/src_fabric.hpp).
MIMATRIX_COMPILED_FACE(::mimatrix::transport::inproc)
MIMATRIX_COMPILED_TOPOLOGIES(MIMATRIX_COMPILED_AUTOMATIC)
MIMATRIX_COMPILED_ALGORITHMS(MIMATRIX_COMPILED_BINDING)
