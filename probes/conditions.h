// The conditions each probe runs for one item, and the records they write (used by runner.cpp).
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
#include <vector>

#include "probes/runner.h"

namespace detaudit::probes::detail {

// The probes in the order their conditions run.
const std::vector<std::string>& probe_names();

// One audited target and what the run made of it.
struct run_target {
  target* t = nullptr;
  std::string label;                      // A, B, ...
  capabilities caps;
  json target_json;                       // record.target
  std::unique_ptr<target> ubatch_1;       // batch probe variants (engine targets only)
  std::unique_ptr<target> ubatch_8192;
  std::unique_ptr<target> spec_variant;   // speculation probe variant
  std::string spec_condition;             // "spec-ngram", or "spec-off" when the target drafts already
};

// The state the conditions share while a run goes on. Not thread-safe: one item at a time.
struct run_state {
  const run_options* opt = nullptr;
  const std::vector<item>* items = nullptr;  // every item (fillers come from the whole list)
  std::string run_id;
  reports::record_writer* writer = nullptr;
  std::set<std::string> done;                // keys that already have a record without error
  // (item id, target label) -> (condition, repetition) -> text, for the quick divergence count.
  std::map<std::pair<std::string, std::string>, std::map<std::pair<std::string, int>, std::string>> texts;
  std::set<const target*> used;              // targets that have been sent a request (not cold)
  run_result* result = nullptr;
};

// Runs every condition of items[index] on each target. Throws unreachable_error (the run stops).
void item_run(run_state& st, std::vector<run_target>& targets, size_t index);

// Notes a usable record (no error, exercised) for item_diverged() and marks its key done.
void record_note(run_state& st, const reports::record& r);

// Whether any condition of the item differs in text from its target's `alone` (seed-none aside;
// seed-fixed repetitions against repetition 0), from the texts st holds.
bool item_diverged(const run_state& st, const std::vector<run_target>& targets, const item& it);

// The request an item sends under the run's base settings (chat or raw).
gen_request request_for(const run_options& opt, const std::string& prompt);

}  // namespace detaudit::probes::detail
