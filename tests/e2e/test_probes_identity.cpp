// Runs that are not like for like, through the CLI: --resume into a folder whose run had other
// settings, two processes on one folder, merges of folders that are not the shards of one run,
// compares with nothing comparable; and how a run stops: a first request the target refuses,
// Ctrl-C, a target that is not there, lint alone without a target.
#include <doctest/doctest.h>

#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "child_process.h"
#include "probes/runner.h"
#include "reports/audit/record.h"
#include "synth_util.h"
#include "test_util.h"

using namespace detaudit;
using json = nlohmann::json;

namespace {

std::string stories() { return "engine:" + test::fixture("models/stories260K.gguf") + "?threads=1&np=4"; }

std::string run_cmd_line(const std::string& target, const std::string& prompts, const std::string& out, const std::string& extra) {
  const bool n_given = extra.find("--n-predict") != std::string::npos;
  return test::detaudit_bin() + " run --target '" + target + "' --prompts " + prompts + " --raw --probe repeat --out " + out +
         (n_given ? " " : " --n-predict 4 ") + extra;
}

size_t line_count(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

std::multiset<std::string> keys(const std::string& dir) {
  std::multiset<std::string> out;
  for (const reports::record& r : reports::records_read(dir)) out.insert(reports::record_key(r));
  return out;
}

}  // namespace

TEST_CASE("probes_identity: --resume refuses another model, prompt set, n_predict or probe list, naming the field") {
  const std::string dir = test::scratch_dir("identity_resume");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe dog ran\n");
  const std::string other_prompts = test::write_file(dir + "/q.txt", "Once upon a time\nThe cat sat\n");
  const std::string out = dir + "/run";
  const test::cmd_result first = test::run_cmd(run_cmd_line(stories(), prompts, out, ""));
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  const std::string manifest = test::file_text(out + "/run.json");
  const std::string records = test::file_text(out + "/records.jsonl");
  const std::string other_model = "engine:" + test::narrow_model() + "?threads=1&np=4";
  const std::pair<std::string, std::string> cases[] = {
      {run_cmd_line(other_model, prompts, out, "--resume"), "targets.A.model_sha256"},
      {run_cmd_line(stories(), other_prompts, out, "--resume"), "items.sha256"},
      {run_cmd_line(stories(), prompts, out, "--resume --n-predict 5"), "request.n_predict: 4 vs 5"},
      {run_cmd_line(stories(), prompts, out, "--resume --probe cache"), "probes: [\"repeat\"] vs [\"cache\",\"repeat\"]"},
      {run_cmd_line(stories(), prompts, out, "--resume --stream"), "transport.stream: false vs true"},
  };
  for (const auto& [cmd, field] : cases) {
    const test::cmd_result r = test::run_cmd(cmd);
    INFO(cmd << " -> " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("holds a run with other settings") != std::string::npos);
    CHECK(r.err.find(field) != std::string::npos);
    CHECK(line_count(r.err) == 1);
  }
  CHECK(test::file_text(out + "/run.json") == manifest);  // nothing rewritten
  CHECK(test::file_text(out + "/records.jsonl") == records);
  const test::cmd_result same = test::run_cmd(run_cmd_line(stories(), prompts, out, "--resume"));
  INFO(same.err);
  CHECK(same.exit_code == 0);
}

TEST_CASE("probes_identity: a second process on a folder in use exits 2 and writes nothing") {
  const std::string dir = test::scratch_dir("identity_lock");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\n");
  const std::string out = dir + "/run";
  std::filesystem::create_directories(out);
  {
    const probes::run_folder_lock held(out);  // this process stands for a run still writing
    const test::cmd_result r = test::run_cmd(run_cmd_line(stories(), prompts, out, ""));
    INFO(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("is in use by another detaudit process") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(out + "/records.jsonl"));
    CHECK(probes::run_folder_busy(out));
  }
  CHECK_FALSE(probes::run_folder_busy(out));
  const test::cmd_result r = test::run_cmd(run_cmd_line(stories(), prompts, out, ""));
  INFO(r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("probes_identity: merge joins only the shards of one run, and a partial set only with --partial") {
  const std::string dir = test::scratch_dir("identity_merge");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe dog ran\nA bird sang\n");
  auto shard = [&](const std::string& name, const std::string& extra) {
    const test::cmd_result r = test::run_cmd(run_cmd_line(stories(), prompts, dir + "/" + name, extra));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
  };
  shard("s1", "--shard 1/2");
  shard("s2", "--shard 2/2");
  shard("s2n", "--shard 2/2 --n-predict 5");
  shard("whole", "");
  const std::string merge = test::detaudit_bin() + " merge --out " + dir + "/";
  const std::pair<std::string, std::string> refused[] = {
      {merge + "m1 " + dir + "/s1 " + dir + "/s2n", "request.n_predict: 4 vs 5"},
      {merge + "m2 " + dir + "/s1 " + dir + "/whole", "is not a shard"},
      {merge + "m3 " + dir + "/s1 " + dir + "/s1", "is given twice"},
      {merge + "m4 " + dir + "/s1", "shard(s) 2 of 2 are missing"},
  };
  for (const auto& [cmd, message] : refused) {
    const test::cmd_result r = test::run_cmd(cmd);
    INFO(cmd << " -> " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(message) != std::string::npos);
    CHECK(line_count(r.err) == 1);
  }
  const test::cmd_result full = test::run_cmd(merge + "all " + dir + "/s1 " + dir + "/s2");
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  CHECK(keys(dir + "/all") == keys(dir + "/whole"));
  const test::cmd_result part = test::run_cmd(merge + "part " + dir + "/s1 --partial");
  INFO(part.err);
  REQUIRE(part.exit_code == 0);
  const json m = json::parse(test::file_text(dir + "/part/run.json"));
  CHECK(m["shards"]["missing"] == json::array({2}));
  CHECK(m["shards"]["merged"] == json::array({1}));
  const test::cmd_result rep = test::run_cmd(test::detaudit_bin() + " report " + dir + "/part");
  CHECK(rep.out.find("incomplete run: shard(s) 2 of 2 are missing") != std::string::npos);
}

TEST_CASE("probes_identity: compare exits 2 when nothing is comparable and names why") {
  const std::string dir = test::scratch_dir("identity_compare");
  const std::string p = test::write_file(dir + "/p.txt", "Once upon a time\nThe dog ran\n");
  const std::string q = test::write_file(dir + "/q.txt", "A bird sang\nThe sea was blue\n");  // the same ids 1, 2
  auto run = [&](const std::string& name, const std::string& prompts, const std::string& extra) {
    const test::cmd_result r = test::run_cmd(run_cmd_line(stories(), prompts, dir + "/" + name, extra));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return dir + "/" + name;
  };
  const std::string a = run("a", p, ""), b = run("b", q, ""), c = run("c", p, "--n-predict 6"), d = run("d", p, "");
  const std::string cmp = test::detaudit_bin() + " compare ";
  test::cmd_result r = test::run_cmd(cmp + a + " " + b);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("every common item's prompt differs") != std::string::npos);
  r = test::run_cmd(cmp + a + " " + c);
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("request.n_predict: 4 vs 6") != std::string::npos);
  CHECK(r.err.find("--ignore-settings") != std::string::npos);
  r = test::run_cmd(cmp + a + " " + c + " --ignore-settings --format json");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(json::parse(r.out)["differences"][0]["field"] == "request.n_predict");
  r = test::run_cmd(cmp + a + " " + d + " --format json --fail-on any");
  INFO(r.err);
  CHECK(r.exit_code == 0);  // the exact engine, like for like
  CHECK(json::parse(r.out)["differences"].empty());
}

TEST_CASE("probes_identity: a first request the target refuses stops the run at once with exit 2 and the fix") {
  const std::string dir = test::scratch_dir("identity_refused");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe dog ran\nA bird sang\n");
  const test::cmd_result r = test::run_cmd(run_cmd_line(stories(), prompts, dir + "/run", "--request '{\"n_probs\": -3}'"));
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("refused the first request") != std::string::npos);
  CHECK(r.err.find("every request would fail the same way") != std::string::npos);
  CHECK(r.err.find("--resume") == std::string::npos);
  CHECK(line_count(r.err) == 1);
  CHECK(reports::records_read_file(dir + "/run/records.jsonl").empty());
}

