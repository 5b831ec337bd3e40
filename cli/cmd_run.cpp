#include <unistd.h>

#include <csignal>
#include <filesystem>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <iostream>
#include <map>
#include <memory>

#include "app.h"
#include "audit_session.h"
#include "commands.h"
#include "probes/runner.h"
#include "reports/audit/conditions.h"
#include "reports/compare.h"
#include "reports/lmeval.h"
#include "reports/output.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

using json = nlohmann::json;

// --n-predict when not given: 64, or lm-eval's max_gen_toks (256) with --dataset gsm8k.
constexpr int64_t N_PREDICT_DEFAULT = INT64_MIN;
constexpr int64_t N_PREDICT_PROMPTS = 64;

struct run_cmd_options {
  std::vector<std::string> targets;
  std::string prompts;
  std::string dataset;
  std::vector<std::string> probes;
  int concurrency = 8;
  int64_t n_predict = N_PREDICT_DEFAULT;
  uint64_t seed = 42;
  int seed_k = 5;
  int repeat = 2;
  int num_fewshot = probes::FEWSHOT_DEFAULT;
  std::string fewshot;
  std::string grader;
  double seed_temperature = 0.7;
  double temperature = 0;
  int n_probs = 2;
  double top_p = -1;  // < 0: not sent
  int64_t top_k = -1;
  std::string request_json;
  bool chat = false;
  bool raw = false;
  std::string system;
  std::vector<std::string> stop;
  std::string out;
  audit_session audit{"run", "any"};
  bool resume = false;
  std::string shard;
  std::string api;
  std::string api_key_env;
  double timeout = 120;
  int retries = 3;
  bool stream = false;
  std::string junit;
  std::string report;
  std::string model;
  std::string export_format;
};

// "I/N" (1-based) -> 0-based index and count.
void shard_parse(const std::string& s, int& index, int& count) {
  const size_t slash = s.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument(s);
    size_t a = 0, b = 0;
    const int i = std::stoi(s.substr(0, slash), &a);
    const int n = std::stoi(s.substr(slash + 1), &b);
    if (a != slash || b != s.size() - slash - 1 || n < 1 || i < 1 || i > n) throw std::invalid_argument(s);
    index = i - 1;
    count = n;
  } catch (const std::exception&) {
    throw input_error("--shard: expected I/N with 1 <= I <= N (e.g. 2/4), found '" + s + "'");
  }
}

std::string default_out_dir() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return std::string("runs/") + buf;
}

std::string format_for_file(const std::string& path, const std::string& dflt) {
  auto ends = [&path](const char* e) { return path.size() >= std::strlen(e) && path.compare(path.size() - std::strlen(e), std::strlen(e), e) == 0; };
  if (ends(".json")) return "json";
  if (ends(".md")) return "md";
  if (ends(".xml")) return "junit";
  if (ends(".txt")) return "text";
  if (ends(".html") || ends(".htm")) return "html";
  return dflt;
}

probes::gen_request base_request(const run_cmd_options& o) {
  probes::gen_request b;
  b.n_predict = o.n_predict != N_PREDICT_DEFAULT ? o.n_predict
                : o.dataset.empty()                ? N_PREDICT_PROMPTS
                                                   : probes::GSM8K_MAX_GEN_TOKS;
  b.temperature = o.temperature;
  b.n_probs = o.n_probs;
  if (o.top_p >= 0) b.top_p = o.top_p;
  if (o.top_k >= 0) b.top_k = o.top_k;
  b.stop = o.stop;
  if (!o.request_json.empty()) {
    try {
      b.extra = json::parse(o.request_json);
    } catch (const json::exception& e) {
      throw input_error("--request: not valid JSON (" + std::string(e.what()) + ")");
    }
    if (!b.extra.is_object()) throw input_error("--request: expected a JSON object, found " + std::string(b.extra.type_name()));
  }
  return b;
}

