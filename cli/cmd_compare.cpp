#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "app.h"
#include "audit_session.h"
#include "commands.h"
#include "reports/audit/file_write.h"
#include "reports/audit/kld.h"
#include "reports/compare.h"
#include "reports/lmeval.h"
#include "reports/output.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

struct compare_cmd_options {
  std::string a, b;
  audit_session audit{"compare", "none"};
  bool kld = false;
  std::vector<std::string> pairs;
  bool ignore_settings = false;
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

void write_text(const std::string& text, const std::string& path) {
  if (path.empty() || path == "-") {
    std::cout << text;
    return;
  }
  reports::text_file_write(path, text, "-o");
}

void run_kld(const compare_cmd_options& o) {
  if (o.audit.format != "text" && o.audit.format != "json")
    throw input_error("--kld: --format: expected text or json, found '" + o.audit.format + "'");
  if (o.audit.gates.fail_on != "none" || o.audit.gates.min_judged != 0)
    throw input_error("--kld: --fail-on and --min-judged apply to compares of runs and sample files, not to --kld (found '" +
                      o.audit.gates.fail_on + "')");
  write_text(reports::kld_render(reports::kld_compare_files(o.a, o.b), o.audit.format), o.audit.output);
}

// Two lm-eval sample files, or two runs.
reports::report compare_sides(const compare_cmd_options& o) {
  const bool lm_a = reports::lmeval_is_samples_file(o.a), lm_b = reports::lmeval_is_samples_file(o.b);
  if (lm_a != lm_b)
    throw input_error("compare: " + (lm_a ? o.a : o.b) + " is an lm-eval samples file but " + (lm_a ? o.b : o.a) +
                      " is not (expected two sample files or two runs)");
  if (lm_a) {
    if (!o.pairs.empty() || o.ignore_settings)
      throw input_error("compare: --pair and --ignore-settings apply to runs, not to lm-eval sample files");
    return reports::lmeval_compare(reports::lmeval_read(o.a), reports::lmeval_read(o.b));
  }
  reports::compare_options co;
  co.ignore_settings = o.ignore_settings;
  for (const std::string& p : o.pairs) {
    const size_t eq = p.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == p.size())
      throw input_error("--pair: expected LABEL_A=LABEL_B (a target label of run A, one of run B), found '" + p + "'");
    co.pairs.emplace_back(p.substr(0, eq), p.substr(eq + 1));
  }
  return reports::compare_runs(read_side(o.a), read_side(o.b), side_manifest(o.a)["run"], side_manifest(o.b)["run"], co);
}

void run_compare(compare_cmd_options& o) {
  const bool oracle_flags = !o.audit.oracle.spec.empty() || !o.audit.oracle.near_tie_text.empty();
  if (o.kld) {
    if (oracle_flags) throw input_error("--kld: --oracle and --near-tie apply to compares of two runs, not to score files");
    return run_kld(o);
  }
  if (oracle_flags && (reports::lmeval_is_samples_file(o.a) || reports::lmeval_is_samples_file(o.b)))
    throw input_error("--oracle and --near-tie apply to two runs, not to lm-eval sample files");
  o.audit.check();
  reports::report rep = compare_sides(o);
  rep.manifest = {{"a", side_manifest(o.a)}, {"b", side_manifest(o.b)}};
  if (rep.records_a > 0 && rep.records_a < rep.records.size()) o.audit.judge_two_runs(rep, o.a, o.b);  // two runs
  else if (oracle_flags) rep.notes.push_back("oracle: one of the runs holds no records; nothing was judged");
  o.audit.finish(rep);
}

}  // namespace

