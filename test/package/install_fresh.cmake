# cmake -DBINARY_DIR=<mimatrix build> -DPREFIX=<dir> -P install_fresh.cmake
# Installs mimatrix into an emptied PREFIX.
foreach(_var BINARY_DIR PREFIX)
  if(NOT ${_var})
    message(FATAL_ERROR "install_fresh.cmake: ${_var} is not set")
  endif()
endforeach()
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${PREFIX}
                RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BINARY_DIR} --prefix ${PREFIX} failed: ${_rc}")
endif()
