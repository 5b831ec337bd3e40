// report_render: the four formats on one hand-built report whose divergence points are known;
// JUnit parsed back by Python's XML parser and its counts checked against the elements.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "reports/compare.h"
#include "test_reports_util.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit::reports;
using detaudit::test::graded;
using detaudit::test::rec;
using detaudit::test::words;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

report sample_report() {
  return compare_run(detaudit::test::sample_records(), {{"run_id", "run-42"}, {"tool_version", "0.1.0"}});
}

}  // namespace

TEST_CASE("report formats: text shows the table, each differing item and the notes") {
  const std::string t = report_render(sample_report(), "text");
  CAPTURE(t);
  CHECK(contains(t, "detaudit report: run run-42, detaudit 0.1.0"));
  CHECK(contains(t, "PROBE"));
  CHECK(contains(t, "NOT-EXERCISED"));
  // 4 of 5 against the control's 0 of 7: Fisher's one-sided p = C(5,4) / C(12,4) = 5/495 = 0.0101.
  // NOISE: none of the 4 is on a noisy item; RETOKENIZED 0 of the 5 judged.
  CHECK(contains(t, "concurrency  alone vs concurrent-8  4/5     0      4             0.01        0/5          1/5      1       1  "
                    "            1/1 -> 0/1    -1/+0        -1   1"));
  CHECK(contains(t, "noise: 2 alone answers per item (alone and 1 control); 0 of 7 item(s) noisy"));
  CHECK(contains(t, "  concurrent-8  0/1 = 0.0% [0.0, 79.3] +- 0.0"));
  CHECK(contains(t, "control      alone vs control       0/7"));
  CHECK(contains(t, "item q1 (alone vs concurrent-8): token 2, byte 4: ' c' (id 3) vs ' X' (id 9)"));
  CHECK(contains(t, "margins 0.5 vs 0.125; logit hash differs from step 2"));
  CHECK(contains(t, "alone        : \"a b \" | \"c d\""));
  CHECK(contains(t, "concurrent-8 : \"a b \" | \"X d\""));
  CHECK(contains(t, "graded right -> wrong (right-to-wrong)"));
  CHECK(contains(t, "\"line one\\nline \" | \"two\""));
  CHECK(contains(t, "item q4 (alone vs concurrent-8): error: side B failed: HTTP 500"));
  CHECK(contains(t, "item q6 (alone vs concurrent-8): identical tokens; logits drifted at step 1"));
  CHECK(contains(t, "concurrency alone vs concurrent-8: 1 of 7 not exercised: the requests did not overlap in time"));
  // Listed for information, counted only as not exercised.
  CHECK(contains(t, "item q5 (alone vs concurrent-8): token 1, byte 2: ' q' (id 36394) vs ' r' (id 58775) [not exercised: "
                    "the requests did not overlap in time]"));
}

TEST_CASE("report formats: json carries every row field with nulls for what is unknown") {
  const json j = json::parse(report_render(sample_report(), "json"));
  CHECK(j["schema"] == 1);
  CHECK(j["manifest"]["run_id"] == "run-42");
  REQUIRE(j["pairs"].size() == 2);
  const json& p = j["pairs"][1];
  CHECK(p["probe"] == "concurrency");
  CHECK(p["cond_a"] == "alone");
  CHECK(p["cond_b"] == "concurrent-8");
  CHECK(p["control"] == false);
  CHECK(j["pairs"][0]["control"] == true);
  CHECK(p["items"] == 7);
  CHECK(p["differ"] == 4);
  CHECK(p["errors"] == 1);
  CHECK(p["not_exercised"] == 1);
  CHECK(p["graded"] == 1);
  CHECK(p["right_to_wrong"] == 1);
  REQUIRE(p["rows"].size() == 7);
  const json& q1 = p["rows"][0];
  CHECK(q1["item_id"] == "q1");
  CHECK(q1["identical"] == false);
  CHECK(q1["token_index"] == 2);
  CHECK(q1["char_offset"] == 4);
  CHECK(q1["token_a"] == " c");
  CHECK(q1["id_b"] == 9);
  CHECK(q1["before_b"] == "a b ");
  CHECK(q1["after_b"] == "X d");
  CHECK(q1["margin_a"] == 0.5);
  CHECK(q1["margin_b"] == 0.125);
  CHECK(q1["hash_step"] == 2);
  CHECK(q1["correct_a"].is_null());
  CHECK(q1["flip"] == "none");
  const json& q2 = p["rows"][1];
  CHECK(q2["margin_a"].is_null());
  CHECK(q2["correct_a"] == true);
  CHECK(q2["correct_b"] == false);
  CHECK(q2["flip"] == "right-to-wrong");
  CHECK(p["rows"][3]["error"] == true);
  CHECK(p["rows"][4]["exercised"] == false);
  CHECK(p["rows"][4]["reason"] == "the requests did not overlap in time");
  CHECK(p["rows"][5]["identical"] == true);
  CHECK(p["rows"][5]["hash_step"] == 1);
  const std::vector<std::string> keys = {"item_id", "cond_a", "cond_b", "identical", "token_index", "char_offset",
                                         "token_a", "token_b", "id_a", "id_b", "before_a", "after_a", "before_b",
                                         "after_b", "margin_a", "margin_b", "hashes_available", "hash_step",
                                         "token_index_a", "token_index_b", "tokenized_differently", "reasoning_compared",
                                         "reasoning_offset", "drift_step", "max_drift", "noisy", "alone_agree", "alone_n",
                                         "correct_a", "correct_b", "flip", "exercised", "reason", "error", "note",
                                         "oracle"};
  for (const std::string& k : keys) CHECK_MESSAGE(q1.contains(k), k);
  CHECK(j["notes"].size() == 1);
}

