# Finds libfabric (Debian: libfabric-dev) and makes two imported targets. Installed with
# the package, so consumers find it the same way.
# - libfabric::headers, what mimatrix::fabric needs: libfabric's headers, the dynamic
#   loader's library, and the file found here (MIMATRIX_LIBFABRIC_FILE). mimatrix links no
#   libfabric: a process loads it when it opens its first endpoint
#   (transport/fabric/library.hpp), by its soname, then from that file.
# - libfabric::libfabric, for a program that calls libfabric itself: the library linked.
if(NOT TARGET libfabric::headers)
  find_path(LIBFABRIC_INCLUDE_DIR rdma/fabric.h HINTS ENV LIBFABRIC_ROOT PATH_SUFFIXES include)
  find_library(LIBFABRIC_LIBRARY fabric HINTS ENV LIBFABRIC_ROOT PATH_SUFFIXES lib lib64)
  if(LIBFABRIC_INCLUDE_DIR AND LIBFABRIC_LIBRARY)
    add_library(libfabric::headers INTERFACE IMPORTED)
    set_target_properties(libfabric::headers PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${LIBFABRIC_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}"
      INTERFACE_COMPILE_DEFINITIONS "MIMATRIX_LIBFABRIC_FILE=\"${LIBFABRIC_LIBRARY}\"")
    add_library(libfabric::libfabric UNKNOWN IMPORTED)
    set_target_properties(libfabric::libfabric PROPERTIES
      IMPORTED_LOCATION "${LIBFABRIC_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${LIBFABRIC_INCLUDE_DIR}")
  endif()
endif()
