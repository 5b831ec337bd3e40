// `detaudit report` and `detaudit compare` as a user runs them: run folders and .jsonl files
// written with the record writer, formats to stdout or -o, --fail-on exit codes, bad input. The
// record reader's range checks in-process: tests/unit/test_reports_cli.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "reports/audit/record.h"
#include "test_reports_util.h"
#include "test_util.h"

using detaudit::reports::json;
using detaudit::reports::record;
using detaudit::test::graded;
using detaudit::test::rec;
using detaudit::test::run_cmd;
using detaudit::test::shell_quote;
using detaudit::test::words;

namespace {

std::string bin() { return shell_quote(detaudit::test::detaudit_bin()); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

void write_records(const std::string& path, const std::vector<record>& recs) {
  detaudit::reports::record_writer w(path);
  for (const record& r : recs) w.write(r);
}

// A run folder: item q1 identical everywhere; item q2 right when alone and wrong beside 7 others.
std::string make_run(const std::string& name) {
  const std::string dir = detaudit::test::scratch_dir(name);
  write_records(dir + "/records.jsonl",
                {graded(rec("q1", "alone", words("#### 3")), "3"), graded(rec("q1", "control", words("#### 3")), "3"),
                 graded(rec("q2", "alone", words("so #### 4")), "4"), graded(rec("q2", "control", words("so #### 4")), "4")});
  std::vector<record> conc = {graded(rec("q1", "concurrent-8", words("#### 3"), "concurrency"), "3"),
                               graded(rec("q2", "concurrent-8", words("so #### 5"), "concurrency"), "4")};
  for (record& r : conc) r.evidence = {{"overlap", true}, {"batch_width", 8}};  // they shared forward steps
  write_records(dir + "/records-concurrency.jsonl", conc);
  std::ofstream(dir + "/run.json") << json{{"schema", 1}, {"run_id", "cli-run"}, {"tool_version", "0.1.0"}}.dump();
  return dir;
}

}  // namespace

TEST_CASE("report cli: a run folder prints a text report and exits 0 by default") {
  const std::string dir = make_run("report_cli_text");
  const auto r = run_cmd(bin() + " report " + shell_quote(dir));
  CAPTURE(r.err);
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "detaudit report: run cli-run"));
  CHECK(contains(r.out, "concurrency  alone vs concurrent-8  1/2"));
  CHECK(contains(r.out, "item q2 (alone vs concurrent-8): token 2, byte 8: ' 4'"));
  // stderr holds only the verdict line: within the default gate (none), one of two items differs.
  CHECK(r.err == "PASS: 1 of 2 items differ under concurrent-8 (p = 0.5), flips -1/+0; exit 0\n");
}

TEST_CASE("report cli: --fail-on decides the exit code and names the reasons on stderr") {
  const std::string dir = make_run("report_cli_fail");
  const auto any = run_cmd(bin() + " report " + shell_quote(dir) + " --fail-on any");
  CHECK(any.exit_code == 1);
  CHECK(any.err ==
        "detaudit report: --fail-on any: concurrency alone vs concurrent-8: 1 of 2 items differ\n"
        "FAIL: 1 of 2 items differ under concurrent-8 (p = 0.5), flips -1/+0 [1 reason(s) above, --fail-on any]; exit 1\n");
  const auto list = run_cmd(bin() + " report " + shell_quote(dir) + " --fail-on drift,errors,not-exercised");
  CHECK(list.exit_code == 0);
  const auto bad = run_cmd(bin() + " report " + shell_quote(dir) + " --fail-on any,bogus");
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "unknown gate 'bogus'"));
  // --min-judged holds by itself, under the viewer's default --fail-on none too.
  const auto few = run_cmd(bin() + " report " + shell_quote(dir) + " --min-judged 3");
  CHECK(few.exit_code == 1);
  CHECK(contains(few.err, "detaudit report: --min-judged 3: concurrency alone vs concurrent-8: only 2 item(s) judged, fewer than 3\n"));
  CHECK(run_cmd(bin() + " report " + shell_quote(dir) + " --fail-on drift --min-judged 2").exit_code == 0);
  const auto flips = run_cmd(bin() + " report " + shell_quote(dir) + " --fail-on flips --format json");
  CHECK(flips.exit_code == 1);
  CHECK(json::parse(flips.out)["pairs"][1]["right_to_wrong"] == 1);
  CHECK(run_cmd(bin() + " report " + shell_quote(dir) + " --fail-on score-drop:50").exit_code == 0);
  CHECK(run_cmd(bin() + " report " + shell_quote(dir) + " --fail-on score-drop:49.9").exit_code == 1);
  CHECK(run_cmd(bin() + " report " + shell_quote(dir) + " --fail-on none").exit_code == 0);
}

