// Error types shared by every module.
//
// input_error: the user's input is wrong (a malformed file, a bad flag value, an unknown name).
// The CLI prints what() on one line and exits 2. Messages name the file, the offset, key or field,
// what was expected and what was found. Libraries throw; they never abort() or exit().
//
// disk_full_error: a file could not be written for want of space (ENOSPC, EDQUOT, or EFBIG: the
// file-size limit). The machine's state, not a bug: the CLI says what was kept and exits 3.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace detaudit {

class input_error : public std::runtime_error {
 public:
  explicit input_error(const std::string& what) : std::runtime_error(what) {}
};

class disk_full_error : public std::runtime_error {
 public:
  explicit disk_full_error(const std::string& what) : std::runtime_error(what) {}
};

// Whether errno value `err` says the disk (or the quota, or the file-size limit) is full.
inline bool errno_disk_full(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG; }

// Throws for a failed write of `what` ("writing PATH") with errno value `err`: disk_full_error
// when the disk is full, else std::runtime_error.
[[noreturn]] inline void throw_write_error(const std::string& what, int err) {
  const std::string msg = what + " failed: " + std::strerror(err);
  if (errno_disk_full(err)) throw disk_full_error(msg);
  throw std::runtime_error(msg);
}

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
