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

#include "reports/audit/record.h"

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

// The concurrency judge's timing test. A server that answers one request at a time spends at least
// a request's time alone on it, and no other request of the burst can end meanwhile. So the burst
// proves that requests were processed together when some request j, whose time alone L_j is known,
// has another request end within QUEUE_SERVICE_SHARE x L_j before j's own end (a tie counts).
// end_ms holds the N requests' end times (ms after their common release; the item's first),
// single_ms each one's time alone (<= 0 or NaN: unknown; the item's is the smaller of its alone and
// control latencies, the fillers' theirs). TIMING_OVERLAP: proven; TIMING_QUEUE: not proven, with
// every request's time alone known (the burst fits a queue); TIMING_UNKNOWN: not proven, some
// request's time alone unknown. Gap widths decide nothing: a slow item among fast fillers on a
// queueing server ends long after them, as it would when batched.
enum burst_timing { TIMING_OVERLAP, TIMING_QUEUE, TIMING_UNKNOWN };
// Half: a request served from the prompt cache in the burst can take less than its time alone,
// and its time alone is the quicker of two sends (control is often served from the cache too).
inline constexpr double QUEUE_SERVICE_SHARE = 0.5;
burst_timing concurrency_timing(const std::vector<double>& end_ms, const std::vector<double>& single_ms);

// Fills each concurrent record's evidence "filler_single_ms" (aligned with "filler_items": the
// fillers that are items of the run) from those items' alone and control latencies on the same
// target, where the runner did not know them yet. compare_run calls it before judging.
void evidence_fill_filler_latency(std::vector<record>& records);

}  // namespace detaudit::reports
