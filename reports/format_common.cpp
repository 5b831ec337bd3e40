// report_render and the helpers every format shares.
#include <algorithm>
#include <cstdio>

#include "reports/audit/stats.h"
#include "reports/audit/utf8.h"
#include "reports/compare_internal.h"
#include "reports/format_internal.h"
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

std::string beyond_noise_text(const pair_summary& s) {
  return s.differ_beyond_noise >= 0 ? std::to_string(s.differ_beyond_noise) : "-";
}

std::string noise_count_text(const pair_summary& s) {
  if (s.control) return std::to_string(s.differ);
  if (s.differ_beyond_noise >= 0) return std::to_string(s.differ - s.differ_beyond_noise);
  return s.same_request > 0 ? std::to_string(s.same_request) : "-";
}

std::string retokenized_text(const pair_summary& s) {
  const std::string n = std::to_string(s.retokenized) + "/" + std::to_string(pair_judged(s));
  return s.one_target ? n : "(" + n + ")";
}

std::string p_noise_text(const pair_summary& s) { return s.p_vs_noise ? p_text(*s.p_vs_noise) : "-"; }
std::string p_mcnemar_text(const pair_summary& s) { return s.mcnemar_p ? p_text(*s.mcnemar_p) : "-"; }

std::string accuracy_text(int64_t k, int64_t n) {
  if (n <= 0) return "-";
  const interval w = wilson_95(k, n);
  char buf[96];
  std::snprintf(buf, sizeof buf, " = %.1f%% [%.1f, %.1f] +- %.1f", 100.0 * double(k) / double(n), 100.0 * w.lo, 100.0 * w.hi,
                100.0 * lmeval_stderr(k, n));
  return std::to_string(k) + "/" + std::to_string(n) + buf;
}

std::vector<std::pair<std::string, std::string>> accuracy_lines(const report& r) {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&out](const std::string& name, int64_t k, int64_t n, int64_t sk, int64_t sn) {
    for (const auto& e : out)
      if (e.first == name) return;
    out.emplace_back(name, accuracy_text(k, n) + (sn > 0 ? "; strict-match " + accuracy_text(sk, sn) : ""));
  };
  for (const pair_summary& s : r.pairs) {
    if (s.graded == 0) continue;
    add(s.cond_a, s.correct_a, s.graded, s.strict_a, s.strict_graded);
    add(s.cond_b, s.correct_b, s.graded, s.strict_b, s.strict_graded);
  }
  return out;
}

std::string noise_text(const report& r) {
  if (r.repeat == 0) return "";
  return "noise: " + std::to_string(r.repeat) + " alone answers per item (alone and " + std::to_string(r.repeat - 1) +
         " control" + (r.repeat > 2 ? "s" : "") + "); " + std::to_string(r.noisy_items) + " of " + std::to_string(r.noise_items) +
         " item(s) noisy (their alone answers disagree)";
}

std::string noisy_text(const pair_item& row) {
  if (!row.noisy) return "";
  return "noisy: alone answers agree " + std::to_string(row.alone_agree) + " of " + std::to_string(row.alone_n);
}

std::string margin_text(const std::optional<double>& m) {
  if (!m) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", *m);
  return buf;
}

bool row_listed(const pair_item& row) {
  return row.error || !row.d.identical || row.d.hash_step >= 0 || row.d.drift_step >= 0 || row.not_argmax_a >= 0 ||
         row.not_argmax_b >= 0;
}

report report_trim(const report& r, const trim_options& t) {
  // Everything but the records (the rows keep pointing into r's) and the pairs' rows, filtered below.
  report out;
  out.manifest = r.manifest;
  out.notes = r.notes;
  out.differences = r.differences;
  out.repeat = r.repeat;
  out.noise_items = r.noise_items;
  out.noisy_items = r.noisy_items;
  int64_t dropped_same = 0, dropped_max = 0;
  for (const pair_summary& s : r.pairs) {
    pair_summary c = s;
    c.rows.clear();
    // Under --max-items the rows that part or failed go before those that only drifted.
    std::vector<char> keep(s.rows.size(), 0);
    int64_t listed = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < s.rows.size(); ++i) {
        const pair_item& row = s.rows[i];
        if (!row_listed(row) || (pass == 0) == row.d.identical) continue;
        if (t.max_items < 0 || listed < t.max_items) keep[i] = 1, ++listed;
        else ++dropped_max;
      }
    for (size_t i = 0; i < s.rows.size(); ++i) {
      const pair_item& row = s.rows[i];
      if (!row_listed(row)) {
        if (t.only_differences) ++dropped_same;
        else c.rows.push_back(row);
      } else if (keep[i]) {
        c.rows.push_back(row);
      }
    }
    out.pairs.push_back(std::move(c));
  }
  if (dropped_same)
    out.notes.push_back(std::to_string(dropped_same) + " identical row(s) not listed (--only-differences); the counts include them");
  if (dropped_max)
    out.notes.push_back(std::to_string(dropped_max) + " differing, drifted or failed row(s) beyond " + std::to_string(t.max_items) +
                        " per pair not listed (--max-items); the counts include them");
  return out;
}

std::string hash_text(const pair_item& row) {
  std::string out;
  if (row.d.hash_step >= 0) {
    const std::string k = std::to_string(row.d.hash_step);
    out = row.d.identical ? "logits drifted at step " + k : "logit hash differs from step " + k;
  }
  if (row.d.drift_step >= 0 && row.d.max_drift) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", *row.d.max_drift);
    out += (out.empty() ? "" : "; ") + std::string("log-probs drifted from step ") + std::to_string(row.d.drift_step) +
           " (max |d| " + buf + (row.d.identical ? "" : " before the tokens part") + ")";
  }
  return out;
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

