// Item-by-item divergence between pairs of responses, graded, and summarised per pair of
// conditions. Reads run records only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

#include "reports/audit/grade.h"
#include "reports/audit/identity.h"
#include "reports/audit/kld.h"
#include "reports/audit/record.h"
#include "reports/oracle.h"

namespace detaudit::reports {

// Where two responses part. Token indices are into the generated tokens; character offsets into
// the generated text (bytes of UTF-8).
struct divergence {
  // Same tokens and same text. Tokens are equal when their bytes are (steps.h token_bytes); a token
  // whose bytes are lost compares by id when both sides have ids, else by its string. A side that
  // reported no tokens is compared on its text alone (text_only).
  bool identical = true;
  bool retokenized = false;        // the texts are equal, the tokens are cut differently
  bool text_only = false;          // a side has no tokens: compared on the texts
  int64_t token_index = -1;        // first differing token (-1: identical)
  int64_t char_offset = -1;        // first differing byte of the text (-1: identical)
  std::string token_a, token_b;    // the two tokens there ("" past the end of one side)
  int32_t id_a = -1, id_b = -1;
  std::string before_a, after_a;   // 40 characters before / 60 after the offset, side A
  std::string before_b, after_b;
  std::optional<double> margin_a, margin_b;  // best minus second-best log-prob at that step, by value
  int64_t hash_step = -1;          // first step whose logit hash differs (-1: none or not available)
  bool hashes_available = false;
  // Log-prob drift over the steps both sides share before their tokens part (all steps when the
  // tokens agree): the first step where an alternative both sides list (same id, else same string)
  // has a different log-prob, bit for bit as the servers wrote it (-1: none), and the largest
  // |difference| of such an alternative over those steps. max_drift is nullopt when no such step
  // has alternatives on both sides (nothing to compare), 0 when they were compared and all equal.
  int64_t drift_step = -1;
  std::optional<double> max_drift;
  // Where the texts part (char_offset >= 0) and both sides have tokens: each side's own index of
  // the token holding the parting byte (its token count when the byte is past its tokens), and
  // whether the two cut the text before it at different places: then their token indices do not
  // correspond (other vocabularies, or another tokenization), and the byte offset is what locates
  // the difference. When both sides' token bytes are known the byte is where those part (which can
  // be before the texts part: different bytes that are not UTF-8 all show as U+FFFD); else each
  // side's tokens are laid over its own text, and a side they cannot be laid over (a character
  // split across tokens whose bytes it does not give) leaves both indices -1: not located.
  int64_t token_index_a = -1, token_index_b = -1;
  bool tokenized_differently = false;
  // A reasoning model's thinking (record.reasoning), compared apart from the answer: whether either
  // side had any, and the first byte where it parts (-1: the same, or none).
  bool reasoning_compared = false;
  int64_t reasoning_offset = -1;
  std::string note;                // e.g. "one side failed: ..."
};

// `one_vocab`: both records come from one target, so a token id names the same token on both
// sides: the same bytes under another id is another token (the greedy choice changed), and equal
// texts over such tokens are retokenized. Across targets (cross pairs, two runs of other models)
// ids are not compared where bytes are known.
divergence diverge(const record& a, const record& b, bool one_vocab = false);

// A row's verdict, in order of precedence: error, not comparable (compare: the prompts differ), not
// exercised, then what the responses show.
enum row_status {
  STATUS_IDENTICAL,       // same tokens and text, and no logit hash differs
  STATUS_DRIFTED,         // same tokens and text, but a logit hash or a shared alternative's log-prob differs
  STATUS_DIFFERS,         // the responses part
  STATUS_RETOKENIZED,     // the same text from other tokens (another cut, or the same bytes under another id)
  STATUS_ERROR,           // a side has no response
  STATUS_NOT_EXERCISED,   // no evidence the condition happened
  STATUS_NOT_COMPARABLE,  // compare: the two runs' requests for this item differ
};
const char* status_name(row_status s);

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
  // Not exercised, but side B's request was byte for byte side A's (alone's) and the answers
  // differ: two answers to one request are run-to-run noise. Such a row is judged (status differs
  // or retokenized, counted in differ or retokenized) and its item is noisy.
  bool same_request = false;
  bool error = false;              // one side has no response
  row_status status = STATUS_IDENTICAL;
  // First step where a greedy side sampled a token that was not its top alternative (-1: none); a
  // sign of a sampler or engine bug worth reporting.
  int64_t not_argmax_a = -1, not_argmax_b = -1;
  // The noise model: of the item's alone answers (alone and each control repetition, side A's
  // target), how many agree with the most common one, out of how many answered. noisy: they do
  // not all agree (on either side's target), so a difference here may be plain run-to-run noise.
  int alone_agree = 0, alone_n = 0;
  bool noisy = false;
  // --oracle: the exact engine's verdict on a row that differs (reports/oracle.h).
  std::optional<row_oracle> oracle;
};

