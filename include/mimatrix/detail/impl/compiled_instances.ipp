// Separate compilation: defines the engines and runtime-typed entries that
// compiled_engines.hpp and compiled_collectives.hpp declare extern.
#pragma once

#include "mimatrix/detail/impl/compiled_collectives.hpp"
#include "mimatrix/detail/impl/compiled_engines.hpp"

#define MIMATRIX_INSTANTIATE_ENGINE(Transport, Topology, Algorithm) \
  template class ::mimatrix::detail::collective_engine<Transport, Topology, Algorithm>;
MIMATRIX_COMPILED_ENGINES(MIMATRIX_INSTANTIATE_ENGINE)
#undef MIMATRIX_INSTANTIATE_ENGINE

#define MIMATRIX_INSTANTIATE_COLLECTIVES(Transport, Topology) \
  template class ::mimatrix::collectives<Transport, Topology>;
MIMATRIX_COMPILED_COLLECTIVES(MIMATRIX_INSTANTIATE_COLLECTIVES)
#undef MIMATRIX_INSTANTIATE_COLLECTIVES
