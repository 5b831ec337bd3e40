#include <iostream>
#include <memory>

#include "app.h"
#include "commands.h"
#include "report_out.h"
#include "reports/compare.h"
#include "reports/output.h"

namespace detaudit::cli {
namespace {

struct report_cmd_options {
  std::string dir;
  std::string format = "text";
  std::string output;
  gate_options gates{"none"};
  oracle_cli oracle;
};

void run_report(report_cmd_options& o) {
  const reports::fail_policy policy = o.gates.parse();  // a bad spec is reported before anything is read
  oracle_check(o.oracle);
  reports::read_stats stats;
  std::vector<reports::record> records = reports::records_read(o.dir, &stats);
  if (stats.truncated)
    std::cerr << "detaudit report: " << o.dir << ": skipped " << stats.truncated
              << " last line(s) cut short (the run was interrupted while writing)\n";
  reports::report rep = reports::compare_run(std::move(records), reports::run_manifest_read(o.dir));
  if (const std::optional<reports::oracle_data> d = oracle_load(rep.records, o.dir, o.oracle, /*save=*/true, "report"))
    reports::oracle_apply(rep, *d, o.oracle.apply());
  report_finish(rep, o.format, o.output, policy, "report", reports::report_incomplete(rep), o.gates.trim());
}

}  // namespace

void setup_report(CLI::App& app) {
  auto opt = std::make_shared<report_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "report",
      "Report a run folder written by 'detaudit run': per probe, the alone-vs-alone control pair (run-to-run noise)\n"
      "and each condition against alone; per item whether the responses are identical, the first differing token and\n"
      "byte, the two tokens, 40 characters before and 60 after, the top-2 log-prob margins, the first differing logit\n"
      "hash, graded results and flips (right->wrong, wrong->right). Conditions that did not take effect are counted\n"
      "as not exercised, never as identical.");
  sub->add_option("dir", opt->dir, "Run folder (its *.jsonl records and run.json), or one .jsonl file")
      ->required()->type_name("DIR");
  sub->add_option("--format", opt->format,
                  "text: a table for the terminal; json: every row, for scripts (schema in docs/records.md); md: a "
                  "summary for a pull request or issue; junit: JUnit XML for CI test reports; html: one self-contained "
                  "page with plots, a sortable item table and each divergence highlighted (docs/reports.md)")
      ->check(CLI::IsMember({"text", "json", "md", "junit", "html"}))->capture_default_str()->type_name("FORMAT");
  sub->add_option("-o,--output", opt->output, "Write the report to FILE instead of stdout")->type_name("FILE");
  gate_options_add(sub, opt->gates);
  opt->oracle.from_file_ok = true;
  oracle_options_add(sub, opt->oracle);
  sub->footer(
      std::string(gate_exit_codes) +
      "Examples:\n"
      "  detaudit report runs/audit-1\n"
      "  detaudit report runs/audit-1 --format md -o report.md\n"
      "  detaudit report runs/audit-1 --format html -o report.html\n"
      "  detaudit report runs/audit-1 --format junit -o detaudit.xml --fail-on any\n"
      "  detaudit report runs/audit-1 --format json | jq '.pairs[] | {probe, cond_b, differ, items}'\n"
      "  detaudit report runs/quant --fail-on score-drop:2\n"
      "  # judge each divergence of a llama-server run with the exact engine (kept in runs/audit-1/oracle.json)\n"
      "  detaudit report runs/audit-1 --oracle engine:model.gguf --fail-on server-error");
  sub->callback([opt] { run_report(*opt); });
}

}  // namespace detaudit::cli
