// compare_runs (two runs item by item) and the --fail-on policy.
#include <algorithm>
#include <map>
#include <set>

#include "reports/compare_internal.h"
#include "util/error.h"

namespace detaudit::reports {
namespace {

using side_index = std::map<std::string, std::vector<const record*>>;  // label -> records

std::string run_key(const record& r) {
  return record_label(r) + "\x1f" + r.item_id + "\x1f" + r.condition + "\x1f" + std::to_string(r.repetition);
}

// The match key within one label pair: item and repetition, plus the condition unless each side
// has only one.
std::string match_key(const record& r, bool by_item) {
  return r.item_id + "\x1f" + (by_item ? std::string() : r.condition) + "\x1f" + std::to_string(r.repetition);
}

std::set<std::string> conditions_of(const std::vector<const record*>& recs) {
  std::set<std::string> out;
  for (const record* r : recs) out.insert(r->condition);
  return out;
}

std::string names(const side_index& ix) {
  std::string out;
  for (const auto& [label, recs] : ix) out += (out.empty() ? "" : ", ") + (label.empty() ? std::string("(none)") : label);
  return out;
}

// Which label of run A is compared with which of run B.
std::vector<std::pair<std::string, std::string>> label_pairs(const side_index& a, const side_index& b,
                                                             const compare_options& opt) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!opt.pairs.empty()) {
    for (const auto& [la, lb] : opt.pairs) {
      if (!a.count(la)) throw input_error("--pair " + la + "=" + lb + ": run A has no target labelled '" + la + "' (it has " + names(a) + ")");
      if (!b.count(lb)) throw input_error("--pair " + la + "=" + lb + ": run B has no target labelled '" + lb + "' (it has " + names(b) + ")");
      out.emplace_back(la, lb);
    }
    return out;
  }
  if (a.size() == 1 && b.size() == 1) return {{a.begin()->first, b.begin()->first}};
  for (const auto& [label, recs] : a)
    if (b.count(label)) out.emplace_back(label, label);
  if (out.empty())
    throw input_error("compare: nothing comparable: run A has targets " + names(a) + " and run B has " + names(b) +
                      "; say which to compare with --pair A=B");
  return out;
}

// Why a matched row is not comparable, or "".
std::string incomparable_reason(const record& ra, const record& rb, const std::string& settings) {
  if (!ra.prompt_sha256.empty() && !rb.prompt_sha256.empty() && ra.prompt_sha256 != rb.prompt_sha256)
    return "the prompts differ (sha256 " + ra.prompt_sha256.substr(0, 12) + "... vs " + rb.prompt_sha256.substr(0, 12) + "...)";
  return settings;
}

// Two runs' responses from one model file (engine targets and detaudit serve name its sha256):
// their token ids name one vocabulary.
bool one_model(const record& a, const record& b) {
  const std::string sa = json_str(a.target, "model_sha256");
  return !sa.empty() && sa == json_str(b.target, "model_sha256");
}

struct pair_counts {
  size_t only_a = 0, only_b = 0, comparable = 0, prompts_differ = 0, settings_differ = 0;
  size_t unpaired = 0;  // responses of conditions that are never paired (seed-none)
  // Rows whose two sides were graded otherwise (another grader or answer key): graded here by A's
  // grader and key (A has a grader), or not graded; the grader pairs seen, "A's vs B's".
  size_t regraded = 0, ungraded = 0, other_key = 0;
  std::set<std::string> grader_pairs;
};

void grading_count(const record& ra, const record& rb, pair_counts& n) {
  if (ra.grader == rb.grader && ra.reference == rb.reference) return;
  (ra.grader.empty() ? n.ungraded : n.regraded) += 1;
  n.other_key += ra.reference != rb.reference;
  if (ra.grader != rb.grader) n.grader_pairs.insert("'" + ra.grader + "' vs '" + rb.grader + "'");
}

// What a compare says when the runs graded an item otherwise.
void notes_grading(report& rep, const pair_counts& n) {
  if (n.regraded + n.ungraded == 0) return;
  std::string pairs;
  for (const std::string& g : n.grader_pairs) pairs += (pairs.empty() ? "" : ", ") + g;
  std::string text = "the runs grade otherwise (";
  if (!pairs.empty()) text += "graders " + pairs + ", A's vs B's" + (n.other_key ? "; " : "");
  if (n.other_key) text += std::to_string(n.other_key) + " row(s) with another reference";
  text += "): ";
  if (n.regraded) text += std::to_string(n.regraded) + " row(s) graded on both sides by run A's grader and answer key";
  if (n.ungraded) text += std::string(n.regraded ? "; " : "") + std::to_string(n.ungraded) + " row(s) not graded (no grader in A)";
  rep.notes.push_back(text + "; no flip compares two readings");
}

bool never_paired(const record& r) {
  const condition_def* d = condition_find(r.condition);
  return d && d->pairs == PAIR_NONE;
}

