// SPDX-License-Identifier: Apache-2.0
// The model a command sizes, spelled the same way in `wisp plan` and `wisp evaluate`: a built-in
// preset or a model .json file (docs/formats.md#model-files), and the synthetic router of its
// shape.
#pragma once

#include "cli.hpp"

#include <wisp/alloc/model_file.hpp>
#include <wisp/alloc/model_spec.hpp>
#include <wisp/trace/synthetic.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace wisp::tool {

/// Help text of a model argument.
inline std::string model_source_help() {
  return "a preset (" + model_preset_names() +
         ") or a model .json file (schema: docs/formats.md#model-files)";
}

/// @brief The preset called `name`, else the model file at that path.
/// @throws wisp::logic_error for an unknown name that is no file; wisp::error / format_error for
///   a file that cannot be read or parsed.
inline model_spec load_model(const std::string& name) {
  if (find_model_preset(name) != nullptr) {
    return model_preset(name);
  }
  std::error_code ec;
  if (name.ends_with(".json") || std::filesystem::exists(name, ec)) {
    return read_model_json(name).spec;
  }
  usage_error("--model: unknown model '", name, "' (presets: ", model_preset_names(),
              "; or give a model .json file)");
}

/// The synthetic router of the model: its preset for a preset model, else the default dynamics
/// scaled to the model's shape.
inline synthetic_config synthetic_for(const model_spec& m) {
  const moe_shape shape = m.shape();
  if (const auto* preset = find_model_preset(m.name);
      preset != nullptr && preset->config.spec() == m) {
    return synthetic_preset(m.name);
  }
  return synthetic_for_shape(shape);
}

}  // namespace wisp::tool
