// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief wisp's version. This file is the single source of truth: CMake, the Conan recipe and
/// the vcpkg port read the three numbers below.
#pragma once

#define WISP_VERSION_MAJOR 0
#define WISP_VERSION_MINOR 3
#define WISP_VERSION_PATCH 0

/// One integer for preprocessor comparisons: MAJOR * 10000 + MINOR * 100 + PATCH.
#define WISP_VERSION (WISP_VERSION_MAJOR * 10000 + WISP_VERSION_MINOR * 100 + WISP_VERSION_PATCH)

#define WISP_DETAIL_STRINGIFY_IMPL(x) #x
#define WISP_DETAIL_STRINGIFY(x) WISP_DETAIL_STRINGIFY_IMPL(x)

/// The version as a string literal, e.g. "0.2.0".
#define WISP_VERSION_STRING                 \
  WISP_DETAIL_STRINGIFY(WISP_VERSION_MAJOR) \
  "." WISP_DETAIL_STRINGIFY(WISP_VERSION_MINOR) "." WISP_DETAIL_STRINGIFY(WISP_VERSION_PATCH)
