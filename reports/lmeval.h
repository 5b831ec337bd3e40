// lm-evaluation-harness interoperability: its per-sample logs (`lm_eval --log_samples`, files
// `samples_<task>_<date>.jsonl`) read as two sides of a compare, and a run's records written in
// that shape.
//
// One sample line (generate_until tasks; loglikelihood tasks put [logprob, is_greedy] pairs in resps):
//
//   {"doc_id": 0, "doc": {...}, "target": "18",
//    "arguments": {"gen_args_0": {"arg_0": "<context>", "arg_1": {<generation kwargs>}}},
//    "resps": [["<generated text>"]], "filtered_resps": ["18"], "filter": "strict-match",
//    "metrics": ["exact_match"], "doc_hash": "<sha256>", "prompt_hash": "<sha256>",
//    "target_hash": "<sha256>", "exact_match": 1.0}
//
// A task with several filters (gsm8k: strict-match, flexible-extract) has one line per doc and filter.
//
// Goals: align two sample files by (doc_id, filter) and report text divergence and correctness flips
// with the report model of compare.h. Non-goals: lm-eval's results_*.json, loglikelihood scores.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reports/compare.h"

namespace detaudit::reports {

// One line of a samples file, reduced to what a compare reads.
struct lmeval_sample {
  int64_t doc_id = 0;
  std::string filter;
  std::string doc_hash;
  std::string prompt_hash;
  std::string target;      // the gold answer; a non-string target as compact JSON
  std::string response;    // resps[0][0] when a string (generate_until), else resps as compact JSON
  std::string filtered;    // filtered_resps[0] when a string, else filtered_resps as compact JSON
  std::string metric;      // the first name in "metrics" whose value is a number or a boolean
  std::optional<bool> correct;  // that value: 1 -> true, 0 -> false, anything else -> not graded
  json arguments;
};

// True when the first non-blank line of path is a JSON object with doc_id, resps, filtered_resps and
// filter (an lm-eval samples file rather than run records). False for folders and unreadable files.
bool lmeval_is_samples_file(const std::string& path);

// Every line of a samples file. Throws input_error naming file:line and the field for a line that
// is not a sample, and for a (doc_id, filter) that appears twice.
std::vector<lmeval_sample> lmeval_read(const std::string& path);

// Item-by-item compare of two sample files: one pair_summary per filter (probe "lm-eval", conditions
// "A:<filter>" and "B:<filter>"), rows aligned by doc_id. Correctness comes from each side's metric,
// not from a grader. A doc whose doc_hash differs is not compared (reason "different documents");
// docs on one side only are counted in a note.
report lmeval_compare(const std::vector<lmeval_sample>& a, const std::vector<lmeval_sample>& b);

// An item of the run, in run order: its index is the exported doc_id.
struct lmeval_doc {
  std::string item_id;
  std::string prompt;
  std::string doc;  // the document's JSON as its dataset line holds it ("" = {"question": prompt})
};

using ordered_json = nlohmann::ordered_json;

// Python's json.dumps(j, indent=2, ensure_ascii=False): keys in the object's own order, ", " and
// ": " separators, only '"', '\\' and control characters escaped, floats as Python's repr.
std::string lmeval_python_dumps(const ordered_json& j);
// lm-eval's doc_hash: the sha256 (hex) of lmeval_python_dumps(doc).
std::string lmeval_doc_hash(const ordered_json& doc);

// The sample lines of one record, in lm-eval's key order: gsm8k-graded records give a
// "strict-match" and a "flexible-extract" line; other records one line with filter "none". resps,
// filtered_resps and exact_match read the text as the target sent it back (a thinking block
// included, as lm-eval reads it); "detaudit" holds detaudit's own reading of the final answer after
// any thinking block ({"final_answer", "filtered", "exact_match"}). doc is the item's document,
// doc_hash lm-eval's hash of it; exact_match is present when the record is graded.
std::vector<ordered_json> lmeval_samples_of(const record& r, int64_t doc_id, const lmeval_doc& d);

// Writes samples_<probe>_<condition>[_<label>][_r<repetition>].jsonl under dir (created), one file
// per target label, probe, condition and repetition; the label is in the name when the records
// have more than one. Records of items not in docs and failed responses are skipped. Returns the
// paths written, sorted. Throws input_error when dir cannot be written.
std::vector<std::string> lmeval_export(const std::vector<record>& records, const std::vector<lmeval_doc>& docs,
                                       const std::string& dir);

}  // namespace detaudit::reports
