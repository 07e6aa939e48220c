// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief The model the expert/KV split is computed for: `wisp::model_spec` and the built-in
/// presets, defined in core (core/model.hpp) because the synthetic routers share the preset table.
#pragma once

#include <wisp/core/model.hpp>