// One pair of conditions over all items.
struct pair_summary {
  std::string probe;
  std::string cond_a, cond_b;
  bool control = false;            // the alone-vs-alone control pair
  bool vs_alone = false;           // alone vs a probe's condition (not control, seed or cross)
  // Both sides are one target's responses (its own conditions, or two runs of one model file):
  // token ids correspond, and a retokenized row is a changed token (--fail-on any fails on it).
  bool one_target = false;
  int64_t items = 0, differ = 0, errors = 0, not_exercised = 0;
  int64_t same_request = 0;        // rows of differ that answer a request answered otherwise too (pair_item::same_request)
  int64_t retokenized = 0, drifted = 0, not_comparable = 0, not_argmax = 0;
  int64_t graded = 0, correct_a = 0, correct_b = 0;
  // GSM8K rows graded by flexible-extract also scored by strict-match (lm-eval reports both).
  int64_t strict_graded = 0, strict_a = 0, strict_b = 0;
  int64_t right_to_wrong = 0, wrong_to_right = 0, wrong_to_other_wrong = 0;
  // Against the noise model (pairs with alone, and cross pairs): rows that differ on items whose
  // alone answers all agree (-1: not computed for this pair), and the one-sided Fisher exact p of
  // this pair's divergence rate against the control pairs' (nullopt: no control to compare with).
  int64_t differ_beyond_noise = -1, noisy = 0;
  std::optional<double> p_vs_noise;
  // Graded pairs: McNemar's exact two-sided p on right->wrong vs wrong->right (nullopt: ungraded).
  std::optional<double> mcnemar_p;
  // --oracle: fidelity of the responses of condition b (and of a), server vs exact; whether b's is
  // worse than a's (ORACLE_WORSE_RATIO) when a is alone; rows judged per class, and not judged.
  std::optional<oracle_fidelity> fidelity, fidelity_a;
  bool fidelity_worse = false;
  int64_t near_tie = 0, server_error = 0, both_off = 0, sampled = 0, unjudged = 0;
  // Cross pairs: llama-perplexity's KL-divergence summary of B from A over the steps each row's two
  // responses share before their tokens part (kld_points_shared), and how many rows gave both sides'
  // pre-sampling log-probs with ids; nullopt when no step qualifies.
  std::optional<kld_stats> kld;
  int64_t kld_rows = 0;
  std::vector<pair_item> rows;
};

// Rows a pair's verdicts rest on: neither failed, not exercised, nor not comparable. `differ` counts
// among these.
inline int64_t pair_judged(const pair_summary& s) { return s.items - s.errors - s.not_exercised - s.not_comparable; }

struct report {
  json manifest;                   // run.json (may be empty)
  std::vector<record> records;     // owned; pair_item pointers point here
  std::vector<pair_summary> pairs;
  std::vector<std::string> notes;  // run-level remarks (not supported by this target, lint, ...)
  // compare: where the two runs' identities differ (request settings, targets, prompt set, probes).
  std::vector<identity_difference> differences;
  // The noise model over all targets: alone answers per item (alone plus its control repetitions,
  // the most any item has; 0 when the run has no control), items with at least two alone answers,
  // and those whose alone answers do not all agree.
  int repeat = 0;
  int64_t noise_items = 0, noisy_items = 0;
  size_t records_a = 0;  // compare_runs: records[0, records_a) are run A's, the rest run B's
  // compare_run: the probes the run asked for (run.json's identity, else those its records name),
  // each of which must judge at least one row (fail_findings); empty for compares of two runs.
  std::vector<std::string> probes_requested;
  // --oracle: the run-level summary (null without an oracle): {"model", "bound", "bound_source",
  // "fidelity" {n, mean, max, equal, kl_mean, responses, off_argmax}, "by_condition" {COND: the
  // same}, "classes" {near-tie, server-error, both-off, sampled, unjudged}, "cost", "notes"}.
  json oracle;
};

