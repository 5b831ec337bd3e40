// --fail-on and the verdict line: which findings of a report fail a CI job, and the one line that
// says so. run, report and compare share this file, so one spec means the same on all three.
#include <cmath>
#include <cstdio>
#include <set>

#include "reports/compare.h"
#include "reports/utf8.h"
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

}  // namespace

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
    out.push_back({"nothing judged", r.pairs.empty() ? "no pair of responses to compare"
                                                     : "every row failed, was not exercised or was not comparable"});
    return out;
  }
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
                                          " items differ"});
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

std::string verdict_line(const report& r, const fail_policy& p, const std::vector<std::string>& reasons, int exit_code) {
  const bool fail = !reasons.empty();
  std::set<std::string> items;
  int64_t drifted = 0, errors = 0, r2w = 0, w2r = 0, not_exercised = 0;
  const pair_summary* worst = nullptr;
  int differing_pairs = 0;
  for (const pair_summary& s : r.pairs) {
    for (const pair_item& row : s.rows)
      if (row.status != STATUS_ERROR && row.status != STATUS_NOT_EXERCISED && row.status != STATUS_NOT_COMPARABLE)
        items.insert(row.item_id);
    drifted += s.drifted;
    errors += s.errors;
    not_exercised += s.not_exercised;
    r2w += s.right_to_wrong;
    w2r += s.wrong_to_right;
    if (s.differ > 0) ++differing_pairs;
    if (s.differ > 0 && (!worst || (worst->control && !s.control) || (worst->control == s.control && s.differ > worst->differ)))
      worst = &s;
  }
  std::string out = exit_code == 0 ? "PASS: " : exit_code == 1 ? "FAIL: " : "INCOMPLETE: ";
  if (items.empty()) {
    out += "nothing was judged";
  } else if (!worst) {
    out += "no item differs in " + std::to_string(r.pairs.size()) + " pair(s) over " + std::to_string(items.size()) + " item(s)";
  } else {
    const int64_t beyond = worst->differ_beyond_noise;
    out += std::to_string(worst->differ) + " of " + std::to_string(pair_judged(*worst)) + " items differ" +
           (beyond >= 0 && beyond != worst->differ ? " (" + std::to_string(beyond) + " beyond noise)" : "") +
           (worst->control ? " between alone and control (run-to-run noise)" : " under " + subject(*worst)) +
           (worst->p_vs_noise ? " (p = " + p_text(*worst->p_vs_noise) + ")" : "");
    if (differing_pairs > 1) out += ", and in " + std::to_string(differing_pairs - 1) + " other pair(s)";
  }
  if (drifted) out += ", " + std::to_string(drifted) + " drifted";
  if (r2w || w2r) out += ", flips -" + std::to_string(r2w) + "/+" + std::to_string(w2r);
  if (errors) out += ", " + std::to_string(errors) + " failed";
  if (not_exercised) out += ", " + std::to_string(not_exercised) + " not exercised";
  if (fail && reasons.size() > 0)
    out += " [" + std::to_string(reasons.size()) + " reason(s) above, --fail-on " + p.spec +
           (p.min_judged > 0 ? " --min-judged " + std::to_string(p.min_judged) : "") + "]";
  out += "; exit " + std::to_string(exit_code);
  return out;
}

}  // namespace detaudit::reports
