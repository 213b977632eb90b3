# cmake -DCOMMAND_FILE=<file> -DSOURCE=<source> -DEXPECT=fail|pass [-DREGEX_FILE=<file>]
#       -P check_compile.cmake
# Compiles SOURCE. EXPECT=fail: succeeds only if the compiler rejects it with output that
# matches the regex in REGEX_FILE. EXPECT=pass: succeeds only if it compiles.
cmake_minimum_required(VERSION 3.25)

foreach(_var COMMAND_FILE SOURCE EXPECT)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "check_compile.cmake: ${_var} is not set")
  endif()
endforeach()
include(${COMMAND_FILE})

separate_arguments(_flags UNIX_COMMAND "${MIMATRIX_CXX_FLAGS}")
set(_includes ${MIMATRIX_INCLUDES})
list(TRANSFORM _includes PREPEND -I)
set(_defines ${MIMATRIX_DEFINES})
list(TRANSFORM _defines PREPEND -D)
set(_command ${MIMATRIX_CXX} ${_flags} ${MIMATRIX_CXX_OPTIONS} ${_includes} ${_defines} ${SOURCE})
list(JOIN _command " " _shown)
message(STATUS "LC_ALL=C ${_shown}")

# The C locale keeps the compiler's quotes ASCII, so a regex can spell them.
execute_process(COMMAND ${CMAKE_COMMAND} -E env LC_ALL=C LANG=C ${_command}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _output ERROR_VARIABLE _output)

if(NOT _rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "could not run the compiler: ${_rc}\n${_output}")
endif()

if(EXPECT STREQUAL "pass")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${SOURCE} must compile but did not (exit ${_rc}):\n${_output}")
  endif()
  message(STATUS "compiled, as it must")
  return()
endif()

if(NOT EXPECT STREQUAL "fail")
  message(FATAL_ERROR "check_compile.cmake: EXPECT is '${EXPECT}', not fail or pass")
endif()
file(READ ${REGEX_FILE} _regex)
if(_rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} must not compile, but it did:\n${_output}")
endif()
# A crashing compiler is not a compile error in the code.
if(_output MATCHES "internal compiler error|PLEASE submit a bug report|Segmentation fault")
  message(FATAL_ERROR "the compiler crashed on ${SOURCE} (exit ${_rc}):\n${_output}")
endif()
if(NOT _output MATCHES "${_regex}")
  message(FATAL_ERROR "${SOURCE} failed to compile as it must, but the output does not "
                      "match the regex\n  ${_regex}\n--- compiler output (exit ${_rc}) ---\n${_output}")
endif()
string(REGEX MATCH "${_regex}" _matched "${_output}")
message(STATUS "failed to compile, as it must, saying: ${_matched}")
