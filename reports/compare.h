// Item-by-item divergence between pairs of responses, graded, and summarised per pair of
// conditions. Reads run records only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reports/record.h"

namespace detaudit::reports {

// Where two responses part. Token indices are into the generated tokens; character offsets into
// the generated text (bytes of UTF-8).
struct divergence {
  bool identical = true;           // same token sequence (ids when both have ids, else texts) and same text
  int64_t token_index = -1;        // first differing token (-1: identical)
  int64_t char_offset = -1;        // first differing byte of the text (-1: identical)
  std::string token_a, token_b;    // the two tokens there ("" past the end of one side)
  int32_t id_a = -1, id_b = -1;
  std::string before_a, after_a;   // 40 characters before / 60 after the offset, side A
  std::string before_b, after_b;
  std::optional<double> margin_a, margin_b;  // top-1 minus top-2 log-prob at that step
  int64_t hash_step = -1;          // first step whose logit hash differs (-1: none or not available)
  bool hashes_available = false;
  std::string note;                // e.g. "one side failed: ..."
};

divergence diverge(const record& a, const record& b);

// Graders. grade() returns nullopt when the record has no reference or no grader.
// "gsm8k" (strict-match), "gsm8k-flex" (flexible-extract), "exact", "numeric", "regex:PATTERN".
std::optional<bool> grade(const std::string& grader, const std::string& response, const std::string& reference);
std::optional<bool> grade(const record& r);
// lm-evaluation-harness's GSM8K answer extraction and normalisation, exposed for tests.
std::optional<std::string> gsm8k_extract_strict(const std::string& response);
std::optional<std::string> gsm8k_extract_flexible(const std::string& response);
std::string gsm8k_normalize(const std::string& s);

enum flip_kind { FLIP_NONE, FLIP_RIGHT_TO_WRONG, FLIP_WRONG_TO_RIGHT, FLIP_WRONG_TO_OTHER_WRONG };
const char* flip_name(flip_kind f);

// One item under one pair of conditions.
struct pair_item {
  std::string item_id;
  std::string cond_a, cond_b;      // "LABEL:condition[#rep]" when targets differ, else "condition[#rep]"
  const record* a = nullptr;       // points into the records given to compare_run()
  const record* b = nullptr;
  divergence d;
  std::optional<bool> correct_a, correct_b;
  flip_kind flip = FLIP_NONE;
  bool exercised = true;           // false: the condition did not take effect (see reason)
  std::string reason;
  bool error = false;              // one side has no response
};

// One pair of conditions over all items.
struct pair_summary {
  std::string probe;
  std::string cond_a, cond_b;
  bool control = false;            // the alone-vs-alone control pair
  int64_t items = 0, differ = 0, errors = 0, not_exercised = 0;
  int64_t graded = 0, correct_a = 0, correct_b = 0;
  int64_t right_to_wrong = 0, wrong_to_right = 0, wrong_to_other_wrong = 0;
  std::vector<pair_item> rows;
};

struct report {
  json manifest;                   // run.json (may be empty)
  std::vector<record> records;     // owned; pair_item pointers point here
  std::vector<pair_summary> pairs;
  std::vector<std::string> notes;  // run-level remarks (not supported by this target, lint, ...)
};

// Builds the pairs a run's records call for: per probe, (alone, control) and (alone, X) for each
// other condition; seed probe: repetitions against repetition 0; cross: target A vs target B on
// each shared condition. Takes ownership of the records.
report compare_run(std::vector<record> records, json manifest = json::object());
// Two runs item by item: records matched by item_id and condition (or by item_id alone when each
// side has one condition per item).
report compare_runs(std::vector<record> a, std::vector<record> b);

// --fail-on: "any" (a non-control pair differs), "flips" (any right->wrong), "score-drop:X"
// (correct_a - correct_b > X percentage points on some pair), "none". Throws input_error on a bad spec.
struct fail_policy {
  std::string kind = "any";
  double score_drop = 0;
};
fail_policy fail_policy_parse(const std::string& spec);
// Empty when within thresholds; otherwise one line per reason.
std::vector<std::string> fail_reasons(const report& r, const fail_policy& p);

// Formats: "text" (terminal table), "json", "md", "junit", "html" (one self-contained page).
// Throws input_error on an unknown format.
std::string report_render(const report& r, const std::string& format);

}  // namespace detaudit::reports
