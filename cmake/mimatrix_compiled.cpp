// mimatrix::compiled: the one translation unit of mimatrix's separately compiled part.
#include "mimatrix/impl/src.hpp"
