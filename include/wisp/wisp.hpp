// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Umbrella header: the whole core of wisp (everything under include/wisp/, no CUDA).
#pragma once

#include <wisp/core/config.hpp>
#include <wisp/core/error.hpp>
#include <wisp/core/ids.hpp>
#include <wisp/version.hpp>
