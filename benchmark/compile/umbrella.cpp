// Compile-time unit (issue 53 item 6): typed.cpp's one typed allreduce over fabric, after
// the umbrella header the README includes (typed.cpp's narrow headers then add nothing).
#include <mimatrix/mimatrix.hpp>
#include <mimatrix/transport/fabric.hpp>

#include "typed.cpp"
