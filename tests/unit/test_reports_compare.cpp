// compare_run, compare_runs and --fail-on on hand-built runs: which pairs are built, how rows are
// judged (differ, error, not exercised, graded, flips) and counted, and the notes.
#include <doctest/doctest.h>

#include <algorithm>

#include "reports/compare.h"
#include "test_reports_util.h"
#include "util/error.h"

using namespace detaudit::reports;
using detaudit::test::graded;
using detaudit::test::rec;
using detaudit::test::words;

namespace {

record with_evidence(record r, const json& evidence) {
  r.evidence = evidence;
  return r;
}

record failed(record r, const std::string& error) {
  r.error = error;
  r.text.clear();
  r.tokens.clear();
  return r;
}

// Three graded items: item-1 right, item-2 right, item-10 wrong when alone.
std::vector<record> sample_run() {
  std::vector<record> v;
  const std::string t1 = "The answer is #### 18", t2 = "So #### 5", t10 = "It is #### 6";
  auto g1 = [](record r) { return graded(std::move(r), "18"); };
  auto g2 = [](record r) { return graded(std::move(r), "5"); };
  auto g10 = [](record r) { return graded(std::move(r), "7"); };
  v.push_back(g10(rec("item-10", "alone", words(t10))));
  v.push_back(g1(rec("item-1", "alone", words(t1))));
  v.push_back(g2(rec("item-2", "alone", words(t2))));
  for (auto [id, t] : {std::pair<std::string, std::string>{"item-1", t1}, {"item-2", t2}, {"item-10", t10}}) {
    record c = rec(id, "control", words(t));
    v.push_back(id == "item-1" ? g1(c) : id == "item-2" ? g2(c) : g10(c));
  }
  v.push_back(g1(with_evidence(rec("item-1", "concurrent-8", words("The answer is #### 17"), "concurrency"),
                               {{"overlap", true}, {"batch_width", 8}})));
  v.push_back(g2(failed(rec("item-2", "concurrent-8", {}, "concurrency"), "timeout")));
  v.push_back(g2(with_evidence(rec("item-2", "concurrent-8", words(t2), "concurrency"), {{"overlap", false}})));
  v.push_back(g10(with_evidence(rec("item-10", "concurrent-8", words("It is #### 7"), "concurrency"), {{"overlap", true}, {"batch_width", 8}})));
  v.push_back(g1(with_evidence(rec("item-1", "cache-warm", words(t1), "cache"), {{"cached_tokens", 12}})));
  v.push_back(g2(with_evidence(rec("item-2", "cache-warm", words(t2), "cache"), {{"cached_tokens", 0}})));
  v.push_back(g10(failed(rec("item-10", "cache-warm", {}, "cache"), "HTTP 503")));
  for (const char* id : {"item-1", "item-2", "item-10"})
    v.push_back(with_evidence(rec(id, "ubatch-8192", {}, "batch"),
                              {{"exercised", false}, {"reason", "not supported by this target (HTTP server)"}}));
  for (int k = 0; k < 3; ++k) {
    v.push_back(rec("item-1", "seed-fixed", words("s one"), "seed", "A", k));
    v.push_back(rec("item-2", "seed-fixed", words(k == 2 ? "s three" : "s two"), "seed", "A", k));
    v.push_back(rec("item-1", "seed-none", words(k == 1 ? "y" : "x"), "seed", "A", k));
  }
  return v;
}

const pair_summary& find_pair(const report& r, const std::string& cond_b) {
  auto it = std::find_if(r.pairs.begin(), r.pairs.end(), [&](const pair_summary& s) { return s.cond_b == cond_b; });
  REQUIRE(it != r.pairs.end());
  return *it;
}

bool has_note(const report& r, const std::string& part) {
  return std::any_of(r.notes.begin(), r.notes.end(), [&](const std::string& n) { return n.find(part) != std::string::npos; });
}

}  // namespace

