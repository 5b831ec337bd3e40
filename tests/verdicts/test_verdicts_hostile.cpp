// A hostile or careless user's runs: folders that already hold another run or shard, shard numbers
// no run writes, graders the reports cannot apply, Ctrl-C while a target's API is detected, a server
// whose answers nest JSON a hundred thousand levels deep. Each must end in a clear exit (2 with one
// line, 3, 130), never a crash, a hang, a run wasted, or two runs mixed under one run.json.
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <functional>
#include <memory>
#include <sys/resource.h>
#include <thread>

#include "verdict_harness.h"

using namespace detaudit::verdicts_test;

namespace {

const answer SAME = answer({"Same", " answer"});

// One planted server and a scratch folder; `detaudit run --probe repeat` against it.
struct hostile_bench {
  planted p{OPENAI_CHAT};
  std::unique_ptr<verdict_server> srv;
  std::string dir = fresh_dir();

  explicit hostile_bench(const std::vector<std::string>& prompts, json server = json::object()) {
    for (const auto& [k, v] : server.items()) p.server(k, v);
    for (const std::string& pr : prompts) p.item(pr, {SAME});
    srv = std::make_unique<verdict_server>(p.cases());
  }
  std::string run_line(const std::string& out, const std::string& prompts_file, const std::string& extra) const {
    return "run --target " + srv->url() + " " + p.api_flags() + " --prompts " + prompts_file + " " + run_flags(dir + "/" + out) +
           " --probe repeat " + extra;
  }
  test::cmd_result run(const std::string& out, const std::string& prompts_file, const std::string& extra = "") const {
    return detaudit_cli(run_line(out, prompts_file, extra));
  }
  std::string prompts(const std::vector<std::string>& lines, const std::string& name = "p.txt") const {
    return prompts_write(dir, lines, name);
  }
};

size_t lines_of(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

void json_edit(const std::string& path, const std::function<void(json&)>& edit) {
  json j = json::parse(test::file_text(path));
  edit(j);
  file_write(std::filesystem::path(path).parent_path().string(), std::filesystem::path(path).filename().string(), j.dump(2));
}

}  // namespace

// A typo in a grader ("exakt") used to pass `detaudit run`, send every request, and then make every
// report of the folder fail (exit 2 at the end, and `detaudit report` refusing forever after). It
// must be refused before anything is sent, naming the file and line.
TEST_CASE("hostile: a grader the reports cannot apply is refused before anything is sent") {
  hostile_bench b({"grade me"});
  const std::pair<std::string, std::string> cases[] = {
      {R"({"id": "a", "prompt": "grade me", "answer": "1", "grader": "exakt"})", "unknown grader 'exakt'"},
      {R"({"id": "a", "prompt": "grade me", "grader": "regex:((("})", "not a valid regular expression"},
  };
  for (const auto& [line, message] : cases) {
    const std::string prompts = file_write(b.dir, "g.jsonl", line + "\n");
    const test::cmd_result r = b.run("run_grader", prompts);
    INFO(line << " -> " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(message) != std::string::npos);
    CHECK(r.err.find("g.jsonl:1") != std::string::npos);
    CHECK(lines_of(r.err) == 1);
  }
  CHECK(b.srv->requests().empty());
}

// `--resume --shard 2/3` into the folder of shard 1/3 used to be accepted: it appended shard 2's
// records beside shard 1's and rewrote run.json as shard 2, so a merge with the real shard 2 then
// held shard 1's items under shard 2's name. The shard index is part of what is resumed.
TEST_CASE("hostile: --resume with another --shard index exits 2 and writes nothing") {
  hostile_bench b({"one", "two", "three"});
  const std::string prompts = b.prompts({"one", "two", "three"});
  REQUIRE(b.run("s", prompts, "--shard 1/3").exit_code == 0);
  const std::string manifest = test::file_text(b.dir + "/s/run.json");
  const size_t sent = b.srv->requests().size();
  const test::cmd_result r = b.run("s", prompts, "--shard 2/3 --resume");
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("shard") != std::string::npos);
  CHECK(lines_of(r.err) == 1);
  CHECK(test::file_text(b.dir + "/s/run.json") == manifest);
  CHECK_FALSE(std::filesystem::exists(b.dir + "/s/records-2-of-3.jsonl"));
  CHECK(b.srv->requests().size() == sent);
}

// A fresh run (no --resume) into a folder that holds another run's or shard's records used to be
// accepted when its own records file had another name: run.json was replaced by the new run's,
// and every report of the folder read both runs' records as one.
TEST_CASE("hostile: a run into a folder holding another run's or shard's records exits 2") {
  hostile_bench b({"one", "two"});
  const std::string prompts = b.prompts({"one", "two"});
  REQUIRE(b.run("s", prompts, "--shard 1/2").exit_code == 0);
  const std::string manifest = test::file_text(b.dir + "/s/run.json");
  const std::string lint_alone = "run --prompts " + prompts + " --probe lint --out " + b.dir + "/s";
  for (const std::string& cmd : {b.run_line("s", prompts, ""), b.run_line("s", prompts, "--shard 2/2"), lint_alone}) {
    const test::cmd_result r = detaudit_cli(cmd);
    INFO(cmd << " -> " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("records-1-of-2.jsonl") != std::string::npos);
    CHECK(lines_of(r.err) == 1);
  }
  CHECK(test::file_text(b.dir + "/s/run.json") == manifest);
  CHECK_FALSE(std::filesystem::exists(b.dir + "/s/records.jsonl"));
  CHECK_FALSE(std::filesystem::exists(b.dir + "/s/records-2-of-2.jsonl"));
}

// merge trusted the shard numbers in run.json: shard 7 of 3 merged with --partial as "merged [2,
// 3, 7]", shard 0 of 0 as a complete run with nothing missing, and shard 1 of 2000000000 built a
// list of 2e9 missing shards (minutes, gigabytes). And `merge --out` into a folder holding a run's
// records mixed them with the merged ones.
TEST_CASE("hostile: merge refuses shard numbers no run writes, and an output folder holding records") {
  hostile_bench b({"one", "two", "three"});
  const std::string prompts = b.prompts({"one", "two", "three"});
  for (const char* s : {"1", "2", "3"}) REQUIRE(b.run(std::string("s") + s, prompts, std::string("--shard ") + s + "/3").exit_code == 0);
  const std::string s1 = b.dir + "/s1", s2 = b.dir + "/s2", s3 = b.dir + "/s3";
  const json original = json::parse(test::file_text(s1 + "/run.json"));
  const json shards[] = {{{"index", 7}, {"count", 3}}, {{"index", 0}, {"count", 0}}, {{"index", 1}, {"count", 2000000000}}};
  int n = 0;
  for (const json& shard : shards) {
    json_edit(s1 + "/run.json", [&shard](json& m) { m["shard"] = shard; });
    const test::cmd_result r = detaudit_cli("merge --partial --out " + b.dir + "/m" + std::to_string(n++) + " " + s1 + " " + s2 + " " + s3);
    INFO(shard.dump() << " -> " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("s1/run.json") != std::string::npos);
    CHECK(lines_of(r.err) == 1);
  }
  file_write(s1, "run.json", original.dump(2));
  const test::cmd_result into = detaudit_cli("merge --partial --out " + s1 + " " + s2 + " " + s3);
  INFO(into.err);
  CHECK(into.exit_code == 2);
  CHECK(into.err.find("records-1-of-3.jsonl") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(s1 + "/records.jsonl"));
  CHECK(json::parse(test::file_text(s1 + "/run.json")) == original);
}

// Ctrl-C while `detaudit run` detects a target's API (every GET answers 3 s late) used to end in
// "detaudit: internal error: ...: interrupted" and exit 4; a stop is exit 130 whenever it comes.
TEST_CASE("hostile: Ctrl-C while the target's API is being detected exits 130") {
  hostile_bench b({"slow probe"}, {{"get_delay_ms", 3000}});
  const std::string prompts = b.prompts({"slow probe"});
  const std::string err_path = b.dir + "/stderr";
  const std::string cmd = test::detaudit_bin() + " run --target " + b.srv->url() + " --chat --prompts " + prompts + " --out " +
                          b.dir + "/run --retries 0 --probe repeat";  // no --api: the dialect is detected
  test::child_process run(test::shell_spec(cmd + " >/dev/null 2>" + err_path));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const int rc = run.signal_and_wait(SIGINT);
  const std::string err = test::file_text(err_path);
  INFO(err);
  REQUIRE(run.exited_normally());
  CHECK(rc == 130);
  CHECK(err.find("internal error") == std::string::npos);
  CHECK(err.find("interrupted") != std::string::npos);
}

// A server whose /props and answers carry an array nested 100000 levels deep used to crash
// `detaudit run` (SIGSEGV: copying the JSON recursed past the stack). The answers are that
// request's error ("nests JSON ... levels deep"), as any malformed answer is; the run ends with 3.
TEST_CASE("hostile: a server answering JSON nested 100000 levels deep is an error per request, not a crash") {
  hostile_bench b({"deep"}, {{"props", true}, {"deep_json", 100000}});
  const std::string prompts = b.prompts({"deep"});
  const test::cmd_result r = b.run("run", prompts);
  INFO(r.err);
  CHECK(r.exit_code == 3);
  const std::string records = test::file_text(b.dir + "/run/records.jsonl");
  CHECK(records.find("levels deep") != std::string::npos);
}

// `--request '{"temperature": 1}'` makes every request sample at 1, yet each record said
// temperature 0 (the run's --temperature), so the greedy check flagged every row "greedy side A
// sampled a token below its top alternative" (a sampler bug, per the docs) although nothing greedy
// was asked for. The record carries the temperature the body was sent with.
TEST_CASE("hostile: a --request temperature is the record's temperature, and no greedy check is made of it") {
  planted p(OPENAI_CHAT);
  p.item("warm", {SAME}).seeded("warm", answer({"Roll"}).logprob(0, -1.0).top(0, {{"Dice", -0.25}, {"Roll", -1.0}}), true);
  const outcome r = run_planted(p, "--probe repeat --request '{\"temperature\": 1}'");
  const json& row = r.row("alone", "control");
  CHECK(row.value("not_argmax_a", true) == false);
  CHECK(row.value("not_argmax_b", true) == false);
  std::istringstream records(test::file_text(r.run_dir + "/records.jsonl"));
  for (std::string line; std::getline(records, line);) CHECK(json::parse(line).value("temperature", -1.0) == 1.0);
}

// `--out` naming a file (or a place no folder can be made) ended in "detaudit: internal error:
// filesystem error: cannot create directories: Not a directory", exit 4, for run, lint alone and
// merge alike: it is the user's input, exit 2 with one line naming it.
TEST_CASE("hostile: --out that cannot be a folder is an input error (exit 2), not an internal error") {
  hostile_bench b({"one", "two"});
  const std::string prompts = b.prompts({"one", "two"});
  REQUIRE(b.run("s", prompts, "--shard 1/2").exit_code == 0);
  const size_t sent = b.srv->requests().size();
  const std::string file = file_write(b.dir, "a-file", "not a folder\n");
  const std::string cmds[] = {
      "run --target " + b.srv->url() + " " + b.p.api_flags() + " --prompts " + prompts + " --probe repeat --out " + file,
      "run --prompts " + prompts + " --probe lint --out " + file + "/sub",
      "merge --partial --out " + file + " " + b.dir + "/s",
  };
  for (const std::string& cmd : cmds) {
    const test::cmd_result r = detaudit_cli(cmd);
    INFO(cmd << " -> " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("internal error") == std::string::npos);
    CHECK(r.err.find("a-file") != std::string::npos);
  }
  CHECK(b.srv->requests().size() == sent);
}

namespace {

// `detaudit ARGS` as a child of its own, with its peak resident memory (wait4: that process
// alone, not the verdict server).
struct measured_run {
  int exit_code = -1;
  std::string err;
  long max_rss_kb = 0;
};

measured_run run_measured(const std::string& args, const std::string& dir) {
  const std::string err_path = dir + "/measured.stderr";
  test::child_process run(test::shell_spec(test::detaudit_bin() + " " + args + " >/dev/null 2>" + err_path));
  rusage ru{};
  measured_run m;
  m.exit_code = run.wait(&ru);
  m.err = test::file_text(err_path);
  m.max_rss_kb = ru.ru_maxrss;
  return m;
}

uintmax_t file_bytes(const std::string& path) {
  std::error_code ec;
  const uintmax_t n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

}  // namespace

// A hostile server's floods used to cost far beyond the 256 MiB the client read: 10^6 tokens when
// 4 were asked took 1.7 GB and wrote 153 MB of records, 10^6 alternatives for one token 705 MB, a
// 200 MB answer of tiny values 5 GB, 250 MB of tiny events 1.39 GB; the concurrency probe sends
// several such requests at once. Each answer is now bounded by what its request can need (about
// 1 MiB here): every request of the run is an item error, the records stay small, and the run's
// peak memory stays far below any of those figures with 4 answers at once.
TEST_CASE("hostile: floods of tokens, alternatives, values and events are item errors in bounded memory") {
  struct flood_case {
    const char* kind;
    int64_t count;
    const char* extra;
    const char* error;
  };
  const flood_case cases[] = {
      {"tokens", 1000000, "", "larger than"},      // 2 MB of ids: past the answer's byte bound
      {"tokens", 40, "", "holds 40 tokens, more than the 4 asked"},
      {"alts", 1000000, "", "larger than"},
      {"alts", 300, "", "holds 300 alternatives"},
      {"values", 100000000, "", "larger than"},    // 200 MB of "0,"
      {"values", 400000, "", "JSON values"},       // 800 KB: within the bytes, past the values
      {"events", 7000000, "--stream", "larger than"},  // 250 MB of events
      {"events", 200, "--stream", "more than 84 events"},
  };
  for (const flood_case& c : cases) {
    CAPTURE(c.kind);
    CAPTURE(c.count);
    hostile_bench b({"flood"}, {{"flood", c.kind}, {"flood_count", c.count}});
    const std::string prompts = b.prompts({"flood"});
    const std::string out = b.dir + "/run";
    const measured_run r = run_measured("run --target " + b.srv->url() + " --api llamacpp --raw --prompts " + prompts +
                                            " --n-predict 4 --probe concurrency --concurrency 4 --retries 0 --timeout 60 --fail-on none --out " +
                                            out + " " + c.extra,
                                        b.dir);
    INFO(r.err);
    MESSAGE(std::string(c.kind) << " x" << c.count << ": peak RSS " << r.max_rss_kb / 1024 << " MiB, records " << file_bytes(out + "/records.jsonl")
                   << " bytes");
    CHECK(r.exit_code == 3);
    CHECK(r.max_rss_kb < 400 * 1024);
    CHECK(file_bytes(out + "/records.jsonl") < 64 * 1024);
    CHECK(file_bytes(out + "/run.json") < 64 * 1024);
    std::istringstream records(test::file_text(out + "/records.jsonl"));
    int n = 0;
    for (std::string line; std::getline(records, line); ++n) {
      const json rec = json::parse(line);
      CHECK(rec.value("error", "").find(c.error) != std::string::npos);
      CHECK(rec.value("tokens", json::array()).empty());
    }
    CHECK(n >= 2);  // every request the probe sent is recorded, as an error
  }
}

// Answers nested 100 levels deep passed (the readers' bound is 128) and their parts were stored a
// few levels further down in the record. An answer is bounded at 64 levels: deeper is that
// request's error, saying so.
TEST_CASE("hostile: an answer nested deeper than 64 levels is an item error naming the bound") {
  hostile_bench b({"deep"}, {{"deep_json", 100}});
  const std::string prompts = b.prompts({"deep"});
  const test::cmd_result r = b.run("run", prompts);
  INFO(r.err);
  CHECK(r.exit_code == 3);
  CHECK(test::file_text(b.dir + "/run/records.jsonl").find("nests JSON more than 64 levels deep") != std::string::npos);
}

// /props naming the build and fingerprint in 2 MB each, and 300,000 values 30 levels deep: both
// were copied into run.json (indented, a line per value) and the names into every record's target.
// run.json keeps the server's metadata cut to a fixed size, and each record a short name.
TEST_CASE("hostile: a huge /props is stored in run.json and the records bounded in size") {
  hostile_bench b({"one", "two"}, {{"props_name_bytes", 2 << 20}, {"props_depth", 30}, {"props_width", 300000}});
  const std::string prompts = b.prompts({"one", "two"});
  const test::cmd_result r = b.run("run", prompts);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  MESSAGE("run.json " << file_bytes(b.dir + "/run/run.json") << " bytes, records " << file_bytes(b.dir + "/run/records.jsonl") << " bytes");
  CHECK(file_bytes(b.dir + "/run/run.json") < 256 * 1024);
  CHECK(file_bytes(b.dir + "/run/records.jsonl") < 64 * 1024);
  const json manifest = json::parse(test::file_text(b.dir + "/run/run.json"));
  const std::string build = manifest["targets"][0]["capabilities"]["build"];
  CHECK(build.find("bytes, cut") != std::string::npos);
}
