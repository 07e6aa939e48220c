// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Every built-in eviction policy and the slot cache: `lru`, `fifo`, `lfu`, `lfru`, `fld`,
/// `least_stale`, `decayed_frequency`, `predicted_next_use`, `reuse_probability`, `learned_belady`,
/// `belady`,
/// `slot_cache<P>`, `per_layer_cache<P>`, and `visit_policy` (a built-in policy by name).
#pragma once

#include <wisp/cache/belady.hpp>
#include <wisp/cache/decayed_frequency.hpp>
#include <wisp/cache/eviction_policy.hpp>
#include <wisp/cache/fifo.hpp>
#include <wisp/cache/fld.hpp>
#include <wisp/cache/learned_belady.hpp>
#include <wisp/cache/least_stale.hpp>
#include <wisp/cache/lfru.hpp>
#include <wisp/cache/lfu.hpp>
#include <wisp/cache/lru.hpp>
#include <wisp/cache/per_layer_cache.hpp>
#include <wisp/cache/predicted_next_use.hpp>
#include <wisp/cache/reuse_probability.hpp>
#include <wisp/cache/slot_cache.hpp>
#include <wisp/cache/visit_policy.hpp>
