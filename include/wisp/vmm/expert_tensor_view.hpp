// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Forwards to core/expert_tensor_view.hpp (`expert_tensor_view`), where kernel contracts,
/// copy paths and the VMM tensor all find the view without depending on each other.
#pragma once

#include <wisp/core/expert_tensor_view.hpp>
