# Finds libfabric (Debian: libfabric-dev) and makes the imported target
# libfabric::libfabric. Installed with the package, so consumers find it the same way.
if(NOT TARGET libfabric::libfabric)
  find_path(LIBFABRIC_INCLUDE_DIR rdma/fabric.h HINTS ENV LIBFABRIC_ROOT PATH_SUFFIXES include)
  find_library(LIBFABRIC_LIBRARY fabric HINTS ENV LIBFABRIC_ROOT PATH_SUFFIXES lib lib64)
  if(LIBFABRIC_INCLUDE_DIR AND LIBFABRIC_LIBRARY)
    add_library(libfabric::libfabric UNKNOWN IMPORTED)
    set_target_properties(libfabric::libfabric PROPERTIES
      IMPORTED_LOCATION "${LIBFABRIC_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${LIBFABRIC_INCLUDE_DIR}")
  endif()
endif()