// Builds the pairs a run's records call for: per probe, (alone, control) and (alone, X) for each
// other condition; seed probe: repetitions against repetition 0; cross: target A vs target B on
// each shared condition. Takes ownership of the records.
report compare_run(std::vector<record> records, json manifest = json::object());
// Why a run's report covers less than the run asked for, or "": fewer items have records than
// run.json says the run (or shard) holds (a run that was stopped or killed), or shards missing from
// a merge made with --partial. `detaudit report` then ends INCOMPLETE (exit 3), as `run` does.
std::string report_incomplete(const report& r);
struct compare_options {
  // --pair A=B: target label in run A, label in run B. Empty: the only label of each run when each
  // has one, else every label both runs have.
  std::vector<std::pair<std::string, std::string>> pairs;
  bool ignore_settings = false;  // --ignore-settings: compare rows whose request settings differ
};

// Two runs item by item, label pair by label pair: records matched by item_id, condition and
// repetition (by item_id and repetition alone when each side has one condition). A matched item
// whose prompts differ (prompt_sha256), or whose run's request settings differ (identity
// "request.*", unless ignore_settings), is a not-comparable row. The identities' differences are
// listed in report::differences. Throws input_error when nothing is comparable (no label pair, no
// common item, every matched item not comparable), naming why.
report compare_runs(std::vector<record> a, std::vector<record> b, const json& manifest_a = json::object(),
                    const json& manifest_b = json::object(), const compare_options& opt = {});

// Applies the oracle's figures to a report built by compare_run or compare_runs: a row_oracle on
// every row that differs (both sides evaluated), each pair's fidelity and class counts, the run's
// summary in report::oracle, and one note per condition whose fidelity is worse than alone's.
// compare: `d_b` holds run B's figures, whose records are r.records[n_a...] (compare_runs puts
// run A's first).
void oracle_apply(report& r, const oracle_data& d, const oracle_apply_options& opt = {}, const oracle_data* d_b = nullptr,
                  size_t n_a = 0);
// The tie bounds of a run. Each target's precision is half the largest spread (reports/oracle.h:
// max - min of server - exact log-prob within one step, so an offset the step's values share does
// not count) over its quietest responses (alone and control; all of its responses when those have
// none): a row's bound is side A's target's precision plus side B's (two tokens whose exact gap is
// at most that can be ordered either way by servers each that precise). A target with no step of
// two comparable values counts ORACLE_DEFAULT_TIE / 2; --near-tie replaces every bound.
struct oracle_bound_info {
  std::map<std::string, double> precision;  // target label -> half the largest spread (measured ones only)
  std::set<std::string> implausible;         // labels whose precision exceeds ORACLE_MAX_PRECISION
  std::optional<double> fixed;              // --near-tie
  std::string source;                       // how the bounds were set, in words
  // Never below ORACLE_EXACT_BOUND (unless fixed): a few measured values can understate a float
  // server's precision, and exact math cannot order two tokens closer than that for float64.
  double for_labels(const std::string& a, const std::string& b) const;
  double headline() const;  // the bound of a pair of the least precise measured target, or the fixed one
};
oracle_bound_info oracle_bound(const std::vector<record>& records, const oracle_data& d,
                               const oracle_apply_options& opt = {});
