# mimatrix_compiled_target(<name> <source dir> <core target> [<fabric target>]): the static
# library of mimatrix's separately compiled part (impl/src.hpp), built only when something
# links it, from mimatrix_compiled.cpp and, with fabric, mimatrix_compiled_fabric.cpp in
# <source dir>. Two units, so that a program that never uses fabric pulls no fabric object
# from the archive (libfabric itself is loaded only by a first endpoint). Used by this build (cmake/compiled.cmake) and,
# installed, by the package config, which makes mimatrix::compiled in the consumer's
# project: compiled there with the consumer's compiler and flags, so that its code and
# theirs always agree (sanitizers, _GLIBCXX_ASSERTIONS, -march), and the installed package
# stays architecture-independent.
function(mimatrix_compiled_target name source_dir core)
  add_library(${name} STATIC EXCLUDE_FROM_ALL ${source_dir}/mimatrix_compiled.cpp)
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # Its users see declarations only; the definitions are in this library.
  target_compile_definitions(${name} PUBLIC MIMATRIX_SEPARATE_COMPILATION)
  target_link_libraries(${name} PUBLIC ${core})
  if(ARGC GREATER 3)
    target_sources(${name} PRIVATE ${source_dir}/mimatrix_compiled_fabric.cpp)
    target_link_libraries(${name} PUBLIC ${ARGV3})
  else()
    # Its users must not expect fabric's part in it (detail/impl/compiled_engines.hpp).
    target_compile_definitions(${name} PUBLIC MIMATRIX_COMPILED_FABRIC=0)
  endif()
endfunction()
