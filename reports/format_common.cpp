// report_render and the helpers every format shares.
#include <cstdio>

#include "reports/compare_internal.h"
#include "reports/format_internal.h"
#include "reports/utf8.h"
#include "util/error.h"

namespace detaudit::reports {

std::string escape_line(const std::string& s, char quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (quote && c == quote) out += std::string("\\") + quote;
    else if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string pair_title(const pair_summary& s) { return s.probe + ": " + s.cond_a + " vs " + s.cond_b; }

std::string score_text(const pair_summary& s) {
  if (s.graded == 0) return "-";
  const std::string g = std::to_string(s.graded);
  return std::to_string(s.correct_a) + "/" + g + " -> " + std::to_string(s.correct_b) + "/" + g;
}

std::string flips_text(const pair_summary& s) {
  if (s.graded == 0) return "-";
  return "-" + std::to_string(s.right_to_wrong) + "/+" + std::to_string(s.wrong_to_right);
}

std::string net_text(const pair_summary& s) {
  if (s.graded == 0) return "-";
  const int64_t net = s.wrong_to_right - s.right_to_wrong;
  return (net > 0 ? "+" : "") + std::to_string(net);
}

std::string margin_text(const std::optional<double>& m) {
  if (!m) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", *m);
  return buf;
}

bool row_listed(const pair_item& row) {
  return row.error || !row.d.identical || row.d.hash_step >= 0 || row.not_argmax_a >= 0 || row.not_argmax_b >= 0;
}

std::string hash_text(const pair_item& row) {
  if (row.d.hash_step < 0) return "";
  const std::string k = std::to_string(row.d.hash_step);
  return row.d.identical ? "logits drifted at step " + k : "logit hash differs from step " + k;
}

std::string manifest_line(const json& m) {
  if (!m.is_object() || m.empty()) return "";
  std::string out;
  for (const char* side : {"a", "b"})
    if (auto it = m.find(side); it != m.end() && it->is_object() && !json_str(*it, "path").empty())
      out += (out.empty() ? "" : ", ") + std::string(side[0] == 'a' ? "A" : "B") + " = " + json_str(*it, "path");
  if (!json_str(m, "run_id").empty()) out += "run " + json_str(m, "run_id");
  if (!json_str(m, "tool_version").empty())
    out += (out.empty() ? "" : ", ") + std::string("detaudit ") + json_str(m, "tool_version");
  if (auto t = m.find("targets"); t != m.end() && t->is_array())
    for (const json& tg : *t)
      if (tg.is_object()) out += (out.empty() ? "" : ", ") + json_str(tg, "label", "?") + " = " + json_str(tg, "spec", "?");
  return out;
}

std::string not_argmax_text(const pair_item& row) {
  std::string out;
  for (int side = 0; side < 2; ++side) {
    const int64_t step = side ? row.not_argmax_b : row.not_argmax_a;
    if (step >= 0)
      out += (out.empty() ? "" : "; ") + std::string("greedy side ") + (side ? "B" : "A") +
             " sampled a token below its top alternative at step " + std::to_string(step);
  }
  return out;
}

std::string report_render(const report& r, const std::string& format) {
  if (format == "text") return render_text(r);
  if (format == "json") return render_json(r);
  if (format == "md") return render_md(r);
  if (format == "junit") return render_junit(r);
  if (format == "html") return render_html(r);
  throw input_error("--format: expected text, json, md, junit or html, found '" + format + "'");
}

}  // namespace detaudit::reports
