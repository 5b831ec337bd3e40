#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>

#include "audit_session.h"
#include "commands.h"
#include "reports/audit/utf8.h"
#include "reports/bundle.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

struct bundle_cmd_options {
  std::string dir;
  std::string item;
  std::string conditions;
  std::string out;
  bool no_tar = false;
  oracle_cli oracle;
};

void run_bundle(bundle_cmd_options& o) {
  reports::bundle_options b;
  b.item_id = o.item;
  b.out_dir = o.out;
  b.tarball = !o.no_tar;
  if (!o.conditions.empty()) {
    const size_t comma = o.conditions.find(',');
    if (comma == std::string::npos || o.conditions.find(',', comma + 1) != std::string::npos)
      throw input_error("--conditions: expected two conditions A,B (e.g. alone,concurrent-8), found '" + o.conditions + "'");
    b.cond_a = o.conditions.substr(0, comma);
    b.cond_b = o.conditions.substr(comma + 1);
  }
  oracle_check(o.oracle);
  std::optional<reports::oracle_data> d;
  std::error_code ec;
  if (!o.oracle.spec.empty()) {
    const std::vector<reports::record> all = reports::records_read(o.dir);
    // An item the run does not hold is said before the whole run is teacher-forced.
    if (std::none_of(all.begin(), all.end(), [&o](const reports::record& r) { return r.item_id == o.item; }))
      throw input_error("bundle: " + o.dir + ": no record has item_id '" + o.item + "'");
    d = oracle_load(all, o.dir, o.oracle, /*save=*/true, "bundle");
  } else if (std::filesystem::is_directory(o.dir, ec)) {
    d = oracle_load({}, o.dir, o.oracle, /*save=*/false, "bundle");
  }
  if (d) b.oracle = &*d;
  b.oracle_opt = o.oracle.apply();
  const reports::bundle_result r = reports::bundle_write(o.dir, b);
  using reports::escape_line;  // names from the run's records and the command line, onto one terminal line
  std::cout << "bundle " << escape_line(r.dir) << (r.tarball.empty() ? "" : " and " + escape_line(r.tarball)) << ": item "
            << escape_line(o.item) << ", " << escape_line(r.cond_a) << " vs " << escape_line(r.cond_b) << ": "
            << (r.error         ? std::string("a side has no usable response (see README.md)")
                : r.no_response ? std::string("a side was not exercised and has no response (see README.md)")
                : r.identical   ? std::string("identical")
                : r.token_index >= 0 ? "differ from token " + std::to_string(r.token_index)
                                     : std::string("differ (compared on the texts; see README.md)"))
            << "\n";
}

}  // namespace

void setup_bundle(CLI::App& app) {
  auto opt = std::make_shared<bundle_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "bundle",
      "Pack one item of a run folder into a bug-report bundle: a folder (and FOLDER.tar.gz) with an issue-ready\n"
      "README.md (the target, its build and settings, the condition pair, how often it diverged, the first differing\n"
      "token with 40 characters before and 60 after and the margins at that step, the logit hash step, the grades),\n"
      "the request bodies and both responses (secrets redacted), and repro.py (Python standard library) and repro.sh\n"
      "(curl) that replay the pair and print identical or different. For engine: targets the reproducers run\n"
      "'detaudit run' themselves. Works for any item, diverged or not. docs/bundles.md describes every file.");
  sub->add_option("dir", opt->dir, "Run folder written by 'detaudit run' (or one .jsonl file)")->required()->type_name("RUN_DIR");
  sub->add_option("--item", opt->item, "The item's id, as in the records and the report")->required()->type_name("ID");
  sub->add_option("--conditions", opt->conditions,
                  "The pair A,B, each [LABEL:]CONDITION[#REP] (e.g. alone,concurrent-8 or alone,seed-fixed#2). Default: "
                  "alone against the first condition where the item differs, then against another target's alone, else "
                  "alone against control, on the first target")
      ->type_name("A,B");
  sub->add_option("-o,--output", opt->out, "The bundle folder to write (replaced when it holds an earlier bundle)")
      ->required()->type_name("OUT");
  opt->oracle.from_file_ok = true;
  oracle_options_add(sub, opt->oracle);
  sub->add_flag("--no-tar", opt->no_tar, "Write the folder only, not OUT.tar.gz (default: both; the tarball is made with tar)");
  sub->footer(
      "Exit codes: 0 written, 2 bad input (no such item or condition, OUT is not a bundle folder, tar failed).\n"
      "Examples:\n"
      "  detaudit bundle runs/audit-1 --item 17 -o bug-17\n"
      "  detaudit bundle runs/audit-1 --item 17 --conditions alone,cache-warm -o bug-17-cache\n"
      "  python3 bug-17/repro.py --url http://127.0.0.1:8080 --tries 5\n"
      "  # with the exact engine's verdict on the divergence (near-tie or server error)\n"
      "  detaudit bundle runs/audit-1 --item 17 -o bug-17 --oracle engine:model.gguf");
  sub->callback([opt] { run_bundle(*opt); });
}

}  // namespace detaudit::cli