void setup_compare(CLI::App& app) {
  auto opt = std::make_shared<compare_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "compare",
      "Compare two runs item by item: two run folders or two .jsonl record files (e.g. the same prompts against two\n"
      "engines, two quantizations, or before and after an upgrade). Targets are paired label by label (--pair);\n"
      "responses are matched by item_id, condition and repetition (by item_id and repetition alone when each side\n"
      "holds a single condition). How the two runs differ (targets, request settings, prompt set) is listed first.\n"
      "An item whose prompt differs, or whose run's request settings differ (unless --ignore-settings), is 'not\n"
      "comparable', never 'differs'. Per item: status, first differing token and byte, both tokens, context,\n"
      "margins, logit hash step, grades and flips.\n"
      "Two lm-evaluation-harness sample files (lm_eval --log_samples: samples_<task>_<date>.jsonl, recognised by\n"
      "their first line) are matched by doc_id and filter, each filter a pair; correctness is each line's metric\n"
      "(e.g. exact_match 1.0), and a doc_hash that differs marks the doc as a different document, not compared.\n"
      "With --kld, A and B are 'detaudit score --json' outputs over the same tokens, compared by distribution.");
  sub->add_option("a", opt->a, "Run A: a run folder, a .jsonl file, an lm-eval samples file, or with --kld a score file")
      ->required()->type_name("A");
  sub->add_option("b", opt->b, "Run B: the same kind as A")->required()->type_name("B");
  sub->add_option("--format", opt->audit.format,
                  "text: a table for the terminal; json: every row, for scripts (schema in docs/records.md); md: a "
                  "summary for a pull request or issue; junit: JUnit XML for CI test reports; html: one self-contained "
                  "page with plots, a sortable item table and each divergence highlighted (docs/reports.md)")
      ->check(CLI::IsMember({"text", "json", "md", "junit", "html"}))->capture_default_str()->type_name("FORMAT");
  sub->add_option("-o,--output", opt->audit.output, "Write the report to FILE instead of stdout")->type_name("FILE");
  sub->add_option("--pair", opt->pairs,
                  "Which targets to set side by side when a run has several: LABEL_A=LABEL_B (repeatable; default: the "
                  "only target of each run, else the labels both runs have)")
      ->type_name("A=B");
  opt->audit.oracle.from_file_ok = true;
  opt->audit.options_add(sub);
  sub->add_flag("--ignore-settings", opt->ignore_settings,
                "Compare items even when the runs' request settings differ (n_predict, temperature, chat or raw, "
                "system prompt, stop strings, ...); the differences are listed at the top either way");
  sub->add_flag("--kld", opt->kld,
                "A and B are 'detaudit score --json' outputs over the same tokens: report, per item and overall, "
                "what llama-perplexity's KL-divergence mode prints (A its base, B its Q): PPL of each side, their "
                "ratio and difference with uncertainties, the KL divergence of B from A (mean, percentiles from "
                "99.9% to 0.1%, max, min), dp = p_B - p_A of the scored token (mean, percentiles, RMS) and how "
                "often the top token is the same; KLD from the top-k log-probs (the approximation is in "
                "docs/lm-eval.md); --format text or json");
  sub->footer(
      "Exit codes: 0 within --fail-on, 1 beyond it (each reason on stderr), 2 bad input or nothing comparable, 5\n"
      "nothing judged. The last line on stderr is the verdict: 'PASS: ...; exit 0', 'FAIL: ...; exit 1' or\n"
      "'UNJUDGED: ...; exit 5'.\n"
      "Examples:\n"
      "  detaudit compare runs/q8 runs/q4\n"
      "  detaudit compare runs/q8 runs/q4 --fail-on score-drop:1\n"
      "  detaudit compare before.jsonl after.jsonl --fail-on any --format junit -o compare.xml\n"
      "  detaudit compare runs/v1 runs/v2 --format md -o diff.md\n"
      "  detaudit compare samples_gsm8k_q8.jsonl samples_gsm8k_q4.jsonl --fail-on flips\n"
      "  detaudit compare --kld q8.score.json q4.score.json --format json");
  sub->callback([opt] { run_compare(*opt); });
}

}  // namespace detaudit::cli
