// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: `WISP_DETAIL_ALWAYS_INLINE`, for the few hot-path templates whose callers must
/// see through them (a bulk cache call and the callback it runs per access).
#pragma once

#include <wisp/core/config.hpp>

#if defined(__GNUC__) || defined(__clang__)
#define WISP_DETAIL_ALWAYS_INLINE [[gnu::always_inline]] inline
#elif defined(_MSC_VER)
#define WISP_DETAIL_ALWAYS_INLINE __forceinline
#else
#define WISP_DETAIL_ALWAYS_INLINE inline
#endif
