// run_audit: checks the options, probes the targets, lints, writes run.json, then runs the items
// of this shard one after another (conditions in a fixed order, see conditions.h), appending a
// record per response. --resume reads the records already there (cutting a line left half written)
// and sends only what is missing; keys whose records all carry an error are sent again, and the
// reports take the last record of a key.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <thread>

#include "probes/conditions.h"
#include "reports/audit/conditions.h"
#include "reports/audit/file_write.h"
#include "reports/audit/identity.h"
#include "reports/audit/redact.h"
#include "runtime/generate.h"
#include "runtime/output.h"
#include "util/error.h"
#include "util/sha256.h"

namespace detaudit::probes {
namespace {

namespace fs = std::filesystem;
using detail::run_state;
using detail::run_target;

void log_line(const run_options& opt, const std::string& s) {
  if (opt.log) opt.log(s);
}

std::string utc_iso(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string new_run_id() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

bool lint_only(const run_options& opt) { return opt.probes.size() == 1 && opt.probes[0] == "lint"; }

void options_check(const std::vector<target*>& targets, const std::vector<item>& items, const run_options& opt) {
  if (targets.empty() && !lint_only(opt)) throw input_error("no target: give at least one --target");
  if (items.empty()) throw input_error("no items: give --prompts FILE or --dataset gsm8k:FILE");
  for (const std::string& p : opt.probes)
    if (!reports::probe_known(p))
      throw input_error("--probe: unknown probe '" + p + "' (expected " + reports::probe_names_text() + ")");
  auto wanted = [&opt](const char* p) { return std::find(opt.probes.begin(), opt.probes.end(), p) != opt.probes.end(); };
  if (wanted("cross") && targets.size() < 2) throw input_error("--probe cross needs two --target");
  if (wanted("concurrency") && (opt.concurrency < 2 || opt.concurrency > 1024))
    throw input_error("--concurrency must be in [2, 1024], found " + std::to_string(opt.concurrency));
  if (wanted("seed") && (opt.seed_k < 1 || opt.seed_k > 1000))
    throw input_error("--seed-k must be in [1, 1000], found " + std::to_string(opt.seed_k));
  if (opt.repeat < 2 || opt.repeat > 100)
    throw input_error("--repeat must be in [2, 100] (alone answers per item: alone and repeat-1 controls), found " +
                      std::to_string(opt.repeat));
  if (opt.shard_count < 1 || opt.shard_index < 0 || opt.shard_index >= opt.shard_count)
    throw input_error("--shard: expected I/N with 1 <= I <= N, found " + std::to_string(opt.shard_index + 1) + "/" +
                      std::to_string(opt.shard_count));
  if (!opt.chat && !opt.system.empty()) throw input_error("--system needs chat requests; it cannot go with --raw");
  if (opt.out_dir.empty() && !lint_only(opt)) throw input_error("no output folder (--out DIR)");
}

std::string records_file_name(const run_options& opt) {
  if (opt.shard_count <= 1) return "records.jsonl";
  return "records-" + std::to_string(opt.shard_index + 1) + "-of-" + std::to_string(opt.shard_count) + ".jsonl";
}

// Cuts a last line left without its newline (a run killed mid-write). Returns the bytes removed.
uintmax_t records_cut_tail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  if (data.empty() || data.back() == '\n') return 0;
  const size_t nl = data.rfind('\n');
  const uintmax_t keep = nl == std::string::npos ? 0 : nl + 1;
  fs::resize_file(path, keep);
  return data.size() - keep;
}

// The manifest an earlier run of this folder wrote (its run id, started time and identity).
json resume_manifest(const run_options& opt, run_state& st) {
  json previous = reports::run_manifest_read(opt.out_dir);
  if (previous.empty())
    throw input_error("--resume: " + (fs::path(opt.out_dir) / "run.json").string() + " not found; nothing to resume");
  if (st.run_id.empty()) st.run_id = previous.value("run_id", "");
  return previous;
}

// The usable records an earlier run of this folder wrote (after its identity was checked): a last
// line left half written by a killed run is cut first.
void resume_records(const run_options& opt, const std::string& path, run_state& st) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  if (const uintmax_t cut = records_cut_tail(path); cut > 0)
    log_line(opt, "resume: removed a half-written last line (" + std::to_string(cut) + " bytes) from " + path);
  for (const reports::record& r : reports::records_read_file(path)) detail::record_note(st, r);
  log_line(opt, "resume: " + std::to_string(st.done.size()) + " responses already recorded in " + path);
}

std::vector<run_target> targets_prepare(const std::vector<target*>& targets, const run_options& opt) {
  std::vector<run_target> out;
  auto wanted = [&opt](const char* p) { return std::find(opt.probes.begin(), opt.probes.end(), p) != opt.probes.end(); };
  for (size_t i = 0; i < targets.size(); ++i) {
    run_target rt;
    rt.t = targets[i];
    rt.label = i < 26 ? std::string(1, static_cast<char>('A' + i)) : "T" + std::to_string(i + 1);
    rt.caps = rt.t->probe();
    rt.target_json = {{"label", rt.label},     {"spec", rt.t->spec()},          {"dialect", rt.t->dialect()},
                      {"build", rt.caps.build}, {"fingerprint", rt.caps.fingerprint}, {"model", rt.caps.model},
                      {"model_sha256", rt.caps.model_sha256}};
    if (const json* ub = rt.caps.raw.is_object() && rt.caps.raw.contains("ubatch") ? &rt.caps.raw["ubatch"] : nullptr;
        ub && ub->is_number_integer())
      rt.ubatch = ub->get<int64_t>();
    if (wanted("batch")) {
      rt.ubatch_1 = rt.t->variant("ubatch", "1");
      rt.ubatch_8192 = rt.t->variant("ubatch", "8192");
    }
    if (wanted("speculation")) {
      const bool drafting = rt.caps.raw.is_object() && rt.caps.raw.value("spec", "none") != "none";
      rt.spec_variant = rt.t->variant("spec", drafting ? "none" : "ngram");
      rt.spec_condition = drafting ? "spec-off" : "spec-ngram";
    }
    if (opt.stop_eos) {
      const std::string& eos = rt.caps.eos_token;
      if (eos.empty())
        log_line(opt, "target " + rt.label + " does not say its end-of-sequence text: its requests go without it among "
                      "the stop strings (lm-eval also leaves it out, with a warning, when it cannot tell)");
      else if (std::find(opt.base.stop.begin(), opt.base.stop.end(), eos) == opt.base.stop.end())
        rt.eos_stop = eos;
    }
    out.push_back(std::move(rt));
  }
  return out;
}

std::string sha256_hex(const std::string& s) {
  sha256 h;
  h.update(s.data(), s.size());
  return h.hex_digest();
}

// The chat template fallback a target reported (detaudit serve, the engine): the answers are not in
// the model's own chat format, which a reader of the report should know.
void lint_targets(const std::vector<run_target>& rts, const run_options& opt, std::vector<lint_finding>& findings) {
  if (!opt.chat) return;
  for (const run_target& rt : rts)
    if (!rt.caps.chat_template_fallback.empty())
      findings.push_back({"warning", "chat-template-fallback", "",
                          "target " + rt.label + " renders chats with " + rt.caps.chat_template_fallback +
                              ": the model has no chat template of its own (as llama-server does); send --raw prompts "
                              "to audit the model without a template"});
}

json environment_json() {
  json env = runtime::run_environment();
  utsname u{};
  if (uname(&u) == 0) env["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  env["cpu_threads"] = std::thread::hardware_concurrency();
  return env;
}

json targets_json(const std::vector<run_target>& targets) {
  json out = json::array();
  for (const run_target& rt : targets) {
    json t = {{"label", rt.label}, {"spec", rt.t->spec()}, {"dialect", rt.t->dialect()},
              {"capabilities", capabilities_to_json(rt.caps)}};
    if (!rt.seed_check.empty()) t["seed_check"] = rt.seed_check;
    json variants = json::array();
    if (rt.ubatch_1) variants.push_back({{"condition", "ubatch-1"}, {"spec", rt.ubatch_1->spec()}});
    if (rt.ubatch_8192) variants.push_back({{"condition", "ubatch-8192"}, {"spec", rt.ubatch_8192->spec()}});
    if (rt.spec_variant) variants.push_back({{"condition", rt.spec_condition}, {"spec", rt.spec_variant->spec()}});
    if (!variants.empty()) t["variants"] = variants;
    out.push_back(std::move(t));
  }
  return out;
}

json options_json(const run_options& opt) {
  const gen_request& b = opt.base;
  json o = {{"n_predict", b.n_predict},   {"temperature", b.temperature}, {"n_probs", b.n_probs},
            {"chat", opt.chat},           {"concurrency", opt.concurrency}, {"seed", opt.seed},
            {"seed_k", opt.seed_k},       {"seed_temperature", opt.seed_temperature},
            {"repeat", opt.repeat}};
  if (b.top_p) o["top_p"] = *b.top_p;
  if (b.top_k) o["top_k"] = *b.top_k;
  if (!opt.system.empty()) o["system"] = opt.system;
  if (!b.stop.empty()) o["stop"] = b.stop;
  if (b.extra.is_object() && !b.extra.empty()) o["request"] = b.extra;
  return o;
}

json lint_json(const std::vector<lint_finding>& findings) {
  json out = json::array();
  for (const lint_finding& f : findings)
    out.push_back({{"severity", f.severity}, {"code", f.code}, {"item_id", f.item_id}, {"message", f.message}});
  return out;
}

// run.json, through a temporary file: a full disk leaves the previous one whole. Every string is
// redacted (reports/audit/redact.h) of the targets' key.
void manifest_write(const std::string& dir, const json& m, const std::string& secret) {
  const fs::path tmp = fs::path(dir) / "run.json.tmp";
  try {
    reports::text_file_write(tmp.string(), reports::redact_json(m, secret).dump(2, ' ', false, json::error_handler_t::replace) + "\n",
                             "run.json");
  } catch (const disk_full_error&) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fs::rename(tmp, fs::path(dir) / "run.json");
}

void lint_log(const run_options& opt, const std::vector<lint_finding>& findings) {
  const bool listed = std::find(opt.probes.begin(), opt.probes.end(), "lint") != opt.probes.end();
  if (findings.empty()) {
    if (listed) log_line(opt, "lint: no findings");
    return;
  }
  if (!listed) {
    log_line(opt, "lint: " + std::to_string(findings.size()) + " findings (listed in run.json; --probe lint prints them)");
    return;
  }
  for (const lint_finding& f : findings)
    log_line(opt, "lint " + f.severity + " [" + f.code + "]" + (f.item_id.empty() ? "" : " item " + f.item_id) + ": " + f.message);
}

// Item, rate, ETA and divergences so far: a redrawn line on a terminal, else plain lines.
struct progress {
  const run_options& opt;
  size_t total;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  size_t done = 0;
  size_t diverged = 0;

  void step(bool item_diverged) {
    ++done;
    diverged += item_diverged ? 1 : 0;
    const bool every = opt.progress_tty || total <= 50 || done % 10 == 0 || done == total;
    if (!every) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = s > 0 ? static_cast<double>(done) / s : 0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    char buf[160];
    std::snprintf(buf, sizeof buf, "item %zu/%zu  %.1f items/s  ETA %.0fs  diverged so far: %zu", done, total, rate, eta, diverged);
    log_line(opt, opt.progress_tty ? "\r" + std::string(buf) : std::string(buf));
  }
};

json manifest_make(const run_state& st, const std::vector<run_target>& rts, const std::vector<item>& items,
                   size_t n_shard_items, const std::vector<lint_finding>& findings, const json& previous,
                   const json& identity) {
  const run_options& opt = *st.opt;
  json m = {{"schema", 1},
            {"run_id", st.run_id},
            {"tool_version", DETAUDIT_VERSION},
            {"precision_contract", runtime::run_environment().value("precision_contract", "")},
            {"started", previous.value("started", utc_iso(std::time(nullptr)))},
            {"environment", environment_json()},
            {"identity", identity},
            {"targets", targets_json(rts)},
            {"probes", opt.probes},
            {"options", options_json(opt)},
            {"items", items.size()},
            {"items_in_shard", n_shard_items},
            {"records", records_file_name(opt)},
            {"lint", lint_json(findings)}};
  if (opt.shard_count > 1) m["shard"] = {{"index", opt.shard_index + 1}, {"count", opt.shard_count}};
  if (!previous.empty()) {
    json resumed = previous.value("resumed", json::array());
    resumed.push_back(utc_iso(std::time(nullptr)));
    m["resumed"] = resumed;
  }
  return m;
}

// --resume into a folder whose run had other settings would mix two runs under one id.
void resume_check(const run_options& opt, const json& previous, const json& identity) {
  const json before = reports::identity_of(previous);
  if (before.empty()) {
    log_line(opt, "resume: " + opt.out_dir + "/run.json records no identity (an older detaudit): its settings cannot be checked");
    return;
  }
  std::vector<reports::identity_difference> diffs = reports::identity_diff(before, identity);
  // The identity holds the shard count only (shards of one run share it); resuming another shard's
  // folder would append this shard's records to that one's.
  const json shard_before = previous.contains("shard") && previous["shard"].is_object() ? previous["shard"].value("index", json()) : json();
  const json shard_now = opt.shard_count > 1 ? json(opt.shard_index + 1) : json();
  if (shard_before != shard_now) diffs.push_back({"shard.index", shard_before, shard_now});
  if (diffs.empty()) return;
  std::string list;
  for (const reports::identity_difference& d : diffs)
    list += (list.empty() ? "" : "; ") + reports::identity_difference_text(d);
  throw input_error("--resume: " + opt.out_dir + " holds a run with other settings (earlier vs now: " + list +
                    "); run the same command as before, or choose another --out");
}

std::vector<size_t> shard_items(const std::vector<item>& items, const run_options& opt) {
  std::vector<size_t> mine;
  for (size_t k = 0; k < items.size(); ++k)
    if (static_cast<int>(k % static_cast<size_t>(opt.shard_count)) == opt.shard_index) mine.push_back(k);
  return mine;
}

// --probe lint alone: findings before anything is sent, no target contacted.
run_result run_lint_only(const std::vector<item>& items, const run_options& opt) {
  std::optional<run_folder_lock> lock;
  if (!opt.out_dir.empty()) {
    run_folder_make(opt.out_dir);
    lock.emplace(opt.out_dir);
    if (const std::string other = run_folder_other_records(opt.out_dir, ""); !other.empty())
      throw input_error(opt.out_dir + " holds the records of a run (" + other + "); --probe lint alone would replace its "
                        "run.json: choose another --out");
  }
  const std::vector<lint_finding> findings = lint(items, opt.base);
  lint_log(opt, findings);
  if (opt.out_dir.empty()) return {};
  run_state st;
  st.opt = &opt;
  st.run_id = opt.run_id.empty() ? new_run_id() : opt.run_id;
  json m = manifest_make(st, {}, items, shard_items(items, opt).size(), findings, json::object(),
                         run_identity({}, {}, items, opt));
  m.erase("records");
  manifest_write(opt.out_dir, m, opt.secret);
  return {};
}

// The items of this shard, one after another; stops at an unreachable target or Ctrl-C.
void items_loop(run_state& st, std::vector<run_target>& rts, const std::vector<item>& items,
                const std::vector<size_t>& mine, run_result& result) {
  progress prog{*st.opt, mine.size()};
  try {
    for (size_t k : mine) {
      detail::item_run(st, rts, k);
      prog.step(detail::item_diverged(st, rts, items[k]));
    }
  } catch (const unreachable_error& e) {
    result.unreachable = true;
    result.unreachable_message = e.what();
  } catch (const interrupted_error&) {
    result.interrupted = true;
  }
}

}  // namespace

namespace {

// What grades the run's answers: the graders, the answer key, and how the few-shot exemplars were
// chosen. Absent when no item is graded (as in runs made before it was recorded).
json grading_identity(const std::vector<item>& items, const run_options& opt) {
  std::set<std::string> graders;
  json key = json::array();  // [[id, grader, reference], ...]: JSON, so no text can pass for a separator
  for (const item& it : items) {
    if (it.grader.empty()) continue;
    graders.insert(it.grader);
    key.push_back({it.id, it.grader, it.reference});
  }
  if (graders.empty()) return json::object();
  json g = {{"graders", std::vector<std::string>(graders.begin(), graders.end())},
            {"answers_sha256", sha256_hex(key.dump(-1, ' ', false, json::error_handler_t::replace))}};
  if (opt.fewshot.is_object() && !opt.fewshot.empty()) g["fewshot"] = opt.fewshot;
  return g;
}

}  // namespace

json run_identity(const std::vector<target*>& targets, const std::vector<capabilities>& caps,
                  const std::vector<item>& items, const run_options& opt) {
  json ts = json::array();
  for (size_t i = 0; i < targets.size() && i < caps.size(); ++i) {
    const capabilities& c = caps[i];
    // An engine spec says how the engine computes; a server's URL says only where it listens (a
    // server restarted on another port is the same target): the server's build, fingerprint and
    // model say what it is.
    const bool engine = targets[i]->dialect() == "engine";
    ts.push_back({{"label", i < 26 ? std::string(1, static_cast<char>('A' + i)) : "T" + std::to_string(i + 1)},
                  {"spec", engine ? targets[i]->spec() : ""},
                  {"dialect", targets[i]->dialect()},
                  {"build", c.build},
                  {"fingerprint", c.fingerprint},
                  {"model", c.model},
                  {"model_sha256", c.model_sha256},
                  {"chat_template_sha256", c.chat_template.empty() ? "" : sha256_hex(c.chat_template)},
                  {"chat_template_fallback", c.chat_template_fallback}});
  }
  const gen_request& b = opt.base;
  const json request = {{"n_predict", b.n_predict},
                        {"temperature", b.temperature},
                        {"top_p", b.top_p ? json(*b.top_p) : json(nullptr)},
                        {"top_k", b.top_k ? json(*b.top_k) : json(nullptr)},
                        {"chat", opt.chat},
                        {"system", opt.system},
                        {"stop", b.stop},
                        {"extra", b.extra.is_object() ? b.extra : json::object()}};
  json req = request;
  if (opt.stop_eos) req["stop_eos"] = true;  // absent otherwise, as in runs made before it
  if (b.seed) req["seed"] = *b.seed;
  auto wanted = [&opt](const char* p) { return std::find(opt.probes.begin(), opt.probes.end(), p) != opt.probes.end(); };
  json settings = json::object();
  if (wanted("concurrency")) settings["concurrency"] = opt.concurrency;
  if (wanted("seed")) settings["seed"] = opt.seed, settings["seed_k"] = opt.seed_k, settings["seed_temperature"] = opt.seed_temperature;
  if (opt.repeat != 2) settings["repeat"] = opt.repeat;  // absent at the default, as in runs made before --repeat
  std::vector<std::string> probes = opt.probes;
  std::sort(probes.begin(), probes.end());
  probes.erase(std::unique(probes.begin(), probes.end()), probes.end());
  std::string lines;
  for (const item& it : items) lines += it.id + '\0' + sha256_hex(it.prompt) + '\n';
  json id = {{"targets", ts},
          {"request", req},
          {"logprobs", {{"n_probs", b.n_probs}}},
          {"transport", {{"stream", opt.stream}}},
          {"probes", probes},
          {"probe_settings", settings},
          {"items", {{"count", items.size()}, {"sha256", sha256_hex(lines)}}},
          {"shard", {{"count", opt.shard_count}}}};
  if (json g = grading_identity(items, opt); !g.empty()) id["grading"] = std::move(g);
  return id;
}

run_folder_lock::run_folder_lock(const std::string& dir) {
  const std::string path = (fs::path(dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw input_error("cannot open the lock file " + path + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw input_error(dir + " is in use by another detaudit process (it holds " + path +
                      "); wait for it to finish, or choose another --out");
  }
}

void run_folder_make(const std::string& dir) {
  std::error_code ec, ec_dir;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec_dir))
    throw input_error("cannot use '" + dir + "' as the run folder: " + (ec ? ec.message() : std::string("not a folder")) +
                      "; choose another --out");
}

std::string run_folder_other_records(const std::string& dir, const std::string& own) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != own && e.path().extension() == ".jsonl" && e.is_regular_file(ec) && e.file_size(ec) > 0) return name;
  }
  return "";
}

