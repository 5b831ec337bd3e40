// Bug-report bundles: one item of a run folder under one pair of conditions, packed so that it can
// be attached to an issue and replayed by whoever reads it.
//
// Goals: an issue-ready README.md (the target, its build and settings, the condition pair, how
// often the item diverged, the first differing token with its context and margins, the grades);
// the exact request bodies and both responses; reproducers that need nothing but Python's standard
// library (repro.py) or curl (repro.sh), and for `engine:` targets `detaudit` itself; no secret.
// Non-goals: replaying a whole run (that is `detaudit run`), or proving that a divergence recurs:
// divergence that comes from batch composition and timing may or may not come back on a replay.
//
// Layout of a bundle folder OUT (and OUT.tar.gz holding the folder under its own name):
//
//   OUT/README.md           the issue text
//   OUT/bundle.json         what the reproducers read: condition pair, URL and endpoint, N, ...
//   OUT/request-A.json      side A's request body as sent (secrets redacted)
//   OUT/request-B.json      side B's request body
//   OUT/response-A.json     side A's record (docs/records.md)
//   OUT/response-B.json     side B's record
//   OUT/fillers/filler-K.json   concurrency only: the N-1 bodies sent beside the item (K = 1..N-1)
//   OUT/item.jsonl          engine targets: the prompts file the reproducer gives `detaudit run`
//   OUT/target.json         the target's entry in run.json (its capabilities and settings)
//   OUT/repro.py, OUT/repro.sh  replay the pair; print "identical" or "different ..."; exit 0 / 1
#pragma once

#include <string>

#include "reports/oracle.h"

namespace detaudit::reports {

struct bundle_options {
  std::string item_id;   // required: the item's id as in the records
  // The two conditions, each "condition", "condition#REP" or "LABEL:condition[#REP]" (label: the
  // target's, default the first target of the run). Both empty: alone against the first condition
  // where the item differs (report order), else alone against control.
  std::string cond_a, cond_b;
  std::string out_dir;   // the bundle folder; created, and replaced when it holds an older bundle
  bool tarball = true;   // also write OUT.tar.gz with the system `tar`
  // The exact engine's figures for the run (--oracle, or the run folder's oracle.json), when
  // there are any: the README and bundle.json then carry its verdict on the divergence.
  const oracle_data* oracle = nullptr;
  oracle_apply_options oracle_opt;  // --near-tie
};

struct bundle_result {
  std::string dir;        // the bundle folder
  std::string tarball;    // OUT.tar.gz, or "" when not written
  std::string cond_a, cond_b;  // the pair chosen, as named in the README
  bool identical = true;  // the two recorded responses agree token for token
  bool error = false;     // a side has no usable response (its record carries an error)
  bool no_response = false;  // a side's condition was not exercised and it holds no response
  int64_t token_index = -1;
};

// Writes the bundle of `run_dir` (a run folder or one .jsonl file) for `o.item_id`.
// Throws input_error when the item or a condition has no record (the message lists what exists),
// when OUT exists and is not an earlier bundle (it holds no bundle.json), or when a file cannot be
// written or `tar` fails.
bundle_result bundle_write(const std::string& run_dir, const bundle_options& o);

}  // namespace detaudit::reports