TEST_CASE("report formats: md has the summary table and a section per pair with code-span context") {
  const std::string m = report_render(sample_report(), "md");
  CAPTURE(m);
  CHECK(contains(m, "| probe | pair | differ | noise | beyond noise | p vs noise | retokenized | drifted | errors | not exercised | "
                    "score A -> B | flips -r/+w | net | McNemar p |"));
  CHECK(contains(m, "| concurrency | alone vs concurrent-8 | 4/5 | 0 | 4 | 0.01 | 0/5 | 1/5 | 1 | 1 | 1/1 -> 0/1 | -1/+0 | -1 | 1 |"));
  CHECK(contains(m, "## concurrency: alone vs concurrent-8"));
  CHECK(contains(m, "token 2: `  c ` vs `  X `; byte 4; margins 0.5 / 0.125; logit hash differs from step 2"));
  CHECK(contains(m, "  - alone: ` a b  ` | `c d`"));
  CHECK(contains(m, "  - alone: ` line one\\nline  ` | `two`"));  // a space at an end: padded
  CHECK(contains(m, "**right-to-wrong**"));
  CHECK_FALSE(contains(m, "## control"));
}

TEST_CASE("report formats: junit is well-formed XML whose counts match its testcases") {
  const std::string x = report_render(sample_report(), "junit");
  const std::string dir = detaudit::test::scratch_dir("reports_junit");
  {
    std::ofstream(dir + "/r.xml", std::ios::binary) << x;
  }
  const std::string script =
      "import json, sys, xml.dom.minidom as m\n"
      "d = m.parse(sys.argv[1])\n"
      "out = []\n"
      "for s in d.getElementsByTagName('testsuite'):\n"
      "  cases = s.getElementsByTagName('testcase')\n"
      "  count = lambda t: sum(len(c.getElementsByTagName(t)) for c in cases)\n"
      "  out.append({'name': s.getAttribute('name'), 'tests': s.getAttribute('tests'), 'failures': "
      "s.getAttribute('failures'), 'errors': s.getAttribute('errors'), 'skipped': s.getAttribute('skipped'), "
      "'n': len(cases), 'nf': count('failure'), 'ne': count('error'), 'ns': count('skipped'), "
      "'classnames': sorted(set(c.getAttribute('classname') for c in cases)), "
      "'names': [c.getAttribute('name') for c in cases], "
      "'messages': [f.getAttribute('message') for f in s.getElementsByTagName('failure')]})\n"
      "print(json.dumps(out))\n";
  {
    std::ofstream(dir + "/check.py") << script;
  }
  const auto res = detaudit::test::run_cmd("python3 " + dir + "/check.py " + dir + "/r.xml");
  CAPTURE(res.err);
  REQUIRE(res.exit_code == 0);
  const json suites = json::parse(res.out);
  REQUIRE(suites.size() == 3);
  CHECK(suites[0]["name"] == "control: alone vs control");
  CHECK(suites[0]["tests"] == "7");
  CHECK(suites[0]["failures"] == "0");
  CHECK(suites[0]["nf"] == 0);
  const json& c = suites[1];
  CHECK(c["name"] == "concurrency: alone vs concurrent-8");
  CHECK(c["tests"] == "7");
  CHECK(c["n"] == 7);
  CHECK(c["failures"] == "4");
  CHECK(c["nf"] == 4);
  CHECK(c["errors"] == "1");
  CHECK(c["ne"] == 1);
  CHECK(c["skipped"] == "1");
  CHECK(c["ns"] == 1);
  CHECK(c["classnames"] == json::array({"detaudit.concurrency"}));
  CHECK(c["names"][0] == "q1 [alone vs concurrent-8]");
  CHECK(c["messages"][0] == "first difference at token 2: ' c' vs ' X'");
  CHECK(c["messages"][2] == "first difference at token 0: 'line one\\nline two' vs 'line one\\nline 2'");
  CHECK(c["messages"][3] == "first difference at token 1: '\\x01\xEF\xBF\xBD" "z' vs '\\x02]]>'");
  CHECK(suites[2]["name"] == "detaudit notes");
  CHECK(contains(x, "\\x01"));
  CHECK(contains(x, "\xEF\xBF\xBD"));
  CHECK_FALSE(contains(x, "\x01"));
}

TEST_CASE("report formats: an unknown format is an input error") {
  CHECK_THROWS_AS(report_render(sample_report(), "html5"), detaudit::input_error);
}
