# SPDX-License-Identifier: Apache-2.0
# The single-header distribution, compiled with the bare compiler (no CMake target, no -I include/).
#
# MODE=alone:     builds programs/dist_sample.cpp twice with `<CXX> -std=c++20`: once against a copy of
#                 single_include/wisp/wisp.hpp standing alone in an empty folder, once against
#                 include/. Both must exit 0 and print exactly the same lines.
# MODE=two_copies: generates a vendored copy with `amalgamate.py --namespace acme`, then builds
#                 programs/two_copies.cpp with it next to the single header, and again next to include/.
#
# cmake -D MODE=alone|two_copies -D SOURCE_DIR=... -D WORK_DIR=... -D CXX_COMPILER=g++
#       [-D PYTHON=python3] -P single_header_check.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var MODE SOURCE_DIR WORK_DIR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "single_header_check.cmake: ${var} is not set")
  endif()
endforeach()

set(flags -std=c++20 -Wall -Wextra -Wpedantic -Werror)
set(single "${SOURCE_DIR}/single_include/wisp/wisp.hpp")
if(NOT EXISTS "${single}")
  message(FATAL_ERROR "${single} does not exist: run `python3 tools/amalgamate.py`")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_checked out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " shown "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${shown}\n${out}${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# build_and_run(<name> <source> <include dirs...>): compiles, runs, returns stdout in <name>_out.
function(build_and_run name source)
  set(includes)
  foreach(dir IN LISTS ARGN)
    list(APPEND includes "-I${dir}")
  endforeach()
  set(exe "${WORK_DIR}/${name}")
  string(REPLACE ";" " " shown "${CXX_COMPILER} ${flags} ${includes} ${source} -o ${exe}")
  message(STATUS "${shown}")
  string(TIMESTAMP t0 "%s")
  run_checked(ignored "${CXX_COMPILER}" ${flags} ${includes} "${source}" -o "${exe}")
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  run_checked(out "${exe}")
  message(STATUS "${name} (compiled in ${seconds} s) printed:\n${out}")
  set(${name}_out "${out}" PARENT_SCOPE)
endfunction()

# The single header alone: a folder holding only wisp/wisp.hpp, so nothing can leak in from include/.
file(COPY "${single}" DESTINATION "${WORK_DIR}/alone/wisp")

if(MODE STREQUAL "alone")
  set(program "${CMAKE_CURRENT_LIST_DIR}/programs/dist_sample.cpp")
  build_and_run(from_single_header "${program}" "${WORK_DIR}/alone")
  build_and_run(from_include "${program}" "${SOURCE_DIR}/include")
  if(NOT from_single_header_out STREQUAL from_include_out)
    message(FATAL_ERROR "the program prints different results built against the single header "
                        "and against include/ (see above)")
  endif()
  message(STATUS "single header alone == include/: same output")
elseif(MODE STREQUAL "two_copies")
  if(NOT DEFINED PYTHON)
    message(FATAL_ERROR "single_header_check.cmake: MODE=two_copies needs PYTHON")
  endif()
  run_checked(ignored "${PYTHON}" "${SOURCE_DIR}/tools/amalgamate.py" --namespace acme
              --output "${WORK_DIR}/vendored/acme/wisp.hpp")
  set(program "${CMAKE_CURRENT_LIST_DIR}/programs/two_copies.cpp")
  build_and_run(with_single_header "${program}" "${WORK_DIR}/alone" "${WORK_DIR}/vendored")
  build_and_run(with_include "${program}" "${SOURCE_DIR}/include" "${WORK_DIR}/vendored")
else()
  message(FATAL_ERROR "single_header_check.cmake: unknown MODE '${MODE}'")
endif()
