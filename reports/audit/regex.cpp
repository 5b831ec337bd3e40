// PCRE2 behind the graders' regular expressions.
#include "reports/audit/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

#include "util/error.h"

namespace detaudit::reports {
namespace {

struct match_data {
  pcre2_match_data* md;
  explicit match_data(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!md) throw std::bad_alloc();
  }
  ~match_data() { pcre2_match_data_free(md); }
  match_data(const match_data&) = delete;
  match_data& operator=(const match_data&) = delete;
};

// Bytes of the UTF-8 sequence that starts with lead byte c (1 for a stray byte).
size_t seq_len(unsigned char c) {
  if (c >= 0xF0 && c < 0xF8) return 4;
  if (c >= 0xE0) return c < 0xF0 ? 3 : 1;
  if (c >= 0xC0) return 2;
  return 1;
}

// The position after an empty match at `pos`: one character on (as Python steps over it).
size_t step_over(const std::string& s, size_t pos) {
  return pos + std::min(seq_len(static_cast<unsigned char>(s[pos])), s.size() - pos);
}

// One match from `start`: PCRE2_ERROR_NOMATCH or the number of groups set. A pattern that gives up
// on this subject (it backtracks past PCRE2's match, depth or heap limit, e.g. "(a+)+$") is the
// pattern's fault: input_error naming `what`; any other failure is an internal error.
int match_at(const pcre2_code* code, const std::string& s, size_t start, pcre2_match_data* md, const std::string& what) {
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start, 0, md, nullptr);
  if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT)
    throw input_error(what + ": the regular expression gives up on a " + std::to_string(s.size()) +
                      "-byte text: it backtracks too much (PCRE2 error " + std::to_string(rc) +
                      "); write it without nested repeats such as (a+)+");
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
    throw std::runtime_error("regular expression match failed (PCRE2 error " + std::to_string(rc) + ")");
  return rc;
}

}  // namespace

struct regex::impl {
  pcre2_code* code = nullptr;
  std::string what;
  uint32_t n_groups = 0;
  ~impl() { pcre2_code_free(code); }
};

regex::regex(const std::string& pattern, const std::string& what) : p_(std::make_unique<impl>()) {
  p_->what = what;
  const uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  p_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err, &err_offset, nullptr);
  if (!p_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw input_error(what + ": '" + pattern + "' is not a valid regular expression (offset " + std::to_string(err_offset) +
                      ": " + reinterpret_cast<const char*>(msg) + ")");
  }
  pcre2_pattern_info(p_->code, PCRE2_INFO_CAPTURECOUNT, &p_->n_groups);
}

regex::~regex() = default;

std::vector<std::vector<std::string>> regex::findall(const std::string& s) const {
  std::vector<std::vector<std::string>> out;
  match_data m(p_->code);
  size_t pos = 0;
  while (pos <= s.size()) {
    if (match_at(p_->code, s, pos, m.md, p_->what) == PCRE2_ERROR_NOMATCH) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
    std::vector<std::string> groups;
    if (p_->n_groups == 0) groups.push_back(s.substr(ov[0], ov[1] - ov[0]));
    for (uint32_t g = 1; g <= p_->n_groups; ++g) {
      const PCRE2_SIZE b = ov[2 * g], e = ov[2 * g + 1];
      groups.push_back(b == PCRE2_UNSET ? std::string() : s.substr(b, e - b));
    }
    out.push_back(std::move(groups));
    if (ov[1] == ov[0]) {
      if (ov[0] >= s.size()) break;
      pos = step_over(s, ov[0]);
    } else {
      pos = ov[1];
    }
  }
  return out;
}

bool regex::search(const std::string& s) const {
  match_data m(p_->code);
  return match_at(p_->code, s, 0, m.md, p_->what) != PCRE2_ERROR_NOMATCH;
}

std::optional<std::pair<size_t, std::string>> regex::first(const std::string& s) const {
  match_data m(p_->code);
  if (match_at(p_->code, s, 0, m.md, p_->what) == PCRE2_ERROR_NOMATCH) return std::nullopt;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
  return std::make_pair(static_cast<size_t>(ov[0]), s.substr(ov[0], ov[1] - ov[0]));
}

std::string regex::remove_all(const std::string& s) const {
  std::string out;
  match_data m(p_->code);
  size_t pos = 0, kept = 0;
  while (pos <= s.size()) {
    if (match_at(p_->code, s, pos, m.md, p_->what) == PCRE2_ERROR_NOMATCH) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
    out.append(s, kept, ov[0] - kept);
    kept = ov[1];
    if (ov[1] == ov[0]) {
      if (ov[0] >= s.size()) break;
      pos = step_over(s, ov[0]);
    } else {
      pos = ov[1];
    }
  }
  out.append(s, kept, std::string::npos);
  return out;
}

}  // namespace detaudit::reports