// One label pair: a summary per condition of A.
void compare_label_pair(report& rep, const std::vector<const record*>& side_a, const std::vector<const record*>& side_b,
                        const std::string& prefix_a, const std::string& prefix_b, const std::string& settings,
                        pair_counts& n) {
  const bool by_item = conditions_of(side_a).size() == 1 && conditions_of(side_b).size() == 1;
  bool reps = false;
  std::map<std::string, const record*> index_b;
  for (const record* r : side_b) index_b[match_key(*r, by_item)] = r, reps = reps || r->repetition > 0;
  for (const record* r : side_a) reps = reps || r->repetition > 0;
  std::map<std::string, std::vector<std::pair<const record*, const record*>>> groups;
  std::set<std::string> matched;
  for (const record* ra : side_a) {
    auto f = index_b.find(match_key(*ra, by_item));
    if (f == index_b.end()) {
      ++n.only_a;
      continue;
    }
    matched.insert(f->first);
    if (never_paired(*ra) || never_paired(*f->second)) {  // answers that may differ by design, here as in a report
      n.unpaired += 2;
      continue;
    }
    groups[ra->condition].push_back({ra, f->second});
  }
  n.only_b += side_b.size() - matched.size();
  for (auto& [cond, rows] : groups) {
    std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) {
      if (x.first->item_id != y.first->item_id) return natural_less(x.first->item_id, y.first->item_id);
      return x.first->repetition < y.first->repetition;
    });
    pair_summary s;
    s.probe = "compare";
    s.cond_a = prefix_a + cond;
    s.cond_b = prefix_b + rows.front().second->condition;
    for (const auto& [ra, rb] : rows) {
      const std::string na = prefix_a + ra->condition + (reps ? "#" + std::to_string(ra->repetition) : "");
      const std::string nb = prefix_b + rb->condition + (reps ? "#" + std::to_string(rb->repetition) : "");
      const std::string why = incomparable_reason(*ra, *rb, settings);
      if (why.empty()) {
        ++n.comparable;
        grading_count(*ra, *rb, n);
        summary_add(s, row_make(*ra, *rb, na, nb, {.judge = false, .one_vocab = one_model(*ra, *rb)}));
        continue;
      }
      (why == settings ? n.settings_differ : n.prompts_differ) += 1;
      summary_add(s, row_not_comparable(*ra, *rb, na, nb, why));
    }
    s.one_target = one_model(*rows.front().first, *rows.front().second);
    rep.pairs.push_back(std::move(s));
  }
}

// "the requests differ: request.n_predict: 16 vs 32; ..." from the identities, or "".
std::string settings_reason(const std::vector<identity_difference>& diffs, bool ignore) {
  std::string out;
  for (const identity_difference& d : diffs)
    if (identity_is_request_setting(d)) out += (out.empty() ? "" : "; ") + identity_difference_text(d);
  return out.empty() || ignore ? "" : "the runs' request settings differ (" + out + ")";
}

}  // namespace

report compare_runs(std::vector<record> a, std::vector<record> b, const json& manifest_a, const json& manifest_b,
                    const compare_options& opt) {
  report rep;
  size_t dropped_a = 0, dropped_b = 0;
  a = records_dedupe(std::move(a), run_key, &dropped_a);
  b = records_dedupe(std::move(b), run_key, &dropped_b);
  const json id_a = identity_of(manifest_a), id_b = identity_of(manifest_b);
  // A side without an identity (a bare records file, an older run) says nothing about its
  // settings: there is nothing to diff, and the note below says they could not be checked.
  if (!id_a.empty() && !id_b.empty()) rep.differences = identity_diff(id_a, id_b);
  const std::string settings = settings_reason(rep.differences, opt.ignore_settings);
  const size_t n_a = a.size();
  rep.records = std::move(a);
  rep.records_a = rep.records.size();
  rep.records.insert(rep.records.end(), std::make_move_iterator(b.begin()), std::make_move_iterator(b.end()));
  side_index ix_a, ix_b;
  for (size_t i = 0; i < rep.records.size(); ++i) (i < n_a ? ix_a : ix_b)[record_label(rep.records[i])].push_back(&rep.records[i]);
  if (ix_a.empty() || ix_b.empty()) throw input_error("compare: nothing comparable: run " + std::string(ix_a.empty() ? "A" : "B") + " holds no records");
  const std::vector<std::pair<std::string, std::string>> lp = label_pairs(ix_a, ix_b, opt);
  pair_counts n;
  for (const auto& [la, lb] : lp) {
    const std::string pa = lp.size() > 1 ? "A/" + la + ":" : "A:", pb = lp.size() > 1 ? "B/" + lb + ":" : "B:";
    compare_label_pair(rep, ix_a.at(la), ix_b.at(lb), pa, pb, settings, n);
  }
  if (n.comparable == 0) {
    std::string why = n.prompts_differ + n.settings_differ == 0 ? "the runs have no item in common (matched by item_id, condition and repetition)"
                      : n.settings_differ > 0 ? settings + " (compare them anyway with --ignore-settings)"
                                              : "every common item's prompt differs";
    throw input_error("compare: nothing comparable: " + why);
  }
  if (id_a.empty() || id_b.empty())
    rep.notes.push_back(std::string("run ") + (id_a.empty() ? "A" : "B") + " records no identity (a bare records file or an older run): "
                        "its request settings could not be checked against the other run's");
  if (opt.ignore_settings && !settings_reason(rep.differences, false).empty())
    rep.notes.push_back("compared although " + settings_reason(rep.differences, false) + " (--ignore-settings)");
  if (n.unpaired)
    rep.notes.push_back(std::to_string(n.unpaired) + " response(s) of conditions that are never paired (seed-none: answers "
                        "may differ at temperature > 0 without a seed) were not compared");
  if (n.prompts_differ) rep.notes.push_back(std::to_string(n.prompts_differ) + " item(s) not comparable: the same item_id with another prompt");
  if (n.only_a || n.only_b)
    rep.notes.push_back(std::to_string(n.only_a) + " response(s) only in A and " + std::to_string(n.only_b) +
                        " only in B were left out (matched by item_id, condition and repetition)");
  if (dropped_a || dropped_b)
    rep.notes.push_back(std::to_string(dropped_a + dropped_b) +
                        " record(s) were superseded by a later record of the same request: the last of each was used");
  notes_grading(rep, n);
  significance_apply(rep);
  notes_tokenization(rep);
  notes_not_exercised(rep);
  return rep;
}

}  // namespace detaudit::reports
