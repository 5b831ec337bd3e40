// compare_run and compare_runs: which responses are paired, how each row is judged (error, not
// exercised, identical or not, graded, flipped), and the per-pair counts.
//
// Pairs of one run (see docs/records.md, "Report"):
//   per target label: control (alone vs control), then (alone, X) for every other condition X,
//   ordered by probe (repeat, concurrency, cache, batch, speculation, ...) then by name;
//   seed: one pair "seed-fixed#0 vs seed-fixed#k" whose rows are every item and every k >= 1;
//   seed-none: not a pair (answers are expected to differ): a note per item with its distinct answers;
//   two or more labels: cross pairs, the first label against each other one, per shared condition,
//   with the KL divergence of their distributions before the tokens part (reports/audit/kld.h).
// Non-goals: deciding pass/fail (fail_reasons), presentation (report_render).
#include <algorithm>
#include <map>
#include <set>

#include "reports/audit/grade.h"
#include "reports/compare.h"
#include "reports/compare_internal.h"
#include "util/error.h"

namespace detaudit::reports {
namespace {

// (item, repetition) in natural order: "item-2" before "item-10".
struct item_rep_less {
  bool operator()(const std::pair<std::string, int>& x, const std::pair<std::string, int>& y) const {
    if (x.first != y.first) return natural_less(x.first, y.first);
    return x.second < y.second;
  }
};
using item_map = std::map<std::pair<std::string, int>, const record*, item_rep_less>;

struct run_index {
  std::vector<std::string> labels;                                  // sorted
  std::map<std::string, std::map<std::string, item_map>> by_label;  // label -> condition -> rows
  std::map<std::string, std::string> probe_of;                      // condition -> probe
  std::set<std::string> multi_rep;                                  // conditions run more than once
};

run_index index_build(const std::vector<record>& recs) {
  run_index ix;
  for (const record& r : recs) {
    const std::string label = record_label(r);
    ix.by_label[label][r.condition][{r.item_id, r.repetition}] = &r;
    if (r.repetition > 0) ix.multi_rep.insert(r.condition);
    std::string& p = ix.probe_of[r.condition];
    if (p.empty() && !r.probe.empty() && r.probe != "base") p = r.probe;
  }
  for (auto& [cond, p] : ix.probe_of)
    if (p.empty()) p = probe_from_condition(cond);
  for (const auto& [label, conds] : ix.by_label) ix.labels.push_back(label);
  return ix;
}

std::string cond_name(const run_index& ix, const std::string& prefix, const std::string& cond, int rep) {
  return prefix + cond + (ix.multi_rep.count(cond) ? "#" + std::to_string(rep) : "");
}

pairing pairing_of(const std::string& cond) {
  const condition_def* c = condition_find(cond);
  return c ? c->pairs : PAIR_ALONE;
}

bool seed_pair_condition(const std::string& cond) { return pairing_of(cond) == PAIR_REP0; }

// Conditions other than alone/control that pair with alone, in report order.
std::vector<std::string> ordered_conditions(const run_index& ix, const std::map<std::string, item_map>& conds) {
  std::vector<std::string> out;
  for (const auto& [c, rows] : conds)
    if (c != "control" && pairing_of(c) == PAIR_ALONE) out.push_back(c);
  std::sort(out.begin(), out.end(), [&](const std::string& x, const std::string& y) {
    const int rx = probe_rank(ix.probe_of.at(x)), ry = probe_rank(ix.probe_of.at(y));
    if (rx != ry) return rx < ry;
    return natural_less(x, y);
  });
  return out;
}

void note_missing(report& rep, const pair_summary& s, size_t missing, const std::string& what) {
  if (missing == 0) return;
  rep.notes.push_back(s.probe + " " + s.cond_a + " vs " + s.cond_b + ": " + std::to_string(missing) +
                      " response(s) without " + what + " partner were left out");
}

// (alone, cond) for one label.
void pairs_against_alone(report& rep, const run_index& ix, const std::string& label, const std::string& prefix,
                         const row_rules& rules) {
  const auto& conds = ix.by_label.at(label);
  auto alone_it = conds.find("alone");
  std::vector<std::string> order;
  if (conds.count("control")) order.push_back("control");
  for (const std::string& c : ordered_conditions(ix, conds)) order.push_back(c);
  if (alone_it == conds.end()) {
    if (!order.empty())
      rep.notes.push_back(prefix + "no 'alone' responses: " + std::to_string(order.size()) +
                          " condition(s) could not be paired (" + order.front() + (order.size() > 1 ? ", ..." : "") + ")");
    return;
  }
  for (const std::string& c : order) {
    // A condition run more than once (control, under --repeat K > 2) is one pair per repetition,
    // so that every pair holds each item once and its counts are counts of items.
    std::set<int> reps;
    for (const auto& [key, rb] : conds.at(c)) reps.insert(key.second);
    for (int rep_k : reps) {
      pair_summary s;
      s.control = c == "control";
      s.vs_alone = !s.control;
      s.one_target = true;
      s.probe = s.control ? "control" : ix.probe_of.at(c);
      s.cond_a = prefix + "alone";
      s.cond_b = cond_name(ix, prefix, c, rep_k);
      size_t missing = 0;
      for (const auto& [key, rb] : conds.at(c)) {
        if (key.second != rep_k) continue;
        auto f = alone_it->second.find({key.first, 0});
        if (f == alone_it->second.end()) {
          ++missing;
          continue;
        }
        summary_add(s, row_make(*f->second, *rb, cond_name(ix, prefix, "alone", 0), cond_name(ix, prefix, c, key.second),
                                rules));
      }
      note_missing(rep, s, missing, "an 'alone'");
      rep.pairs.push_back(std::move(s));
    }
  }
}

// seed-fixed#0 vs seed-fixed#k, one summary per seeded condition.
void pairs_seed(report& rep, const run_index& ix, const std::string& label, const std::string& prefix) {
  for (const auto& [c, rows] : ix.by_label.at(label)) {
    if (!seed_pair_condition(c)) continue;
    pair_summary s;
    s.probe = ix.probe_of.at(c);
    s.one_target = true;
    s.cond_a = prefix + c + "#0";
    s.cond_b = prefix + c + "#k";
    size_t missing = 0;
    for (const auto& [key, rb] : rows) {
      if (key.second == 0) continue;
      auto f = rows.find({key.first, 0});
      if (f == rows.end()) {
        ++missing;
        continue;
      }
      summary_add(s, row_make(*f->second, *rb, prefix + c + "#0", prefix + c + "#" + std::to_string(key.second)));
    }
    note_missing(rep, s, missing, "a repetition-0");
    if (!s.rows.empty() || missing) rep.pairs.push_back(std::move(s));
  }
}

// Conditions that are not paired (seed-none: temperature > 0 without a seed): per item, the number
// of distinct answers.
void notes_unpaired(report& rep, const run_index& ix, const std::string& label, const std::string& prefix) {
  for (const auto& [cond, rows] : ix.by_label.at(label)) {
    if (pairing_of(cond) != PAIR_NONE) continue;
    std::map<std::string, std::pair<std::set<std::string>, int>, decltype(&natural_less)> per_item(&natural_less);
    for (const auto& [key, r] : rows) {
      if (!r->error.empty() || !condition_not_exercised(*r, *r).empty()) continue;
      auto& [texts, n] = per_item[key.first];
      texts.insert(r->text);
      ++n;
    }
    const condition_def* c = condition_find(cond);
    rep.notes.push_back(prefix + cond + " (" + (c ? std::string(c->sends) : "not paired") +
                        "): answers may differ, not a failure; distinct answers per item follow");
    for (const auto& [item, tn] : per_item)
      rep.notes.push_back(prefix + cond + ": item " + item + ": " + std::to_string(tn.first.size()) +
                          " distinct answer(s) among " + std::to_string(tn.second));
  }
}

// The distributions of a cross pair's rows, compared step by step before the tokens part.
void cross_kld(pair_summary& s) {
  std::vector<kld_point> points;
  for (const pair_item& row : s.rows)
    if (row.a && row.b && kld_points_shared(*row.a, *row.b, points)) ++s.kld_rows;
  if (!points.empty()) s.kld = kld_summarize(points);
}

// The first label against each other one, on every condition both have (seed-none excepted); each
// with its KLD summary where both targets give pre-sampling log-probs with token ids.
void pairs_cross(report& rep, const run_index& ix) {
  const std::string& ref = ix.labels.front();
  const auto& ref_conds = ix.by_label.at(ref);
  for (size_t li = 1; li < ix.labels.size(); ++li) {
    const std::string& other = ix.labels[li];
    const auto& other_conds = ix.by_label.at(other);
    std::vector<std::string> order;
    for (const std::string& c : {std::string("alone"), std::string("control")})
      if (ref_conds.count(c) && other_conds.count(c)) order.push_back(c);
    for (const std::string& c : ordered_conditions(ix, ref_conds))
      if (other_conds.count(c)) order.push_back(c);
    for (const auto& [c, rows] : ref_conds)
      if (seed_pair_condition(c) && other_conds.count(c)) order.push_back(c);
    for (const std::string& c : order) {
      pair_summary s;
      s.probe = "cross";
      s.cond_a = ref + ":" + c;
      s.cond_b = other + ":" + c;
      size_t one_sided = 0;
      const item_map& rows_a = ref_conds.at(c);
      const item_map& rows_b = other_conds.at(c);
      for (const auto& [key, ra] : rows_a) {
        auto f = rows_b.find(key);
        if (f == rows_b.end()) {
          ++one_sided;
          continue;
        }
        summary_add(s, row_make(*ra, *f->second, cond_name(ix, ref + ":", c, key.second),
                                cond_name(ix, other + ":", c, key.second), {.judge = false, .one_vocab = false}));
      }
      for (const auto& [key, rb] : rows_b) one_sided += rows_a.count(key) == 0;
      if (one_sided)
        rep.notes.push_back("cross " + s.cond_a + " vs " + s.cond_b + ": " + std::to_string(one_sided) +
                            " response(s) on one side only were left out");
      cross_kld(s);
      rep.pairs.push_back(std::move(s));
    }
  }
}

const record* find_record(const std::map<std::string, item_map>& conds, const std::string& cond, const std::string& item) {
  auto c = conds.find(cond);
  if (c == conds.end()) return nullptr;
  auto f = c->second.find({item, 0});
  return f == c->second.end() ? nullptr : f->second;
}

// When the run's first request (evidence.cold) differs from the same request sent again alone.
void notes_cold(report& rep, const run_index& ix) {
  const std::vector<std::string> same_request = {"alone", "control", "repeat"};
  for (const record& r : rep.records) {
    auto cold = r.evidence.find("cold");
    if (cold == r.evidence.end() || !cold->is_boolean() || !cold->get<bool>() || !r.error.empty()) continue;
    if (std::find(same_request.begin(), same_request.end(), r.condition) == same_request.end()) continue;
    const std::string label = record_label(r);
    for (const std::string& later : same_request) {
      const record* other = later == r.condition ? nullptr : find_record(ix.by_label.at(label), later, r.item_id);
      if (!other || !other->error.empty()) continue;
      const divergence d = diverge(r, *other, /*one_vocab=*/true);
      if (d.identical) continue;
      rep.notes.push_back("the first request after the target started differed: item " + r.item_id + " (" +
                          (ix.labels.size() > 1 ? label + ":" : "") + r.condition + " vs " + later +
                          "): " + divergence_where(d));
      break;
    }
  }
}

// A merge made with --partial says which shards it lacks; every report of it says so too.
void notes_shards(report& rep) {
  auto it = rep.manifest.find("shards");
  if (it == rep.manifest.end() || !it->is_object()) return;
  auto missing = it->find("missing");
  if (missing == it->end() || !missing->is_array() || missing->empty()) return;
  std::string list;
  for (const json& m : *missing) list += (list.empty() ? "" : ", ") + (m.is_number() ? m.dump() : json_str(json{{"v", m}}, "v"));
  rep.notes.insert(rep.notes.begin(), "incomplete run: shard(s) " + list + " of " + it->value("count", json(0)).dump() +
                                          " are missing (merged with --partial); items of those shards are not in this report");
}

// A server that changed under the run (another build behind the same URL, a rotated
// system_fingerprint): its responses are not all from one target.
void notes_fingerprints(report& rep) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> seen;  // label -> (fingerprint, first item)
  for (const record& r : rep.records) {
    const std::string fp = json_str(r.target, "fingerprint");
    if (fp.empty()) continue;
    auto& v = seen[record_label(r)];
    if (std::none_of(v.begin(), v.end(), [&fp](const auto& e) { return e.first == fp; })) v.emplace_back(fp, r.item_id);
  }
  for (const auto& [label, fps] : seen) {
    if (fps.size() < 2) continue;
    std::string list;
    for (const auto& [fp, item] : fps) list += (list.empty() ? "" : ", ") + ("'" + fp + "' (from item " + item + ")");
    rep.notes.push_back("target " + (label.empty() ? std::string("?") : label) + " answered under " + std::to_string(fps.size()) +
                        " system fingerprints: " + list + "; its responses may not all come from one server build");
  }
}

void notes_lint(report& rep) {
  auto it = rep.manifest.find("lint");
  if (it == rep.manifest.end() || !it->is_array()) return;
  for (const json& f : *it) {
    if (!f.is_object()) continue;
    const std::string item = json_str(f, "item_id");
    rep.notes.push_back("lint " + json_str(f, "severity", "warning") + " [" + json_str(f, "code") + "]" +
                        (item.empty() ? "" : " item " + item) + ": " + json_str(f, "message"));
  }
}

// The probes the run asked for: run.json's identity, else those its records name. lint sends
// nothing and judges nothing.
std::vector<std::string> probes_requested(const report& rep) {
  std::set<std::string> out;
  const json id = identity_of(rep.manifest);
  if (auto it = id.find("probes"); it != id.end() && it->is_array()) {
    for (const json& p : *it)
      if (p.is_string()) out.insert(p.get<std::string>());
  } else {
    for (const record& r : rep.records)
      if (!r.probe.empty() && r.probe != "base" && r.probe != "control") out.insert(r.probe);
  }
  out.erase("lint");
  std::vector<std::string> v(out.begin(), out.end());
  std::sort(v.begin(), v.end(), [](const std::string& x, const std::string& y) { return probe_rank(x) < probe_rank(y); });
  return v;
}

}  // namespace

