// The audit runner: items x probes x conditions against one or more targets, records appended per
// response, resumable, shardable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "probes/target.h"
#include "reports/audit/record.h"

namespace detaudit::probes {

struct item {
  std::string id;
  std::string prompt;     // the question / prompt text
  std::string reference;  // gold answer ("" = not graded)
  std::string grader;     // gsm8k, exact, numeric, regex:..., "" = not graded
  std::string doc;        // the document as its dataset line holds it (lm-eval's doc, doc_hash); "" = {"question": prompt}
};

// --dataset gsm8k as lm-evaluation-harness's gsm8k task (version 3.0) renders it: K exemplars drawn
// for each document from the few-shot file (jsonl question/answer, GSM8K's train split) as lm-eval's
// default sampler draws them (probes/fewshot.h: one Random(1234), in document order), each
// "Question: Q\nAnswer: A", joined and followed by the item's "Question: Q\nAnswer:" with a blank
// line between. K: num_fewshot, or FEWSHOT_DEFAULT: lm-eval's 5 when fewshot_file is given, else 0.
// strict: grade by strict-match (the "#### N" line); otherwise flexible-extract (the last number).
inline constexpr int FEWSHOT_DEFAULT = -1;
inline constexpr int GSM8K_FEWSHOT = 5;       // the task's num_fewshot
inline constexpr int64_t GSM8K_MAX_GEN_TOKS = 256;  // lm-eval's max_gen_toks default
inline constexpr uint64_t GSM8K_SEED = 1234;  // the seed lm-eval's API models send with every request
struct dataset_options {
  int num_fewshot = FEWSHOT_DEFAULT;
  std::string fewshot_file;
  bool strict = false;
};
// How the exemplars were chosen, for the run's identity: {"count", "file_sha256", "sampler"}; an
// empty object for 0-shot. Throws input_error as items_load_dataset does on bad options.
json dataset_fewshot_identity(const dataset_options& d);
// lm-eval's gsm8k stop strings ("until"): "Question:", "</s>", "<|im_end|>".
const std::vector<std::string>& gsm8k_stop_strings();

// --prompts FILE.txt (one prompt per line; blank lines skipped) or FILE.jsonl ({"id"?, "prompt",
// "answer"?, "grader"?} per line); --dataset gsm8k:FILE[:N] (GSM8K test.jsonl: question/answer,
// rendered as above). Throws input_error naming file and line.
std::vector<item> items_load_prompts(const std::string& path);
std::vector<item> items_load_dataset(const std::string& spec, const dataset_options& d = {});
// The built-in set: 32 short prompts (arithmetic, facts, code, lists, translation) with short
// greedy answers, for a first run with nothing but --target; ids "builtin-1".."builtin-32".
std::vector<item> items_builtin();

// A lint finding: a request or prompt pitfall found before anything is sent.
struct lint_finding {
  std::string severity;  // "warning" | "error"
  std::string code;      // e.g. "temp0-top-p", "n-gt-1", "penalty", "bom", "zero-width", "crlf", "timestamp"
  std::string item_id;   // "" for request-level findings
  std::string message;
};
std::vector<lint_finding> lint(const std::vector<item>& items, const gen_request& base);

struct run_options {
  std::vector<std::string> probes;   // names from reports::probe_table()
  int concurrency = 8;               // the concurrency probe's N
  int seed_k = 5;                    // the seed probe's K
  int repeat = 2;                    // alone answers per item: alone, then repeat-1 control repetitions
  double seed_temperature = 0.7;
  uint64_t seed = 42;
  bool chat = true;                  // chat request (--chat) or raw completion (--raw)
  std::string system;                // chat: a system message before each prompt ("" = none)
  bool stream = false;               // HTTP targets were asked for streamed answers (identity only)
  gen_request base;                  // n_predict, temperature 0, n_probs, stop, seed, extra
  bool stop_eos = false;             // each target's end-of-sequence text among the stops (lm-eval's protocol)
  // How few-shot exemplars were chosen ({"count", "file_sha256", "sampler"}; empty: none), for the
  // run's identity.
  json fewshot = json::object();
  std::string out_dir;
  std::string run_id;                // "" = new (resume keeps the folder's)
  bool resume = false;
  int shard_index = 0, shard_count = 1;  // --shard I/N (0-based index here; the CLI takes 1-based)
  bool progress_tty = false;         // a redrawn progress line instead of plain lines
  std::string secret;                // the targets' API key: redacted from run.json (reports/audit/redact.h)
  std::function<void(const std::string&)> log;  // progress output (stderr)
};

struct run_result {
  size_t records_written = 0;
  size_t records_skipped = 0;  // already present (--resume)
  size_t errors = 0;
  bool unreachable = false;    // a target became unreachable; the run stopped early
  std::string unreachable_message;
  bool interrupted = false;    // SIGINT/SIGTERM: the run stopped sending (run_interrupt())
  std::string records_path;    // "" when no records file was opened
};

// Runs the audit; writes run.json and records into opt.out_dir. Targets are given labelled A, B, ...
// Throws input_error (exit 2): bad options; --resume of a folder whose run differs (each differing
// identity field named); a folder another process is writing (locked); a first request a target
// refuses outright (a 4xx other than 408/429: the message says how to fix it). With only the lint
// probe, `targets` may be empty: nothing is sent, findings are logged (and run.json written when
// opt.out_dir is set).
run_result run_audit(const std::vector<target*>& targets, const std::vector<item>& items, const run_options& opt);

// The run's identity (run.json "identity", reports/audit/identity.h): what decides whether two runs can be
// compared, resumed into one folder or merged.
json run_identity(const std::vector<target*>& targets, const std::vector<capabilities>& caps,
                  const std::vector<item>& items, const run_options& opt);

// `detaudit merge OUT DIR...`: joins the shard folders of one run (each key once: the first record
// without an error). Throws input_error when the folders are not shards of one run (an identity
// differs, a folder is not a shard, a shard index repeats) or, unless `partial`, when shards are
// missing; a partial merge's run.json lists them ("shards": {"count", "merged", "missing"}).
// Returns the number of records written.
size_t runs_merge(const std::vector<std::string>& dirs, const std::string& out_dir, bool partial = false);

// The first records file (a non-empty *.jsonl at the top of DIR, which every reader takes as part
// of the run) other than `own` (a file name such as "records.jsonl"; "" for none), or "" when there
// is none. A run or a merge that wrote into a folder holding one would mix two runs under one
// run.json.
std::string run_folder_other_records(const std::string& dir, const std::string& own);

// Creates DIR (and its parents) for a run or a merge; input_error naming it when that cannot be
// done (a file of that name, a folder that cannot be written).
void run_folder_make(const std::string& dir);

// Whether a process holds DIR's lock now (a run still writing to it). Never creates the lock file.
bool run_folder_busy(const std::string& dir);

// Takes the run folder's lock (DIR/.lock, flock) for the life of the object. Throws input_error
// when another process holds it.
class run_folder_lock {
 public:
  explicit run_folder_lock(const std::string& dir);
  ~run_folder_lock();
  run_folder_lock(const run_folder_lock&) = delete;
  run_folder_lock& operator=(const run_folder_lock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace detaudit::probes
