# mimatrix::compiled: the optional separately compiled part, as asio offers it. Linking it
# defines MIMATRIX_SEPARATE_COMPILATION for the user's units, which then see declarations
# only; options, the communicator's state, the collective engines, the runtime entry's
# core, the kernel table, transport::fabric, and the bindings of inproc and fabric, ring,
# mesh and BiGraph are compiled once, here. Installed, the package makes the same target
# in the consumer's project (cmake/mimatrix-compiled-target.cmake).
include(${CMAKE_CURRENT_LIST_DIR}/mimatrix-compiled-target.cmake)
if(TARGET mimatrix_fabric)
  mimatrix_compiled_target(mimatrix_compiled ${CMAKE_CURRENT_LIST_DIR} mimatrix_core mimatrix_fabric)
else()
  mimatrix_compiled_target(mimatrix_compiled ${CMAKE_CURRENT_LIST_DIR} mimatrix_core)
endif()
add_library(mimatrix::compiled ALIAS mimatrix_compiled)
mimatrix_warnings(mimatrix_compiled)
