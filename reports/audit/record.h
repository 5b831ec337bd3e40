// Run records: the contract between probes (which write them) and reports (which read them).
//
// One record per (item, target, condition, repetition) response, one JSON object per line in a
// `*.jsonl` file at the top of a run folder; no header line; `item_id` on every line; appended and
// flushed as each response arrives, so a crash loses at most the line being written. A run folder
// also holds `run.json` (the run's manifest: tool and precision-contract versions, environment,
// targets and their capability probes, the lint findings, the options). docs/records.md is the
// schema; RECORD_SCHEMA is its version and every line carries it.
//
// The record types live here, in the reports library, and probes writes through them: the schema
// has one owner (the reader), and the dependency stays one way (cli -> probes -> reports -> engine).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace detaudit::reports {

using json = nlohmann::json;

inline constexpr int RECORD_SCHEMA = 1;

// One generated token. `id` is -1 when the target gives no token ids (then `text` and `bytes` are
// what it gave). `bytes` holds the token's raw bytes when they are not valid UTF-8 on their own.
struct token_rec {
  int32_t id = -1;
  std::string text;
  std::vector<uint8_t> bytes;  // empty: `text` is the whole token
  std::optional<double> logprob;  // the sampled token's log-prob when the target reports it
  // The sampled token's place among this step's alternatives sorted best first: how many have a
  // strictly higher log-prob (0: it was the top); the number of alternatives when it is not among
  // them; -1 when the step has no alternatives. Filled by record_normalise() (reports/audit/steps.h).
  int rank = -1;
};

// One alternative at one step: a token (id when known, else -1) and its log-prob.
struct alt_rec {
  int32_t id = -1;
  std::string token;
  double logprob = 0;
};

struct record {
  int schema = RECORD_SCHEMA;
  std::string run_id;
  std::string item_id;
  std::string probe;      // the probe that asked for this response: repeat, concurrency, cache, ...
  std::string condition;  // alone, control, concurrent-8, cache-off, cache-warm, ubatch-8192, ...
  int repetition = 0;     // 0-based index when a condition is run K times (seed probe)
  // The target that answered: {"label": "A"|"B"|..., "spec", "dialect", "url" or "model_sha256",
  // "build", "fingerprint", "model"}. Never holds a secret.
  json target = json::object();
  json request = json::object();  // the body as sent (secrets redacted); engine targets: their params
  std::string endpoint;           // the path the request went to ("/completion", ...); "" in process
  // The temperature the runner asked for; a greedy request (0) must sample the top alternative.
  std::optional<double> temperature;
  std::string prompt_sha256;      // of the prompt text (or the rendered messages JSON)
  std::string text;               // the generated text (a reasoning model: the final answer only)
  // A reasoning model's thinking, where the server returns it apart from the answer
  // (reasoning_content on llama-server, vLLM and SGLang, reasoning on newer vLLM, thinking on
  // ollama); "" when none. Compared as its own stream; never graded.
  std::string reasoning;
  std::vector<token_rec> tokens;
  // Top log-probs per generated token, best first; `logprobs_kind` says which distribution.
  std::vector<std::vector<alt_rec>> top_logprobs;
  std::string logprobs_kind;          // "pre-sampling" | "post-sampling" | "" (none reported)
  std::vector<uint64_t> logit_hashes;  // per step, xxh3-64 of the float32 logits (engine, serve)
  std::string chained_hash;            // hex, when the target reports one
  std::string finish_reason;           // "stop" | "length" | "error" | the target's word
  json usage = json::object();         // prompt_tokens, completion_tokens, cached_tokens, ...
  json timings = json::object();       // t_start / t_end (unix seconds, float), latency_ms, target's own
  // Evidence that the condition took effect (docs/records.md, "Evidence"): "cached_tokens",
  // "overlap", "end_ms", "batch_width" (this request's), "slots_busy_max", "prompt_tokens",
  // "ubatch", "draft_proposed", "cold", "exercised" (false: not applied, with "reason"), ...
  // reports/audit/conditions.h judges it.
  json evidence = json::object();
  // Grading: the gold answer (empty: not graded) and the grader name (gsm8k, exact, regex:..., numeric).
  std::string reference;
  std::string grader;
  std::string error;  // non-empty: no usable response; what went wrong (never a secret)
  int http_status = 0;
};

json record_to_json(const record& r);
// Throws input_error naming `where` (file:line) for a line that is not a valid record.
record record_from_json(const json& j, const std::string& where);

// Appends one record as one line and flushes it (a line is complete or absent). Thread-safe.
class record_writer {
 public:
  explicit record_writer(const std::string& path);  // opens for append; creates the file
  ~record_writer();
  record_writer(const record_writer&) = delete;
  record_writer& operator=(const record_writer&) = delete;
  void write(const record& r);
  const std::string& path() const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

struct read_stats {
  size_t lines = 0;
  size_t records = 0;
  size_t truncated = 0;  // a last line without its newline (a crash mid-write): skipped, counted
};

// Reads every record of one .jsonl file. A final line without a newline is skipped and counted
// (the writer died mid-line); any other bad line is an input_error naming file and line.
std::vector<record> records_read_file(const std::string& path, read_stats* stats = nullptr);
// A run folder: every *.jsonl at its top, in name order; or a single .jsonl file.
std::vector<record> records_read(const std::string& dir_or_file, read_stats* stats = nullptr);
// The run folder's run.json, or an empty object when there is none.
json run_manifest_read(const std::string& dir);

// How deep JSON read from a file or a server may nest. Copying, comparing and printing a JSON
// value recurse once per level, so a hostile answer nested a hundred thousand levels deep would
// overflow the stack; what detaudit and the servers it reads write nests fewer than a dozen.
inline constexpr size_t JSON_MAX_DEPTH = 128;
// Whether `j` nests at most `max_depth` levels (a scalar or an empty array or object is one level
// of its own, each non-empty container one more than its deepest element); checked without
// recursion.
bool json_depth_within(const json& j, size_t max_depth);
// One line of a JSON Lines file, parsed and held to JSON_MAX_DEPTH. Throws input_error naming
// `where`: "not a JSON line (...)" or "JSON nested more than 128 levels deep".
json json_line_parse(const std::string& line, const std::string& where);

// The key that identifies one response within a run: item, target label, condition, repetition.
std::string record_key(const record& r);

}  // namespace detaudit::reports