std::string nats_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

namespace {

double number_or(const json& f, const char* key, double dflt) {
  const auto it = f.find(key);
  return it != f.end() && it->is_number() ? it->get<double>() : dflt;
}

std::string fidelity_line(const json& f) {
  if (!f.is_object()) return "";
  const int64_t n = static_cast<int64_t>(number_or(f, "values", 0));
  if (n <= 0 || !f.contains("mean") || !f["mean"].is_number()) return "no log-prob the server reported could be compared";
  std::string out = "mean |Δ log-prob| " + nats_text(number_or(f, "mean", 0)) + ", max " + nats_text(number_or(f, "max", 0)) +
                    " over " + std::to_string(n) + " values (" + std::to_string(static_cast<int64_t>(number_or(f, "equal", 0))) +
                    " equal bit for bit)";
  if (f.contains("kl_mean") && f["kl_mean"].is_number()) out += ", KL " + nats_text(f["kl_mean"].get<double>());
  return out;
}

}  // namespace

std::vector<std::string> oracle_lines(const report& r) {
  std::vector<std::string> out;
  if (!r.oracle.is_object()) return out;
  const json& o = r.oracle;
  const json& m = o.value("model", json::object());
  out.push_back("oracle: the exact engine on " + json_str(m, "path", "?") + " (" + json_str(m, "device", "cpu") +
                "); tie bound " + nats_text(number_or(o, "bound", 0)) + " nats (" + json_str(o, "bound_source") + ")");
  const std::string all = fidelity_line(o.value("fidelity", json::object()));
  if (!all.empty()) out.push_back("  fidelity, server vs exact: " + all);
  if (o.contains("by_condition") && o["by_condition"].is_object())
    for (const auto& [cond, f] : o["by_condition"].items()) {
      std::string line = "    " + cond + ": " + fidelity_line(f);
      const int64_t off = static_cast<int64_t>(number_or(f, "off_argmax", 0));
      if (off > 0) line += "; " + std::to_string(off) + " greedy response(s) below the exact argmax by more than the bound";
      out.push_back(line);
    }
  if (o.contains("classes") && o["classes"].is_object()) {
    const json& c = o["classes"];
    auto n = [&c](const char* k) { return std::to_string(static_cast<int64_t>(number_or(c, k, 0))); };
    out.push_back("  divergences judged: " + n("near-tie") + " near-tie, " + n("server-error") + " server-error, " +
                  n("both-off") + " both-off, " + n("sampled") + " sampled, " + n("unjudged") + " not judged");
  }
  const json& cost = o.value("cost", json::object());
  if (cost.contains("seconds") && cost["seconds"].is_number()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f s", cost["seconds"].get<double>());
    out.push_back("  cost: " + std::string(buf) + ", " + std::to_string(static_cast<int64_t>(number_or(cost, "prefills", 0))) +
                  " prefill(s), " + std::to_string(static_cast<int64_t>(number_or(cost, "tokens_evaluated", 0))) +
                  " tokens evaluated for " + std::to_string(static_cast<int64_t>(number_or(cost, "tokens_scored", 0))) +
                  " scored");
  }
  if (o.contains("notes") && o["notes"].is_array())
    for (const json& n : o["notes"])
      if (n.is_string()) out.push_back("  " + n.get<std::string>());
  return out;
}

std::string oracle_pair_text(const pair_summary& s) {
  const int64_t judged = s.near_tie + s.server_error + s.both_off + s.sampled;
  if (judged + s.unjudged == 0) return "";
  std::string out = ", oracle: ";
  std::vector<std::string> parts;
  if (s.near_tie) parts.push_back(std::to_string(s.near_tie) + " near-tie");
  if (s.server_error) parts.push_back(std::to_string(s.server_error) + " server-error");
  if (s.both_off) parts.push_back(std::to_string(s.both_off) + " both-off");
  if (s.sampled) parts.push_back(std::to_string(s.sampled) + " sampled");
  if (s.unjudged) parts.push_back(std::to_string(s.unjudged) + " not judged");
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out;
}

std::string md_escape(const std::string& s) {
  std::string out;
  const std::string line = escape_line(s);
  size_t digits = 0;  // a leading "12." or "12)" would start an ordered list: its '.' or ')' is escaped
  while (digits < line.size() && line[digits] >= '0' && line[digits] <= '9') ++digits;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    const bool markup = std::string("\\`*_[]<>|#!&~").find(c) != std::string::npos;
    const bool leading = (i == 0 && (c == '-' || c == '+' || c == '=')) || (digits > 0 && i == digits && (c == '.' || c == ')'));
    if (markup || leading) out += '\\';
    out += c;
  }
  return out;
}

std::string md_code_line(const std::string& s) {
  if (s.empty()) return "*(empty)*";
  size_t run = 0, longest = 0;
  for (char c : s) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(longest + 1, '`');
  const bool pad = s.front() == '`' || s.back() == '`' || s.front() == ' ' || s.back() == ' ';
  return fence + (pad ? " " : "") + s + (pad ? " " : "") + fence;
}

std::string md_code(const std::string& raw) { return md_code_line(escape_line(raw)); }

std::string md_cell(const std::string& t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '|' && (i == 0 || t[i - 1] != '\\')) out += '\\';
    out += t[i];
  }
  return out;
}

std::string md_fence(const std::string& text) {
  size_t run = 0, longest = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<size_t>(3, longest + 1), '`');
}

}  // namespace detaudit::reports
