#include <filesystem>
#include <iostream>
#include <memory>

#include "app.h"
#include "commands.h"
#include "reports/compare.h"
#include "reports/output.h"

namespace detaudit::cli {
namespace {

struct compare_cmd_options {
  std::string a, b;
  std::string format = "text";
  std::string output;
  std::string fail_on = "none";
};

std::vector<reports::record> read_side(const std::string& path) {
  reports::read_stats stats;
  std::vector<reports::record> records = reports::records_read(path, &stats);
  if (stats.truncated)
    std::cerr << "detaudit compare: " << path << ": skipped " << stats.truncated
              << " last line(s) cut short (the run was interrupted while writing)\n";
  return records;
}

reports::json side_manifest(const std::string& path) {
  std::error_code ec;
  const bool dir = std::filesystem::is_directory(path, ec);
  return {{"path", path}, {"run", dir ? reports::run_manifest_read(path) : reports::json::object()}};
}

void run_compare(const compare_cmd_options& o) {
  const reports::fail_policy policy = reports::fail_policy_parse(o.fail_on);
  std::vector<reports::record> a = read_side(o.a);
  std::vector<reports::record> b = read_side(o.b);
  reports::report rep = reports::compare_runs(std::move(a), std::move(b));
  rep.manifest = {{"a", side_manifest(o.a)}, {"b", side_manifest(o.b)}};
  reports::report_output(rep, o.format, o.output);
  const std::vector<std::string> reasons = reports::fail_reasons(rep, policy);
  for (const std::string& r : reasons) std::cerr << "detaudit compare: --fail-on " << o.fail_on << ": " << r << "\n";
  if (!reasons.empty()) throw exit_with(EXIT_DIVERGED);
}

}  // namespace

void setup_compare(CLI::App& app) {
  auto opt = std::make_shared<compare_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "compare",
      "Compare two runs item by item: two run folders or two .jsonl record files (e.g. the same prompts against two\n"
      "engines, two quantizations, or before and after an upgrade). Responses are matched by item_id, condition and\n"
      "repetition; when each side holds a single condition, by item_id (and repetition) alone. Per item: identical\n"
      "or not, first differing token and byte, both tokens, context, margins, logit hash step, grades and flips.");
  sub->add_option("a", opt->a, "Run A: a run folder or a .jsonl file")->required()->type_name("A");
  sub->add_option("b", opt->b, "Run B: a run folder or a .jsonl file")->required()->type_name("B");
  sub->add_option("--format", opt->format,
                  "text: a table for the terminal; json: every row, for scripts (schema in docs/records.md); md: a "
                  "summary for a pull request or issue; junit: JUnit XML for CI test reports")
      ->check(CLI::IsMember({"text", "json", "md", "junit"}))->capture_default_str()->type_name("FORMAT");
  sub->add_option("-o,--output", opt->output, "Write the report to FILE instead of stdout")->type_name("FILE");
  sub->add_option("--fail-on", opt->fail_on,
                  "Exit 1 when: any (some item differs), flips (an answer went right->wrong from A to B), "
                  "score-drop:X (B scores more than X percentage points below A), none (never)")
      ->capture_default_str()->type_name("SPEC");
  sub->footer(
      "Exit codes: 0 within --fail-on, 1 beyond it (the reasons go to stderr), 2 bad input.\n"
      "Examples:\n"
      "  detaudit compare runs/q8 runs/q4\n"
      "  detaudit compare runs/q8 runs/q4 --fail-on score-drop:1\n"
      "  detaudit compare before.jsonl after.jsonl --fail-on any --format junit -o compare.xml\n"
      "  detaudit compare runs/v1 runs/v2 --format md -o diff.md");
  sub->callback([opt] { run_compare(*opt); });
}

}  // namespace detaudit::cli
