// Error types shared by every module.
//
// input_error: the user's input is wrong (a malformed file, a bad flag value, an unknown name).
// The CLI prints what() on one line and exits 2. Messages name the file, the offset, key or field,
// what was expected and what was found. Libraries throw; they never abort() or exit().
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>

namespace detaudit {

class input_error : public std::runtime_error {
 public:
  explicit input_error(const std::string& what) : std::runtime_error(what) {}
};

// A message for one line of a terminal: a line break becomes a space, any other control byte
// \xHH, so a message quoting something a file or a server said cannot move the cursor, clear the
// screen or set the window title. Bytes from 0x80 up (UTF-8) are kept.
inline std::string message_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += ' ';
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace detaudit
