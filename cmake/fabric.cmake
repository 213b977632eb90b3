# mimatrix::fabric: transport::fabric's target, made when libfabric is found. Headers
# that need libfabric are only included by code that links this target.
include(${CMAKE_CURRENT_LIST_DIR}/libfabric.cmake)
set(MIMATRIX_HAS_FABRIC OFF)
if(TARGET libfabric::headers)
  set(MIMATRIX_HAS_FABRIC ON)
  add_library(mimatrix_fabric INTERFACE)
  add_library(mimatrix::fabric ALIAS mimatrix_fabric)
  set_target_properties(mimatrix_fabric PROPERTIES EXPORT_NAME fabric)
  target_link_libraries(mimatrix_fabric INTERFACE mimatrix_core libfabric::headers)
  target_compile_definitions(mimatrix_fabric INTERFACE MIMATRIX_WITH_FABRIC=1)
  target_link_libraries(mimatrix_mimatrix INTERFACE mimatrix_fabric)
endif()
message(STATUS "mimatrix: libfabric transport ${MIMATRIX_HAS_FABRIC}")
