// JUnit XML for CI: one testsuite per pair of conditions (the control pair is its own suite), one
// testcase per item. Valid against the schema CI servers read (Jenkins' junit-10.xsd: testsuites >
// testsuite name/tests/failures/errors/skipped > testcase classname/name > failure|error|skipped).
//
//   <testsuite name="concurrency: alone vs concurrent-8" tests="20" failures="2" errors="0" skipped="0">
//     <testcase classname="detaudit.concurrency" name="17 [alone vs concurrent-8]">
//       <failure type="divergence" message="first difference at token 5: ' cat' vs ' dog'">...</failure>
//
// Text is escaped for XML 1.0: markup characters as entities, characters XML cannot hold (control
// bytes, U+FFFE/U+FFFF, invalid UTF-8) replaced by a visible \xHH or U+FFFD.
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "reports/audit/utf8.h"
#include "reports/compare_internal.h"
#include "reports/format_internal.h"

namespace detaudit::reports {
namespace {

// Length of the valid UTF-8 sequence at s[i] that XML 1.0 allows, or 0.
size_t xml_char_len(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  const bool overlong = (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000);
  const bool invalid = (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF || cp > 0x10FFFF;
  return (overlong || invalid) ? 0 : n;
}

// s escaped for XML text (attr: also for a double-quoted attribute, keeping newlines and tabs as
// character references).
std::string xml_escape(const std::string& s, bool attr) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    const unsigned char u = static_cast<unsigned char>(c);
    const size_t n = xml_char_len(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (attr && c == '"') out += "&quot;";
    else if (attr && (c == '\n' || c == '\r' || c == '\t')) out += c == '\n' ? "&#10;" : c == '\r' ? "&#13;" : "&#9;";
    else if ((u < 0x20 && c != '\n' && c != '\r' && c != '\t') || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out.append(s, i, n);
    }
    i += n;
  }
  return out;
}

std::string attr(const char* name, const std::string& value) {
  return std::string(" ") + name + "=\"" + xml_escape(value, true) + "\"";
}

std::string attr(const char* name, int64_t value) { return attr(name, std::to_string(value)); }

// Seconds a response took, from its record's timings (latency_ms, else t_end - t_start); 0 when unknown.
double seconds_of(const record* r) {
  if (!r || !r->timings.is_object()) return 0;
  auto num = [r](const char* k) -> std::optional<double> {
    auto it = r->timings.find(k);
    if (it == r->timings.end() || !it->is_number()) return std::nullopt;
    const double v = it->get<double>();
    return std::isfinite(v) && v >= 0 ? std::optional<double>(v) : std::nullopt;
  };
  if (auto ms = num("latency_ms")) return *ms / 1000.0;
  auto t0 = num("t_start"), t1 = num("t_end");
  return t0 && t1 && *t1 >= *t0 ? *t1 - *t0 : 0;
}

// A testcase's time: both responses it compares, as their records timed them.
double row_seconds(const pair_item& row) { return seconds_of(row.a) + seconds_of(row.b); }

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

void testcase(std::ostringstream& os, const pair_summary& s, const pair_item& row) {
  os << "    <testcase" << attr("classname", "detaudit." + s.probe)
     << attr("name", row.item_id + " [" + row.cond_a + " vs " + row.cond_b + "]") << attr("time", seconds_text(row_seconds(row)));
  if (row.error) {
    os << ">\n      <error" << attr("type", "error") << attr("message", row.d.note) << ">"
       << xml_escape(row_text(row), false) << "</error>\n    </testcase>\n";
  } else if (row.status == STATUS_NOT_EXERCISED || row.status == STATUS_NOT_COMPARABLE) {
    os << ">\n      <skipped" << attr("message", row.reason) << "/>\n    </testcase>\n";
  } else if (row.status == STATUS_DIFFERS || (row.status == STATUS_RETOKENIZED && s.one_target)) {
    const std::string cls = row.oracle && !row.oracle->cls.empty() ? " (oracle: " + row.oracle->cls + ")" : "";
    os << ">\n      <failure" << attr("type", "divergence") << attr("message", divergence_where(row.d) + cls) << ">"
       << xml_escape(row_text(row), false) << "</failure>\n    </testcase>\n";
  } else if (row_listed(row)) {
    os << ">\n      <system-out>" << xml_escape(row_text(row), false) << "</system-out>\n    </testcase>\n";
  } else {
    os << "/>\n";
  }
}

// Failures: differing rows, and one target's retokenized rows (a changed token).
int64_t failures_of(const pair_summary& s) { return s.differ + (s.one_target ? s.retokenized : 0); }

double suite_seconds(const pair_summary& s) {
  double t = 0;
  for (const pair_item& row : s.rows) t += row_seconds(row);
  return t;
}

std::string property(const char* name, const std::string& value) {
  return "<property" + attr("name", name) + attr("value", value) + "/>";
}

void testsuite(std::ostringstream& os, const pair_summary& s) {
  os << "  <testsuite" << attr("name", pair_title(s)) << attr("tests", s.items)
     << attr("failures", failures_of(s)) << attr("errors", s.errors) << attr("skipped", s.not_exercised + s.not_comparable)
     << attr("time", seconds_text(suite_seconds(s))) << ">\n";
  // Drifted rows (same tokens, moved logits or log-probs) are not failures; they, the noise model and
  // the p-values are properties ("-" where not computed).
  os << "    <properties>" << property("drifted", std::to_string(s.drifted))
     << property("differ_beyond_noise", beyond_noise_text(s)) << property("p_vs_noise", p_noise_text(s))
     << property("mcnemar_p", p_mcnemar_text(s));
  if (s.fidelity && s.fidelity->n > 0)
    os << property("fidelity_mean", nats_text(s.fidelity->mean)) << property("fidelity_max", nats_text(s.fidelity->max));
  if (s.near_tie + s.server_error + s.both_off + s.sampled + s.unjudged > 0)
    os << property("oracle_near_tie", std::to_string(s.near_tie)) << property("oracle_server_error", std::to_string(s.server_error))
       << property("oracle_both_off", std::to_string(s.both_off));
  os << "</properties>\n";
  for (const pair_item& row : s.rows) testcase(os, s, row);
  os << "  </testsuite>\n";
}

}  // namespace

std::string render_junit(const report& r) {
  int64_t tests = 0, failures = 0, errors = 0;
  double seconds = 0;
  for (const pair_summary& s : r.pairs) tests += s.items, failures += failures_of(s), errors += s.errors, seconds += suite_seconds(s);
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<testsuites" << attr("name", "detaudit") << attr("tests", tests) << attr("failures", failures)
     << attr("errors", errors) << attr("time", seconds_text(seconds)) << ">\n";
  for (const pair_summary& s : r.pairs) testsuite(os, s);
  if (!r.notes.empty()) {
    std::string notes;
    for (const std::string& n : r.notes) notes += n + "\n";
    os << "  <testsuite" << attr("name", "detaudit notes") << attr("tests", 0) << attr("failures", 0)
       << attr("errors", 0) << attr("skipped", 0) << attr("time", "0") << ">\n    <system-out>"
       << xml_escape(notes, false) << "</system-out>\n  </testsuite>\n";
  }
  os << "</testsuites>\n";
  return os.str();
}

}  // namespace detaudit::reports
