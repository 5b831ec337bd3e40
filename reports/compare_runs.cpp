// compare_runs (two runs item by item) and the --fail-on policy.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "reports/compare_internal.h"
#include "util/error.h"

namespace detaudit::reports {
namespace {

std::set<std::string> conditions_of(const std::vector<record>& recs) {
  std::set<std::string> out;
  for (const record& r : recs) out.insert(r.condition);
  return out;
}

std::string run_key(const record& r) {
  return r.item_id + "\x1f" + r.condition + "\x1f" + std::to_string(r.repetition);
}

// The match key: item and repetition, plus the condition unless each side has only one.
std::string match_key(const record& r, bool by_item) {
  return r.item_id + "\x1f" + (by_item ? std::string() : r.condition) + "\x1f" + std::to_string(r.repetition);
}

bool has_repetitions(const std::vector<const record*>& rs) {
  for (const record* r : rs)
    if (r->repetition > 0) return true;
  return false;
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

}  // namespace

report compare_runs(std::vector<record> a, std::vector<record> b) {
  report rep;
  size_t dropped_a = 0, dropped_b = 0;
  a = records_dedupe(std::move(a), run_key, &dropped_a);
  b = records_dedupe(std::move(b), run_key, &dropped_b);
  const bool by_item = conditions_of(a).size() == 1 && conditions_of(b).size() == 1;
  const size_t n_a = a.size();
  rep.records = std::move(a);
  rep.records.insert(rep.records.end(), std::make_move_iterator(b.begin()), std::make_move_iterator(b.end()));
  std::vector<const record*> side_a, side_b;
  for (size_t i = 0; i < rep.records.size(); ++i) (i < n_a ? side_a : side_b).push_back(&rep.records[i]);

  std::map<std::string, const record*> index_b;
  for (const record* r : side_b) index_b[match_key(*r, by_item)] = r;
  const bool reps = has_repetitions(side_a) || has_repetitions(side_b);
  // One summary per condition of A, items in natural order.
  std::map<std::string, std::vector<std::pair<const record*, const record*>>> groups;
  size_t only_a = 0;
  std::set<std::string> matched;
  for (const record* ra : side_a) {
    const std::string k = match_key(*ra, by_item);
    auto f = index_b.find(k);
    if (f == index_b.end()) {
      ++only_a;
      continue;
    }
    matched.insert(k);
    groups[ra->condition].push_back({ra, f->second});
  }
  for (auto& [cond, rows] : groups) {
    std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) {
      if (x.first->item_id != y.first->item_id) return natural_less(x.first->item_id, y.first->item_id);
      return x.first->repetition < y.first->repetition;
    });
    pair_summary s;
    s.probe = "compare";
    s.cond_a = "A:" + cond;
    s.cond_b = "B:" + rows.front().second->condition;
    for (const auto& [ra, rb] : rows) {
      const std::string ra_name = "A:" + ra->condition + (reps ? "#" + std::to_string(ra->repetition) : "");
      const std::string rb_name = "B:" + rb->condition + (reps ? "#" + std::to_string(rb->repetition) : "");
      summary_add(s, row_make(*ra, *rb, ra_name, rb_name));
    }
    rep.pairs.push_back(std::move(s));
  }
  const size_t only_b = side_b.size() - matched.size();
  if (only_a || only_b)
    rep.notes.push_back(std::to_string(only_a) + " response(s) only in A and " + std::to_string(only_b) +
                        " only in B were left out (matched by item_id" + (by_item ? "" : ", condition") +
                        " and repetition)");
  if (dropped_a || dropped_b)
    rep.notes.push_back(std::to_string(dropped_a + dropped_b) +
                        " record(s) were superseded by a later record of the same request: the last of each was used");
  notes_not_exercised(rep);
  return rep;
}

fail_policy fail_policy_parse(const std::string& spec) {
  fail_policy p;
  if (spec == "any" || spec == "flips" || spec == "none") {
    p.kind = spec;
    return p;
  }
  const std::string prefix = "score-drop:";
  if (spec.rfind(prefix, 0) == 0) {
    const std::string num = spec.substr(prefix.size());
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(num, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == num.size() && !num.empty() && std::isfinite(x) && x >= 0) {
      p.kind = "score-drop";
      p.score_drop = x;
      return p;
    }
    throw input_error("--fail-on: score-drop needs a number of percentage points >= 0 (e.g. score-drop:2), found '" +
                      num + "'");
  }
  throw input_error("--fail-on: expected any, flips, score-drop:X or none, found '" + spec + "'");
}

std::vector<std::string> fail_reasons(const report& r, const fail_policy& p) {
  std::vector<std::string> out;
  for (const pair_summary& s : r.pairs) {
    const std::string title = s.probe + " " + s.cond_a + " vs " + s.cond_b;
    const std::string of = std::to_string(s.items - s.errors - s.not_exercised);
    if (p.kind == "any" && s.differ > 0)
      out.push_back((s.control ? "run-to-run noise: " : "") + title + ": " + std::to_string(s.differ) + " of " + of +
                    " items differ");
    if (p.kind == "flips" && s.right_to_wrong > 0)
      out.push_back(title + ": " + std::to_string(s.right_to_wrong) + " right-to-wrong flip(s)");
    if (p.kind == "score-drop" && s.graded > 0) {
      const double drop = double(s.correct_a - s.correct_b) / double(s.graded) * 100.0;
      if (drop > p.score_drop)
        out.push_back(title + ": score dropped " + percent(drop) + " points (" + std::to_string(s.correct_a) + " -> " +
                      std::to_string(s.correct_b) + " of " + std::to_string(s.graded) + "), more than " +
                      percent(p.score_drop));
    }
  }
  return out;
}

}  // namespace detaudit::reports
