// A small PCRE2 wrapper with Python `re` semantics where the graders need them: findall (groups
// as lm-evaluation-harness reads them), search and sub. Patterns are compiled in UTF mode; `$`
// also matches before a final newline, as in Python; invalid UTF-8 in a subject never fails a match.
//
// Non-goals: replacement templates, named groups, flags beyond what the graders use.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace detaudit::reports {

class regex {
 public:
  // Throws input_error (naming `what`, the offset and PCRE2's message) when the pattern does not compile.
  regex(const std::string& pattern, const std::string& what);
  ~regex();
  regex(const regex&) = delete;
  regex& operator=(const regex&) = delete;

  // Every non-overlapping match, left to right; each as its capture groups 1..n ("" for a group that
  // did not take part), or as the whole match when the pattern has no groups. Python's re.findall.
  std::vector<std::vector<std::string>> findall(const std::string& s) const;
  // True when the pattern matches somewhere in s (Python's re.search).
  bool search(const std::string& s) const;
  // The first match: its byte offset and its text; nullopt when there is none.
  std::optional<std::pair<size_t, std::string>> first(const std::string& s) const;
  // s with every non-overlapping match removed (Python's re.sub(pattern, "", s)).
  std::string remove_all(const std::string& s) const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace detaudit::reports