probes::target_options target_options_make(const run_cmd_options& o) {
  probes::target_options t;
  t.timeout_s = o.timeout;
  t.retries = o.retries;
  t.api = o.api;
  t.model = o.model;
  t.n_parallel = std::max(8, o.concurrency);
  t.stream = o.stream;
  if (!o.api_key_env.empty()) {
    const char* k = std::getenv(o.api_key_env.c_str());
    if (!k || !*k) throw input_error("--api-key-env: environment variable " + o.api_key_env + " is not set or empty");
    t.api_key = k;
  }
  return t;
}

// Progress and notes on stderr; a line starting with '\r' is redrawn in place; an empty line ends
// a line drawn in place (so that what follows starts on a line of its own) and prints nothing else.
std::function<void(const std::string&)> stderr_log() {
  auto drawn = std::make_shared<bool>(false);
  return [drawn](const std::string& s) {
    if (s.empty()) {
      if (*drawn) std::cerr << "\n" << std::flush;
      *drawn = false;
      return;
    }
    if (!s.empty() && s[0] == '\r') {
      std::cerr << s << "\x1b[K" << std::flush;
      *drawn = true;
      return;
    }
    if (*drawn) std::cerr << "\n";
    *drawn = false;
    std::cerr << s << std::endl;
  };
}

// Keys whose last record (the one the reports use) carries an error: requests that still failed
// after their retries, in this invocation or an earlier one of the same folder.
size_t keys_failed(const std::vector<reports::record>& recs) {
  std::map<std::string, bool> failed;
  for (const reports::record& r : recs) failed[reports::record_key(r)] = !r.error.empty();
  return static_cast<size_t>(std::count_if(failed.begin(), failed.end(), [](const auto& kv) { return kv.second; }));
}

// The report, then the exit status: 3 when requests failed (the run is incomplete; --resume sends
// them again), else 1, 5 or 0 by --fail-on (reports::verdict_exit_code).
void report_and_exit(run_cmd_options& o, const std::string& out_dir) {
  const reports::report rep = o.audit.report_of(out_dir);
  if (!o.junit.empty()) reports::report_output(rep, "junit", o.junit, "--junit");
  if (!o.report.empty()) {
    const std::string f = format_for_file(o.report, o.audit.format);
    reports::report_output(f == "junit" ? rep : reports::report_trim(rep, o.audit.gates.trim()), f, o.report, "--report");
  }
  const size_t failed = keys_failed(rep.records);
  const std::string incomplete =
      failed == 0 ? "" : "incomplete: " + std::to_string(failed) + " request(s) failed after their retries (their records carry "
                         "the error); run the same command with --resume --out " + out_dir + " to send them again";
  o.audit.finish(rep, incomplete);
}

// --export lm-eval: the run's records as lm-evaluation-harness sample files in DIR/lm-eval/.
void export_lmeval(const std::vector<probes::item>& items, const std::string& out_dir) {
  std::vector<reports::lmeval_doc> docs;
  for (const probes::item& it : items) docs.push_back({it.id, it.prompt, it.doc});
  const std::string dir = out_dir + "/lm-eval";
  const std::vector<std::string> files = reports::lmeval_export(reports::records_read(out_dir), docs, dir);
  std::cerr << "lm-eval samples: " << files.size() << " file(s) in " << dir << "\n";
}

// SIGINT / SIGTERM: the first asks the run to stop cleanly (requests in flight end, every record is
// kept); a second ends the process at once (records on disk are whole lines either way).
void on_stop_signal(int sig) {
  if (probes::run_interrupted()) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  probes::run_interrupt();
}