TEST_CASE("report compare_run: pairs come in probe order with the control pair first") {
  const report r = compare_run(sample_run());
  std::vector<std::string> got;
  for (const pair_summary& s : r.pairs) got.push_back(s.probe + ":" + s.cond_a + ">" + s.cond_b);
  const std::vector<std::string> want = {"control:alone>control", "concurrency:alone>concurrent-8", "cache:alone>cache-warm",
                                         "batch:alone>ubatch-8192", "seed:seed-fixed#0>seed-fixed#k"};
  CHECK(got == want);
  CHECK(r.pairs[0].control);
  CHECK_FALSE(r.pairs[1].control);
  std::vector<std::string> items;
  for (const pair_item& row : r.pairs[0].rows) items.push_back(row.item_id);
  CHECK(items == std::vector<std::string>{"item-1", "item-2", "item-10"});
}

TEST_CASE("report compare_run: rows count as differ, error or not exercised, with grades and flips") {
  const report r = compare_run(sample_run());
  const pair_summary& ctl = find_pair(r, "control");
  CHECK(ctl.items == 3);
  CHECK(ctl.differ == 0);
  CHECK(ctl.graded == 3);
  CHECK(ctl.correct_a == 2);
  CHECK(ctl.correct_b == 2);

  const pair_summary& conc = find_pair(r, "concurrent-8");
  CHECK(conc.items == 3);
  CHECK(conc.differ == 2);
  CHECK(conc.errors == 0);  // the failed first try was superseded by the later record
  CHECK(conc.not_exercised == 1);
  CHECK(conc.graded == 2);
  CHECK(conc.correct_a == 1);
  CHECK(conc.correct_b == 1);
  CHECK(conc.right_to_wrong == 1);
  CHECK(conc.wrong_to_right == 1);
  CHECK(conc.wrong_to_other_wrong == 0);
  CHECK(conc.rows[0].flip == FLIP_RIGHT_TO_WRONG);
  CHECK(conc.rows[0].d.token_index == 4);
  CHECK(conc.rows[1].reason == "the requests did not overlap in time");
  CHECK_FALSE(conc.rows[1].exercised);
  CHECK(conc.rows[2].flip == FLIP_WRONG_TO_RIGHT);

  const pair_summary& cache = find_pair(r, "cache-warm");
  CHECK(cache.items == 3);
  CHECK(cache.differ == 0);
  CHECK(cache.errors == 1);
  CHECK(cache.not_exercised == 1);
  CHECK(cache.rows[1].reason == "no tokens were served from the cache");
  CHECK(cache.rows[2].error);

  const pair_summary& batch = find_pair(r, "ubatch-8192");
  CHECK(batch.not_exercised == 3);
  CHECK(batch.differ == 0);
  CHECK(has_note(r, "batch alone vs ubatch-8192: 3 of 3 not exercised: not supported by this target (HTTP server)"));
}

TEST_CASE("report compare_run: seed repetitions pair with repetition 0 and seed-none counts distinct answers") {
  const report r = compare_run(sample_run());
  const pair_summary& seed = find_pair(r, "seed-fixed#k");
  CHECK(seed.items == 4);
  CHECK(seed.differ == 1);
  std::vector<std::string> rows;
  for (const pair_item& row : seed.rows) rows.push_back(row.item_id + " " + row.cond_a + ">" + row.cond_b);
  CHECK(rows == std::vector<std::string>{"item-1 seed-fixed#0>seed-fixed#1", "item-1 seed-fixed#0>seed-fixed#2",
                                         "item-2 seed-fixed#0>seed-fixed#1", "item-2 seed-fixed#0>seed-fixed#2"});
  CHECK_FALSE(seed.rows[3].d.identical);
  CHECK(has_note(r, "seed-none: item item-1: 2 distinct answer(s) among 3"));
  CHECK(has_note(r, "1 record(s) were superseded"));
}

TEST_CASE("report compare_run: both wrong with different answers is a wrong-to-other-wrong flip") {
  std::vector<record> v = {graded(rec("q", "alone", words("#### 3")), "4"),
                           graded(rec("q", "repeat", words("#### 5"), "repeat"), "4"),
                           graded(rec("p", "alone", words("it is #### 3")), "4"),
                           graded(rec("p", "repeat", words("so #### 3"), "repeat"), "4")};
  const report r = compare_run(std::move(v));
  const pair_summary& s = find_pair(r, "repeat");
  CHECK(s.differ == 2);
  CHECK(s.wrong_to_other_wrong == 1);
  CHECK(s.rows[0].item_id == "p");
  CHECK(s.rows[0].flip == FLIP_NONE);  // a different text, the same wrong answer
  CHECK(s.rows[1].flip == FLIP_WRONG_TO_OTHER_WRONG);
}

