// `detaudit run` end to end: the real binary against a real `detaudit serve` on 127.0.0.1 (a free
// port, stopped after each test). Exact numerics: no divergence, exit 0. Float numerics: the
// concurrency probe finds divergence, exit 1, and every first-difference index in the report
// agrees with the token ids in the records. A server killed mid-run: exit 3, complete lines, and
// --resume against a new server finishes every key once. An API key reaches no file of the run.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "model/synth.h"
#include "reports/audit/record.h"
#include "serve_util.h"
#include "synth_util.h"
#include "test_util.h"

using namespace detaudit;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A `detaudit serve` child; env (if any) reaches it as DETAUDIT_E2E_SERVER_KEY.
struct server : test::serve_child {
  server(const std::string& model, const std::vector<std::string>& extra, const std::string& env = "")
      : serve_child(extra, model,
                    env.empty() ? std::vector<std::pair<std::string, std::string>>{}
                                : std::vector<std::pair<std::string, std::string>>{{"DETAUDIT_E2E_SERVER_KEY", env}}) {}
};

std::string prompts_file(const std::string& dir, int n, const std::string& stem) {
  const std::string path = dir + "/prompts.txt";
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) out << stem << " " << i << "\n";
  return path;
}

size_t line_count(const std::string& path) {
  const std::string t = test::file_text(path);
  return static_cast<size_t>(std::count(t.begin(), t.end(), '\n'));
}

json pair_of(const json& report, const std::string& cond_b) {
  for (const json& p : report["pairs"])
    if (p["cond_b"] == cond_b) return p;
  FAIL("no pair alone vs " << cond_b);
  return {};
}

}  // namespace

TEST_CASE("audit_e2e: exact serve shows no divergence under concurrency, cache and repeat, exit 0") {
  server srv(test::fixture("models/stories260K.gguf"), {"-np", "8"});
  const std::string dir = test::scratch_dir("audit_e2e_exact");
  const std::string cmd = test::detaudit_bin() + " run --target " + srv.url() + " --prompts " +
                          prompts_file(dir, 6, "Once upon a time there was a dog named") +
                          " --raw --probe concurrency,cache --probe repeat --repeat 3 --n-predict 12 --format json --out " + dir +
                          "/run";
  const test::cmd_result r = test::run_cmd(cmd);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.rfind("PASS: no item differs in 7 pair(s) over 6 item(s); exit 0\n") != std::string::npos);
  const json rep = json::parse(r.out);
  REQUIRE(rep["pairs"].size() == 7);  // control#0, control#1, repeat, concurrent-8, cache-off, cache-on, cache-warm
  CHECK(rep["noise"]["repeat"] == 3);
  CHECK(rep["noise"]["noisy"] == 0);
  for (const json& p : rep["pairs"]) {
    INFO(p["cond_b"]);
    CHECK(p["items"] == 6);  // each control repetition is a pair of its own
    CHECK(p["differ"] == 0);
    CHECK(p["drifted"] == 0);
    CHECK(p["errors"] == 0);
    CHECK(p["not_exercised"] == 0);
    for (const json& row : p["rows"]) {
      // Log-probs were compared (two alternatives per step) and none moved by a single bit.
      CHECK(row["drift_step"] == -1);
      CHECK(row["max_drift"] == 0.0);
      CHECK(row["hash_step"] == -1);
    }
  }
  int widest = 0;
  for (const reports::record& rec : reports::records_read(dir + "/run")) {
    if (rec.condition == "concurrent-8") {
      CHECK(rec.evidence["overlap"] == true);
      widest = std::max(widest, rec.evidence.value("batch_width", 0));
    }
    if (rec.condition == "cache-warm") CHECK(rec.evidence["cached_tokens"].get<int>() > 0);
  }
  CHECK(widest > 1);
}

