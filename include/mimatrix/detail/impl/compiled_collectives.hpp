// Separate compilation: the runtime-typed entries mimatrix::compiled instantiates once
// (impl/src.hpp), declared extern so that no user unit instantiates them again: every
// transport compiled there, on ring, mesh and BiGraph.
#pragma once

#include "mimatrix/collectives.hpp"
#include "mimatrix/detail/impl/compiled_engines.hpp"

/// F(Transport, Topology) for every collectives<> compiled in mimatrix::compiled.
#define MIMATRIX_COMPILED_COLLECTIVES_OVER(F, Transport) \
  F(Transport, ::mimatrix::topology::ring)                 \
  F(Transport, ::mimatrix::topology::mesh)                 \
  F(Transport, ::mimatrix::topology::bigraph)

#if MIMATRIX_COMPILED_FABRIC_ON
#define MIMATRIX_COMPILED_COLLECTIVES(F)                              \
  MIMATRIX_COMPILED_COLLECTIVES_OVER(F, ::mimatrix::transport::inproc) \
  MIMATRIX_COMPILED_COLLECTIVES_OVER(F, ::mimatrix::transport::fabric)
#else
#define MIMATRIX_COMPILED_COLLECTIVES(F) MIMATRIX_COMPILED_COLLECTIVES_OVER(F, ::mimatrix::transport::inproc)
#endif

#if !MIMATRIX_HEADER_ONLY  // header-only, every unit instantiates what it uses
#define MIMATRIX_EXTERN_COLLECTIVES(Transport, Topology) \
  extern template class ::mimatrix::collectives<Transport, Topology>;
MIMATRIX_COMPILED_COLLECTIVES(MIMATRIX_EXTERN_COLLECTIVES)
#undef MIMATRIX_EXTERN_COLLECTIVES
#endif
