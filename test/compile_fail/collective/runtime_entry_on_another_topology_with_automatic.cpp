// The control for runtime_entry_on_another_topology.cpp: with algorithm/automatic.hpp
// included, the same program compiles.
#define WITH_AUTOMATIC
#include "runtime_entry_on_another_topology.cpp"
