# SPDX-License-Identifier: Apache-2.0
# Locates the system compression libraries behind the optional wisp::zstd and wisp::lz4 targets.
# Nothing is downloaded or vendored: a CMake package (vcpkg, Conan, a source install, Debian's
# libzstd-dev) is tried first, pkg-config second (Debian's liblz4-dev ships only liblz4.pc).
# Each function defines one imported target, wisp::libzstd or wisp::liblz4, that the wisp::zstd /
# wisp::lz4 targets link; installed alongside wisp-config.cmake, which calls it for consumers.

# wisp_find_codec_library(<target> <what> <option> <pkg-config module> <package> <candidates...>)
function(wisp_find_codec_library target what option module package)
  if(TARGET ${target})
    return()
  endif()
  set(found "")
  find_package(${package} CONFIG QUIET)
  foreach(candidate IN LISTS ARGN)
    if(TARGET ${candidate})
      set(found ${candidate})
      break()
    endif()
  endforeach()
  if(NOT found)
    find_package(PkgConfig QUIET)
    if(PkgConfig_FOUND)
      pkg_check_modules(wisp_pc_${package} QUIET IMPORTED_TARGET ${module})
      if(TARGET PkgConfig::wisp_pc_${package})
        set(found PkgConfig::wisp_pc_${package})
      endif()
    endif()
  endif()
  if(NOT found)
    message(FATAL_ERROR
      "wisp: ${option}=ON needs ${what}, which was found neither as a CMake package "
      "(${package}Config.cmake: set ${package}_DIR or CMAKE_PREFIX_PATH) nor by pkg-config "
      "(${module}.pc: set PKG_CONFIG_PATH). On Debian/Ubuntu install the -dev package "
      "(scripts/deps.sh does), or configure with -D${option}=OFF.")
  endif()
  add_library(${target} INTERFACE IMPORTED)
  target_link_libraries(${target} INTERFACE ${found})
  message(STATUS "wisp: ${what} from ${found}")
endfunction()

function(wisp_find_zstd)
  wisp_find_codec_library(wisp::libzstd "zstd (libzstd)" WISP_ENABLE_ZSTD libzstd zstd
                          zstd::libzstd zstd::libzstd_shared zstd::libzstd_static)
endfunction()

function(wisp_find_lz4)
  wisp_find_codec_library(wisp::liblz4 "LZ4 (liblz4)" WISP_ENABLE_LZ4 liblz4 lz4 lz4::lz4
                          LZ4::lz4_shared LZ4::lz4_static)
endfunction()
