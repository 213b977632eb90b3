// Compiler switches shared by host and device code.
#pragma once

#if defined(__CUDACC__)
#define MIMATRIX_HOST_DEVICE __host__ __device__
#else
#define MIMATRIX_HOST_DEVICE
#endif
