// Pieces shared by compare_run, compare_runs and the renderers; not part of the reports interface.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "reports/audit/conditions.h"
#include "reports/compare.h"

namespace detaudit::reports {

// Natural order: digit runs compare as numbers ("item-2" < "item-10"), then plain byte order.
bool natural_less(const std::string& x, const std::string& y);

// The probe a condition belongs to when its records do not say ("concurrent-8" -> "concurrency"),
// from the condition table (reports/audit/conditions.h); the condition itself when unknown.
std::string probe_from_condition(const std::string& condition);

// Keeps one record per key: the last one in input order, at the position of the first. `dropped`
// receives the number of records superseded.
std::vector<record> records_dedupe(std::vector<record> in, const std::function<std::string(const record&)>& key,
                                   size_t* dropped);

// How a row is judged. judge: b's condition's evidence is judged against a (conditions.h), else
// only the records' own exercised flags count (cross and compare pairs set two targets or two runs
// side by side). one_vocab: token ids name one vocabulary on both sides (diverge()).
struct row_rules {
  bool judge = true;
  bool one_vocab = true;
  // Greedy records whose request (body and endpoint) another record of the same target and item
  // carries byte for byte, answered otherwise: the record -> that other one (requests_answered_twice).
  const std::map<const record*, const record*>* twins = nullptr;
};
// The twins of a run's records (row_rules::twins): per target, item, endpoint and request body, the
// greedy responses that differ from another of the same group.
std::map<const record*, const record*> requests_answered_twice(const std::vector<record>& records);
// One row: divergence, error, exercised, same request (pair_item::same_request), status, grades
// (both sides by A's grader), flip and not-argmax steps. a and b must outlive the row.
pair_item row_make(const record& a, const record& b, const std::string& cond_a, const std::string& cond_b,
                   const row_rules& rules = {});
// A row whose two responses are not comparable (compare: other prompts or request settings), why.
pair_item row_not_comparable(const record& a, const record& b, const std::string& cond_a, const std::string& cond_b,
                             const std::string& why);
// Appends a row and counts it (errors, then not exercised, then differ / graded / flips).
void summary_add(pair_summary& s, pair_item row);

// The noise model (reports/noise.cpp): per label and item, how many alone answers (alone and every
// control repetition) agree; marks rows of items whose alone answers disagree as noisy, and per
// pair counts differ_beyond_noise, p_vs_noise (against the same labels' control pairs) and, where
// graded, McNemar's p. Needs rep.records and rep.pairs built.
void noise_apply(report& rep);
// McNemar's p on every graded pair (compare_runs, which has no noise model of its own).
void significance_apply(report& rep);
// "label" of a record's target ("" when none).
std::string record_label(const record& r);

// One note per pair whose rows show the two sides tokenizing differently (divergence::
// tokenized_differently): their token indices do not correspond; bytes locate the differences.
void notes_tokenization(report& r);

// One note per pair and distinct reason for rows that were not exercised.
void notes_not_exercised(report& r);

// o[key] when it is a string, else dflt (never throws).
std::string json_str(const json& o, const char* key, const std::string& dflt = "");

// "first difference at token 5: ' cat' vs ' dog'" (or at byte N, or why there is none).
std::string divergence_where(const divergence& d);

}  // namespace detaudit::reports
