// The senders of each probe's conditions for one item, and the records they write (used by
// runner.cpp). The conditions, their order, their evidence rules and their pairing are rows of
// reports::condition_table(); this file holds one sender per probe (probe_senders()).
//
// Per item and target, in this order: alone, control (probe "base"); repeat; concurrent-N;
// cache-off, cache-on, cache-warm; ubatch-1, ubatch-8192; spec-ngram (or spec-off); seed-fixed
// and seed-none repetitions 0..K-1. A condition a target cannot apply is written as a record with
// evidence {exercised: false, reason} and nothing is sent. docs/probes.md describes each probe.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "probes/runner.h"

namespace detaudit::probes::detail {

// One audited target and what the run made of it.
struct run_target {
  target* t = nullptr;
  std::string label;                      // A, B, ...
  capabilities caps;
  json target_json;                       // record.target
  std::unique_ptr<target> ubatch_1;       // batch probe variants (engine targets only)
  std::unique_ptr<target> ubatch_8192;
  int64_t ubatch = 0;                     // the target's own micro-batch (engine), 0 when unknown
  std::unique_ptr<target> spec_variant;   // speculation probe variant
  std::string spec_condition;             // "spec-ngram", or "spec-off" when the target drafts already
  std::string seed_reason;                // why seed-fixed cannot be judged on it ("" when it honours seeds)
  json seed_check = json::object();       // what the seed check saw (run.json)
  // run_options::stop_eos: the target's end-of-sequence text, added to every request's stop
  // strings ("" when the target does not say it, or the stops hold it already).
  std::string eos_stop;
};

// The state the conditions share while a run goes on. Not thread-safe: one item at a time.
struct run_state {
  const run_options* opt = nullptr;
  const std::vector<item>* items = nullptr;  // every item (fillers come from the whole list)
  std::string run_id;
  reports::record_writer* writer = nullptr;
  std::set<std::string> done;                // keys that already have a record without error
  std::set<std::string> sent;                // keys sent by this invocation (not sent twice, even after an error)
  // (item id, target label) -> (condition, repetition) -> text, for the quick divergence count.
  std::map<std::pair<std::string, std::string>, std::map<std::pair<std::string, int>, std::string>> texts;
  std::set<const target*> used;              // targets that have been sent a request (not cold)
  std::set<const target*> checked;           // targets whose first response in this invocation was checked
  std::map<std::string, double> latency_ms;  // key -> latency of a usable record (the queue test's scale)
  // (target label, fixed filler index) -> that filler's time alone, measured once (0: failed)
  std::map<std::pair<std::string, int>, double> filler_latency_ms;
  run_result* result = nullptr;
};

// Runs every condition of items[index] on each target. Throws unreachable_error (the run stops)
// and interrupted_error (Ctrl-C).
void item_run(run_state& st, std::vector<run_target>& targets, size_t index);

// The seed check of the seed probe on an HTTP target: items[index] at the seed temperature with
// seed S, S again and S+1. Sets rt.seed_reason ("" when the two S answers agree and S+1's differs)
// and rt.seed_check.
void target_seed_check(const run_options& opt, run_target& rt, const item& it);

// Notes a usable record (no error, exercised) for item_diverged() and marks its key done.
void record_note(run_state& st, const reports::record& r);

// Whether any condition of the item differs in text from its target's `alone` (seed-none aside;
// seed-fixed repetitions against repetition 0), from the texts st holds.
bool item_diverged(const run_state& st, const std::vector<run_target>& targets, const item& it);

// The request an item sends under the run's base settings (chat, with the system message when one
// is set, or raw).
gen_request request_for(const run_options& opt, const std::string& prompt);
// The same on one target: with its eos_stop among the stop strings.
gen_request request_for(const run_options& opt, const run_target& rt, const std::string& prompt);

// One item on one target while its conditions are sent (conditions.cpp).
struct item_ctx;

// The probes that send something, each with its sender; a probe of reports::probe_table() missing
// here sends nothing of its own (cross, lint).
struct probe_sender {
  std::string_view probe;
  void (*send)(const item_ctx& c, const gen_request& req);
};
const std::vector<probe_sender>& probe_senders();

}  // namespace detaudit::probes::detail
