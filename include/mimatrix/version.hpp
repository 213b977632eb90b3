// mimatrix version, set by the build system's project() version.
#pragma once

#define MIMATRIX_VERSION_MAJOR 0
#define MIMATRIX_VERSION_MINOR 1
#define MIMATRIX_VERSION_PATCH 0
#define MIMATRIX_VERSION \
  (MIMATRIX_VERSION_MAJOR * 10000 + MIMATRIX_VERSION_MINOR * 100 + MIMATRIX_VERSION_PATCH)
