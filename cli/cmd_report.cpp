#include <iostream>
#include <memory>

#include "app.h"
#include "audit_session.h"
#include "commands.h"
#include "reports/compare.h"
#include "reports/output.h"

namespace detaudit::cli {
namespace {

struct report_cmd_options {
  std::string dir;
  audit_session audit{"report", "none"};
};

void run_report(report_cmd_options& o) {
  o.audit.check();
  const reports::report rep = o.audit.report_of(o.dir);
  o.audit.finish(rep, reports::report_incomplete(rep));
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
  sub->add_option("--format", opt->audit.format,
                  "text: a table for the terminal; json: every row, for scripts (schema in docs/records.md); md: a "
                  "summary for a pull request or issue; junit: JUnit XML for CI test reports; html: one self-contained "
                  "page with plots, a sortable item table and each divergence highlighted (docs/reports.md)")
      ->check(CLI::IsMember({"text", "json", "md", "junit", "html"}))->capture_default_str()->type_name("FORMAT");
  sub->add_option("-o,--output", opt->audit.output, "Write the report to FILE instead of stdout")->type_name("FILE");
  opt->audit.oracle.from_file_ok = true;
  opt->audit.options_add(sub);
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