bool run_folder_busy(const std::string& dir) {
  const std::string path = (fs::path(dir) / ".lock").string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool busy = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
  ::close(fd);
  return busy;
}

run_folder_lock::~run_folder_lock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the lock
}

run_result run_audit(const std::vector<target*>& targets, const std::vector<item>& items, const run_options& opt) {
  options_check(targets, items, opt);
  if (lint_only(opt)) return run_lint_only(items, opt);
  run_folder_make(opt.out_dir);
  const run_folder_lock lock(opt.out_dir);
  run_result result;
  const std::string path = (fs::path(opt.out_dir) / records_file_name(opt)).string();
  run_state st;
  st.opt = &opt;
  st.items = &items;
  st.run_id = opt.run_id;
  st.result = &result;
  json previous = json::object();
  std::error_code ec;
  if (const std::string other = run_folder_other_records(opt.out_dir, records_file_name(opt)); !other.empty())
    throw input_error(opt.out_dir + " holds the records of another run or shard (" + other + "), which every report of the "
                      "folder would read with this run's: choose another --out (one run, or one shard, per folder)");
  if (opt.resume) previous = resume_manifest(opt, st);
  else if (fs::exists(path, ec) && fs::file_size(path, ec) > 0)
    throw input_error(path + " already holds records: continue that run with --resume, or choose another --out");
  if (st.run_id.empty()) st.run_id = new_run_id();
  const std::vector<size_t> mine = shard_items(items, opt);
  if (mine.empty()) throw input_error("--shard " + std::to_string(opt.shard_index + 1) + "/" + std::to_string(opt.shard_count) +
                                      ": this shard holds none of the " + std::to_string(items.size()) + " items");

  std::vector<run_target> rts;
  try {
    rts = targets_prepare(targets, opt);
    std::vector<capabilities> caps;
    for (const run_target& rt : rts) caps.push_back(rt.caps);
    const json identity = run_identity(targets, caps, items, opt);
    if (opt.resume) {
      resume_check(opt, previous, identity);
      resume_records(opt, path, st);
    }
    if (std::find(opt.probes.begin(), opt.probes.end(), "seed") != opt.probes.end())
      for (run_target& rt : rts) {
        detail::target_seed_check(opt, rt, items[mine.front()]);
        if (rt.t->dialect() != "engine") st.used.insert(rt.t);  // the check was its first request: alone is not cold
      }
    std::vector<lint_finding> findings = lint(items, opt.base);
    lint_targets(rts, opt, findings);
    lint_log(opt, findings);
    manifest_write(opt.out_dir, manifest_make(st, rts, items, mine.size(), findings, previous, identity), opt.secret);
  } catch (const unreachable_error& e) {
    result.unreachable = true;
    result.unreachable_message = e.what();
    return result;
  } catch (const interrupted_error&) {
    result.interrupted = true;
    return result;
  }
  reports::record_writer writer(path);
  result.records_path = path;
  st.writer = &writer;
  items_loop(st, rts, items, mine, result);
  return result;
}

}  // namespace detaudit::probes
