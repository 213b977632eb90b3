# Install the headers and an exported CMake package with components: core always, fabric
# and cuda when this build made them. Each has its own export set, so a consumer loads
# only the components whose dependencies it has (cmake/mimatrix-config.cmake.in).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MIMATRIX_CMAKE_DIR ${CMAKE_INSTALL_DATADIR}/cmake/mimatrix)
set(MIMATRIX_INSTALLED_COMPONENTS "")
foreach(_component IN ITEMS core fabric cuda)
  if(NOT TARGET mimatrix_${_component})
    continue()
  endif()
  list(APPEND MIMATRIX_INSTALLED_COMPONENTS ${_component})
  # INCLUDES DESTINATION puts the installed include directory on the exported targets: the
  # $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}> in CMakeLists.txt is read before
  # GNUInstallDirs is included, so on a first configure it is empty.
  install(TARGETS mimatrix_${_component} EXPORT mimatrix-${_component}-targets
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT mimatrix-${_component}-targets NAMESPACE mimatrix::
          FILE mimatrix-${_component}-targets.cmake DESTINATION ${MIMATRIX_CMAKE_DIR})
endforeach()

install(DIRECTORY include/mimatrix TYPE INCLUDE)
configure_package_config_file(cmake/mimatrix-config.cmake.in
  ${PROJECT_BINARY_DIR}/mimatrix-config.cmake INSTALL_DESTINATION ${MIMATRIX_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mimatrix-config-version.cmake
  COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
# mimatrix::compiled is not installed built: the config makes it in the consumer's project
# from these files (cmake/mimatrix-compiled-target.cmake says why).
install(FILES ${PROJECT_BINARY_DIR}/mimatrix-config.cmake
              cmake/libfabric.cmake
              cmake/mimatrix-compiled-target.cmake
              cmake/mimatrix_compiled.cpp
              cmake/mimatrix_compiled_fabric.cpp
              ${PROJECT_BINARY_DIR}/mimatrix-config-version.cmake
        DESTINATION ${MIMATRIX_CMAKE_DIR})
