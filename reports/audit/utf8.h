// UTF-8 helpers for cutting report context without splitting a code point, and for escaping text
// so it prints on one line. Invalid bytes count as one character each.
#pragma once

#include <cstddef>
#include <string>

namespace detaudit::reports {

inline bool utf8_is_cont(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// The start of the code point that holds byte `pos` (pos itself when it starts one or is the end).
inline size_t utf8_char_start(const std::string& s, size_t pos) {
  size_t p = pos;
  while (p > 0 && p < s.size() && utf8_is_cont(s[p]) && pos - p < 3) --p;
  return (p < s.size() && utf8_is_cont(s[p])) ? pos : p;
}

// The offset `n` code points before `pos` (or 0).
inline size_t utf8_back(const std::string& s, size_t pos, size_t n) {
  size_t p = pos;
  for (size_t i = 0; i < n && p > 0; ++i) {
    --p;
    size_t steps = 0;
    while (p > 0 && utf8_is_cont(s[p]) && steps < 3) --p, ++steps;
  }
  return p;
}

// The offset `n` code points after `pos` (or the end).
inline size_t utf8_forward(const std::string& s, size_t pos, size_t n) {
  size_t p = pos;
  for (size_t i = 0; i < n && p < s.size(); ++i) {
    ++p;
    size_t steps = 0;
    while (p < s.size() && utf8_is_cont(s[p]) && steps < 3) ++p, ++steps;
  }
  return p;
}

// s on one line: backslash, newline, carriage return, tab and other control bytes escaped
// (\\, \n, \r, \t, \xHH); `quote` (when not 0) escaped as \".
std::string escape_line(const std::string& s, char quote = 0);

}  // namespace detaudit::reports
