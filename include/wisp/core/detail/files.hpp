// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Internal: opening the files wisp's readers and writers use, with errors that say why a
/// file cannot be opened (the operating system's reason, e.g. "No such file or directory").
#pragma once

#include <wisp/core/error.hpp>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace wisp::detail {

/// The operating system's reason for the last failed open (`errno`), or a generic one.
[[nodiscard]] inline std::string os_reason(int saved_errno) {
  return saved_errno != 0 ? std::generic_category().message(saved_errno) : "unknown reason";
}

/// @brief Opens `path` for binary reading.
/// @throws wisp::error "cannot open PATH: REASON" (a folder is refused too: reading one would
///         fail later with a less clear message).
[[nodiscard]] inline std::ifstream open_for_reading(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw error("cannot open " + path.string() + ": it is a folder, not a file");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw error("cannot open " + path.string() + ": " + os_reason(errno));
  }
  return in;
}

/// @brief Creates or truncates `path` for binary writing.
/// @throws wisp::error "cannot open PATH for writing: REASON".
[[nodiscard]] inline std::ofstream open_for_writing(const std::filesystem::path& path) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw error("cannot open " + path.string() + " for writing: " + os_reason(errno));
  }
  return out;
}

}  // namespace wisp::detail
