// algorithm::automatic, declared: the runtime-typed collectives name it without parsing
// every algorithm. automatic.hpp defines it and includes this, so the two cannot differ.
#pragma once

namespace mimatrix::algorithm {

template <class... Candidates>
class basic_automatic;
class binomial;
class bruck;
class gdraa;
class halving_doubling;
class hdrm;
class linear;
class pairwise;
class rabenseifner;
class recursive_doubling;
class ring;
struct topology_default;
template <class LocalAlgo, class GlobalAlgo>
class hierarchical;

using automatic = basic_automatic<hdrm, gdraa, hierarchical<topology_default, topology_default>, ring,
                                  halving_doubling, recursive_doubling, binomial, rabenseifner, linear, pairwise,
                                  bruck>;

}  // namespace mimatrix::algorithm
