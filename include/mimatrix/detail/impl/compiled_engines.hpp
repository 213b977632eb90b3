// Separate compilation: the engines mimatrix::compiled instantiates once (impl/src.hpp),
// declared extern here so that no user unit instantiates them again. For each transport
// compiled there: ring, mesh and BiGraph, each with its own algorithm (the typed
// collectives' default) and with algorithm::automatic (collectives<>, the runtime entry).
#pragma once

#include "mimatrix/algorithm/automatic.hpp"
#include "mimatrix/algorithm/gdraa.hpp"
#include "mimatrix/algorithm/hdrm.hpp"
#include "mimatrix/algorithm/ring.hpp"
#include "mimatrix/core/config.hpp"
#include "mimatrix/detail/collective_engine.hpp"
#include "mimatrix/topology/bigraph.hpp"
#include "mimatrix/topology/mesh.hpp"
#include "mimatrix/topology/ring.hpp"
#include "mimatrix/transport/inproc.hpp"

#if !defined(MIMATRIX_COMPILED_FABRIC) || MIMATRIX_COMPILED_FABRIC
#define MIMATRIX_COMPILED_FABRIC_ON 1
#include "mimatrix/transport/fabric.hpp"
#else
#define MIMATRIX_COMPILED_FABRIC_ON 0
#endif

/// F(Transport, Topology, Algorithm) for every engine compiled in mimatrix::compiled.
#define MIMATRIX_COMPILED_ENGINES_OVER(F, Transport)                     \
  F(Transport, ::mimatrix::topology::ring, ::mimatrix::algorithm::ring)    \
  F(Transport, ::mimatrix::topology::mesh, ::mimatrix::algorithm::gdraa)   \
  F(Transport, ::mimatrix::topology::bigraph, ::mimatrix::algorithm::hdrm) \
  F(Transport, ::mimatrix::topology::ring, ::mimatrix::algorithm::automatic) \
  F(Transport, ::mimatrix::topology::mesh, ::mimatrix::algorithm::automatic) \
  F(Transport, ::mimatrix::topology::bigraph, ::mimatrix::algorithm::automatic)

#if MIMATRIX_COMPILED_FABRIC_ON
#define MIMATRIX_COMPILED_ENGINES(F)                              \
  MIMATRIX_COMPILED_ENGINES_OVER(F, ::mimatrix::transport::inproc) \
  MIMATRIX_COMPILED_ENGINES_OVER(F, ::mimatrix::transport::fabric)
#else
#define MIMATRIX_COMPILED_ENGINES(F) MIMATRIX_COMPILED_ENGINES_OVER(F, ::mimatrix::transport::inproc)
#endif

#if !MIMATRIX_HEADER_ONLY  // header-only, every unit instantiates what it uses
#define MIMATRIX_EXTERN_ENGINE(Transport, Topology, Algorithm) \
  extern template class ::mimatrix::detail::collective_engine<Transport, Topology, Algorithm>;
MIMATRIX_COMPILED_ENGINES(MIMATRIX_EXTERN_ENGINE)
#undef MIMATRIX_EXTERN_ENGINE
#endif
