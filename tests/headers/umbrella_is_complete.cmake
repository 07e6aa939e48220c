# SPDX-License-Identifier: Apache-2.0
# cmake -D INCLUDE_DIR=<include> -P umbrella_is_complete.cmake
# Fails when a public header under include/wisp/ is missing from the umbrella wisp/wisp.hpp,
# unless the umbrella's comment lists it as left out on purpose ("///   <wisp/...>").
file(READ "${INCLUDE_DIR}/wisp/wisp.hpp" umbrella)
file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/wisp/*.hpp")
set(missing)
foreach(header IN LISTS headers)
  if(header MATCHES "/detail/" OR header STREQUAL "wisp/wisp.hpp")
    continue()
  endif()
  string(FIND "${umbrella}" "#include <${header}>" at)
  string(FIND "${umbrella}" "///   <${header}>" left_out)
  if(at EQUAL -1 AND left_out EQUAL -1)
    list(APPEND missing "${header}")
  endif()
endforeach()
if(missing)
  list(JOIN missing "\n  " shown)
  message(FATAL_ERROR "wisp/wisp.hpp does not include:\n  ${shown}")
endif()
