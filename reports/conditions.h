// The probes and their conditions: one table each, read by the runner (what to send), the reports
// (how to pair and judge), the bundle and --help. Adding a probe or a condition is a row here and
// its functions (a judge here, a sender in probes/conditions.cpp).
//
// A condition counts only on positive evidence that it happened: a judge returns "" when the
// record's evidence shows it, else the reason it was not exercised. docs/probes.md, "Evidence",
// is this table in words.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "reports/record.h"

namespace detaudit::reports {

enum pairing {
  PAIR_BASE,   // the reference every other condition of its target is paired with (alone)
  PAIR_ALONE,  // paired with alone, item by item
  PAIR_REP0,   // repetitions k >= 1 paired with repetition 0 (must agree)
  PAIR_NONE,   // not paired: answers may differ (the notes count distinct answers)
};

struct condition_def {
  std::string_view name;      // "alone", or a prefix such as "concurrent-" when `numbered`
  bool numbered;              // the name ends in a number: concurrent-8, ubatch-8192
  std::string_view probe;     // the probe whose pairs it belongs to ("control" for the control pair)
  std::string_view sends;     // what is sent
  std::string_view evidence;  // what shows it happened
  pairing pairs;
  // "" when `r` (under this condition) shows the condition happened, judged against `base` (its
  // alone, or repetition 0); else why not. nullptr: nothing to show (always exercised).
  std::string (*judge)(const record& base, const record& r);
};

struct probe_def {
  std::string_view name;
  std::string_view help;  // one line, for --help and docs
};

// Every condition, in the order a run sends them for one item.
const std::vector<condition_def>& condition_table();
// Every probe a user can ask for, in report order.
const std::vector<probe_def>& probe_table();

// The row of a condition name ("concurrent-8" finds "concurrent-"); nullptr when unknown.
const condition_def* condition_find(const std::string& condition);
// Whether a probe name is in probe_table().
bool probe_known(const std::string& probe);
// "repeat, concurrency, cache, ..." for messages.
std::string probe_names_text();
// Report order of a probe: control first, then probe_table() order, unknown names last.
int probe_rank(const std::string& probe);

// Why the pair (base, r) is not exercised, or "": `exercised: false` on either record (with its
// reason), else the judge of r's condition.
std::string condition_not_exercised(const record& base, const record& r);

// The concurrency judge's queue test, exposed for tests: end_ms holds the N requests' end times
// (ms after their common release, the item's first), alone_ms the item's latency when sent alone.
// True when they finished one after another like single requests: the item's own gap (from the
// end before it, or from the release) is at least 0.6 x alone_ms, and at least half the gaps
// between consecutive ends are at least 0.5 x alone_ms.
bool concurrency_looks_queued(const std::vector<double>& end_ms, double alone_ms);

}  // namespace detaudit::reports
