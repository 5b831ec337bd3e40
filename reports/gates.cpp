// --fail-on and the verdict line: which findings of a report fail a CI job, and the one line that
// says so. run, report and compare share this file, so one spec means the same on all three.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "reports/audit/utf8.h"
#include "reports/compare.h"
#include "reports/compare_internal.h"
#include "util/error.h"

namespace detaudit::reports {
namespace {

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

double score_drop_parse(const std::string& num) {
  // Decimal only: stod would also read hex ("0x10") and "inf".
  const bool decimal = !num.empty() && num.find_first_not_of("0123456789.eE+-") == std::string::npos;
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(num, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (decimal && used == num.size() && std::isfinite(x) && x >= 0) return x;
  throw input_error("--fail-on: score-drop needs a number of percentage points >= 0 (e.g. score-drop:2), found '" + num + "'");
}

// Names from records (conditions, labels) are escaped: these lines go to a terminal.
std::string title(const pair_summary& s) { return escape_line(s.probe + " " + s.cond_a + " vs " + s.cond_b); }

// The condition a pair is about: B's side of a pair with alone, both sides otherwise.
std::string subject(const pair_summary& s) { return escape_line(s.vs_alone ? s.cond_b : s.cond_a + " vs " + s.cond_b); }

bool significant(const std::optional<double>& p) { return p && *p < 0.05; }

// " (2 of them run-to-run noise: ...)" for a pair whose differing rows include requests answered
// twice (pair_item::same_request).
std::string same_request_text(const pair_summary& s) {
  const int64_t n = std::min(s.same_request, s.differ);
  if (n == 0) return "";
  return " (" + std::to_string(n) + (n == s.differ ? "" : " of them") +
         " run-to-run noise: the same request as alone's, answered otherwise)";
}

// Every probe the run asked for must judge at least one row of its pairs on every target (the
// control pair is the noise baseline, not the probe's; cross pairs count once, for the pair of
// targets). A probe whose rows were all not exercised passed nothing.
struct probe_tally {
  int64_t rows = 0, judged = 0, not_exercised = 0, errors = 0;
  std::map<std::string, int64_t> reasons;
};

void unjudged_probes(const report& r, std::vector<fail_finding>& out) {
  std::set<std::string> labels;
  for (const record& rec : r.records) labels.insert(json_str(rec.target, "label"));
  for (const std::string& probe : r.probes_requested) {
    std::map<std::string, probe_tally> per;  // target label ("" for cross pairs) -> tally
    for (const pair_summary& s : r.pairs) {
      if (s.control || s.probe != probe) continue;
      for (const pair_item& row : s.rows) {
        probe_tally& t = per[probe == "cross" || !row.b ? std::string() : json_str(row.b->target, "label")];
        ++t.rows;
        t.judged += row.status != STATUS_ERROR && row.status != STATUS_NOT_EXERCISED && row.status != STATUS_NOT_COMPARABLE;
        t.not_exercised += row.status == STATUS_NOT_EXERCISED;
        t.errors += row.status == STATUS_ERROR;
        if (row.status == STATUS_NOT_EXERCISED) ++t.reasons[row.reason];
      }
    }
    if (per.empty())
      out.push_back({"unjudged", "probe " + escape_line(probe) + " judged nothing: no pair of its conditions has responses", true});
    for (const auto& [label, t] : per) {
      if (t.judged > 0) continue;
      std::string why = std::to_string(t.rows) + " row(s): " + std::to_string(t.not_exercised) + " not exercised, " +
                        std::to_string(t.errors) + " failed";
      if (!t.reasons.empty()) {
        const auto top = std::max_element(t.reasons.begin(), t.reasons.end(),
                                          [](const auto& x, const auto& y) { return x.second < y.second; });
        why += " (" + escape_line(top->first) + ")";
      }
      const std::string where = labels.size() > 1 && !label.empty() ? " on target " + escape_line(label) : "";
      out.push_back({"unjudged", "probe " + escape_line(probe) + " judged nothing" + where + ": " + why, true});
    }
  }
}

}  // namespace

int verdict_exit_code(const std::vector<fail_finding>& findings, bool incomplete) {
  if (incomplete) return 3;
  bool unjudged = false;
  for (const fail_finding& f : findings) {
    if (!f.unjudged) return 1;
    unjudged = true;
  }
  return unjudged ? 5 : 0;
}

std::string p_text(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, p >= 0.001 || p == 0 ? "%.2g" : "%.1e", p);
  return buf;
}

fail_policy fail_policy_parse(const std::string& spec, int64_t min_judged) {
  fail_policy p;
  p.spec = spec;
  if (min_judged < 0) throw input_error("--min-judged: expected a count >= 0, found " + std::to_string(min_judged));
  p.min_judged = min_judged;
  size_t start = 0;
  int entries = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string e = trim(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (e.empty()) throw input_error("--fail-on: an empty entry in '" + spec + "' (expected a comma-separated list)");
    ++entries;
    if (e == "none") p.none = true;
    else if (e == "any") p.any = true;
    else if (e == "drift") p.drift = true;
    else if (e == "flips") p.flips = true;
    else if (e == "significant") p.significant = true;
    else if (e == "errors") p.errors = true;
    else if (e == "not-exercised") p.not_exercised = true;
    else if (e == "server-error") p.server_error = true;
    else if (e.rfind("score-drop:", 0) == 0) p.score_drop = score_drop_parse(e.substr(11));
    else
      throw input_error("--fail-on: unknown gate '" + e +
                        "' (expected a list of: any, drift, flips, significant, errors, not-exercised, server-error, score-drop:X, none)");
  }
  if (p.none && entries > 1) throw input_error("--fail-on: 'none' cannot be combined with other gates, found '" + spec + "'");
  return p;
}

std::vector<fail_finding> fail_findings(const report& r, const fail_policy& p) {
  std::vector<fail_finding> out;
  int64_t judged_total = 0;
  for (const pair_summary& s : r.pairs) judged_total += pair_judged(s);
  const std::string min_gate = "--min-judged " + std::to_string(p.min_judged);
  if (judged_total == 0 && !p.none) {
    out.push_back({"nothing judged",
                   r.pairs.empty() ? "no pair of responses to compare"
                                   : "every row failed, was not exercised or was not comparable",
                   true});
    return out;
  }
  if (!p.none) unjudged_probes(r, out);
  // A gate that tested nothing does not pass: server-error needs the oracle's figures.
  if (p.server_error && !p.none && !r.oracle.is_object())
    out.push_back({"--fail-on server-error", "no oracle figures to judge the divergences by: give --oracle "
                                             "engine:MODEL.gguf (the file the server serves)"});
  for (const pair_summary& s : r.pairs) {
    const std::string t = title(s);
    const int64_t judged = pair_judged(s);
    const std::string of = std::to_string(judged);
    if (p.min_judged > 0 && judged < p.min_judged)
      out.push_back({min_gate, t + ": only " + of + " item(s) judged, fewer than " + std::to_string(p.min_judged)});
    if (p.none) continue;
    if (p.any && s.differ > 0)
      out.push_back({"--fail-on any", (s.control ? "run-to-run noise: " : "") + t + ": " + std::to_string(s.differ) + " of " + of +
                                          " items differ" + same_request_text(s)});
    if (p.any && s.one_target && s.retokenized > 0)
      out.push_back({"--fail-on any", t + ": " + std::to_string(s.retokenized) + " of " + of +
                                          " items retokenized (the same text from other tokens: the greedy choice changed)"});
    if (p.drift && s.drifted > 0)
      out.push_back({"--fail-on drift", t + ": " + std::to_string(s.drifted) + " of " + of +
                                            " items drifted (same tokens, moved log-probs or logits)"});
    if (p.flips && s.right_to_wrong > 0)
      out.push_back({"--fail-on flips", t + ": " + std::to_string(s.right_to_wrong) + " right-to-wrong flip(s)"});
    if (p.significant && significant(s.p_vs_noise))
      out.push_back({"--fail-on significant", t + ": " + std::to_string(s.differ) + " of " + of +
                                                  " items differ, more often than the control pair (Fisher p = " +
                                                  p_text(*s.p_vs_noise) + ")"});
    if (p.significant && significant(s.mcnemar_p))
      out.push_back({"--fail-on significant", t + ": flips -" + std::to_string(s.right_to_wrong) + "/+" +
                                                  std::to_string(s.wrong_to_right) + " are lopsided (McNemar p = " +
                                                  p_text(*s.mcnemar_p) + ")"});
    if (p.server_error && s.server_error > 0)
      out.push_back({"--fail-on server-error", t + ": " + std::to_string(s.server_error) +
                                                   " divergence(s) where the server picked a token exact math puts below "
                                                   "its best by more than the tie bound (--oracle)"});
    if (p.server_error && s.unjudged > 0)
      out.push_back({"--fail-on server-error", t + ": " + std::to_string(s.unjudged) +
                                                   " divergence(s) the oracle could not judge (each row says why)"});
    if (p.server_error && s.fidelity_worse)
      out.push_back({"--fail-on server-error", t + ": the server is further from exact math under " + escape_line(s.cond_b) +
                                                   " than under " + escape_line(s.cond_a) + " (--oracle fidelity)"});
    if (p.errors && s.errors > 0) out.push_back({"--fail-on errors", t + ": " + std::to_string(s.errors) + " failed response(s)"});
    if (p.not_exercised && s.not_exercised > 0)
      out.push_back({"--fail-on not-exercised",
                     t + ": " + std::to_string(s.not_exercised) + " item(s) where the condition did not take effect"});
    if (p.score_drop && s.graded > 0) {
      const double drop = double(s.correct_a - s.correct_b) / double(s.graded) * 100.0;
      if (drop > *p.score_drop) {
        std::string sig;
        if (s.mcnemar_p)
          sig = significant(s.mcnemar_p) ? "; significant (McNemar p = " + p_text(*s.mcnemar_p) + ")"
                                         : "; not significant (McNemar p = " + p_text(*s.mcnemar_p) + ", 0.05 needed)";
        out.push_back({"--fail-on score-drop:" + percent(*p.score_drop),
                       t + ": score dropped " + percent(drop) + " points (" + std::to_string(s.correct_a) + " -> " +
                           std::to_string(s.correct_b) + " of " + std::to_string(s.graded) + "), more than " +
                           percent(*p.score_drop) + sig});
      }
    }
  }
  return out;
}

std::vector<std::string> fail_reasons(const report& r, const fail_policy& p) {
  std::vector<std::string> out;
  for (const fail_finding& f : fail_findings(r, p)) out.push_back(f.gate == "nothing judged" ? "nothing was judged: " + f.text : f.text);
  return out;
}

namespace {

// What the verdict line counts over every pair.
struct verdict_counts {
  std::set<std::string> items;  // items judged somewhere
  int64_t drifted = 0, errors = 0, r2w = 0, w2r = 0, not_exercised = 0, retokenized = 0;
  const pair_summary* worst = nullptr;        // the pair with the most differing items (a probe's before the control)
  const pair_summary* worst_retok = nullptr;  // one target's pair with the most retokenized rows
  int differing_pairs = 0, retok_pairs = 0;
};

verdict_counts verdict_count(const report& r) {
  verdict_counts c;
  for (const pair_summary& s : r.pairs) {
    for (const pair_item& row : s.rows)
      if (row.status != STATUS_ERROR && row.status != STATUS_NOT_EXERCISED && row.status != STATUS_NOT_COMPARABLE)
        c.items.insert(row.item_id);
    c.drifted += s.drifted;
    c.errors += s.errors;
    c.not_exercised += s.not_exercised;
    c.r2w += s.right_to_wrong;
    c.w2r += s.wrong_to_right;
    if (s.one_target && s.retokenized > 0) {
      c.retokenized += s.retokenized;
      ++c.retok_pairs;
      if (!c.worst_retok || s.retokenized > c.worst_retok->retokenized) c.worst_retok = &s;
    }
    if (s.differ > 0) ++c.differing_pairs;
    const pair_summary* w = c.worst;
    if (s.differ > 0 && (!w || (w->control && !s.control) || (w->control == s.control && s.differ > w->differ))) c.worst = &s;
  }
  return c;
}

// The worst pair's subject. A pair with alone names the condition ("under concurrent-8"), unless the
// oracle puts every error it found in that pair on alone's side: then alone's answers are the ones
// that moved, and the line names both sides with the oracle's count.
std::string worst_subject(const pair_summary& w) {
  if (w.control) return " between alone and control (run-to-run noise)";
  int64_t off_a = 0, off_b = 0;
  for (const pair_item& row : w.rows)
    if (row.status == STATUS_DIFFERS && row.oracle && !row.oracle->cls.empty()) {
      off_a += row.oracle->off_a && !row.oracle->off_b;
      off_b += row.oracle->off_b && !row.oracle->off_a;
    }
  if (!w.vs_alone || off_a == 0 || off_b > 0) return " under " + subject(w);
  return " between " + escape_line(w.cond_a) + " and " + escape_line(w.cond_b) + " (the oracle puts the error on " +
         escape_line(w.cond_a) + "'s side in " + std::to_string(off_a) + ", on " + escape_line(w.cond_b) + "'s in none)";
}

// "3 of 12 items differ (1 beyond noise) under concurrent-8 (p = 0.12)".
std::string worst_text(const pair_summary& w) {
  const int64_t beyond = w.differ_beyond_noise;
  std::string out = std::to_string(w.differ) + " of " + std::to_string(pair_judged(w)) + " items differ" +
                    (beyond >= 0 && beyond != w.differ ? " (" + std::to_string(beyond) + " beyond noise)" : "") +
                    worst_subject(w) + same_request_text(w);
  if (w.p_vs_noise) out += " (p = " + p_text(*w.p_vs_noise) + ")";
  return out;
}

const char* verdict_word(int exit_code) {
  switch (exit_code) {
    case 0: return "PASS: ";
    case 1: return "FAIL: ";
    case 5: return "UNJUDGED: ";
    default: return "INCOMPLETE: ";
  }
}

}  // namespace

std::string verdict_line(const report& r, const fail_policy& p, const std::vector<std::string>& reasons, int exit_code) {
  const verdict_counts c = verdict_count(r);
  std::string out = verdict_word(exit_code);
  if (c.items.empty()) {
    out += "nothing was judged";
  } else if (!c.worst) {
    out += "no item differs in " + std::to_string(r.pairs.size()) + " pair(s) over " + std::to_string(c.items.size()) + " item(s)";
  } else {
    out += worst_text(*c.worst);
    if (c.differing_pairs > 1) out += ", and in " + std::to_string(c.differing_pairs - 1) + " other pair(s)";
  }
  if (c.retokenized)
    out += ", " + std::to_string(c.retokenized) + " retokenized (same text, other tokens) " +
           (c.retok_pairs == 1 ? "under " + subject(*c.worst_retok) : "in " + std::to_string(c.retok_pairs) + " pairs");
  if (c.drifted) out += ", " + std::to_string(c.drifted) + " drifted";
  if (c.r2w || c.w2r) out += ", flips -" + std::to_string(c.r2w) + "/+" + std::to_string(c.w2r);
  if (c.errors) out += ", " + std::to_string(c.errors) + " failed";
  if (c.not_exercised) out += ", " + std::to_string(c.not_exercised) + " not exercised";
  if (!reasons.empty())
    out += " [" + std::to_string(reasons.size()) + " reason(s) above, --fail-on " + p.spec +
           (p.min_judged > 0 ? " --min-judged " + std::to_string(p.min_judged) : "") + "]";
  out += "; exit " + std::to_string(exit_code);
  return out;
}

}  // namespace detaudit::reports