TEST_CASE("report compare_run: a cold first request that differs from the same request later is noted") {
  std::vector<record> v = {with_evidence(rec("q", "alone", words("a b c")), {{"cold", true}}),
                           rec("q", "control", words("a b d")), rec("q", "repeat", words("a b d"), "repeat")};
  const report r = compare_run(std::move(v));
  CHECK(has_note(r, "the first request after the target started differed: item q (alone vs control): first difference "
                    "at token 2: ' c' vs ' d'"));
  CHECK(find_pair(r, "control").differ == 1);
  const std::vector<std::string> reasons = fail_reasons(r, fail_policy_parse("any"));
  REQUIRE(reasons.size() == 2);
  CHECK(reasons[0] == "run-to-run noise: control alone vs control: 1 of 1 items differ");
  CHECK(reasons[1] == "repeat alone vs repeat: 1 of 1 items differ");
}

TEST_CASE("report compare_run: two targets get their own pairs and cross pairs on shared conditions") {
  std::vector<record> v = {rec("q", "alone", words("x y"), "", "A"), rec("q", "control", words("x y"), "", "A"),
                           rec("q", "alone", words("x z"), "", "B"), rec("q", "control", words("x z"), "", "B"),
                           rec("r", "alone", words("k"), "", "A")};
  const report r = compare_run(std::move(v));
  std::vector<std::string> got;
  for (const pair_summary& s : r.pairs) got.push_back(s.probe + ":" + s.cond_a + ">" + s.cond_b);
  CHECK(got == std::vector<std::string>{"control:A:alone>A:control", "control:B:alone>B:control", "cross:A:alone>B:alone",
                                        "cross:A:control>B:control"});
  CHECK(r.pairs[2].items == 1);
  CHECK(r.pairs[2].differ == 1);
  CHECK(r.pairs[2].rows[0].d.token_index == 1);
  CHECK(has_note(r, "cross A:alone vs B:alone: 1 response(s) on one side only were left out"));
}

TEST_CASE("report compare_run: the last record of a request wins and lint findings become notes") {
  std::vector<record> v = {rec("q", "alone", words("a")), failed(rec("q", "control", {}), "connection reset"),
                           rec("q", "control", words("a"))};
  const json manifest = {{"run_id", "r1"},
                         {"lint", json::array({{{"severity", "warning"}, {"code", "temp0-top-p"}, {"message", "top_p < 1"}}})}};
  const report r = compare_run(std::move(v), manifest);
  CHECK(r.records.size() == 2);
  CHECK(r.pairs[0].errors == 0);
  CHECK(r.pairs[0].differ == 0);
  CHECK(has_note(r, "lint warning [temp0-top-p]: top_p < 1"));
  CHECK(r.manifest["run_id"] == "r1");
}

TEST_CASE("report compare_run: responses without a partner are left out and counted in a note") {
  std::vector<record> v = {rec("q1", "alone", words("a")), rec("q1", "concurrent-8", words("a"), "concurrency"),
                           rec("q2", "concurrent-8", words("b"), "concurrency"),
                           rec("q3", "seed-fixed", words("c"), "seed", "A", 1)};
  const report r = compare_run(std::move(v));
  CHECK(find_pair(r, "concurrent-8").items == 1);
  CHECK(has_note(r, "concurrency alone vs concurrent-8: 1 response(s) without an 'alone' partner were left out"));
  CHECK(find_pair(r, "seed-fixed#k").items == 0);
  CHECK(has_note(r, "seed seed-fixed#0 vs seed-fixed#k: 1 response(s) without a repetition-0 partner were left out"));
}

