# SPDX-License-Identifier: Apache-2.0
# `conan create` for real, hermetically inside the build tree:
#   1. a Python venv in WORK_DIR/venv with conan==CONAN_VERSION from PyPI (kept between runs when
#      it already holds that version; pip's cache is WORK_DIR/pip-cache);
#   2. CONAN_HOME=WORK_DIR/conan-home, recreated each run (~/.conan2 is never touched), and
#      `conan profile detect`;
#   3. `conan create <source> -s compiler.cppstd=20 --build=missing --no-remote`, with test_package/
#      copied into WORK_DIR so the checkout stays clean: exports the recipe, packages the headers,
#      builds test_package with CMakeDeps + CMakeToolchain and runs it (it exits 1 on a wrong result);
#   4. the recipe refuses C++17 (validate) and, where the CUDA toolkit's CCCL exists
#      (CCCL_PREFIX set), `conan test` builds the wisp::cuda test against the same package with
#      -o wisp/*:cuda=True; `conan test` with -o wisp/*:zstd=True -o wisp/*:lz4=True builds the
#      codecs test against the system's libzstd and liblz4.
#
# cmake -D SOURCE_DIR=... -D WORK_DIR=... -D PYTHON=python3 -D CONAN_VERSION=2.34.0
#       -D CXX_COMPILER=g++ -D GENERATOR=Ninja [-D CCCL_PREFIX=...] -P conan_create.cmake
cmake_minimum_required(VERSION 3.25)
foreach(var SOURCE_DIR WORK_DIR PYTHON CONAN_VERSION CXX_COMPILER GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "conan_create.cmake: ${var} is not set")
  endif()
endforeach()

file(STRINGS "${SOURCE_DIR}/include/wisp/version.hpp" version_lines
     REGEX "^#define WISP_VERSION_(MAJOR|MINOR|PATCH) [0-9]+$")
set(version)
foreach(part MAJOR MINOR PATCH)
  string(REGEX MATCH "WISP_VERSION_${part} ([0-9]+)" ignored "${version_lines}")
  list(APPEND version "${CMAKE_MATCH_1}")
endforeach()
list(JOIN version "." version)
set(ref "wisp/${version}")

set(venv "${WORK_DIR}/venv")
set(conan "${venv}/bin/conan")
set(ENV{PIP_CACHE_DIR} "${WORK_DIR}/pip-cache")
set(ENV{PIP_DISABLE_PIP_VERSION_CHECK} 1)
set(ENV{PIP_NO_INPUT} 1)
set(ENV{PYTHONNOUSERSITE} 1)
set(ENV{CONAN_HOME} "${WORK_DIR}/conan-home")
unset(ENV{CONAN_DEFAULT_PROFILE})
unset(ENV{CC})
set(ENV{CXX} "${CXX_COMPILER}") # what `conan profile detect` looks at

# step(<description> <command...>): runs it, shows its output, fails the test when it fails.
function(step what)
  message(STATUS "==== ${what}")
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out
                  ECHO_OUTPUT_VARIABLE ECHO_ERROR_VARIABLE)
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  message(STATUS "==== ${what}: exit ${rc} after ${seconds} s")
  set(step_rc "${rc}" PARENT_SCOPE)
  set(step_out "${out}" PARENT_SCOPE)
endfunction()

# 1. conan in a venv.
set(have_conan FALSE)
if(EXISTS "${conan}")
  execute_process(COMMAND "${conan}" --version OUTPUT_VARIABLE installed RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND installed MATCHES "version ${CONAN_VERSION}\n")
    set(have_conan TRUE)
    message(STATUS "reusing ${venv} (conan ${CONAN_VERSION})")
  endif()
endif()
if(NOT have_conan)
  file(REMOVE_RECURSE "${venv}")
  step("create a venv in the build tree" "${PYTHON}" -m venv "${venv}")
  if(NOT step_rc EQUAL 0)
    message(FATAL_ERROR "`${PYTHON} -m venv` failed: on Debian/Ubuntu install python3-venv "
                        "(scripts/deps.sh installs it when run as root)")
  endif()
  step("pip install conan==${CONAN_VERSION}" "${venv}/bin/python" -m pip install --quiet
       "conan==${CONAN_VERSION}")
  if(NOT step_rc EQUAL 0)
    message(FATAL_ERROR "pip could not install conan==${CONAN_VERSION}: this test needs PyPI "
                        "(configure with -DWISP_TEST_CONAN=OFF to leave it out offline)")
  endif()
endif()

# 2. A Conan home of our own.
file(REMOVE_RECURSE "$ENV{CONAN_HOME}")
step("conan profile detect" "${conan}" profile detect --force)
if(NOT step_rc EQUAL 0)
  message(FATAL_ERROR "conan profile detect failed")
endif()

# 3. conan create, test_package included.
set(test_folder "${WORK_DIR}/test_package")
file(REMOVE_RECURSE "${test_folder}")
file(COPY "${SOURCE_DIR}/test_package/" DESTINATION "${test_folder}")
set(common -s compiler.cppstd=20 --no-remote -c "tools.cmake.cmaketoolchain:generator=${GENERATOR}"
           -c tools.build:jobs=2 -c "tools.build:compiler_executables={'cpp': '${CXX_COMPILER}'}")
step("conan create ${SOURCE_DIR}" "${conan}" create "${SOURCE_DIR}" --build=missing
     --test-folder "${test_folder}" ${common})
if(NOT step_rc EQUAL 0)
  message(FATAL_ERROR "conan create failed (exit ${step_rc}): see its output above")
endif()
foreach(expected "Full package reference: ${ref}#" "test_package: wisp ${version}, [0-9]+ accesses.*pager ok: yes")
  if(NOT step_out MATCHES "${expected}")
    message(FATAL_ERROR "conan create succeeded but its output lacks '${expected}': test_package did not run?")
  endif()
endforeach()

# 4a. validate(): C++17 is refused.
step("a C++17 consumer is refused" "${conan}" install "--requires=${ref}" -s compiler.cppstd=17
     --no-remote)
if(step_rc EQUAL 0 OR NOT step_out MATCHES "lower than the required C\\+\\+ standard \\(20\\)")
  message(FATAL_ERROR "the recipe accepted compiler.cppstd=17 (validate() must require C++20)")
endif()

# 4b. wisp::cuda through the recipe's CCCL build module, on Thrust's CPP device system.
if(CCCL_PREFIX)
  set(ENV{CMAKE_PREFIX_PATH} "${CCCL_PREFIX}")
  step("conan test with -o wisp/*:cuda=True" "${conan}" test "${test_folder}" "${ref}"
       -o "wisp/*:cuda=True" ${common})
  if(NOT step_rc EQUAL 0 OR NOT step_out MATCHES "test_package_cuda: wisp::cuda remap_topk ok")
    message(FATAL_ERROR "test_package against wisp::cuda (cuda=True) failed")
  endif()
endif()
# 4c. wisp::zstd and wisp::lz4 through the recipe's build modules (the system's libraries).
step("conan test with -o wisp/*:zstd=True -o wisp/*:lz4=True" "${conan}" test "${test_folder}"
     "${ref}" -o "wisp/*:zstd=True" -o "wisp/*:lz4=True" ${common})
if(NOT step_rc EQUAL 0 OR NOT step_out MATCHES "test_package_codecs: lz4hc")
  message(FATAL_ERROR "test_package against wisp::zstd and wisp::lz4 failed")
endif()
message(STATUS "conan: ${ref} created, test_package passed")
