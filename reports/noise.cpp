// The noise model and the significance of each pair.
//
// A run sends every item alone K times (alone, then K-1 control repetitions: `run --repeat K`).
// Where those K answers disagree the item is noisy: the target does not repeat itself even with
// nothing changed, so a difference under a probe's condition there may be that same noise. Per pair:
// the rows that differ on items whose alone answers all agree (differ_beyond_noise), and Fisher's
// exact test of the pair's divergence rate against the control pairs' rate (p_vs_noise). Graded
// pairs get McNemar's exact test on their flips.
//
// Non-goals: multiple-comparison corrections (docs/reports.md says how to read several p-values).
#include <algorithm>
#include <map>
#include <set>

#include "reports/audit/stats.h"
#include "reports/compare.h"
#include "reports/compare_internal.h"

namespace detaudit::reports {
namespace {

struct agreement {
  int agree = 0, n = 0;
  bool noisy() const { return n >= 2 && agree < n; }
};

// Alone answers of one item on one target: the most common answer's count among those that answered.
agreement agreement_of(const std::vector<const record*>& answers) {
  std::vector<std::pair<const record*, int>> classes;
  agreement g;
  for (const record* r : answers) {
    if (!r->error.empty()) continue;
    ++g.n;
    auto same = std::find_if(classes.begin(), classes.end(),
                             [r](const auto& c) { return diverge(*c.first, *r, /*one_vocab=*/true).identical; });
    if (same == classes.end()) classes.push_back({r, 1});
    else ++same->second;
  }
  for (const auto& c : classes) g.agree = std::max(g.agree, c.second);
  return g;
}

using agreement_map = std::map<std::pair<std::string, std::string>, agreement>;  // (label, item)

// Alone answers: alone and control, and the answer of any row whose request was alone's own
// (pair_item::same_request): two answers to one request.
agreement_map agreements(const report& rep, int& repeat) {
  std::map<std::pair<std::string, std::string>, std::vector<const record*>> alone;
  for (const record& r : rep.records)
    if (r.condition == "alone" || r.condition == "control") alone[{record_label(r), r.item_id}].push_back(&r);
  repeat = 0;
  for (const auto& [key, answers] : alone)
    if (std::any_of(answers.begin(), answers.end(), [](const record* r) { return r->condition == "control"; }))
      repeat = std::max(repeat, static_cast<int>(answers.size()));
  for (const pair_summary& s : rep.pairs)
    for (const pair_item& row : s.rows)
      if (row.same_request) alone[{record_label(*row.b), row.item_id}].push_back(row.b);
  agreement_map out;
  for (const auto& [key, answers] : alone) out[key] = agreement_of(answers);
  return out;
}

struct rate {
  int64_t differ = 0, judged = 0;
};

}  // namespace

std::string record_label(const record& r) { return json_str(r.target, "label"); }

void significance_apply(report& rep) {
  for (pair_summary& s : rep.pairs)
    if (s.graded > 0) s.mcnemar_p = mcnemar_exact_p(s.right_to_wrong, s.wrong_to_right);
}

void noise_apply(report& rep) {
  significance_apply(rep);
  const agreement_map agree = agreements(rep, rep.repeat);
  rep.noise_items = rep.noisy_items = 0;
  for (const auto& [key, g] : agree) {
    rep.noise_items += g.n >= 2;
    rep.noisy_items += g.noisy();
  }
  const bool same_request = std::any_of(rep.pairs.begin(), rep.pairs.end(), [](const pair_summary& s) { return s.same_request > 0; });
  if (rep.repeat == 0 && !same_request) return;  // no control and no request answered twice: no noise model
  auto find = [&agree](const record* r) -> agreement {
    if (!r) return {};
    auto it = agree.find({record_label(*r), r->item_id});
    return it == agree.end() ? agreement{} : it->second;
  };
  std::map<std::string, rate> control;  // label -> the control pairs' divergence, pooled
  for (pair_summary& s : rep.pairs) {
    std::set<std::string> labels;
    for (pair_item& row : s.rows) {
      const agreement ga = find(row.a), gb = find(row.b);
      row.alone_agree = ga.agree;
      row.alone_n = ga.n;
      row.noisy = ga.noisy() || gb.noisy();
      s.noisy += row.noisy;
      if (row.a) labels.insert(record_label(*row.a));
      if (row.b) labels.insert(record_label(*row.b));
    }
    if (s.control && labels.size() == 1) {
      rate& c = control[*labels.begin()];
      c.differ += s.differ;
      c.judged += pair_judged(s);
    }
  }
  for (pair_summary& s : rep.pairs) {
    const bool cross = s.probe == "cross";
    if (!s.vs_alone && !cross) continue;
    s.differ_beyond_noise = 0;
    std::set<std::string> labels;
    for (const pair_item& row : s.rows) {
      s.differ_beyond_noise += row.status == STATUS_DIFFERS && !row.noisy;
      if (row.a) labels.insert(record_label(*row.a));
      if (row.b) labels.insert(record_label(*row.b));
    }
    rate noise;
    bool have = false;
    for (const std::string& l : labels) {
      auto it = control.find(l);
      if (it == control.end()) continue;
      have = true;
      noise.differ += it->second.differ;
      noise.judged += it->second.judged;
    }
    const int64_t judged = pair_judged(s);
    if (have && noise.judged > 0 && judged > 0)
      s.p_vs_noise = fisher_exact_greater_p(s.differ, judged - s.differ, noise.differ, noise.judged - noise.differ);
  }
}

}  // namespace detaudit::reports
