# Warnings for mimatrix's own targets (tests, examples, benchmarks). Warnings become
# errors only where asked (MIMATRIX_WARNINGS_AS_ERRORS: the presets and CI), never in a
# user's plain build: a newer or older compiler's new warning must not break it.
option(MIMATRIX_WARNINGS_AS_ERRORS "Treat warnings in mimatrix's own targets as errors" OFF)

# mimatrix_warnings(target...): -Wall -Wextra -Wpedantic, plus -Werror when asked.
function(mimatrix_warnings)
  foreach(_target IN LISTS ARGN)
    target_compile_options(${_target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra;-Wpedantic>"
      "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${MIMATRIX_WARNINGS_AS_ERRORS}>>:-Werror>")
  endforeach()
endfunction()
