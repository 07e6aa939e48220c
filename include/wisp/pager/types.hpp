// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Forwards to core/topk.hpp (`topk_id`, `copy_op`), where every area that reads top-k ids
/// or copy plans finds them.
#pragma once

#include <wisp/core/topk.hpp>
