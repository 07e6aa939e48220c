# SPDX-License-Identifier: Apache-2.0
# cmake -D WISP_BUILD_DIR=... -D WISP_SOURCE_DIR=... -D WORK_DIR=... -D WITH_CUDA=ON|OFF
#       -D WITH_CODECS=ON|OFF (wisp::zstd and wisp::lz4 both built)
#       -D CXX_COMPILER=... -D GENERATOR=... -P install_and_consume.cmake
foreach(var WISP_BUILD_DIR WISP_SOURCE_DIR WORK_DIR CXX_COMPILER GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_and_consume.cmake: ${var} is not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " shown "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${shown}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run("${CMAKE_COMMAND}" --install "${WISP_BUILD_DIR}" --prefix "${prefix}")

set(prefix_path "${prefix}")
set(consumer_options)
if(WITH_CUDA)
  list(APPEND prefix_path /usr/local/cuda/lib/cmake)
  list(APPEND consumer_options -DCONSUMER_WITH_CUDA=ON)
endif()
if(WITH_CODECS)
  list(APPEND consumer_options -DCONSUMER_WITH_CODECS=ON)
endif()
string(REPLACE ";" "\\;" prefix_path "${prefix_path}")

run("${CMAKE_COMMAND}" -S "${WISP_SOURCE_DIR}/examples/consumer" -B "${WORK_DIR}/build" -G
    "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_PREFIX_PATH=${prefix_path}"
    -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON ${consumer_options})
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")
if(WITH_CUDA)
  run("${WORK_DIR}/build/consumer_cuda")
endif()
if(WITH_CODECS)
  run("${WORK_DIR}/build/consumer_codecs")
endif()
message(STATUS "installed wisp was found and consumed from ${prefix}")