struct stop_signals {
  stop_signals() {
    probes::run_interrupt_reset();
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
  }
  ~stop_signals() {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
};

size_t records_in(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return 0;
  try {
    return reports::records_read(dir).size();
  } catch (const input_error&) {
    return 0;
  }
}

// What is kept after a run stopped early, and how to go on.
std::string kept_text(const probes::run_result& res, const std::string& dir) {
  const size_t n = records_in(dir);
  if (n == 0) return "nothing was recorded";
  return std::to_string(n) + " record(s) are kept in " + dir + " (" + std::to_string(res.records_written) +
         " new); run the same command with --resume --out " + dir + " to continue";
}

// --dataset gsm8k: lm-eval's request protocol: its stop strings and each target's EOS text among
// them (unless --stop), seed 1234 (unless --request sets one), and what chose the exemplars.
void dataset_protocol(const run_cmd_options& o, const probes::dataset_options& d, probes::run_options& ro) {
  if (o.stop.empty()) {
    ro.base.stop = probes::gsm8k_stop_strings();
    ro.stop_eos = true;
  }
  if (!ro.base.extra.contains("seed")) ro.base.seed = probes::GSM8K_SEED;
  ro.fewshot = probes::dataset_fewshot_identity(d);
  if (ro.fewshot.empty())
    std::cerr << "dataset: 0-shot; lm-eval's gsm8k task is 5-shot: give --fewshot train.jsonl (GSM8K's train split) "
                 "to send the prompts lm-eval sends\n";
}

void run_run(run_cmd_options& o) {
  if (!o.prompts.empty() && !o.dataset.empty()) throw input_error("give one of --prompts FILE and --dataset gsm8k:FILE[:N], not both");
  if (o.chat && o.raw) throw input_error("--chat and --raw exclude each other");
  if (o.dataset.empty() && (o.num_fewshot != probes::FEWSHOT_DEFAULT || !o.fewshot.empty() || !o.grader.empty()))
    throw input_error("--num-fewshot, --fewshot and --grader apply to --dataset gsm8k:FILE");
  // --report and --junit may go into the run folder, which the run creates; elsewhere their folder
  // must exist before anything is sent.
  auto report_file_check = [&o](const std::string& path, const char* flag) {
    if (path.empty()) return;
    if (!o.out.empty()) {
      const std::filesystem::path rel = std::filesystem::path(path).parent_path().lexically_normal().lexically_relative(
          std::filesystem::path(o.out).lexically_normal());
      if (!rel.empty() && *rel.begin() != "..") return;
    }
    audit_session::output_check(path, flag);
  };
  report_file_check(o.report, "--report");
  report_file_check(o.junit, "--junit");
  o.audit.check(/*preflight=*/true);  // a bad gate list or oracle model is found before any request
  probes::run_options ro;
  ro.probes.clear();
  for (const std::string& p : o.probes) ro.probes.push_back(p);
  if (ro.probes.empty()) ro.probes = {"concurrency"};
  const bool lint_only = ro.probes.size() == 1 && ro.probes[0] == "lint";
  if (!o.shard.empty()) shard_parse(o.shard, ro.shard_index, ro.shard_count);
  probes::dataset_options dopt;
  dopt.num_fewshot = o.num_fewshot;
  dopt.fewshot_file = o.fewshot;
  dopt.strict = o.grader == "strict";
  const std::vector<probes::item> items = !o.dataset.empty()   ? probes::items_load_dataset(o.dataset, dopt)
                                          : !o.prompts.empty() ? probes::items_load_prompts(o.prompts)
                                                               : probes::items_builtin();
  if (o.prompts.empty() && o.dataset.empty())
    std::cerr << "prompts: the built-in set of " << items.size() << " (give --prompts FILE or --dataset gsm8k:FILE for your own)\n";
  ro.concurrency = o.concurrency;
  ro.seed = o.seed;
  ro.seed_k = o.seed_k;
  ro.repeat = o.repeat;
  ro.seed_temperature = o.seed_temperature;
  // A dataset is rendered as lm-eval renders it, for raw completions unless --chat; prompts go as chat.
  ro.chat = o.dataset.empty() ? !o.raw : o.chat;
  ro.system = o.system;
  ro.stream = o.stream;
  ro.base = base_request(o);
  if (!o.dataset.empty()) dataset_protocol(o, dopt, ro);
  ro.resume = o.resume;
  ro.out_dir = o.out.empty() && !lint_only ? default_out_dir() : o.out;
  ro.progress_tty = isatty(2) == 1;
  ro.log = stderr_log();
  if (o.out.empty() && !lint_only) std::cerr << "run folder: " << ro.out_dir << std::endl;

  const probes::target_options topt = target_options_make(o);
  ro.secret = topt.api_key;
  std::vector<std::unique_ptr<probes::target>> owned;
  std::vector<probes::target*> targets;
  probes::run_result res;
  const stop_signals signals;
  try {
    if (!lint_only)  // lint alone sends nothing, so it needs no target up
      for (const std::string& spec : o.targets) {
        owned.push_back(probes::target_make(spec, topt));
        targets.push_back(owned.back().get());
      }
    res = probes::run_audit(targets, items, ro);
    ro.log("");  // the progress line ends before the report
  } catch (const disk_full_error& e) {
    ro.log("");  // the records written so far are whole lines: --resume goes on
    const size_t n = records_in(ro.out_dir);
    std::cerr << "detaudit run: disk full: " << message_line(e.what()) << "\n"
              << "detaudit run: " << (n == 0 ? std::string("nothing was recorded")
                                              : std::to_string(n) + " record(s) are kept in " + ro.out_dir)
              << "; free disk space, then run the same command with --resume --out " << ro.out_dir << " to continue\n"
              << "INCOMPLETE: the disk is full, nothing was judged; exit 3\n";
    throw exit_with(EXIT_UNREACHABLE);
  } catch (const probes::unreachable_error& e) {
    ro.log("");
    res.unreachable = true;
    res.unreachable_message = e.what();
  } catch (const probes::interrupted_error&) {  // Ctrl-C while a target's API was being detected
    ro.log("");
    res.interrupted = true;
  }
  if (res.interrupted) {
    std::cerr << "detaudit run: interrupted: " << kept_text(res, ro.out_dir) << "\n"
              << "INTERRUPTED: nothing was judged; exit 130\n";
    throw exit_with(EXIT_INTERRUPTED);
  }
  if (res.unreachable) {
    std::cerr << "detaudit run: target unreachable: " << res.unreachable_message << "\n"
              << "detaudit run: " << kept_text(res, ro.out_dir) << "\n"
              << "INCOMPLETE: the target became unreachable, nothing was judged; exit 3\n";
    throw exit_with(EXIT_UNREACHABLE);
  }
  if (lint_only) return;
  if (o.export_format == "lm-eval") export_lmeval(items, ro.out_dir);
  try {
    report_and_exit(o, ro.out_dir);
  } catch (const probes::interrupted_error&) {  // Ctrl-C while the oracle teacher-forces the answers
    std::cerr << "detaudit run: interrupted: the oracle did not finish; " << records_in(ro.out_dir)
              << " record(s) are kept in " << ro.out_dir << " (detaudit report " << ro.out_dir
              << " --oracle SPEC judges them later)\n"
              << "INTERRUPTED: nothing was judged; exit 130\n";
    throw exit_with(EXIT_INTERRUPTED);
  }
}

// What every request carries and what the probes vary.
void options_request(CLI::App* sub, run_cmd_options& o) {
  sub->add_option("--concurrency", o.concurrency, "N for the concurrency probe: the item and N-1 fillers at once")->capture_default_str();
  sub->add_option("-n,--n-predict", o.n_predict,
                  "Most tokens generated per request (default: 64; 256, lm-eval's max_gen_toks, with --dataset gsm8k)")
      ->type_name("N");
  sub->add_option("--temperature", o.temperature, "Temperature of every request but the seed probe's")->capture_default_str();
  sub->add_option("--top-p", o.top_p, "top_p sent with every request (default: not sent)")->type_name("P");
  sub->add_option("--top-k", o.top_k, "top_k sent with every request (default: not sent)")->type_name("K");
  sub->add_option("--n-probs", o.n_probs, "Top log-probs asked per step (they give the margin at a flip)")->capture_default_str();
  sub->add_option("--seed", o.seed, "Seed of the seed probe's fixed-seed requests")->capture_default_str();
  sub->add_option("--seed-k", o.seed_k, "Requests per seed condition")->capture_default_str();
  sub->add_option("--repeat", o.repeat,
                  "Alone answers per item, the noise model: alone, then K-1 control repetitions; an item whose alone "
                  "answers disagree is noisy, and each condition is tested against the controls' divergence rate")
      ->capture_default_str()->type_name("K");
  sub->add_option("--seed-temperature", o.seed_temperature, "Temperature of the seed probe's requests")->capture_default_str();
  sub->add_option("--request", o.request_json, "Extra fields merged into every request body, as a JSON object (e.g. '{\"min_p\": 0}')")
      ->type_name("JSON");
  sub->add_flag("--chat", o.chat, "Send each prompt as a chat user message (the default for --prompts; --dataset sends raw completions)");
  sub->add_flag("--raw", o.raw, "Send each prompt as a raw completion prompt");
  sub->add_option("--system", o.system, "Chat requests: a system message sent before each prompt")->type_name("TEXT");
  sub->add_option("--stop", o.stop, "A stop string sent with every request (repeatable)")->type_name("TEXT");
}

// The probes and their conditions, from the tables the runner and the reports use.
std::string probes_help() {
  std::string out;
  for (const reports::probe_def& p : reports::probe_table()) {
    std::string name(p.name);
    name.resize(13, ' ');
    out += "  " + name + std::string(p.help) + "\n";
  }
  return out;
}

}  // namespace