TEST_CASE("probes_identity: Ctrl-C stops the run cleanly with exit 130, the records kept, and --resume completes it") {
  const std::string dir = test::scratch_dir("identity_sigint");
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "Tell me a story about the number " + std::to_string(i) + "\n";
  const std::string prompts = test::write_file(dir + "/p.txt", lines);
  const std::string out = dir + "/run";
  const std::string err_path = dir + "/stderr";
  test::child_spec spec;
  spec.argv = {test::detaudit_bin(), "run", "--target", stories(), "--prompts", prompts, "--raw", "--n-predict", "4",
               "--probe", "repeat", "--out", out};
  spec.stderr_path = err_path;
  test::child_process run(std::move(spec));
  const std::string records = out + "/records.jsonl";
  for (int i = 0; i < 600 && !(std::filesystem::exists(records) && std::filesystem::file_size(records) > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int rc = run.signal_and_wait(SIGINT);
  const std::string err = test::file_text(err_path);
  INFO(err);
  REQUIRE(run.exited_normally());
  CHECK(rc == 130);
  CHECK(err.find("interrupted:") != std::string::npos);
  CHECK(err.find("--resume --out " + out) != std::string::npos);
  const std::vector<reports::record> kept = reports::records_read_file(records);
  CHECK(kept.size() > 0);
  CHECK(kept.size() < 100 * 3);
  const test::cmd_result resumed = test::run_cmd(test::detaudit_bin() + " run --target '" + stories() + "' --prompts " + prompts +
                                                 " --raw --n-predict 4 --probe repeat --out " + out + " --resume");
  INFO(resumed.err);
  CHECK(resumed.exit_code == 0);
  const std::multiset<std::string> k = keys(out);
  CHECK(k.size() == 100 * 3);
  CHECK(std::set<std::string>(k.begin(), k.end()).size() == 100 * 3);
}

TEST_CASE("probes_identity: a target that is not there, and lint alone that needs none") {
  const std::string dir = test::scratch_dir("identity_absent");
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nAt 2025-01-01T12:00:00 the log said\n");
  const std::string nowhere = "http://127.0.0.1:9";  // discard: nothing listens there
  test::cmd_result r = test::run_cmd(test::detaudit_bin() + " run --target " + nowhere + " --prompts " + prompts +
                                     " --retries 0 --out " + dir + "/run");
  INFO(r.err);
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("nothing was recorded") != std::string::npos);
  CHECK(r.err.find("kept in") == std::string::npos);
  r = test::run_cmd(test::detaudit_bin() + " run --target " + nowhere + " --prompts " + prompts + " --probe lint --retries 0");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("[timestamp] item 2") != std::string::npos);
  r = test::run_cmd(test::detaudit_bin() + " run --prompts " + prompts + " --probe lint");
  CHECK(r.exit_code == 0);
}
