# SPDX-License-Identifier: Apache-2.0
# vcpkg overlay port for wisp, installed through wisp's own CMake install rules (header-only).
#   vcpkg install wisp --overlay-ports=<wisp checkout>/ports          # classic mode
#   "dependencies": ["wisp"] + "overlay-ports": ["<wisp checkout>/ports"]   # manifest mode
# The source is the checkout this port lives in (ports/wisp/../..). vcpkg's binary cache keys the
# package on the port files, not on that source: after changing the checkout, reinstall with
# --no-binarycaching (or `vcpkg remove wisp`). In a registry, fetch a release instead:
#   vcpkg_from_github(OUT_SOURCE_PATH SOURCE_PATH REPO <org>/wisp REF "v${VERSION}" SHA512 <sha512>)
# CI (ctest -L dist, dist.vcpkg_port) runs this file with stand-ins for the vcpkg functions: the
# configure options below are exactly the ones it checks.
set(VCPKG_BUILD_TYPE release) # header-only: one configuration

get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(NOT EXISTS "${SOURCE_PATH}/include/wisp/version.hpp")
  message(FATAL_ERROR "wisp port: ${SOURCE_PATH} is not a wisp checkout (use the port from its ports/ folder)")
endif()

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
    FEATURES
        cuda WISP_ENABLE_CUDA
        zstd WISP_ENABLE_ZSTD
        lz4 WISP_ENABLE_LZ4
)

vcpkg_cmake_configure(
    SOURCE_PATH "${SOURCE_PATH}"
    OPTIONS
        ${FEATURE_OPTIONS}
        -DWISP_INSTALL=ON
        -DWISP_BUILD_TESTS=OFF
        -DWISP_BUILD_BENCHMARKS=OFF
        -DWISP_BUILD_EXAMPLES=OFF
        -DWISP_BUILD_TOOLS=OFF
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME wisp CONFIG_PATH share/cmake/wisp)

# Nothing is compiled: no lib/ or bin/. The licence is installed as the port's copyright instead.
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/lib" "${CURRENT_PACKAGES_DIR}/share/doc")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
