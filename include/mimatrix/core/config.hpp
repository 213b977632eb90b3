// Compiler switches shared by host and device code.
#pragma once

#if defined(__CUDACC__)
#define MIMATRIX_HOST_DEVICE __host__ __device__
#else
#define MIMATRIX_HOST_DEVICE
#endif

// Separate compilation, as asio offers it: header-only by default; with
// MIMATRIX_SEPARATE_COMPILATION the plain code (the libfabric transport, the collective
// engine, the communicator's state, the kernel table) is declared in the headers and
// compiled once, in the target mimatrix::compiled or in one translation unit of the
// user's that includes "mimatrix/impl/src.hpp" (the list is there).
#if defined(MIMATRIX_SEPARATE_COMPILATION)
#define MIMATRIX_HEADER_ONLY 0
#define MIMATRIX_DECL
#else
#define MIMATRIX_HEADER_ONLY 1
#define MIMATRIX_DECL inline
#endif