TEST_CASE("report cli: -o writes the chosen format to a file and nothing to stdout") {
  const std::string dir = make_run("report_cli_out");
  const auto r = run_cmd(bin() + " report " + shell_quote(dir) + " --format junit -o " + shell_quote(dir + "/out.xml"));
  CHECK(r.exit_code == 0);
  CHECK(r.out.empty());
  std::ifstream in(dir + "/out.xml");
  std::stringstream ss;
  ss << in.rdbuf();
  CHECK(ss.str().rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites", 0) == 0);
  CHECK(contains(ss.str(), "message=\"first difference at token 2: ' 4' vs ' 5'\""));
  const auto md = run_cmd(bin() + " report " + shell_quote(dir) + " --format md");
  CHECK(md.exit_code == 0);
  CHECK(contains(md.out, "## concurrency: alone vs concurrent-8"));
}

TEST_CASE("report cli: a last line cut short is skipped with a word on stderr") {
  const std::string dir = make_run("report_cli_truncated");
  std::ofstream(dir + "/records-concurrency.jsonl", std::ios::app) << "{\"schema\":1,\"item_id\":\"q3\",\"cond";
  const auto r = run_cmd(bin() + " report " + shell_quote(dir));
  CHECK(r.exit_code == 0);
  CHECK(contains(r.err, "skipped 1 last line(s) cut short"));
  CHECK(contains(r.out, "concurrency  alone vs concurrent-8  1/2"));
}

TEST_CASE("report cli: bad input exits 2 with one line on stderr") {
  const std::string dir = make_run("report_cli_bad");
  const std::string bad_dir = detaudit::test::scratch_dir("report_cli_bad_line");
  std::ofstream(bad_dir + "/records.jsonl") << "{\"schema\":1,\"item_id\":\"q\",\"condition\":\"alone\"}\nnot json\n";
  const std::vector<std::string> cases = {
      "report " + shell_quote(dir) + " --fail-on sometimes",
      "report " + shell_quote(dir) + " --fail-on score-drop:x",
      "report " + shell_quote(dir) + " --format pdf",
      "report /nonexistent/run/folder",
      "report " + shell_quote(bad_dir),
      "compare " + shell_quote(dir),
  };
  for (const std::string& c : cases) {
    CAPTURE(c);
    const auto r = run_cmd(bin() + " " + c);
    CHECK(r.exit_code == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.rfind("detaudit", 0) == 0);
  }
  CHECK(contains(run_cmd(bin() + " report " + shell_quote(bad_dir)).err, "records.jsonl:2"));
}

TEST_CASE("compare_runs cli: two .jsonl files compare item by item") {
  const std::string dir = detaudit::test::scratch_dir("compare_cli");
  write_records(dir + "/a.jsonl", {graded(rec("1", "alone", words("so #### 7")), "7"),
                                   graded(rec("2", "alone", words("it is #### 2")), "2")});
  write_records(dir + "/b.jsonl", {graded(rec("1", "alone", words("so #### 8"), "", "B"), "7"),
                                   graded(rec("2", "alone", words("it is #### 2"), "", "B"), "2")});
  const std::string args = shell_quote(dir + "/a.jsonl") + " " + shell_quote(dir + "/b.jsonl");
  const auto r = run_cmd(bin() + " compare " + args + " --format json");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  const json j = json::parse(r.out);
  REQUIRE(j["pairs"].size() == 1);
  CHECK(j["pairs"][0]["cond_a"] == "A:alone");
  CHECK(j["pairs"][0]["cond_b"] == "B:alone");
  CHECK(j["pairs"][0]["differ"] == 1);
  CHECK(j["pairs"][0]["rows"][0]["token_b"] == " 8");
  CHECK(j["manifest"]["a"]["path"] == dir + "/a.jsonl");
  const auto text = run_cmd(bin() + " compare " + args);
  CHECK(contains(text.out, "A = " + dir + "/a.jsonl, B = " + dir + "/b.jsonl"));
  const auto flips = run_cmd(bin() + " compare " + args + " --fail-on flips");
  CHECK(flips.exit_code == 1);
  CHECK(flips.err ==
        "detaudit compare: --fail-on flips: compare A:alone vs B:alone: 1 right-to-wrong flip(s)\n"
        "FAIL: 1 of 2 items differ under A:alone vs B:alone, flips -1/+0 [1 reason(s) above, --fail-on flips]; exit 1\n");
}

TEST_CASE("report cli: --help names the formats, --fail-on and examples") {
  for (const char* sub : {"report", "compare"}) {
    CAPTURE(sub);
    const auto r = run_cmd(bin() + " " + sub + " --help");
    CHECK(r.exit_code == 0);
    for (const char* word : {"junit", "json", "md", "score-drop:X", "flips", "Examples:", "Exit codes"})
      CHECK_MESSAGE(contains(r.out, word), word);
  }
}

// A hostile server can plant a value nested 100,000 deep inside a record's timings, request,
// usage or evidence; `bundle`, `report` (every format) and `merge` copied and printed it by
// recursion and died with SIGSEGV. Every command that reads records refuses it, naming the file
// and line, with exit 2.
TEST_CASE("reader cli: a record nested 100,000 deep stops report, bundle and merge with file and line, exit 2") {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const char* field : {"timings", "request", "usage", "evidence"}) {
    CAPTURE(field);
    const std::string dir = make_run(std::string("reader_cli_deep_") + field);
    std::ofstream(dir + "/records.jsonl", std::ios::app)
        << R"({"schema":1,"item_id":"q3","run_id":"cli-run","probe":"base","condition":"alone",")" << field << "\":"
        << "{\"x\":" << deep << "}}\n";
    std::vector<std::string> cmds;
    for (const char* f : {"text", "json", "md", "junit", "html"}) cmds.push_back("report " + shell_quote(dir) + " --format " + f);
    cmds.push_back("bundle " + shell_quote(dir) + " --item q1 --no-tar -o " + shell_quote(dir + "/bundle"));
    for (const std::string& c : cmds) {
      CAPTURE(c);
      const auto r = run_cmd(bin() + " " + c);
      CHECK(r.exit_code == 2);
      CHECK(count_lines(r.err) == 1);
      CHECK(contains(r.err, "records.jsonl:5"));
    }
    // merge reads the records of shards only: the folder becomes shard 1 of 2
    std::ofstream(dir + "/run.json") << json{{"schema", 1}, {"run_id", "cli-run"}, {"shard", {{"index", 1}, {"count", 2}}},
                                     {"identity", {{"shard", {{"count", 2}}}, {"items", {{"count", 3}}}}}}.dump();
    const auto m = run_cmd(bin() + " merge --partial " + shell_quote(dir) + " --out " + shell_quote(dir + "-merged"));
    CHECK(m.exit_code == 2);
    CHECK(count_lines(m.err) == 1);
    CHECK(contains(m.err, "records.jsonl:5"));
  }
}
