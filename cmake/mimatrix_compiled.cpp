// mimatrix::compiled: its unit without transport::fabric (impl/src_core.hpp).
#include "mimatrix/impl/src_core.hpp"