TEST_CASE("audit_e2e: float serve diverges under concurrency, exit 1, and the report's indices match the records") {
  server srv(test::narrow_model(), {"-np", "8", "--numerics", "float"});
  const std::string dir = test::scratch_dir("audit_e2e_float");
  const std::string cmd = test::detaudit_bin() + " run --target " + srv.url() + " --prompts " +
                          prompts_file(dir, 16, "Tell me story number") + " --raw --probe concurrency --n-predict 48 --fail-on any" +
                          " --n-probs 4" +
                          " --format json --junit " + dir + "/junit.xml --out " + dir + "/run";
  const test::cmd_result r = test::run_cmd(cmd);
  INFO(r.err);
  REQUIRE(r.exit_code == 1);
  CHECK(r.err.find("--fail-on any") != std::string::npos);
  const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
  CHECK(last.rfind("FAIL: ", 0) == 0);
  CHECK(last.find(" under concurrent-8 (p = ") != std::string::npos);
  CHECK(last.substr(last.size() - 9) == "; exit 1\n");
  CHECK(test::file_text(dir + "/junit.xml").find("<testsuite") != std::string::npos);
  const json rep = json::parse(r.out);
  CHECK(pair_of(rep, "control")["differ"] == 0);  // alone twice: no run-to-run noise
  const json conc = pair_of(rep, "concurrent-8");
  CHECK(conc["differ"].get<int>() > 0);
  std::map<std::pair<std::string, std::string>, reports::record> recs;
  for (reports::record& rec : reports::records_read(dir + "/run")) recs[{rec.item_id, rec.condition}] = std::move(rec);
  int checked = 0;
  for (const json& row : conc["rows"]) {
    if (row["identical"] == true) continue;
    const reports::record& a = recs.at({row["item_id"].get<std::string>(), "alone"});
    const reports::record& b = recs.at({row["item_id"].get<std::string>(), "concurrent-8"});
    size_t first = 0;
    while (first < a.tokens.size() && first < b.tokens.size() && a.tokens[first].id == b.tokens[first].id) ++first;
    INFO("item " << row["item_id"]);
    CHECK(row["token_index"] == first);
    if (first < a.tokens.size()) CHECK(row["id_a"] == a.tokens[first].id);
    if (first < b.tokens.size()) CHECK(row["id_b"] == b.tokens[first].id);
    ++checked;
  }
  CHECK(checked == conc["differ"].get<int>());
  // Drift, worked out from the records: the first step before the tokens part where an alternative
  // listed on both sides (same id) has another log-prob, and the largest such difference.
  int drifted_rows = 0;
  for (const json& row : conc["rows"]) {
    const reports::record& a = recs.at({row["item_id"].get<std::string>(), "alone"});
    const reports::record& b = recs.at({row["item_id"].get<std::string>(), "concurrent-8"});
    const size_t stop = row["token_index"].get<int64_t>() < 0 ? std::min(a.top_logprobs.size(), b.top_logprobs.size())
                                                               : static_cast<size_t>(row["token_index"].get<int64_t>());
    int64_t first = -1;
    double most = 0;
    bool compared = false;  // a step with alternatives on both sides: else max_drift is null
    for (size_t i = 0; i < stop; ++i) {
      compared = compared || (!a.top_logprobs[i].empty() && !b.top_logprobs[i].empty());
      for (const auto& x : a.top_logprobs[i])
        for (const auto& y : b.top_logprobs[i])
          if (x.id == y.id && x.logprob != y.logprob) {
            if (first < 0) first = static_cast<int64_t>(i);
            most = std::max(most, std::abs(x.logprob - y.logprob));
          }
    }
    INFO("item " << row["item_id"]);
    CHECK(row["drift_step"] == first);
    if (compared) CHECK(row["max_drift"].get<double>() == most);
    else CHECK(row["max_drift"].is_null());
    if (row["status"] == "drifted") ++drifted_rows;
  }
  CHECK(conc["drifted"] == drifted_rows);
  // Float numerics under batching move log-probs before (or without) moving a token.
  CHECK(std::any_of(conc["rows"].begin(), conc["rows"].end(), [](const json& row) { return row["drift_step"] >= 0; }));
  // The control pair is silent, so every difference is beyond noise and is tested against 0 of 16.
  CHECK(rep["noise"]["noisy"] == 0);
  CHECK(conc["differ_beyond_noise"] == conc["differ"]);
  CHECK(conc["p_vs_noise"].is_number());
}

