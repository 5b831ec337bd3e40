// lm-evaluation-harness sample files: hand-written pairs with known flips compared item by item,
// a number out of range rejected, records exported as sample lines and read back. Through the
// binary (`detaudit compare` on sample files, bad lines, `detaudit run --export lm-eval`):
// tests/e2e/test_reports_lmeval.cpp.
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
using test::lmeval::write_pair;

namespace {

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

TEST_CASE("lmeval read: a number too large for a double is an input_error naming the line") {
  const std::string dir = test::scratch_dir("lmeval_number_overflow");
  const std::string path = dir + "/overflow.jsonl";
  std::ofstream(path, std::ios::binary) << sample(0, "none", "x", "x", 1, "h", "x").dump() << "\n"
                                        << "{\"doc_id\": 1e999, \"filter\": \"none\"}\n";
  CHECK_THROWS_WITH_AS(reports::lmeval_read(path), doctest::Contains("overflow.jsonl:2: not a JSON line"), input_error);
}

TEST_CASE("lmeval read: a line nested deeper than the records' limit is refused, as a record line is") {
  const std::string dir = test::scratch_dir("lmeval_deep");
  const std::string path = dir + "/deep.jsonl";
  const size_t depth = reports::JSON_MAX_DEPTH + 1;
  std::ofstream(path, std::ios::binary) << sample(0, "none", "x", "x", 1, "h", "x").dump() << "\n"
                                        << "{\"doc_id\": 1, \"filter\": \"none\", \"arguments\": "
                                        << std::string(depth, '[') << std::string(depth, ']') << "}\n";
  CHECK_THROWS_WITH_AS(reports::lmeval_read(path), doctest::Contains("deep.jsonl:2: JSON nested more than 128 levels deep"),
                       input_error);
  // One level less is read (and refused for what it lacks, not for its depth).
  std::ofstream(path, std::ios::binary) << "{\"doc_id\": 1, \"filter\": \"none\", \"arguments\": "
                                        << std::string(depth - 3, '[') << std::string(depth - 3, ']') << "}\n";
  try {
    reports::lmeval_read(path);
  } catch (const input_error& e) {
    CHECK(std::string(e.what()).find("nested") == std::string::npos);
  }
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
  const std::vector<reports::lmeval_doc> docs = {{"q1", "Two and two?", ""}, {"q2", "Four?", ""}, {"q3", "Say it", ""}};
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
  // lm-eval's doc_hash of the document {"question": "Two and two?"}, from python3 -c "import json,
  // hashlib; print(hashlib.sha256(json.dumps({'question': 'Two and two?'}, indent=2,
  // ensure_ascii=False).encode()).hexdigest())"
  CHECK(a[1].doc_hash == "34700532a1d4ce79ae898b34c4c68b0c269c75345bc875db1e182233af82113a");
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


// Python's json.dumps(doc, indent=2, ensure_ascii=False), which lm-eval hashes for doc_hash. The
// expected text and hash are CPython 3.11's for the same document (keys in the document's order).
TEST_CASE("lmeval doc_hash: documents are dumped as Python's json.dumps(indent=2, ensure_ascii=False)") {
  const reports::ordered_json doc = reports::ordered_json::parse(
      R"({"b": 1, "a": [1.5, 1e16, 0.0001, 1e-05, 100.0, true, null, {}], "c": "x\u0001y\"\\\u00e9\u2028", "d": {"e": []}})");
  CHECK(reports::lmeval_python_dumps(doc) ==
        "{\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    1e+16,\n    0.0001,\n    1e-05,\n    100.0,\n    true,\n    null,\n"
        "    {}\n  ],\n  \"c\": \"x\\u0001y\\\"\\\\\xc3\xa9\xe2\x80\xa8\",\n  \"d\": {\n    \"e\": []\n  }\n}");
  CHECK(reports::lmeval_doc_hash(doc) == "4afe1b803cc51e46136b7646b4a7b572fb406103744270b68c572bcc3d55e9db");
}

// Integers beyond 64 bits are valid JSON and exact in Python: lm-eval hashes their digits. The
// expected hash is CPython's for the same line (json.loads, then json.dumps(indent=2,
// ensure_ascii=False)); the exported doc keeps the digits.
TEST_CASE("lmeval doc_hash: an integer beyond 64 bits is hashed and exported as its digits") {
  const std::string dir = test::scratch_dir("lmeval_bigint");
  reports::record r = test::rec("q1", "alone", test::words("x"));
  const std::string line = R"({"q": "x", "n": 123456789012345678901234567890, "neg": -9223372036854775809, "f": 2.5})";
  const std::vector<reports::lmeval_doc> docs = {{"q1", "x", line}};
  const std::vector<std::string> files = reports::lmeval_export({r}, docs, dir);
  REQUIRE(files.size() == 1);
  const std::string text = test::file_text(files[0]);
  CHECK(text.find("\"n\":123456789012345678901234567890") != std::string::npos);
  CHECK(text.find("\"neg\":-9223372036854775809") != std::string::npos);
  const std::vector<reports::lmeval_sample> s = reports::lmeval_read(files[0]);
  REQUIRE(s.size() == 1);
  CHECK(s[0].doc_hash == "5daff0f5fe57997b7d36eb47bd81007f74bfc3cfebe21c0ae24a6fca6628a275");
}
