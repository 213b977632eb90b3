// mimatrix::compiled: transport::fabric's unit (impl/src_fabric.hpp), linked only into
// programs that use fabric.
#include "mimatrix/impl/src_fabric.hpp"
