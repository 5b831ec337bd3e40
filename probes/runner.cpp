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
#include <random>
#include <sstream>
#include <sys/utsname.h>
#include <thread>

#include "probes/conditions.h"
#include "runtime/generate.h"
#include "util/error.h"

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

void options_check(const std::vector<target*>& targets, const std::vector<item>& items, const run_options& opt) {
  if (targets.empty()) throw input_error("no target: give at least one --target");
  if (items.empty()) throw input_error("no items: give --prompts FILE or --dataset gsm8k:FILE");
  const std::vector<std::string>& known = detail::probe_names();
  for (const std::string& p : opt.probes)
    if (std::find(known.begin(), known.end(), p) == known.end())
      throw input_error("--probe: unknown probe '" + p + "' (expected repeat, concurrency, cache, speculation, batch, seed, cross, lint)");
  auto wanted = [&opt](const char* p) { return std::find(opt.probes.begin(), opt.probes.end(), p) != opt.probes.end(); };
  if (wanted("cross") && targets.size() < 2) throw input_error("--probe cross needs two --target");
  if (wanted("concurrency") && (opt.concurrency < 2 || opt.concurrency > 1024))
    throw input_error("--concurrency must be in [2, 1024], found " + std::to_string(opt.concurrency));
  if (wanted("seed") && (opt.seed_k < 1 || opt.seed_k > 1000))
    throw input_error("--seed-k must be in [1, 1000], found " + std::to_string(opt.seed_k));
  if (opt.shard_count < 1 || opt.shard_index < 0 || opt.shard_index >= opt.shard_count)
    throw input_error("--shard: expected I/N with 1 <= I <= N, found " + std::to_string(opt.shard_index + 1) + "/" +
                      std::to_string(opt.shard_count));
  if (opt.out_dir.empty()) throw input_error("no output folder (--out DIR)");
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

// Reads what an earlier run of this folder wrote: its run id, started time and usable records.
void resume_load(const run_options& opt, const std::string& path, run_state& st, json& previous) {
  previous = reports::run_manifest_read(opt.out_dir);
  if (previous.empty())
    throw input_error("--resume: " + (fs::path(opt.out_dir) / "run.json").string() + " not found; nothing to resume");
  if (st.run_id.empty()) st.run_id = previous.value("run_id", "");
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
    if (wanted("batch")) {
      rt.ubatch_1 = rt.t->variant("ubatch", "1");
      rt.ubatch_8192 = rt.t->variant("ubatch", "8192");
    }
    if (wanted("speculation")) {
      const bool drafting = rt.caps.raw.is_object() && rt.caps.raw.value("spec", "none") != "none";
      rt.spec_variant = rt.t->variant("spec", drafting ? "none" : "ngram");
      rt.spec_condition = drafting ? "spec-off" : "spec-ngram";
    }
    out.push_back(std::move(rt));
  }
  return out;
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
            {"seed_k", opt.seed_k},       {"seed_temperature", opt.seed_temperature}};
  if (b.top_p) o["top_p"] = *b.top_p;
  if (b.top_k) o["top_k"] = *b.top_k;
  if (b.extra.is_object() && !b.extra.empty()) o["request"] = b.extra;
  return o;
}

json lint_json(const std::vector<lint_finding>& findings) {
  json out = json::array();
  for (const lint_finding& f : findings)
    out.push_back({{"severity", f.severity}, {"code", f.code}, {"item_id", f.item_id}, {"message", f.message}});
  return out;
}

void manifest_write(const std::string& dir, const json& m) {
  const fs::path tmp = fs::path(dir) / "run.json.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw input_error("cannot write " + tmp.string());
    out << m.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    if (!out) throw input_error("cannot write " + tmp.string());
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
                   size_t n_shard_items, const std::vector<lint_finding>& findings, const json& previous) {
  const run_options& opt = *st.opt;
  json m = {{"schema", 1},
            {"run_id", st.run_id},
            {"tool_version", DETAUDIT_VERSION},
            {"precision_contract", runtime::run_environment().value("precision_contract", "")},
            {"started", previous.value("started", utc_iso(std::time(nullptr)))},
            {"environment", environment_json()},
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

}  // namespace

run_result run_audit(const std::vector<target*>& targets, const std::vector<item>& items, const run_options& opt) {
  options_check(targets, items, opt);
  fs::create_directories(opt.out_dir);
  run_result result;
  const std::string path = (fs::path(opt.out_dir) / records_file_name(opt)).string();
  result.records_path = path;
  run_state st;
  st.opt = &opt;
  st.items = &items;
  st.run_id = opt.run_id;
  st.result = &result;
  json previous = json::object();
  std::error_code ec;
  if (opt.resume) resume_load(opt, path, st, previous);
  else if (fs::exists(path, ec) && fs::file_size(path, ec) > 0)
    throw input_error(path + " already holds records: continue that run with --resume, or choose another --out");
  if (st.run_id.empty()) st.run_id = new_run_id();

  std::vector<run_target> rts;
  try {
    rts = targets_prepare(targets, opt);
  } catch (const unreachable_error& e) {
    result.unreachable = true;
    result.unreachable_message = e.what();
    return result;
  }
  const std::vector<lint_finding> findings = lint(items, opt.base);
  lint_log(opt, findings);
  std::vector<size_t> mine;
  for (size_t k = 0; k < items.size(); ++k)
    if (static_cast<int>(k % static_cast<size_t>(opt.shard_count)) == opt.shard_index) mine.push_back(k);
  manifest_write(opt.out_dir, manifest_make(st, rts, items, mine.size(), findings, previous));
  if (opt.probes.size() == 1 && opt.probes[0] == "lint") return result;

  reports::record_writer writer(path);
  st.writer = &writer;
  progress prog{opt, mine.size()};
  for (size_t k : mine) {
    try {
      detail::item_run(st, rts, k);
    } catch (const unreachable_error& e) {
      result.unreachable = true;
      result.unreachable_message = e.what();
      return result;
    }
    prog.step(detail::item_diverged(st, rts, items[k]));
  }
  return result;
}

}  // namespace detaudit::probes