// The verdict on one differing row (its records' figures looked up by record_key).
row_oracle oracle_judge(const pair_item& row, const oracle_data& d, const oracle_bound_info& bounds);
// "at token 24 the server under concurrent-8 ' an' (exact log-prob -3.41, rank 2) picked a token
// 3.29 nats below what exact math gives, ' cl' (-0.12): not a near-tie (tie bound 0.08 nats); ...",
// the sentence a bundle and every report print. `style` quotes a token and escapes the other text
// once, for the format it goes into.
struct sentence_style {
  std::function<std::string(const std::string&)> token;  // a token's text, quoted
  std::function<std::string(const std::string&)> text;   // a condition name or a note
};
sentence_style sentence_plain();     // as stored: tokens in '...', nothing escaped (JSON)
sentence_style sentence_terminal();  // escape_line: one line, control bytes as \xHH
std::string oracle_sentence(const pair_item& row, const sentence_style& style = sentence_plain());

// --fail-on: a comma-separated list of gates, each a reason to exit 1:
//   any            a pair (the control pair included) differs on some item, or one target's own
//                  pair has a retokenized row (another token for the same text)
//   drift          a pair has drifted rows (same tokens, moved logits or log-probs)
//   flips          an answer went right->wrong
//   significant    a pair's divergence rate is above the control's (Fisher p < 0.05) or its flips are
//                  lopsided (McNemar p < 0.05, either way)
//   errors         a response failed
//   not-exercised  a condition did not take effect on some item
//   server-error   --oracle judged a divergence server-error or could not judge one, or found a
//                  condition's fidelity worse than alone's; or the report has no oracle figures
//   score-drop:X   a score fell by more than X percentage points (the reason says if significant)
//   none           none of the above, and not the nothing-judged rule either
// Beyond the list: nothing judged at all, or a probe the run asked for that judged no row (its
// pairs other than the control all failed, were not exercised or not comparable), is an unjudged
// finding (unless "none"): exit 5, not 1; a pair with fewer than min_judged judged rows is a
// reason whenever min_judged > 0. Throws input_error on a bad spec, naming the bad entry.
struct fail_policy {
  bool none = false;
  bool any = false, drift = false, flips = false, significant = false, errors = false, not_exercised = false;
  bool server_error = false;
  std::optional<double> score_drop;
  int64_t min_judged = 0;
  std::string spec;  // as given
};
fail_policy fail_policy_parse(const std::string& spec, int64_t min_judged = 0);
// One reason to exit 1: the gate that failed ("--fail-on any", "--min-judged 5", "nothing judged")
// and why.
struct fail_finding {
  std::string gate;
  std::string text;
  bool unjudged = false;  // nothing judged, or a probe that judged nothing: exit 5 when no gate failed
};
// The exit code of a finished report: 3 when incomplete, else 1 when a gate failed, else 5 when
// something went unjudged, else 0.
int verdict_exit_code(const std::vector<fail_finding>& findings, bool incomplete);
// Empty when within thresholds. `none` turns off the --fail-on gates and the nothing-judged rule;
// a --min-judged above 0 still applies (it was asked for by itself).
std::vector<fail_finding> fail_findings(const report& r, const fail_policy& p);
// The texts of fail_findings.
std::vector<std::string> fail_reasons(const report& r, const fail_policy& p);
// A p-value as the reports print it: two significant digits, scientific below 0.001.
std::string p_text(double p);
// The last line of run, report and compare, pytest-like: "PASS: ...; exit 0", "FAIL: ...; exit 1",
// "UNJUDGED: ...; exit 5" (nothing judged, or a probe that judged nothing), or with exit code 3 (a
// run that is incomplete) "INCOMPLETE: ...; exit 3".
std::string verdict_line(const report& r, const fail_policy& p, const std::vector<std::string>& reasons, int exit_code);

// --only-differences and --max-items N: which rows a rendered report lists. Counts, gates and the
// verdict are unchanged (they are computed on the whole report); a note says what was left out.
struct trim_options {
  bool only_differences = false;  // leave out rows a text report does not list (identical, not argmax)
  int64_t max_items = -1;         // at most N listed rows (differ, drifted, failed, ...) per pair (-1: all)
};
// A copy of `r` whose pairs hold only the rows `t` keeps. Its rows point into `r`'s records, so `r`
// must outlive it.
report report_trim(const report& r, const trim_options& t);

// Formats: "text" (terminal table), "json", "md", "junit", "html" (one self-contained page).
// Throws input_error on an unknown format.
std::string report_render(const report& r, const std::string& format);

}  // namespace detaudit::reports
