// Separate compilation: the bindings mimatrix::compiled instantiates once (impl/src.hpp),
// declared extern so that no user unit instantiates them again: each transport compiled
// there, and on ring, mesh and BiGraph their typed collectives' default algorithm and
// algorithm::automatic (collectives<>, the runtime entry). Only declarations of those
// types are needed here, so a user's unit parses none of their definitions for this.
#pragma once

#include <optional>
#include <string>

#include "mimatrix/algorithm/automatic_fwd.hpp"
#include "mimatrix/core/config.hpp"
#include "mimatrix/detail/bindings.hpp"

namespace mimatrix::topology {
class bigraph;
class mesh;
class ring;
}  // namespace mimatrix::topology

namespace mimatrix::transport {
class fabric;
class inproc;
}  // namespace mimatrix::transport

#if !defined(MIMATRIX_COMPILED_FABRIC) || MIMATRIX_COMPILED_FABRIC
#define MIMATRIX_COMPILED_FABRIC_ON 1
#else
#define MIMATRIX_COMPILED_FABRIC_ON 0
#endif

/// F(Transport) for every transport compiled in mimatrix::compiled.
#if MIMATRIX_COMPILED_FABRIC_ON
#define MIMATRIX_COMPILED_TRANSPORTS(F) F(::mimatrix::transport::inproc) F(::mimatrix::transport::fabric)
#else
#define MIMATRIX_COMPILED_TRANSPORTS(F) F(::mimatrix::transport::inproc)
#endif

/// F(Topology) for every topology whose algorithm::automatic is compiled there.
#define MIMATRIX_COMPILED_TOPOLOGIES(F) \
  F(::mimatrix::topology::ring) F(::mimatrix::topology::mesh) F(::mimatrix::topology::bigraph)

/// F(Topology, Algorithm) for every algorithm binding compiled there.
#define MIMATRIX_COMPILED_ALGORITHMS(F)                                      \
  F(::mimatrix::topology::ring, ::mimatrix::algorithm::ring)                 \
  F(::mimatrix::topology::mesh, ::mimatrix::algorithm::gdraa)                \
  F(::mimatrix::topology::bigraph, ::mimatrix::algorithm::hdrm)              \
  F(::mimatrix::topology::ring, ::mimatrix::algorithm::automatic)            \
  F(::mimatrix::topology::mesh, ::mimatrix::algorithm::automatic)            \
  F(::mimatrix::topology::bigraph, ::mimatrix::algorithm::automatic)

#define MIMATRIX_COMPILED_FACE(Transport) \
  template ::mimatrix::detail::transport_face mimatrix::detail::face_of<Transport>(Transport&);
#define MIMATRIX_COMPILED_AUTOMATIC(Topology)                                                                \
  template ::mimatrix::detail::schedule_source mimatrix::detail::automatic_on<Topology>(                      \
      const void*, const std::string&, int, int, const std::optional<::mimatrix::schedule::policy>&);
#define MIMATRIX_COMPILED_BINDING(Topology, Algorithm)                                            \
  template ::mimatrix::detail::schedule_source mimatrix::detail::bind_algorithm<Topology, Algorithm>( \
      Topology, Algorithm, int, std::optional<::mimatrix::schedule::policy>);

#if !MIMATRIX_HEADER_ONLY  // header-only, every unit instantiates what it uses
#define MIMATRIX_EXTERN_FACE(Transport) extern MIMATRIX_COMPILED_FACE(Transport)
#define MIMATRIX_EXTERN_AUTOMATIC(Topology) extern MIMATRIX_COMPILED_AUTOMATIC(Topology)
#define MIMATRIX_EXTERN_BINDING(Topology, Algorithm) extern MIMATRIX_COMPILED_BINDING(Topology, Algorithm)
MIMATRIX_COMPILED_TRANSPORTS(MIMATRIX_EXTERN_FACE)
MIMATRIX_COMPILED_TOPOLOGIES(MIMATRIX_EXTERN_AUTOMATIC)
MIMATRIX_COMPILED_ALGORITHMS(MIMATRIX_EXTERN_BINDING)
#undef MIMATRIX_EXTERN_FACE
#undef MIMATRIX_EXTERN_AUTOMATIC
#undef MIMATRIX_EXTERN_BINDING
#endif
