#include "audit_session.h"

#include <cmath>
#include <filesystem>
#include <iostream>

#include "app.h"
#include "probes/oracle.h"
#include "probes/runner.h"
#include "reports/output.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

void report_finish(const reports::report& rep, const std::string& format, const std::string& output,
                   const reports::fail_policy& policy, const std::string& cmd, const std::string& incomplete,
                   const reports::trim_options& trim) {
  // JUnit lists every item: a CI's test view counts them.
  if ((trim.only_differences || trim.max_items >= 0) && format != "junit")
    reports::report_output(reports::report_trim(rep, trim), format, output);
  else reports::report_output(rep, format, output);
  std::cout.flush();
  std::vector<std::string> reasons;
  const std::vector<reports::fail_finding> findings = reports::fail_findings(rep, policy);
  for (const reports::fail_finding& f : findings) {
    std::cerr << "detaudit " << cmd << ": " << f.gate << ": " << f.text << "\n";
    reasons.push_back(f.text);
  }
  if (!incomplete.empty()) std::cerr << "detaudit " << cmd << ": " << incomplete << "\n";
  const int code = reports::verdict_exit_code(findings, !incomplete.empty());
  std::cerr << reports::verdict_line(rep, policy, reasons, code) << std::endl;
  if (code != 0) throw exit_with(code);
}

void gate_options_add(CLI::App* sub, gate_options& g) {
  sub->add_option("--fail-on", g.fail_on,
                  "Exit 1 on any of a comma-separated list: any (a pair differs on some item, the control pair "
                  "included), drift (same tokens, moved log-probs or logits), flips (an answer went right->wrong), "
                  "significant (a divergence rate above the control's, Fisher p < 0.05, or lopsided flips, McNemar "
                  "p < 0.05), errors (a response failed), not-exercised (a condition did not take effect), "
                  "server-error (--oracle: the server picked a token exact math puts below its best by more than the "
                  "tie bound, a divergence could not be judged, the server is further from exact under a condition than "
                  "alone, or there are no oracle figures), score-drop:X (a score fell by more than X percentage points), none (no gate of the list, not even "
                  "when nothing was judged; an explicit --min-judged still applies)")
      ->capture_default_str()->type_name("LIST");
  sub->add_option("--min-judged", g.min_judged,
                  "Exit 1 when a pair has fewer than N judged items (neither failed, not exercised nor not comparable); "
                  "nothing judged at all always exits 1 unless --fail-on none")
      ->capture_default_str()->type_name("N");
  sub->add_flag("--only-differences", g.only_differences,
                "List only the rows that differ, drifted or failed (json, html and md list every row otherwise); the "
                "counts still cover every row; JUnit output always lists every item");
  sub->add_option("--max-items", g.max_items, "List at most N differing, drifted or failed rows per pair (default: all)")
      ->check(CLI::NonNegativeNumber)->type_name("N");
}

}  // namespace

void oracle_options_add(CLI::App* sub, oracle_cli& o) {
  o.spec_option = sub->add_option("--oracle", o.spec,
                                  "Judge each divergence with the exact engine: engine:MODEL.gguf[?threads=N&ubatch=N&"
                                  "backend=cpu|vulkan|cuda&device=N&chat_template=NAME], the file the server serves. Every "
                                  "response is teacher-forced through it (one prefill per prompt, shared prefixes once); each "
                                  "differing row gets a class (near-tie, server-error, both-off) and the report the server's "
                                  "distance from exact math (fidelity); the figures are kept in the run folder's oracle.json. "
                                  "docs/oracle.md")
                      ->type_name("SPEC");
  sub->add_option("--near-tie", o.near_tie_text,
                  "--oracle: the tie bound in nats for every row (default: each side's target's max |server - exact| "
                  "log-prob alone and in control, summed, at least 0.05; 0.05 per side that reports no log-probs)")
      ->type_name("NATS");
}

