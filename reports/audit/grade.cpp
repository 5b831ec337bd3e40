// Graders: GSM8K as lm-evaluation-harness's gsm8k task scores it (strict-match and
// flexible-extract filters, then exact_match with its normalisation), exact, numeric and regex.
//
// The GSM8K rules, from the task's YAML:
//   strict-match:     regex `#### (\-?[0-9\.\,]+)`, the first match's group 1 (take_first)
//   flexible-extract: regex `(-?[$0-9.,]{2,})|(-?[0-9]+)`, the LAST match (group_select -1), its
//                     non-empty group
//   no match:         "[invalid]"
//   exact_match:      ignore_case, regexes_to_ignore [",", "\$", "(?s).*#### ", "\.$"] removed (in
//                     that order, every occurrence, Python re.sub) from both the extracted answer
//                     and the reference (the dataset's whole "answer" field), then equality.
// Lower-casing is ASCII only (answers are numbers; Python would also fold other scripts).
#include <cctype>
#include <memory>

#include "reports/audit/grade.h"
#include "reports/audit/regex.h"
#include "util/error.h"

namespace detaudit::reports {
namespace {

const regex& strict_re() {
  static const regex r(R"(#### (\-?[0-9\.\,]+))", "gsm8k strict-match");
  return r;
}

const regex& flexible_re() {
  static const regex r(R"((-?[$0-9.,]{2,})|(-?[0-9]+))", "gsm8k flexible-extract");
  return r;
}

const regex& number_re() {
  static const regex r(R"(-?\$?[0-9][0-9,]*(?:\.[0-9]+)?)", "numeric grader");
  return r;
}

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// The last number in s as a canonical decimal, "" when there is none.
std::string last_number(const std::string& s) {
  const auto all = number_re().findall(s);
  return all.empty() ? "" : decimal_canonical(all.back()[0]);
}

// The number a numeric reference holds: after the last "#### " when there is one (GSM8K), the last number.
std::string reference_number(const std::string& reference) {
  const size_t mark = reference.rfind("#### ");
  const std::string tail = mark == std::string::npos ? reference : reference.substr(mark + 5);
  const std::string n = last_number(tail);
  if (n.empty()) throw input_error("numeric grader: the reference '" + reference + "' holds no number");
  return n;
}

const char* INVALID = "[invalid]";

}  // namespace

std::optional<std::string> gsm8k_extract_strict(const std::string& response) {
  const auto all = strict_re().findall(response);
  if (all.empty()) return std::nullopt;
  return trim(all.front()[0]);
}

std::optional<std::string> gsm8k_extract_flexible(const std::string& response) {
  const auto all = flexible_re().findall(response);
  if (all.empty()) return std::nullopt;
  for (const std::string& g : all.back())
    if (!g.empty()) return trim(g);
  return std::nullopt;
}

std::string gsm8k_normalize(const std::string& s) {
  static const regex comma(",", "gsm8k normalisation");
  static const regex dollar(R"(\$)", "gsm8k normalisation");
  static const regex through_marker(R"((?s).*#### )", "gsm8k normalisation");
  static const regex final_dot(R"(\.$)", "gsm8k normalisation");
  std::string out = final_dot.remove_all(through_marker.remove_all(dollar.remove_all(comma.remove_all(s))));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string decimal_canonical(const std::string& s) {
  std::string t;
  for (char c : s)
    if (c != ',' && c != '$') t += c;
  bool neg = false;
  size_t i = 0;
  if (i < t.size() && t[i] == '-') neg = true, ++i;
  std::string int_part, frac_part;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) int_part += t[i++];
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) frac_part += t[i++];
  }
  if (i != t.size() || (int_part.empty() && frac_part.empty())) return "";
  int_part.erase(0, std::min(int_part.find_first_not_of('0'), int_part.size()));
  if (int_part.empty()) int_part = "0";
  while (!frac_part.empty() && frac_part.back() == '0') frac_part.pop_back();
  std::string out = int_part + (frac_part.empty() ? "" : "." + frac_part);
  return (neg && out != "0") ? "-" + out : out;
}

std::string grade_answer(const std::string& grader, const std::string& response) {
  if (grader == "gsm8k") return gsm8k_normalize(gsm8k_extract_strict(response).value_or(INVALID));
  if (grader == "gsm8k-flex") return gsm8k_normalize(gsm8k_extract_flexible(response).value_or(INVALID));
  if (grader == "numeric") return last_number(response);
  if (grader == "exact" || grader.rfind("regex:", 0) == 0) return trim(response);
  throw input_error("unknown grader '" + grader + "': expected gsm8k, gsm8k-flex, exact, numeric or regex:PATTERN");
}

std::optional<bool> grade(const std::string& grader, const std::string& response, const std::string& reference) {
  if (grader.empty()) return std::nullopt;
  if (grader.rfind("regex:", 0) == 0) return regex(grader.substr(6), "grader '" + grader + "'").search(response);
  if (reference.empty()) return std::nullopt;
  if (grader == "numeric") {
    const std::string want = reference_number(reference);
    return last_number(response) == want;
  }
  if (grader == "exact") return trim(response) == trim(reference);
  const std::string got = grade_answer(grader, response);
  return got == gsm8k_normalize(reference);
}

// The final answer of a response: a reasoning model's thinking is graded never, whether the server
// returned it apart (record.reasoning) or inline as a leading <think>...</think> block.
std::string final_answer(const std::string& text) {
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string::npos || text.compare(start, 7, "<think>") != 0) return text;
  const size_t end = text.find("</think>", start);
  return end == std::string::npos ? "" : text.substr(end + 8);  // thinking cut short: no answer yet
}

std::optional<bool> grade(const record& r) {
  try {
    return grade(r.grader, final_answer(r.text), r.reference);
  } catch (const input_error& e) {
    throw input_error("item '" + r.item_id + "' (" + r.condition + "): " + e.what());
  }
}

}  // namespace detaudit::reports
