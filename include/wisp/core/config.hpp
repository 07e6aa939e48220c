// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Compiler and language checks, and the portability macros every wisp header uses.
///
/// Including any wisp header with an unsupported compiler or language standard stops the build
/// here with one readable `#error` instead of pages of template errors further down.
#pragma once

#if defined(_MSVC_LANG)
#define WISP_DETAIL_CPLUSPLUS _MSVC_LANG
#else
#define WISP_DETAIL_CPLUSPLUS __cplusplus
#endif

#if WISP_DETAIL_CPLUSPLUS < 202002L
#error "wisp requires C++20 or newer (compile with -std=c++20 or link the wisp::wisp target)"
#endif

#if defined(__clang__)
#if __clang_major__ < 14
#error "wisp requires clang 14 or newer"
#endif
#elif defined(__GNUC__)
#if __GNUC__ < 11
#error "wisp requires GCC 11 or newer"
#endif
#elif defined(_MSC_VER)
#if _MSC_VER < 1930
#error "wisp requires MSVC 19.30 (Visual Studio 2022) or newer"
#endif
#endif

/// `__host__ __device__` when compiled by a CUDA compiler (nvcc or clang in CUDA mode), nothing
/// otherwise, so the same inline function serves host code and kernels.
#if defined(__CUDACC__) || defined(__CUDA__)
#define WISP_HOST_DEVICE __host__ __device__
#else
#define WISP_HOST_DEVICE
#endif
