// One audit's path from records to exit code, the same on run, report and compare:
//   flags checked (before anything is read or sent) -> records -> report -> the oracle's verdicts
//   (computed with --oracle, else the run folder's oracle.json) -> the report written -> gates
//   (--fail-on, --min-judged) -> the verdict line -> the exit code.
// Each cli/cmd_*.cpp binds its options to an audit_session and calls these steps; none of them
// restates one. bundle uses the oracle part alone (oracle_cli).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "reports/compare.h"

namespace detaudit::cli {

// --fail-on, --min-judged, --only-differences and --max-items, the same on run, report and compare.
struct gate_options {
  std::string fail_on;
  int64_t min_judged = 0;
  bool only_differences = false;
  int64_t max_items = -1;
  reports::trim_options trim() const { return {only_differences, max_items}; }
  reports::fail_policy parse() const { return reports::fail_policy_parse(fail_on, min_judged); }
};
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

// The session: the options run, report and compare share, and the steps in order.
struct audit_session {
  audit_session(std::string cmd_name, std::string fail_on_default) : cmd(std::move(cmd_name)), gates{std::move(fail_on_default)} {}
  std::string cmd;              // "run", "report", "compare": names the stderr lines
  std::string format = "text";  // bound by each command (run's --format, report's and compare's)
  std::string output;           // -o FILE; "" or "-": stdout
  gate_options gates;
  oracle_cli oracle;

  // --fail-on, --min-judged, --only-differences, --max-items, --oracle and --near-tie.
  void options_add(CLI::App* sub);
  // Throws input_error naming `flag` when `path` (a report file to write; "" and "-": stdout) is
  // in a folder that does not exist: found before a request is sent or the oracle runs.
  static void output_check(const std::string& path, const char* flag);
  // Checks the gate list, the oracle flags and -o's folder; with `preflight` (run) also loads the oracle's model
  // and sets up its device, so a bad model is found before the audit rather than after it.
  void check(bool preflight = false);
  // The report of a run folder or one .jsonl file, its divergences judged by the oracle when there
  // are figures (kept in `dir`/oracle.json when computed here and `dir` is a run folder).
  reports::report report_of(const std::string& dir);
  // compare: the oracle's figures of two runs A and B (rep.records: A's first, rep.records_a of
  // them), applied when both sides have some; a note when only one does.
  void judge_two_runs(reports::report& rep, const std::string& a, const std::string& b) const;
  // Renders the report in `format` to `output`, prints "detaudit CMD: GATE: REASON" lines (GATE:
  // "--fail-on drift", "--min-judged 5", "nothing judged") for each gate beyond it, then the verdict
  // line ("PASS: ...; exit 0") on stderr as the last line, and throws exit_with(EXIT_DIVERGED) when
  // a gate failed. `incomplete` (run: requests that failed after their retries) is printed before
  // the verdict, which then reads "INCOMPLETE: ...; exit 3", and exit_with(EXIT_UNREACHABLE) is
  // thrown. --only-differences and --max-items apply to what is rendered, never to the gates.
  void finish(const reports::report& rep, const std::string& incomplete = "") const;
};

}  // namespace detaudit::cli