std::string report_incomplete(const report& r) {
  const json& m = r.manifest;
  if (auto sh = m.find("shards"); sh != m.end() && sh->is_object())
    if (auto missing = sh->find("missing"); missing != sh->end() && missing->is_array() && !missing->empty())
      return "incomplete: shard(s) " + missing->dump() + " of the run are missing from this merge (--partial)";
  const json want = m.contains("items_in_shard") ? m["items_in_shard"] : m.value("items", json());
  if (!want.is_number_unsigned() && !want.is_number_integer()) return "";
  std::set<std::string> items;
  for (const record& rec : r.records) items.insert(rec.item_id);
  const int64_t n = want.get<int64_t>();
  if (static_cast<int64_t>(items.size()) >= n) return "";
  return "incomplete: " + std::to_string(items.size()) + " of the run's " + std::to_string(n) +
         " item(s) have records (the run stopped early; detaudit run --resume with the same flags completes it)";
}

report compare_run(std::vector<record> records, json manifest) {
  report rep;
  rep.manifest = manifest.is_object() ? std::move(manifest) : json::object();
  size_t dropped = 0;
  rep.records = records_dedupe(std::move(records), [](const record& r) { return record_key(r); }, &dropped);
  if (dropped)
    rep.notes.push_back(std::to_string(dropped) + " record(s) were superseded by a later record of the same request "
                        "(a resumed run): the last of each was used");
  evidence_fill_filler_latency(rep.records);
  notes_lint(rep);
  notes_shards(rep);
  notes_fingerprints(rep);
  const run_index ix = index_build(rep.records);
  const bool multi = ix.labels.size() > 1;
  const std::map<const record*, const record*> twins = requests_answered_twice(rep.records);
  const row_rules rules{.judge = true, .one_vocab = true, .twins = &twins};
  for (const std::string& label : ix.labels) {
    const std::string prefix = multi ? label + ":" : "";
    pairs_against_alone(rep, ix, label, prefix, rules);
    pairs_seed(rep, ix, label, prefix);
    notes_unpaired(rep, ix, label, prefix);
  }
  if (multi) pairs_cross(rep, ix);
  rep.probes_requested = probes_requested(rep);
  noise_apply(rep);
  notes_tokenization(rep);
  notes_cold(rep, ix);
  notes_not_exercised(rep);
  return rep;
}

}  // namespace detaudit::reports
