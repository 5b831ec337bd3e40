// lm-evaluation-harness sample files through the binary: `detaudit compare` detects them by the
// first line and renders hand-written pairs, bad lines are rejected, and `detaudit run --export
// lm-eval` is read back. In-process: tests/unit/test_reports_lmeval.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "reports/compare.h"
#include "reports/lmeval.h"
#include "test_reports_util.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using json = nlohmann::json;
using test::lmeval::sample;
using test::lmeval::write_lines;
using test::lmeval::write_pair;

namespace {

std::string bin() { return test::shell_quote(test::detaudit_bin()); }

}  // namespace

TEST_CASE("lmeval compare cli: sample files are detected, rendered, and --fail-on flips exits 1") {
  const std::string dir = test::scratch_dir("lmeval_cli");
  write_pair(dir);
  const std::string args = " " + dir + "/samples_gsm8k_2024-06-01T10-00-00.000001.jsonl " + dir +
                           "/samples_gsm8k_2024-06-02T10-00-00.000001.jsonl";
  const test::cmd_result j = test::run_cmd(bin() + " compare" + args + " --format json");
  INFO(j.err);
  REQUIRE(j.exit_code == 0);
  const json rep = json::parse(j.out);
  REQUIRE(rep["pairs"].size() == 2);
  CHECK(rep["pairs"][0]["right_to_wrong"] == 1);
  CHECK(rep["pairs"][0]["wrong_to_right"] == 1);
  const test::cmd_result t = test::run_cmd(bin() + " compare" + args);
  CHECK(t.exit_code == 0);
  CHECK(t.out.find("strict-match") != std::string::npos);
  const test::cmd_result f = test::run_cmd(bin() + " compare" + args + " --fail-on flips");
  CHECK(f.exit_code == 1);
  CHECK(f.err.find("right-to-wrong") != std::string::npos);
}

TEST_CASE("lmeval read: a bad line names the file, line and field") {
  const std::string dir = test::scratch_dir("lmeval_bad");
  json bad = sample(0, "strict-match", "x", "x", 1, "h", "x");
  bad["doc_id"] = "zero";
  const std::string p1 = write_lines(dir + "/bad_id.jsonl", {sample(1, "none", "x", "x", 1, "h", "x"), bad});
  CHECK_THROWS_WITH_AS(reports::lmeval_read(p1), doctest::Contains("bad_id.jsonl:2: \"doc_id\": expected an integer"),
                       input_error);
  const json dup = sample(0, "none", "x", "x", 1, "h", "x");
  const std::string p2 = write_lines(dir + "/dup.jsonl", {dup, dup});
  CHECK_THROWS_WITH_AS(reports::lmeval_read(p2), doctest::Contains("dup.jsonl:2: doc_id 0 with filter \"none\" appears twice"),
                       input_error);
  json no_resps = dup;
  no_resps.erase("resps");
  const std::string p3 = write_lines(dir + "/no_resps.jsonl", {no_resps});
  CHECK_FALSE(reports::lmeval_is_samples_file(p3));
  CHECK_THROWS_WITH_AS(reports::lmeval_read(p3), doctest::Contains("without \"resps\""), input_error);
  const test::cmd_result mixed = test::run_cmd(bin() + " compare " + p1 + " " + p3);
  CHECK(mixed.exit_code == 2);
  CHECK(mixed.err.find("is an lm-eval samples file but") != std::string::npos);
}

TEST_CASE("lmeval export cli: detaudit run --export lm-eval writes sample files that compare reads") {
  const std::string dir = test::scratch_dir("lmeval_run_export");
  {
    std::ofstream p(dir + "/p.jsonl", std::ios::binary);
    p << R"({"id": "a", "prompt": "Once upon a time", "answer": "#### 3", "grader": "gsm8k"})" "\n"
      << R"({"id": "b", "prompt": "The cat sat", "answer": "#### 4", "grader": "gsm8k"})" "\n";
  }
  const std::string spec = "engine:" + test::fixture("models/stories260K.gguf") + "?threads=1&np=4";
  const test::cmd_result run = test::run_cmd(bin() + " run --target '" + spec + "' --prompts " + dir +
                                             "/p.jsonl --raw --probe repeat --n-predict 6 --fail-on none --export lm-eval --out " +
                                             dir + "/run --format json");
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  CHECK(run.err.find("lm-eval samples: 3 file(s)") != std::string::npos);
  const std::string alone = dir + "/run/lm-eval/samples_base_alone.jsonl";
  const std::string control = dir + "/run/lm-eval/samples_base_control.jsonl";
  REQUIRE(std::filesystem::exists(alone));
  const std::vector<reports::lmeval_sample> a = reports::lmeval_read(alone);
  REQUIRE(a.size() == 4);
  const std::vector<reports::record> recs = reports::records_read(dir + "/run");
  for (const reports::lmeval_sample& s : a) {
    const std::string item = s.doc_id == 0 ? "a" : "b";
    for (const reports::record& r : recs)
      if (r.item_id == item && r.condition == "alone") CHECK(s.response == r.text);
  }
  const test::cmd_result cmp = test::run_cmd(bin() + " compare " + alone + " " + control + " --format json");
  INFO(cmp.err);
  REQUIRE(cmp.exit_code == 0);
  const json rep = json::parse(cmp.out);
  REQUIRE(rep["pairs"].size() == 2);
  for (const json& p : rep["pairs"]) {
    CHECK(p["items"] == 2);
    CHECK(p["differ"] == 0);  // the exact engine repeats itself
    CHECK(p["graded"] == 2);
  }
}
