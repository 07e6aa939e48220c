// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief A small strict JSON parser (RFC 8259 subset good enough for routing records): objects,
/// arrays, numbers, strings with escapes, true/false/null. Standard library only, so the JSONL
/// importer, the model-file reader and the safetensors header reader stay header-only. Not a
/// general-purpose JSON library: numbers are kept as `double`, duplicate keys are rejected, nesting
/// is limited to 64 levels. `json_quote` writes a string literal the parser reads back.
#pragma once

#include <wisp/core/error.hpp>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace wisp::detail {

struct json_member;

/// A parsed JSON value. (Members are a struct declared after it, not a `std::pair`: a pair of an
/// incomplete type cannot be instantiated, which clang with libstdc++ rejects.)
struct json_value {
  enum class kind : std::uint8_t { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  double number = 0;
  std::string text;  // string value, or the number's source spelling
  std::vector<json_value> items;
  std::vector<json_member> members;

  /// Member `key` of an object, or nullptr.
  [[nodiscard]] const json_value* find(std::string_view key) const noexcept;
};

/// One member of a JSON object.
struct json_member {
  std::string key;
  json_value value;
};

inline const json_value* json_value::find(std::string_view key) const noexcept {
  for (const json_member& m : members) {
    if (m.key == key) {
      return &m.value;
    }
  }
  return nullptr;
}

/// Parses exactly one JSON value spanning `text` (surrounding whitespace allowed).
/// Errors are `format_error(base + position, message)`.
class json_parser {
 public:
  json_parser(std::string_view text, std::uint64_t base) : s_(text), base_(base) {}

  [[nodiscard]] json_value parse_document() {
    json_value v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) {
      fail("unexpected trailing characters after the JSON value");
    }
    return v;
  }

 private:
  static constexpr int max_depth = 64;

  [[noreturn]] void fail(const std::string& what) const { throw format_error(base_ + i_, what); }

  void skip_ws() noexcept {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) {
      ++i_;
    }
  }

  void expect_word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) {
      fail("invalid literal (expected '" + std::string(w) + "')");
    }
    i_ += w.size();
  }

  json_value parse_value(int depth) {
    if (depth > max_depth) {
      fail("JSON nested deeper than 64 levels");
    }
    skip_ws();
    if (i_ >= s_.size()) {
      fail("unexpected end of input, expected a value");
    }
    json_value v;
    const char c = s_[i_];
    if (c == '{') {
      return parse_object(depth);
    }
    if (c == '[') {
      return parse_array(depth);
    }
    if (c == '"') {
      v.type = json_value::kind::string;
      v.text = parse_string();
      return v;
    }
    if (c == 't') {
      expect_word("true");
      v.type = json_value::kind::boolean;
      v.boolean = true;
      return v;
    }
    if (c == 'f') {
      expect_word("false");
      v.type = json_value::kind::boolean;
      return v;
    }
    if (c == 'n') {
      expect_word("null");
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      return parse_number();
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  // The object at `i_` (its '{'), members at `depth + 1`; duplicate keys are an error.
  json_value parse_object(int depth) {
    json_value v;
    v.type = json_value::kind::object;
    ++i_;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return v;
    }
    while (true) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"') {
        fail("expected a string key");
      }
      std::string key = parse_string();
      if (v.find(key) != nullptr) {
        fail("duplicate key \"" + key + "\"");
      }
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != ':') {
        fail("expected ':' after a key");
      }
      ++i_;
      json_value member = parse_value(depth + 1);
      v.members.push_back(json_member{std::move(key), std::move(member)});
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return v;
      }
      fail("expected ',' or '}' in an object");
    }
  }

  // The array at `i_` (its '['), items at `depth + 1`.
  json_value parse_array(int depth) {
    json_value v;
    v.type = json_value::kind::array;
    ++i_;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return v;
    }
    while (true) {
      v.items.push_back(parse_value(depth + 1));
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return v;
      }
      fail("expected ',' or ']' in an array");
    }
  }

  static bool digit(char c) noexcept { return c >= '0' && c <= '9'; }

  json_value parse_number() {
    const std::size_t start = i_;
    auto digits = [&] {
      const std::size_t from = i_;
      while (i_ < s_.size() && digit(s_[i_])) {
        ++i_;
      }
      return i_ - from;
    };
    if (s_[i_] == '-') {
      ++i_;
    }
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else if (digits() == 0) {
      fail("invalid number");
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (digits() == 0) {
        fail("invalid number: digits expected after '.'");
      }
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) {
        ++i_;
      }
      if (digits() == 0) {
        fail("invalid number: digits expected in the exponent");
      }
    }
    json_value v;
    v.type = json_value::kind::number;
    v.text = std::string(s_.substr(start, i_ - start));
    const auto r = std::from_chars(v.text.data(), v.text.data() + v.text.size(), v.number);
    if (r.ec != std::errc{} || !std::isfinite(v.number)) {
      i_ = start;
      fail("number out of range: " + v.text);
    }
    return v;
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) {
      fail("truncated \\u escape");
    }
    unsigned v = 0;
    for (int n = 0; n < 4; ++n) {
      const char c = s_[i_++];
      v <<= 4;
      if (digit(c)) {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        fail("invalid hex digit in \\u escape");
      }
    }
    return v;
  }

  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    ++i_;  // opening quote
    std::string out;
    while (true) {
      if (i_ >= s_.size()) {
        fail("unterminated string");
      }
      const char c = s_[i_++];
      if (c == '"') {
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        --i_;
        fail("control character in a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) {
        fail("unterminated escape");
      }
      const char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (i_ + 1 < s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u') {
              i_ += 2;
              const unsigned lo = hex4();
              if (lo < 0xDC00 || lo >= 0xE000) {
                fail("invalid low surrogate in \\u escape");
              }
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              fail("unpaired high surrogate in \\u escape");
            }
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("unpaired low surrogate in \\u escape");
          }
          put_utf8(out, cp);
          break;
        }
        default:
          --i_;
          fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  std::string_view s_;
  std::uint64_t base_;
  std::size_t i_ = 0;
};

/// `s` as a JSON string literal: quotes and backslashes escaped, control characters as `\u00XX`,
/// every other byte as is (UTF-8 passes through). O(|s|).
[[nodiscard]] inline std::string json_quote(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += "\\u00";
      out += hex[(c >> 4) & 0xf];
      out += hex[c & 0xf];
    } else {
      out += c;
    }
  }
  return out + '"';
}

}  // namespace wisp::detail
