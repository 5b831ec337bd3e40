// What run, report and compare do with a finished report: write it where asked, then apply
// --fail-on (one stderr line per reason) and end with the verdict line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "reports/compare.h"

namespace detaudit::cli {

// Renders `rep` in `format` to `output` ("" or "-": stdout), prints "detaudit CMD: GATE: REASON"
// lines (GATE: "--fail-on drift", "--min-judged 5", "nothing judged") for each gate beyond it, then the verdict line ("PASS: ...; exit 0") on
// stderr as the last line, and throws exit_with(EXIT_DIVERGED) when a gate failed. `incomplete`
// (run: requests that failed after their retries) is printed before the verdict, which then reads
// "INCOMPLETE: ...; exit 3", and exit_with(EXIT_UNREACHABLE) is thrown.
// `trim` (--only-differences, --max-items) applies to what is rendered, never to the gates.
void report_finish(const reports::report& rep, const std::string& format, const std::string& output,
                   const reports::fail_policy& policy, const std::string& cmd, const std::string& incomplete = "",
                   const reports::trim_options& trim = {});

// --fail-on, --min-judged, --only-differences and --max-items, the same on run, report and compare.
struct gate_options {
  std::string fail_on;
  int64_t min_judged = 0;
  bool only_differences = false;
  int64_t max_items = -1;
  reports::trim_options trim() const { return {only_differences, max_items}; }
  reports::fail_policy parse() const { return reports::fail_policy_parse(fail_on, min_judged); }
};
void gate_options_add(CLI::App* sub, gate_options& g);
// --oracle SPEC and --near-tie NATS, the same on run, report and compare.
struct oracle_cli {
  std::string spec;
  std::string near_tie_text;   // as given
  double near_tie = -1;        // < 0: measured (set by oracle_check)
  bool from_file_ok = false;   // report: a run folder's oracle.json may take --near-tie without --oracle
  CLI::Option* spec_option = nullptr;
  reports::oracle_apply_options apply() const;
};
void oracle_options_add(CLI::App* sub, oracle_cli& o);
// Checks the flags before anything is read or sent (a bad spec or --near-tie, a missing model file).
void oracle_check(oracle_cli& o);
// run: loads the oracle's model and sets up its device before any request is sent, so that a bad
// model file is found before the audit rather than after it.
void oracle_preflight(const oracle_cli& o);
// The oracle's figures for `recs`: computed when --oracle is given (and kept in DIR/oracle.json
// when `save` and DIR is a folder), else DIR/oracle.json when there is one, else nothing.
std::optional<reports::oracle_data> oracle_load(const std::vector<reports::record>& recs, const std::string& dir,
                                                const oracle_cli& o, bool save, const std::string& cmd);

// The exit-code paragraph every report-writing subcommand's --help ends with.
extern const char* const gate_exit_codes;

}  // namespace detaudit::cli
