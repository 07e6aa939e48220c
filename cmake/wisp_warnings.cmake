# SPDX-License-Identifier: Apache-2.0
# Flags for wisp's own binaries (tests, benchmarks, tools, examples). The exported targets carry
# none of them: consumers keep their own warning level.

add_library(wisp_project_options INTERFACE)
add_library(wisp::project_options ALIAS wisp_project_options)
# Warnings are errors only where asked (WISP_WARNINGS_AS_ERRORS, on in every preset): a user's
# build with another compiler version must not fail on a warning that version adds.
target_compile_options(
  wisp_project_options INTERFACE $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic>
                                 $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
if(WISP_WARNINGS_AS_ERRORS)
  # nvcc: warnings of the host compiler are errors too; CCCL headers are system headers.
  target_compile_options(
    wisp_project_options INTERFACE $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Werror>
                                   $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror --Werror=all-warnings>)
endif()
if(WISP_SANITIZE)
  target_compile_options(
    wisp_project_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined
                                   -fno-sanitize-recover=all -fno-omit-frame-pointer>)
  target_link_options(wisp_project_options INTERFACE -fsanitize=address,undefined)
endif()

# wisp_add_executable(name SOURCES ... [LIBRARIES ...]): an executable built with the project flags.
function(wisp_add_executable name)
  cmake_parse_arguments(arg "" "" "SOURCES;LIBRARIES" ${ARGN})
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE wisp::wisp wisp::project_options ${arg_LIBRARIES})
endfunction()

# wisp_link_codecs(target MACRO_PREFIX): links every optional exponent coder of this build
# (wisp::zstd, wisp::lz4) into `target` and defines <MACRO_PREFIX>_HAVE_ZSTD / _HAVE_LZ4 for it.
function(wisp_link_codecs target prefix)
  foreach(codec IN LISTS wisp_codecs)
    string(TOUPPER "${codec}" upper)
    target_link_libraries(${target} PRIVATE wisp::${codec})
    target_compile_definitions(${target} PRIVATE ${prefix}_HAVE_${upper})
  endforeach()
endfunction()
