# mimatrix::compiled: the optional separately compiled part, as asio offers it. Linking it
# defines MIMATRIX_SEPARATE_COMPILATION for the user's units, which then see declarations
# only; the kernel table, transport::fabric and the collective engines over inproc and
# fabric (on ring, mesh and BiGraph) are compiled once, here.
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/mimatrix_compiled.cpp
     CONTENT "#include \"mimatrix/impl/src.hpp\"\n")
add_library(mimatrix_compiled STATIC EXCLUDE_FROM_ALL ${PROJECT_BINARY_DIR}/mimatrix_compiled.cpp)
add_library(mimatrix::compiled ALIAS mimatrix_compiled)
set_target_properties(mimatrix_compiled PROPERTIES EXPORT_NAME compiled POSITION_INDEPENDENT_CODE ON)
target_compile_definitions(mimatrix_compiled PUBLIC MIMATRIX_SEPARATE_COMPILATION)
target_link_libraries(mimatrix_compiled PUBLIC mimatrix_core)
if(TARGET mimatrix_fabric)
  target_link_libraries(mimatrix_compiled PUBLIC mimatrix_fabric)
else()
  # Its users must not expect fabric's engines in it (detail/impl/compiled_engines.hpp).
  target_compile_definitions(mimatrix_compiled PUBLIC MIMATRIX_COMPILED_FABRIC=0)
endif()
mimatrix_warnings(mimatrix_compiled)
