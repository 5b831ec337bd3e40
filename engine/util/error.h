// Error types shared by every module.
//
// input_error: the user's input is wrong (a malformed file, a bad flag value, an unknown name).
// The CLI prints what() on one line and exits 2. Messages name the file, the offset, key or field,
// what was expected and what was found. Libraries throw; they never abort() or exit().
#pragma once

#include <stdexcept>
#include <string>

namespace detaudit {

class input_error : public std::runtime_error {
 public:
  explicit input_error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace detaudit