TEST_CASE("report compare_runs: one condition per side matches by item and notes one-sided items") {
  std::vector<record> a = {rec("1", "alone", words("a b")), rec("2", "alone", words("c d")), rec("3", "alone", words("e"))};
  std::vector<record> b = {rec("1", "concurrent-8", words("a b")), rec("2", "concurrent-8", words("c x")),
                           rec("4", "concurrent-8", words("e"))};
  const report r = compare_runs(std::move(a), std::move(b));
  REQUIRE(r.pairs.size() == 1);
  CHECK(r.pairs[0].cond_a == "A:alone");
  CHECK(r.pairs[0].cond_b == "B:concurrent-8");
  CHECK(r.pairs[0].items == 2);
  CHECK(r.pairs[0].differ == 1);
  CHECK(r.pairs[0].rows[1].d.token_index == 1);
  CHECK(has_note(r, "1 response(s) only in A and 1 only in B were left out"));
}

TEST_CASE("report compare_runs: several conditions match by condition, and the only target of each run is paired whatever its label") {
  std::vector<record> a = {rec("1", "alone", words("a b"), "", "A"), rec("1", "control", words("a b"), "", "A")};
  std::vector<record> b = {rec("1", "alone", words("a b"), "", "B"), rec("1", "control", words("a c"), "", "B")};
  const report r = compare_runs(std::move(a), std::move(b));
  REQUIRE(r.pairs.size() == 2);
  CHECK(r.pairs[0].cond_a == "A:alone");
  CHECK(r.pairs[0].differ == 0);
  CHECK(r.pairs[1].cond_b == "B:control");
  CHECK(r.pairs[1].differ == 1);
  REQUIRE(r.notes.size() == 1);  // bare records: no run.json to check the settings against
  CHECK(has_note(r, "records no identity"));
}

TEST_CASE("report fail_on: any, flips, score-drop and none decide on the right pairs") {
  const report r = compare_run(sample_run());
  // The batch probe's rows were all not exercised: it judged nothing, a finding under every gate
  // but none (issue 46.5), listed first.
  const std::string batch = "probe batch judged nothing: 3 row(s): 3 not exercised, 0 failed (not supported by this target (HTTP server))";
  const std::vector<std::string> any = fail_reasons(r, fail_policy_parse("any"));
  CHECK(any == std::vector<std::string>{batch, "concurrency alone vs concurrent-8: 2 of 2 items differ",
                                        "seed seed-fixed#0 vs seed-fixed#k: 1 of 4 items differ"});
  const std::vector<std::string> flips = fail_reasons(r, fail_policy_parse("flips"));
  CHECK(flips == std::vector<std::string>{batch, "concurrency alone vs concurrent-8: 1 right-to-wrong flip(s)"});
  CHECK(fail_reasons(r, fail_policy_parse("none")).empty());
  CHECK(fail_reasons(r, fail_policy_parse("score-drop:0")) == std::vector<std::string>{batch});  // 1 -> 1 of 2: no drop

  std::vector<record> v;
  for (int i = 0; i < 4; ++i) {
    const std::string id = "q" + std::to_string(i);
    v.push_back(graded(rec(id, "alone", words("#### 1")), "1"));
    v.push_back(graded(rec(id, "repeat", words(i == 0 ? "#### 2" : "#### 1"), "repeat"), "1"));
  }
  const report drop = compare_run(std::move(v));
  CHECK(fail_reasons(drop, fail_policy_parse("score-drop:25")).empty());  // exactly 25 points: not more
  const std::vector<std::string> over = fail_reasons(drop, fail_policy_parse("score-drop:24.9"));
  // One discordant pair: McNemar's p is 1, so the drop is stated as not significant.
  CHECK(over == std::vector<std::string>{"repeat alone vs repeat: score dropped 25.0 points (4 -> 3 of 4), more than 24.9; "
                                         "not significant (McNemar p = 1, 0.05 needed)"});
}

TEST_CASE("report fail_on: a bad spec is an input error naming what was expected") {
  CHECK(fail_policy_parse("score-drop:2.5").score_drop == 2.5);
  CHECK(fail_policy_parse("flips").flips);
  for (const char* bad : {"", "all", "score-drop:", "score-drop:x", "score-drop:-1", "score-drop:1x", "any,", ",any", "any,,flips",
                          "none,any", "any,bogus", "score-drop:0x10", "score-drop:inf"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(fail_policy_parse(bad), detaudit::input_error);
  }
}