TEST_CASE("audit_e2e: a server killed mid-run gives exit 3 and complete lines, --resume finishes every key once") {
  const std::string model = test::fixture("models/stories260K.gguf");
  const std::string dir = test::scratch_dir("audit_e2e_kill");
  const std::string prompts = prompts_file(dir, 12, "A little bird sang song");
  const std::string run_dir = dir + "/run";
  auto cmd = [&](const server& s, bool resume) {
    return test::detaudit_bin() + " run --target " + s.url() + " --prompts " + prompts +
           " --raw --probe repeat --n-predict 16 --retries 0 --timeout 20 --out " + run_dir + (resume ? " --resume" : "");
  };
  test::cmd_result first;
  {
    server srv(model, {"-np", "2"});
    std::thread runner([&] { first = test::run_cmd(cmd(srv, false)); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (line_count(run_dir + "/records.jsonl") < 4 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    srv.kill9();
    runner.join();
  }
  INFO(first.err);
  REQUIRE(first.exit_code == 3);
  CHECK(first.err.find("--resume") != std::string::npos);
  const std::string text = test::file_text(run_dir + "/records.jsonl");
  REQUIRE_FALSE(text.empty());
  CHECK(text.back() == '\n');
  reports::read_stats st;
  const size_t kept = reports::records_read(run_dir, &st).size();
  CHECK(st.truncated == 0);
  CHECK(kept < 36);

  server again(model, {"-np", "2"});  // a new port: the key holds the target's label, not its URL
  const test::cmd_result second = test::run_cmd(cmd(again, true));
  INFO(second.err);
  CHECK(second.exit_code == 0);
  std::map<std::string, int> usable;
  for (const reports::record& rec : reports::records_read(run_dir))
    if (rec.error.empty()) usable[reports::record_key(rec)]++;
  CHECK(usable.size() == 36);  // 12 items x alone, control, repeat
  for (const auto& [key, n] : usable) CHECK(n == 1);
}

TEST_CASE("audit_e2e: the API key from --api-key-env reaches no file of the run folder") {
  const std::string key = "sk-e2e-9f8e7d6c5b4a-SECRET";
  server srv(test::fixture("models/stories260K.gguf"), {"-np", "4", "--api-key-env", "DETAUDIT_E2E_SERVER_KEY"}, key);
  const std::string dir = test::scratch_dir("audit_e2e_key");
  const std::string base = test::detaudit_bin() + " run --target " + srv.url() + " --prompts " + prompts_file(dir, 2, "Hello there") +
                           " --raw --probe concurrency,cache --concurrency 2 --n-predict 4 --report " + dir + "/run/report.md";
  const test::cmd_result r = test::run_cmd("DETAUDIT_E2E_RUN_KEY=" + key + " " + base + " --api-key-env DETAUDIT_E2E_RUN_KEY --out " + dir + "/run");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(key) == std::string::npos);
  CHECK(r.err.find(key) == std::string::npos);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/run")) {
    if (!e.is_regular_file()) continue;
    ++files;
    INFO(e.path());
    CHECK(test::file_text(e.path().string()).find(key) == std::string::npos);
  }
  CHECK(files >= 3);  // run.json, records.jsonl, report.md
  const test::cmd_result missing = test::run_cmd(base + " --api-key-env DETAUDIT_E2E_UNSET_VARIABLE --out " + dir + "/run2");
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("DETAUDIT_E2E_UNSET_VARIABLE") != std::string::npos);
}

TEST_CASE("audit_e2e: a run with nothing but a URL sends the built-in 32 prompts and ends with a verdict") {
  server srv(test::fixture("models/stories260K.gguf"), {"-np", "8"});
  const std::string dir = test::scratch_dir("audit_e2e_url_only");
  // Besides the URL only --out (the test's scratch space) and -n 16 (CI time).
  const test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --target " + srv.url() + " -n 16 --out " + dir + "/run");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("prompts: the built-in set of 32") != std::string::npos);
  CHECK(r.err.rfind("PASS: no item differs in 2 pair(s) over 32 item(s); exit 0\n") != std::string::npos);
  CHECK(r.out.find("concurrency  alone vs concurrent-8  0/32") != std::string::npos);
  std::set<std::string> items;
  for (const reports::record& rec : reports::records_read(dir + "/run")) {
    items.insert(rec.item_id);
    CHECK(rec.request.contains("messages"));  // prompts go as chat by default
  }
  CHECK(items.size() == 32);
  CHECK(items.count("builtin-1"));
  CHECK(items.count("builtin-32"));
}
