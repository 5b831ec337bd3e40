// Pieces shared by compare_run, compare_runs and the renderers; not part of the reports interface.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "reports/compare.h"

namespace detaudit::reports {

// Natural order: digit runs compare as numbers ("item-2" < "item-10"), then plain byte order.
bool natural_less(const std::string& x, const std::string& y);

// The probe a condition belongs to when its records do not say ("concurrent-8" -> "concurrency").
std::string probe_from_condition(const std::string& condition);
// Report order of probes: control, repeat, concurrency, cache, batch, speculation, seed, cross, others.
int probe_rank(const std::string& probe);

// Keeps one record per key: the last one in input order, at the position of the first. `dropped`
// receives the number of records superseded.
std::vector<record> records_dedupe(std::vector<record> in, const std::function<std::string(const record&)>& key,
                                   size_t* dropped);

// Why a record's condition did not take effect (evidence.exercised false, concurrent requests that
// did not overlap, a warm cache that served no tokens), or "" when it did.
std::string not_exercised_reason(const record& r);

// One row: divergence, error, exercised, grades and flip. a and b must outlive the row.
pair_item row_make(const record& a, const record& b, const std::string& cond_a, const std::string& cond_b);
// Appends a row and counts it (errors, then not exercised, then differ / graded / flips).
void summary_add(pair_summary& s, pair_item row);

// One note per pair and distinct reason for rows that were not exercised.
void notes_not_exercised(report& r);

// o[key] when it is a string, else dflt (never throws).
std::string json_str(const json& o, const char* key, const std::string& dflt = "");

// "first difference at token 5: ' cat' vs ' dog'" (or at byte N, or why there is none).
std::string divergence_where(const divergence& d);

}  // namespace detaudit::reports