void setup_run(CLI::App& app) {
  auto opt = std::make_shared<run_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "Audit one or more targets for run-to-run divergence: send every item alone, again alone (the control pair\n"
      "that measures plain run-to-run noise), and under each probe's condition; record every response in the run\n"
      "folder (records.jsonl, run.json), then report item by item where the outputs part.\n"
      "Probes:\n" + probes_help() +
      "Targets: engine:MODEL.gguf[?numerics=exact|float&threads=N&ubatch=N&spec=ngram|none&ctx=N&np=N&chat_template=NAME]\n"
      "(the built-in engine in process), or the URL of a server, whose dialect is detected or given with --api:\n" +
      probes::dialects_help() +
      "A condition counts only on evidence that it happened (docs/probes.md, \"Evidence\"); otherwise its rows are\n"
      "'not exercised', with the reason, never 'identical'.");
  sub->add_option("--target", opt->targets, "Target to audit (repeat for cross; labelled A, B, ... in this order)")
      ->type_name("SPEC");
  sub->add_option("--prompts", opt->prompts, "Prompts: FILE.txt (one per line) or FILE.jsonl ({\"id\", \"prompt\", \"answer\", \"grader\"})")
      ->type_name("FILE");
  sub->add_option("--dataset", opt->dataset,
                  "A dataset: gsm8k:FILE[:N] (GSM8K's test.jsonl, its first N items), rendered and graded as "
                  "lm-evaluation-harness's gsm8k task: 'Question: ...\\nAnswer:', its stop strings, raw completions "
                  "unless --chat (docs/lm-eval.md). Without --prompts or --dataset: a built-in set of 32 short prompts")
      ->type_name("SPEC");
  sub->add_option("--num-fewshot", opt->num_fewshot,
                  "--dataset gsm8k: exemplars before each question, drawn from --fewshot (default: 5, lm-eval's gsm8k, "
                  "with --fewshot; 0 without)")
      ->type_name("K");
  sub->add_option("--fewshot", opt->fewshot,
                  "--dataset gsm8k: jsonl of question/answer exemplars (GSM8K's train.jsonl); each question's K are drawn as "
                  "lm-eval draws them (one Random(1234), question by question)")
      ->type_name("FILE");
  sub->add_option("--grader", opt->grader,
                  "--dataset gsm8k: which of lm-eval's filters decides right and wrong (flips, scores): flexible "
                  "(flexible-extract, the last number; the default) or strict (strict-match, the '#### N' line); both are reported")
      ->check(CLI::IsMember({"strict", "flexible"}))->type_name("NAME");
  sub->add_option("--probe", opt->probes, "Probe(s) to run, repeatable or comma-separated (default: concurrency)")
      ->delimiter(',')->type_name("PROBE");
  options_request(sub, *opt);
  sub->add_option("--out", opt->out, "Run folder (default: runs/<UTC time>)")->type_name("DIR");
  sub->add_flag("--resume", opt->resume, "Continue the run in --out: send only the responses not yet recorded");
  sub->add_option("--shard", opt->shard, "Run the I-th of N slices of the items (1-based); join the folders with 'detaudit merge'")
      ->type_name("I/N");
  opt->audit.options_add(sub);
  sub->add_option("--format", opt->audit.format, "Report on stdout as text, json, md, junit or html")
      ->check(CLI::IsMember({"text", "json", "md", "junit", "html"}))->capture_default_str()->type_name("FORMAT");
  sub->add_option("--junit", opt->junit, "Also write the report as JUnit XML to FILE")->type_name("FILE");
  sub->add_option("--report", opt->report, "Also write the report to FILE (format from .json, .md, .xml, .html, .txt)")->type_name("FILE");
  sub->add_option("--api", opt->api, "Server dialect instead of detecting it: openai-chat, openai-completions, llamacpp, ollama")
      ->type_name("NAME");
  sub->add_option("--api-key-env", opt->api_key_env, "Read the bearer token from this environment variable (never recorded)")
      ->type_name("NAME");
  sub->add_option("--model", opt->model, "Model name sent to OpenAI / ollama servers (default: the server's first)")->type_name("NAME");
  sub->add_option("--export", opt->export_format,
                  "Also write the run in another tool's shape: lm-eval writes DIR/lm-eval/samples_<probe>_<condition>"
                  ".jsonl (lm-evaluation-harness --log_samples lines; gsm8k items get strict-match and "
                  "flexible-extract lines), which 'detaudit compare' reads back")
      ->check(CLI::IsMember({"lm-eval"}))->type_name("FORMAT");
  sub->add_option("--timeout", opt->timeout, "Seconds per request")->capture_default_str();
  sub->add_option("--retries", opt->retries, "Retries after connection errors, 5xx and 429")->capture_default_str();
  sub->add_flag("--stream", opt->stream,
                "HTTP targets: ask for streamed answers (server-sent events) and assemble them; records are the same "
                "shape, and a stream that ends early is that item's error (not for ollama)");
  sub->footer(
      "Exit codes: 0 within --fail-on, 1 beyond it (each reason on stderr), 2 bad input (also: a target refuses the\n"
      "first request outright, --resume into a folder whose run had other settings or grading, a folder another run\n"
      "is writing), 3 the run is incomplete: a target became unreachable, or requests still failed after their\n"
      "retries (the records so far are kept; the same command with --resume sends only what is missing or failed),\n"
      "5 unjudged: nothing was judged, or a probe asked for judged no item (every row not exercised or failed),\n"
      "130 interrupted (Ctrl-C or SIGTERM: requests in flight are dropped, every record is kept; --resume\n"
      "continues; a second Ctrl-C stops at once). The last line on stderr is the verdict: 'PASS: ...; exit 0',\n"
      "'FAIL: ...; exit 1', 'UNJUDGED: ...; exit 5' or 'INCOMPLETE: ...; exit 3'.\n"
      "Examples:\n"
      "  # alone vs 8 concurrent on the first 100 GSM8K questions\n"
      "  detaudit run --target http://127.0.0.1:8080 --dataset gsm8k:test.jsonl:100 --probe concurrency --concurrency 8\n"
      "  # two quantizations item by item\n"
      "  detaudit run --probe cross --target engine:q8_0.gguf --target engine:q4_k_m.gguf --dataset gsm8k:test.jsonl\n"
      "  # CI: fail the job on any divergence, with a JUnit report\n"
      "  detaudit run --config audit.json --out runs/ci --fail-on any --junit detaudit.xml\n"
      "  # the built-in engine in float numerics shows the effect; exact shows none\n"
      "  detaudit run --target 'engine:model.gguf?numerics=float' --prompts prompts.txt --raw --probe concurrency,cache,batch\n"
      "  # llama-server alone vs 8 concurrent, each divergence judged by the exact engine on the same file\n"
      "  detaudit run --target http://127.0.0.1:8080 --prompts prompts.txt --oracle engine:model.gguf\n"
      "  # a large audit on 4 machines, then one report\n"
      "  detaudit run --config audit.json --shard 2/4 --out runs/s2 && detaudit merge --out runs/all runs/s1 runs/s2 runs/s3 runs/s4");
  sub->callback([opt] { run_run(*opt); });
}

}  // namespace detaudit::cli
