// The machine-readable report: a stable object, keys in a fixed order. docs/records.md ("Report
// JSON") is its schema; REPORT_JSON_SCHEMA below is the version it carries.
//
//   {"schema": 1, "pairs": [{probe, cond_a, cond_b, control, one_target, items, differ, errors,
//     not_exercised, retokenized, same_request, drifted, not_comparable, not_argmax, graded, correct_a, correct_b,
//     right_to_wrong, wrong_to_right, wrong_to_other_wrong, differ_beyond_noise, noisy, p_vs_noise,
//     mcnemar_p, accuracy_a, accuracy_b, fidelity_mean, ..., kld, rows: [{item_id, status, ..., oracle}]}],
//    "noise": {repeat, items, noisy}, "oracle": {...} or null, "differences": [{field, a, b}],
//    "probes_requested": [...], "notes": [...], "manifest": {...}}
#include "reports/audit/stats.h"
#include "reports/format_internal.h"

namespace detaudit::reports {
namespace {

constexpr int REPORT_JSON_SCHEMA = 1;

using ojson = nlohmann::ordered_json;

ojson opt_num(const std::optional<double>& v) { return v ? ojson(*v) : ojson(nullptr); }
ojson opt_bool(const std::optional<bool>& v) { return v ? ojson(*v) : ojson(nullptr); }

// The exact engine's verdict on a differing row (reports/oracle.h).
ojson oracle_row_json(const pair_item& row) {
  const row_oracle& r = *row.oracle;
  ojson o;
  o["class"] = r.cls.empty() ? ojson(nullptr) : ojson(r.cls);
  o["note"] = r.note;
  o["step"] = r.step;
  const bool judged = r.logprob_a.has_value();
  o["id_a"] = r.id_a;
  o["id_b"] = r.id_b;
  o["token_a"] = r.token_a;
  o["token_b"] = r.token_b;
  o["logprob_a"] = opt_num(r.logprob_a);
  o["logprob_b"] = opt_num(r.logprob_b);
  o["rank_a"] = r.rank_a;
  o["rank_b"] = r.rank_b;
  o["argmax_id"] = r.argmax_id;
  o["argmax_token"] = r.argmax_token;
  o["argmax_logprob"] = judged ? ojson(r.argmax_logprob) : ojson(nullptr);
  o["margin"] = judged ? ojson(r.margin) : ojson(nullptr);
  o["argmax_side"] = r.argmax_side.empty() ? ojson(nullptr) : ojson(r.argmax_side);
  o["bound"] = r.bound;
  o["own_gap_a"] = opt_num(r.own_gap_a);
  o["own_gap_b"] = opt_num(r.own_gap_b);
  o["own_best_a"] = r.own_best_a;
  o["own_best_b"] = r.own_best_b;
  o["own_unlisted_a"] = r.own_unlisted_a;
  o["own_unlisted_b"] = r.own_unlisted_b;
  o["sentence"] = oracle_sentence(row);
  return o;
}

ojson fidelity_json(const std::optional<oracle_fidelity>& f, bool mean) {
  if (!f || f->n == 0) return nullptr;
  return mean ? f->mean : f->max;
}

ojson row_json(const pair_item& row) {
  const divergence& d = row.d;
  ojson o;
  o["item_id"] = row.item_id;
  o["cond_a"] = row.cond_a;
  o["cond_b"] = row.cond_b;
  o["status"] = status_name(row.status);
  // Never true for a row whose verdict is not "the same": not exercised, not comparable, failed.
  o["identical"] = row.status == STATUS_IDENTICAL || row.status == STATUS_DRIFTED;
  o["token_index"] = d.token_index;
  o["char_offset"] = d.char_offset;
  o["token_a"] = d.token_a;
  o["token_b"] = d.token_b;
  o["id_a"] = d.id_a;
  o["id_b"] = d.id_b;
  o["before_a"] = d.before_a;
  o["after_a"] = d.after_a;
  o["before_b"] = d.before_b;
  o["after_b"] = d.after_b;
  o["margin_a"] = opt_num(d.margin_a);
  o["margin_b"] = opt_num(d.margin_b);
  o["hashes_available"] = d.hashes_available;
  o["hash_step"] = d.hash_step;
  o["token_index_a"] = d.token_index_a;
  o["token_index_b"] = d.token_index_b;
  o["tokenized_differently"] = d.tokenized_differently;
  o["reasoning_compared"] = d.reasoning_compared;
  o["reasoning_offset"] = d.reasoning_offset;
  o["drift_step"] = d.drift_step;
  o["max_drift"] = opt_num(d.max_drift);
  o["not_argmax_a"] = row.not_argmax_a >= 0;
  o["not_argmax_b"] = row.not_argmax_b >= 0;
  o["not_argmax_step_a"] = row.not_argmax_a;
  o["not_argmax_step_b"] = row.not_argmax_b;
  o["compared_on"] = d.text_only ? "text" : "tokens";
  o["correct_a"] = opt_bool(row.correct_a);
  o["correct_b"] = opt_bool(row.correct_b);
  o["flip"] = flip_name(row.flip);
  o["exercised"] = row.exercised;
  o["same_request"] = row.same_request;
  o["reason"] = row.reason;
  o["error"] = row.error;
  o["note"] = d.note;
  o["noisy"] = row.noisy;
  o["alone_agree"] = row.alone_agree;
  o["alone_n"] = row.alone_n;
  o["oracle"] = row.oracle ? oracle_row_json(row) : ojson(nullptr);
  return o;
}

// k of n right: the accuracy, its Wilson 95% interval and lm-evaluation-harness's stderr.
ojson accuracy_json(int64_t k, int64_t n) {
  const interval w = wilson_95(k, n);
  ojson o;
  o["correct"] = k;
  o["n"] = n;
  o["acc"] = double(k) / double(n);
  o["wilson_lo"] = w.lo;
  o["wilson_hi"] = w.hi;
  o["stderr"] = lmeval_stderr(k, n);
  return o;
}

ojson pair_json(const pair_summary& s) {
  ojson o;
  o["probe"] = s.probe;
  o["cond_a"] = s.cond_a;
  o["cond_b"] = s.cond_b;
  o["control"] = s.control;
  o["one_target"] = s.one_target;
  o["items"] = s.items;
  o["differ"] = s.differ;
  o["errors"] = s.errors;
  o["not_exercised"] = s.not_exercised;
  o["retokenized"] = s.retokenized;
  o["same_request"] = s.same_request;
  o["drifted"] = s.drifted;
  o["not_comparable"] = s.not_comparable;
  o["not_argmax"] = s.not_argmax;
  o["graded"] = s.graded;
  o["correct_a"] = s.correct_a;
  o["correct_b"] = s.correct_b;
  o["right_to_wrong"] = s.right_to_wrong;
  o["wrong_to_right"] = s.wrong_to_right;
  o["wrong_to_other_wrong"] = s.wrong_to_other_wrong;
  o["differ_beyond_noise"] = s.differ_beyond_noise >= 0 ? ojson(s.differ_beyond_noise) : ojson(nullptr);
  o["noisy"] = s.noisy;
  o["p_vs_noise"] = opt_num(s.p_vs_noise);
  o["mcnemar_p"] = opt_num(s.mcnemar_p);
  o["accuracy_a"] = s.graded > 0 ? accuracy_json(s.correct_a, s.graded) : ojson(nullptr);
  o["accuracy_b"] = s.graded > 0 ? accuracy_json(s.correct_b, s.graded) : ojson(nullptr);
  o["strict_match_a"] = s.strict_graded > 0 ? accuracy_json(s.strict_a, s.strict_graded) : ojson(nullptr);
  o["strict_match_b"] = s.strict_graded > 0 ? accuracy_json(s.strict_b, s.strict_graded) : ojson(nullptr);
  o["fidelity_mean"] = fidelity_json(s.fidelity, true);
  o["fidelity_max"] = fidelity_json(s.fidelity, false);
  o["fidelity_a_mean"] = fidelity_json(s.fidelity_a, true);
  o["fidelity_a_max"] = fidelity_json(s.fidelity_a, false);
  o["kl_mean"] = s.fidelity && s.fidelity->kl_n > 0 ? ojson(s.fidelity->kl_mean) : ojson(nullptr);
  o["fidelity_worse"] = s.fidelity_worse;
  if (s.fidelity || s.fidelity_a || s.near_tie + s.server_error + s.both_off + s.sampled + s.unjudged > 0) {
    ojson c;
    c["near-tie"] = s.near_tie;
    c["server-error"] = s.server_error;
    c["both-off"] = s.both_off;
    c["sampled"] = s.sampled;
    c["unjudged"] = s.unjudged;
    o["oracle_classes"] = std::move(c);
  } else {
    o["oracle_classes"] = nullptr;
  }
  if (s.kld) {
    ojson k;
    k["rows"] = s.kld_rows;
    k.update(kld_stats_json(*s.kld));
    o["kld"] = std::move(k);
  } else {
    o["kld"] = nullptr;
  }
  ojson rows = ojson::array();
  for (const pair_item& row : s.rows) rows.push_back(row_json(row));
  o["rows"] = std::move(rows);
  return o;
}

}  // namespace

std::string render_json(const report& r) {
  ojson o;
  o["schema"] = REPORT_JSON_SCHEMA;
  ojson pairs = ojson::array();
  for (const pair_summary& s : r.pairs) pairs.push_back(pair_json(s));
  o["pairs"] = std::move(pairs);
  ojson noise;
  noise["repeat"] = r.repeat;
  noise["items"] = r.noise_items;
  noise["noisy"] = r.noisy_items;
  o["noise"] = std::move(noise);
  o["oracle"] = r.oracle.is_object() ? ojson::parse(r.oracle.dump(-1, ' ', false, json::error_handler_t::replace)) : ojson(nullptr);
  ojson diffs = ojson::array();
  for (const identity_difference& d : r.differences) {
    ojson e;
    e["field"] = d.field;
    e["a"] = ojson::parse(d.a.dump(-1, ' ', false, json::error_handler_t::replace));
    e["b"] = ojson::parse(d.b.dump(-1, ' ', false, json::error_handler_t::replace));
    diffs.push_back(std::move(e));
  }
  o["differences"] = std::move(diffs);
  o["probes_requested"] = r.probes_requested;
  o["notes"] = r.notes;
  const json manifest = r.manifest.is_object() ? r.manifest : json::object();
  o["manifest"] = ojson::parse(manifest.dump(-1, ' ', false, json::error_handler_t::replace));
  return o.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace detaudit::reports
