// lm-evaluation-harness sample files: hand-written pairs with known flips compared item by item,
// detection by the first line, bad lines rejected, and `detaudit run --export lm-eval` read back.
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

namespace {

std::string bin() { return test::shell_quote(test::detaudit_bin()); }

// One gsm8k-style sample line.
json sample(int64_t doc_id, const std::string& filter, const std::string& resp, const std::string& filtered,
            double exact_match, const std::string& doc_hash, const std::string& target) {
  const json gen_args = {{"arg_0", "Question: q" + std::to_string(doc_id)}, {"arg_1", {{"until", {"Question:"}}}}};
  return {{"doc_id", doc_id},
          {"doc", {{"question", "q" + std::to_string(doc_id)}}},
          {"target", target},
          {"arguments", {{"gen_args_0", gen_args}}},
          {"resps", {{resp}}},
          {"filtered_resps", {filtered}},
          {"filter", filter},
          {"metrics", {"exact_match"}},
          {"doc_hash", doc_hash},
          {"prompt_hash", "p" + std::to_string(doc_id)},
          {"target_hash", "t" + std::to_string(doc_id)},
          {"exact_match", exact_match}};
}

std::string write_lines(const std::string& path, const std::vector<json>& lines) {
  std::ofstream out(path, std::ios::binary);
  for (const json& j : lines) out << j.dump() << "\n";
  return path;
}

// Six docs, two filters. Per doc (strict-match, flexible-extract):
//   0: same text, right in both files                     -> identical, no flip
//   1: A "#### 42" right, B "#### 41" wrong                -> right->wrong in both filters
//   2: A "I think 7": strict wrong, flex right; B "#### 7" -> strict wrong->right, flex no flip
//   3: doc_hash differs (A right, B wrong)                 -> not compared, no flip
//   4: A "#### 3", B "#### 4", target 5                    -> wrong->other wrong in both filters
//   5: only in A                                           -> left out with a note
// A lists all strict lines, then all flex lines; B interleaves them per doc (alignment ignores order).
void write_pair(const std::string& dir) {
  struct doc {
    std::string a, a_strict, a_flex, b, b_strict, b_flex, target;
    double a_ok_s, a_ok_f, b_ok_s, b_ok_f;
  };
  const std::vector<doc> docs = {
      {"so #### 18", "18", "18", "so #### 18", "18", "18", "18", 1, 1, 1, 1},
      {"so #### 42", "42", "42", "so #### 41", "41", "41", "42", 1, 1, 0, 0},
      {"I think 7", "[invalid]", "7", "so #### 7", "7", "7", "7", 0, 1, 1, 1},
      {"so #### 9", "9", "9", "so #### 8", "8", "8", "9", 1, 1, 0, 0},
      {"so #### 3", "3", "3", "so #### 4", "4", "4", "5", 0, 0, 0, 0},
      {"so #### 6", "6", "6", "", "", "", "6", 1, 1, 0, 0},
  };
  std::vector<json> a, b;
  for (const char* filter : {"strict-match", "flexible-extract"}) {
    const bool strict = std::string(filter) == "strict-match";
    for (size_t i = 0; i < docs.size(); ++i) {
      const doc& d = docs[i];
      a.push_back(sample(int64_t(i), filter, d.a, strict ? d.a_strict : d.a_flex, strict ? d.a_ok_s : d.a_ok_f,
                         "h" + std::to_string(i), d.target));
    }
  }
  for (size_t i = 0; i < 5; ++i) {
    const doc& d = docs[i];
    const std::string hash = i == 3 ? "other" : "h" + std::to_string(i);
    b.push_back(sample(int64_t(i), "flexible-extract", d.b, d.b_flex, d.b_ok_f, hash, d.target));
    b.push_back(sample(int64_t(i), "strict-match", d.b, d.b_strict, d.b_ok_s, hash, d.target));
  }
  write_lines(dir + "/samples_gsm8k_2024-06-01T10-00-00.000001.jsonl", a);
  write_lines(dir + "/samples_gsm8k_2024-06-02T10-00-00.000001.jsonl", b);
}

const reports::pair_summary& pair_of(const reports::report& r, const std::string& filter) {
  for (const reports::pair_summary& s : r.pairs)
    if (s.cond_a == "A:" + filter) return s;
  FAIL("no pair for filter " << filter);
  throw std::logic_error("unreachable");
}

const reports::pair_item& row_of(const reports::pair_summary& s, const std::string& item) {
  for (const reports::pair_item& row : s.rows)
    if (row.item_id == item) return row;
  FAIL("no row for doc " << item);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("lmeval compare: two filters, known flips both ways, a doc_hash mismatch and a doc on one side") {
  const std::string dir = test::scratch_dir("lmeval_pair");
  write_pair(dir);
  const std::string fa = dir + "/samples_gsm8k_2024-06-01T10-00-00.000001.jsonl";
  const std::string fb = dir + "/samples_gsm8k_2024-06-02T10-00-00.000001.jsonl";
  CHECK(reports::lmeval_is_samples_file(fa));
  const reports::report r = reports::lmeval_compare(reports::lmeval_read(fa), reports::lmeval_read(fb));
  REQUIRE(r.pairs.size() == 2);
  CHECK(r.pairs[0].cond_a == "A:strict-match");  // A's order
  const reports::pair_summary& strict = pair_of(r, "strict-match");
  CHECK(strict.probe == "lm-eval");
  CHECK(strict.cond_b == "B:strict-match");
  CHECK(strict.items == 5);
  CHECK(strict.not_comparable == 1);
  CHECK(strict.differ == 3);
  CHECK(strict.graded == 4);
  CHECK(strict.correct_a == 2);
  CHECK(strict.correct_b == 2);
  CHECK(strict.right_to_wrong == 1);
  CHECK(strict.wrong_to_right == 1);
  CHECK(strict.wrong_to_other_wrong == 1);
  REQUIRE(strict.mcnemar_p.has_value());  // one each way: nothing to say, p = 1
  CHECK(*strict.mcnemar_p == 1.0);
  CHECK(row_of(strict, "0").d.identical);
  CHECK(row_of(strict, "1").flip == reports::FLIP_RIGHT_TO_WRONG);
  CHECK(row_of(strict, "1").d.char_offset == 9);  // "so #### 4|2" vs "so #### 4|1"
  CHECK(row_of(strict, "2").flip == reports::FLIP_WRONG_TO_RIGHT);
  CHECK(row_of(strict, "3").status == reports::STATUS_NOT_COMPARABLE);
  CHECK(row_of(strict, "3").reason.find("different documents") != std::string::npos);
  CHECK(row_of(strict, "3").flip == reports::FLIP_NONE);
  CHECK_FALSE(row_of(strict, "3").correct_a.has_value());
  CHECK(row_of(strict, "4").flip == reports::FLIP_WRONG_TO_OTHER_WRONG);

  const reports::pair_summary& flex = pair_of(r, "flexible-extract");
  CHECK(flex.items == 5);
  CHECK(flex.differ == 3);
  CHECK(flex.graded == 4);
  CHECK(flex.correct_a == 3);
  CHECK(flex.correct_b == 2);
  CHECK(flex.right_to_wrong == 1);
  CHECK(flex.wrong_to_right == 0);
  CHECK(flex.wrong_to_other_wrong == 1);
  CHECK(row_of(flex, "2").flip == reports::FLIP_NONE);

  bool only_note = false, doc_note = false;
  for (const std::string& n : r.notes) {
    only_note |= n.find("2 sample(s) only in A and 0 only in B") != std::string::npos;
    doc_note |= n.find("doc_id 3 (strict-match): different documents") != std::string::npos;
  }
  CHECK(only_note);
  CHECK(doc_note);
}

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

TEST_CASE("lmeval read: a number too large for a double is an input_error naming the line") {
  const std::string dir = test::scratch_dir("lmeval_number_overflow");
  const std::string path = dir + "/overflow.jsonl";
  std::ofstream(path, std::ios::binary) << sample(0, "none", "x", "x", 1, "h", "x").dump() << "\n"
                                        << "{\"doc_id\": 1e999, \"filter\": \"none\"}\n";
  CHECK_THROWS_WITH_AS(reports::lmeval_read(path), doctest::Contains("overflow.jsonl:2: not a JSON line"), input_error);
}

TEST_CASE("lmeval export: gsm8k records become strict-match and flexible-extract lines that read back") {
  const std::string dir = test::scratch_dir("lmeval_export");
  // q1: "so #### 4" is right under both filters; q2: "The answer is 4" has no "#### " (strict
  // [invalid], wrong) but its last number is 4 (flexible right). Side B answers q1 with 5.
  std::vector<reports::record> recs = {
      test::graded(test::rec("q1", "alone", test::words("so #### 4")), "4"),
      test::graded(test::rec("q2", "alone", test::words("The answer is 4")), "4"),
      test::graded(test::rec("q1", "control", test::words("so #### 5")), "4"),
      test::graded(test::rec("q2", "control", test::words("The answer is 4")), "4"),
      test::rec("q3", "alone", test::words("no grade")),
  };
  const std::vector<reports::lmeval_doc> docs = {{"q1", "Two and two?"}, {"q2", "Four?"}, {"q3", "Say it"}};
  const std::vector<std::string> files = reports::lmeval_export(recs, docs, dir + "/lm-eval");
  REQUIRE(files.size() == 2);
  CHECK(files[0] == dir + "/lm-eval/samples_base_alone.jsonl");
  CHECK(files[1] == dir + "/lm-eval/samples_base_control.jsonl");

  const std::vector<reports::lmeval_sample> a = reports::lmeval_read(files[0]);
  REQUIRE(a.size() == 5);  // q1, q2: two filters each; q3: one line, filter none
  CHECK(a[0].doc_id == 0);
  CHECK(a[0].filter == "flexible-extract");
  CHECK(a[1].filter == "strict-match");
  CHECK(a[1].filtered == "4");
  CHECK(a[1].correct == true);
  CHECK(a[1].target == "Work it out.\n#### 4");
  // sha256("Two and two?"), from `printf '%s' 'Two and two?' | sha256sum`
  CHECK(a[1].doc_hash == "38bc141ca3a83bdb1e0873e64a2cfb73aef83e60efe53a9e05743f8f88816c3f");
  CHECK(a[3].filter == "strict-match");
  CHECK(a[3].filtered == "[invalid]");
  CHECK(a[3].correct == false);
  CHECK(a[2].correct == true);  // q2 flexible-extract
  CHECK(a[4].filter == "none");
  CHECK_FALSE(a[4].correct.has_value());

  const reports::report r = reports::lmeval_compare(a, reports::lmeval_read(files[1]));
  const reports::pair_summary& strict = pair_of(r, "strict-match");
  CHECK(strict.items == 2);
  CHECK(strict.differ == 1);
  CHECK(strict.right_to_wrong == 1);
  CHECK(strict.correct_a == 1);
  CHECK(strict.correct_b == 0);

  // Items graded by flexible-extract (run --dataset's default) export both filters too.
  std::vector<reports::record> flex = {test::graded(test::rec("q1", "alone", test::words("so #### 4")), "4")};
  flex[0].grader = "gsm8k-flex";
  const std::vector<std::string> ff = reports::lmeval_export(flex, docs, dir + "/flex");
  const std::vector<reports::lmeval_sample> fs = reports::lmeval_read(ff[0]);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].filter == "flexible-extract");
  CHECK(fs[1].filter == "strict-match");

  // Nothing comparable is an input error, as for two runs: no doc and filter in both files ...
  std::vector<reports::lmeval_sample> other = a;
  for (reports::lmeval_sample& s : other) s.filter = "another";
  CHECK_THROWS_WITH_AS(reports::lmeval_compare(a, other), doctest::Contains("nothing comparable: no doc_id and filter"), input_error);
  // ... or every matched doc another document.
  std::vector<reports::lmeval_sample> moved = a;
  for (reports::lmeval_sample& s : moved) s.doc_hash = "0";
  CHECK_THROWS_WITH_AS(reports::lmeval_compare(a, moved), doctest::Contains("nothing comparable: every doc"), input_error);
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