void oracle_check(oracle_cli& o) {
  if (o.spec_option && o.spec_option->count() > 0 && o.spec.empty())
    throw input_error("--oracle: expected engine:MODEL.gguf, found nothing");
  if (!o.near_tie_text.empty()) {
    // Decimal only: stod would also take hex ("0x10"), "nan" and "inf".
    const std::string& t = o.near_tie_text;
    size_t used = 0;
    double x = -1;
    const bool decimal = t.find_first_not_of("0123456789.eE+-") == std::string::npos;
    try {
      x = std::stod(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (!decimal || used != t.size() || !std::isfinite(x) || x < 0)
      throw input_error("--near-tie: expected a number of nats >= 0 (e.g. 0.05), found '" + t + "'");
    o.near_tie = x;
  }
  if (o.near_tie >= 0 && o.spec.empty() && !o.from_file_ok)
    throw input_error("--near-tie applies with --oracle engine:MODEL.gguf (or a run folder that holds oracle.json)");
  if (!o.spec.empty()) probes::oracle_spec_check(o.spec);
}

void oracle_preflight(const oracle_cli& o) {
  if (!o.spec.empty()) probes::oracle_preflight(o.spec);
}

std::optional<reports::oracle_data> oracle_load(const std::vector<reports::record>& recs, const std::string& dir,
                                                const oracle_cli& o, bool save, const std::string& cmd) {
  std::optional<reports::oracle_data> d;
  std::error_code ec;
  const bool folder = !dir.empty() && std::filesystem::is_directory(dir, ec);
  const std::string prefix = "detaudit " + cmd + ": ";
  if (!o.spec.empty()) {
    probes::oracle_options po;
    po.spec = o.spec;
    po.log = [&prefix](const std::string& m) { std::cerr << prefix << m << "\n"; };
    d = probes::oracle_evaluate(recs, po);
    std::cerr << prefix << "oracle: " << d->cost.value("responses", int64_t{0}) << " response(s), "
              << d->cost.value("tokens_scored", int64_t{0}) << " token(s) scored, "
              << d->cost.value("tokens_evaluated", int64_t{0}) << " evaluated, in " << d->cost.value("seconds", 0.0) << " s\n";
    if (!save) return d;
    if (!folder) {
      std::cerr << prefix << "the oracle's figures are not kept: " << dir << " is not a run folder\n";
    } else if (probes::run_folder_busy(dir) && cmd != "run") {
      std::cerr << prefix << "the oracle's figures are not kept: a run is still writing " << dir << "\n";
    } else {
      try {
        reports::oracle_write(dir, *d);
      } catch (const input_error& e) {
        std::cerr << prefix << "the oracle's figures are not kept: " << message_line(e.what()) << "\n";
      }
    }
  } else if (folder && reports::oracle_present(dir)) {
    try {
      d = reports::oracle_read(dir);
    } catch (const input_error& e) {
      // The oracle's figures are extra: a file that cannot be read must not hide the report.
      if (o.near_tie >= 0) throw;
      std::cerr << prefix << "reporting without the oracle: " << message_line(e.what())
                << " (give --oracle engine:MODEL.gguf to compute the figures again)\n";
    }
  } else if (o.near_tie >= 0) {
    throw input_error("--near-tie: " + dir + " holds no oracle.json; give --oracle engine:MODEL.gguf");
  }
  return d;
}

reports::oracle_apply_options oracle_cli::apply() const {
  reports::oracle_apply_options a;
  if (near_tie >= 0) a.near_tie = near_tie;
  return a;
}

const char* const gate_exit_codes =
    "Exit codes: 0 within --fail-on, 1 beyond it (each reason on stderr), 2 bad input, 5 unjudged: nothing was\n"
    "judged, or a probe the run asked for judged no item (every row not exercised or failed). The last line on\n"
    "stderr is the verdict: 'PASS: ...; exit 0', 'FAIL: ...; exit 1' or 'UNJUDGED: ...; exit 5'.\n";

void audit_session::options_add(CLI::App* sub) {
  gate_options_add(sub, gates);
  oracle_options_add(sub, oracle);
}

void audit_session::output_check(const std::string& path, const char* flag) {
  if (path.empty() || path == "-") return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    throw input_error(std::string(flag) + ": cannot write '" + path + "': the folder '" + parent.string() +
                      "' does not exist");
}

void audit_session::check(bool preflight) {
  gates.parse();  // a bad gate list is reported before anything is read or sent
  oracle_check(oracle);
  output_check(output, "-o");
  if (preflight) oracle_preflight(oracle);
}

reports::report audit_session::report_of(const std::string& dir) {
  reports::read_stats stats;
  std::vector<reports::record> records = reports::records_read(dir, &stats);
  if (stats.truncated)
    std::cerr << "detaudit " << cmd << ": " << dir << ": skipped " << stats.truncated
              << " last line(s) cut short (the run was interrupted while writing)\n";
  reports::report rep = reports::compare_run(std::move(records), reports::run_manifest_read(dir));
  if (const std::optional<reports::oracle_data> d = oracle_load(rep.records, dir, oracle, /*save=*/true, cmd))
    reports::oracle_apply(rep, *d, oracle.apply());
  return rep;
}

void audit_session::judge_two_runs(reports::report& rep, const std::string& a, const std::string& b) const {
  const auto split = rep.records.begin() + static_cast<std::ptrdiff_t>(rep.records_a);
  const std::vector<reports::record> ra(rep.records.begin(), split), rb(split, rep.records.end());
  const std::optional<reports::oracle_data> da = oracle_load(ra, a, oracle, /*save=*/false, cmd);
  const std::optional<reports::oracle_data> db = oracle_load(rb, b, oracle, /*save=*/false, cmd);
  if (da && db) reports::oracle_apply(rep, *da, oracle.apply(), &*db, rep.records_a);
  else if (da || db)
    rep.notes.push_back(std::string("oracle: only run ") + (da ? "A" : "B") +
                        " has oracle figures that could be used; give --oracle engine:MODEL.gguf to judge both");
}

void audit_session::finish(const reports::report& rep, const std::string& incomplete) const {
  report_finish(rep, format, output, gates.parse(), cmd, incomplete, gates.trim());
}

}  // namespace detaudit::cli
