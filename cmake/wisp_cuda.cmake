# SPDX-License-Identifier: Apache-2.0
# Locates CCCL (Thrust, CUB, libcu++) for the wisp::cuda component.

# Finds CCCL, looking in the CUDA toolkit as well, and stops configuration with a message that
# says what is missing and how to point CMake at it.
function(wisp_find_cccl)
  set(hints)
  foreach(root "$ENV{CUDA_PATH}" "$ENV{CUDA_HOME}" "${CUDAToolkit_ROOT}" /usr/local/cuda)
    if(root)
      list(APPEND hints "${root}/lib/cmake" "${root}/lib64/cmake")
    endif()
  endforeach()
  find_package(CCCL CONFIG QUIET HINTS ${hints})
  if(NOT CCCL_FOUND)
    message(
      FATAL_ERROR
        "wisp: WISP_ENABLE_CUDA=ON needs CCCL (Thrust/CUB/libcu++), which was not found.\n"
        "  Looked for CCCLConfig.cmake in CMAKE_PREFIX_PATH and in: ${hints}\n"
        "  Install the CUDA toolkit (it ships CCCL under <cuda>/lib/cmake/cccl), pass "
        "-DCMAKE_PREFIX_PATH=<cuda>/lib/cmake or -DCCCL_DIR=<dir with CCCLConfig.cmake>, "
        "or configure with -DWISP_ENABLE_CUDA=OFF.")
  endif()
  message(STATUS "wisp: CCCL ${CCCL_VERSION} from ${CCCL_DIR}")
endfunction()
