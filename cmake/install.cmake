# Install the headers and an exported CMake package: find_package(mimatrix) then
# target_link_libraries(app PRIVATE mimatrix::mimatrix).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MIMATRIX_CMAKE_DIR ${CMAKE_INSTALL_DATADIR}/cmake/mimatrix)
set(_mimatrix_targets mimatrix_core mimatrix_mimatrix)
if(TARGET mimatrix_cuda)
  list(APPEND _mimatrix_targets mimatrix_cuda)
endif()
if(TARGET mimatrix_fabric)
  list(APPEND _mimatrix_targets mimatrix_fabric)
endif()

install(DIRECTORY include/mimatrix TYPE INCLUDE)
# INCLUDES DESTINATION puts the installed include directory on the exported targets: the
# $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}> in CMakeLists.txt is read before
# GNUInstallDirs is included, so on a first configure it is empty.
install(TARGETS ${_mimatrix_targets} EXPORT mimatrix-targets
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT mimatrix-targets NAMESPACE mimatrix:: FILE mimatrix-targets.cmake
        DESTINATION ${MIMATRIX_CMAKE_DIR})

configure_package_config_file(cmake/mimatrix-config.cmake.in
  ${PROJECT_BINARY_DIR}/mimatrix-config.cmake INSTALL_DESTINATION ${MIMATRIX_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mimatrix-config-version.cmake
  COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/mimatrix-config.cmake
              cmake/libfabric.cmake
              ${PROJECT_BINARY_DIR}/mimatrix-config-version.cmake
        DESTINATION ${MIMATRIX_CMAKE_DIR})
