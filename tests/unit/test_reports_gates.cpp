// The noise model (--repeat K), the p-values on pairs, --fail-on lists, --min-judged and the verdict
// line, on hand-built runs whose expected counts and p-values are worked out in the comments.
#include <doctest/doctest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "reports/compare.h"
#include "test_reports_util.h"
#include "util/error.h"

using namespace detaudit::reports;
using namespace detaudit::test;

namespace {

// n items answered "x<i>" alone and under every control repetition, except where `noisy` says the
// last control answered otherwise; under "repeat" the first `differ` items answer "other".
std::vector<record> noise_run(int n, int controls, int differ, const std::vector<int>& noisy = {}) {
  std::vector<record> v;
  for (int i = 0; i < n; ++i) {
    const std::string id = "q" + std::to_string(i), t = "x" + std::to_string(i);
    v.push_back(rec(id, "alone", words(t)));
    for (int k = 0; k < controls; ++k) {
      const bool odd = k == controls - 1 && std::find(noisy.begin(), noisy.end(), i) != noisy.end();
      v.push_back(rec(id, "control", words(odd ? "noise" : t), "", "A", k));
    }
    v.push_back(rec(id, "repeat", words(i < differ ? "other" : t), "repeat"));
  }
  return v;
}

record failed_with(record r, const std::string& error) {
  r.error = error;
  r.text.clear();
  r.tokens.clear();
  return r;
}

const pair_summary& pair_named(const report& r, const std::string& cond_b) {
  for (const pair_summary& s : r.pairs)
    if (s.cond_b == cond_b) return s;
  FAIL("no pair with B = " << cond_b);
  return r.pairs.front();
}

}  // namespace

TEST_CASE("report noise: three alone answers per item, and an item whose answers disagree is noisy wherever it appears") {
  // q0, q1 differ under repeat; q1 and q3 have a control that answered otherwise.
  const report r = compare_run(noise_run(5, 2, 2, {1, 3}));
  CHECK(r.repeat == 3);
  CHECK(r.noise_items == 5);
  CHECK(r.noisy_items == 2);
  const pair_summary& rep = pair_named(r, "repeat");
  CHECK(rep.differ == 2);
  CHECK(rep.differ_beyond_noise == 1);  // q0 only: q1's alone answers disagree
  CHECK(rep.noisy == 2);
  for (const pair_item& row : rep.rows) {
    CAPTURE(row.item_id);
    CHECK(row.noisy == (row.item_id == "q1" || row.item_id == "q3"));
    CHECK(row.alone_n == 3);
    CHECK(row.alone_agree == (row.noisy ? 2 : 3));
  }
  // One control pair per repetition, each holding every item once; no beyond-noise count of their own.
  CHECK(pair_named(r, "control#0").items == 5);
  CHECK(pair_named(r, "control#1").items == 5);
  CHECK(pair_named(r, "control#1").differ == 2);
  CHECK(pair_named(r, "control#1").differ_beyond_noise == -1);
  const nlohmann::json j = nlohmann::json::parse(report_render(r, "json"));
  CHECK(j["noise"]["repeat"] == 3);
  CHECK(j["noise"]["noisy"] == 2);
  const std::string text = report_render(r, "text");
  CHECK(text.find("noise: 3 alone answers per item (alone and 2 controls); 2 of 5 item(s) noisy") != std::string::npos);
  CHECK(text.find("[noisy: alone answers agree 2 of 3]") != std::string::npos);
  CHECK(report_render(r, "md").find("noisy: alone answers agree 2 of 3") != std::string::npos);
  CHECK(report_render(r, "html").find("<span class=\"noisy\" title=\"noisy: alone answers agree 2 of 3\">(noisy)</span>") !=
        std::string::npos);
}

TEST_CASE("report noise: p_vs_noise is Fisher's one-sided test of the pair's rate against the controls'") {
  // repeat: 5 of 10 differ; control: 0 of 10. Only the observed table is as extreme:
  // C(10,5) C(10,0) / C(20,5) = 252 / 15504.
  const report r = compare_run(noise_run(10, 1, 5));
  const pair_summary& rep = pair_named(r, "repeat");
  REQUIRE(rep.p_vs_noise.has_value());
  CHECK(*rep.p_vs_noise == doctest::Approx(252.0 / 15504.0).epsilon(1e-12));
  CHECK_FALSE(pair_named(r, "control").p_vs_noise.has_value());
  // With no control there is no noise model: nothing to test against.
  std::vector<record> bare;
  for (record& x : noise_run(4, 1, 2))
    if (x.condition != "control") bare.push_back(std::move(x));
  const report nr = compare_run(std::move(bare));
  CHECK(nr.repeat == 0);
  CHECK_FALSE(pair_named(nr, "repeat").p_vs_noise.has_value());
  CHECK(pair_named(nr, "repeat").differ_beyond_noise == -1);
}

TEST_CASE("report significance: McNemar's p on the flips, Wilson and stderr in the JSON pair") {
  // 6 right->wrong, 0 wrong->right among 10 graded: p = 2 * 0.5^6 = 0.03125.
  std::vector<record> v;
  for (int i = 0; i < 10; ++i) {
    const std::string id = "g" + std::to_string(i);
    v.push_back(graded(rec(id, "alone", words("#### 1")), "1"));
    v.push_back(graded(rec(id, "control", words("#### 1")), "1"));
    v.push_back(graded(rec(id, "repeat", words(i < 6 ? "#### 2" : "#### 1"), "repeat"), "1"));
  }
  const report r = compare_run(std::move(v));
  const pair_summary& rep = pair_named(r, "repeat");
  REQUIRE(rep.mcnemar_p.has_value());
  CHECK(*rep.mcnemar_p == doctest::Approx(0.03125).epsilon(1e-12));
  const nlohmann::json j = nlohmann::json::parse(report_render(r, "json"));
  const nlohmann::json& pj = j["pairs"][1];
  CHECK(pj["cond_b"] == "repeat");
  CHECK(pj["mcnemar_p"].get<double>() == doctest::Approx(0.03125));
  CHECK(pj["accuracy_a"]["acc"] == 1.0);
  CHECK(pj["accuracy_a"]["wilson_hi"] == 1.0);  // exact at k = n
  CHECK(pj["accuracy_b"]["correct"] == 4);
  // 4/10: Wilson [0.1682, 0.6873]; stderr sqrt(0.4 * 0.6 / 9) = 0.1633.
  CHECK(pj["accuracy_b"]["wilson_lo"].get<double>() == doctest::Approx(0.16818).epsilon(1e-4));
  CHECK(pj["accuracy_b"]["wilson_hi"].get<double>() == doctest::Approx(0.68732).epsilon(1e-4));
  CHECK(pj["accuracy_b"]["stderr"].get<double>() == doctest::Approx(0.163299).epsilon(1e-5));
  // Both tests fire: 6 of 10 differ against the control's 0 of 10 (Fisher: C(10,6) / C(20,6) =
  // 210 / 38760 = 0.0054), and the flips are lopsided.
  const std::vector<std::string> sig = fail_reasons(r, fail_policy_parse("significant"));
  CHECK(sig == std::vector<std::string>{"repeat alone vs repeat: 6 of 10 items differ, more often than the control pair (Fisher p = 0.0054)",
                                        "repeat alone vs repeat: flips -6/+0 are lopsided (McNemar p = 0.031)"});
  const std::vector<std::string> drop = fail_reasons(r, fail_policy_parse("score-drop:10"));
  REQUIRE(drop.size() == 1);
  CHECK(drop[0].find("; significant (McNemar p = 0.031)") != std::string::npos);
  CHECK(report_render(r, "text").find("4/10 = 40.0% [16.8, 68.7] +- 16.3") != std::string::npos);
}

TEST_CASE("report gates: a list of gates, each with its own reason") {
  std::vector<record> v = noise_run(4, 1, 1);
  v.push_back(failed_with(rec("q9", "alone", {}), "HTTP 500"));
  v.push_back(rec("q9", "control", words("z")));
  // q1's repeat answer drifted: same tokens, a moved log-prob.
  for (record& x : v)
    if (x.item_id == "q1" && (x.condition == "alone" || x.condition == "repeat"))
      x.top_logprobs = {{{word_id("x1"), "x1", x.condition == "alone" ? -0.5 : -0.25}}};
  const report r = compare_run(std::move(v));
  CHECK(fail_reasons(r, fail_policy_parse("none")).empty());
  const std::vector<std::string> got = fail_reasons(r, fail_policy_parse("drift, errors"));
  CHECK(got == std::vector<std::string>{"control alone vs control: 1 failed response(s)",
                                        "repeat alone vs repeat: 1 of 4 items drifted (same tokens, moved log-probs or logits)"});
  const std::vector<std::string> any = fail_reasons(r, fail_policy_parse("any,flips"));
  CHECK(any == std::vector<std::string>{"repeat alone vs repeat: 1 of 4 items differ"});
  // 1 of 4 against 0 of 4: p = C(4,1) C(4,0) / C(8,1) = 0.5, not significant.
  CHECK(fail_reasons(r, fail_policy_parse("significant")).empty());
  const std::vector<std::string> few = fail_reasons(r, fail_policy_parse("flips", 5));
  CHECK(few == std::vector<std::string>{"control alone vs control: only 4 item(s) judged, fewer than 5",
                                        "repeat alone vs repeat: only 4 item(s) judged, fewer than 5"});
  // --min-judged is asked for by itself: it holds under none too, under its own name.
  const std::vector<fail_finding> alone = fail_findings(r, fail_policy_parse("none", 5));
  REQUIRE(alone.size() == 2);
  CHECK(alone[0].gate == "--min-judged 5");
  CHECK(fail_findings(r, fail_policy_parse("drift,errors"))[0].gate == "--fail-on errors");
  CHECK_THROWS_AS(fail_policy_parse("any", -1), detaudit::input_error);
}

TEST_CASE("report gates: nothing judged is unjudged under every gate but none: exit 5") {
  std::vector<record> v = {failed_with(rec("q", "alone", {}), "HTTP 500"), rec("q", "control", words("a"))};
  const report r = compare_run(std::move(v));
  for (const char* spec : {"any", "flips", "drift", "score-drop:5"}) {
    CAPTURE(spec);
    const std::vector<std::string> got = fail_reasons(r, fail_policy_parse(spec));
    CHECK(got == std::vector<std::string>{"nothing was judged: every row failed, was not exercised or was not comparable"});
  }
  CHECK(fail_reasons(r, fail_policy_parse("none")).empty());
  const report empty = compare_run({});
  CHECK(fail_reasons(empty, fail_policy_parse("any")) == std::vector<std::string>{"nothing was judged: no pair of responses to compare"});
  const std::vector<fail_finding> f = fail_findings(empty, fail_policy_parse("any"));
  REQUIRE(f.size() == 1);
  CHECK(f[0].unjudged);
  CHECK(verdict_exit_code(f, false) == 5);
  CHECK(verdict_exit_code(f, true) == 3);
  CHECK(verdict_line(empty, fail_policy_parse("any"), fail_reasons(empty, fail_policy_parse("any")), 5) ==
        "UNJUDGED: nothing was judged [1 reason(s) above, --fail-on any]; exit 5");
}

// Issue 46.5: each probe the run asked for must judge a row of its own pairs. A run of the cache
// probe whose cache rows were all not exercised judged the control pair only: unjudged (exit 5),
// the probe named; a failing gate outranks it (exit 1).
TEST_CASE("report gates: a probe that judged nothing is unjudged, exit 5, and a failing gate outranks it") {
  record warm = rec("q", "cache-warm", words("a b"));
  warm.probe = "cache";
  warm.evidence = {{"exercised", false}, {"reason", "planted: not applied"}};
  std::vector<record> v = {rec("q", "alone", words("a b")), rec("q", "control", words("a b")), warm};
  const report r = compare_run(std::move(v), {{"identity", {{"probes", {"cache"}}}}});
  CHECK(r.probes_requested == std::vector<std::string>{"cache"});
  const std::vector<fail_finding> f = fail_findings(r, fail_policy_parse("any"));
  REQUIRE(f.size() == 1);
  CHECK(f[0].gate == "unjudged");
  CHECK(f[0].text == "probe cache judged nothing: 1 row(s): 1 not exercised, 0 failed (planted: not applied)");
  CHECK(verdict_exit_code(f, false) == 5);
  CHECK(fail_findings(r, fail_policy_parse("none")).empty());
  // A differing control pair fails `any` (exit 1) beside the unjudged probe.
  std::vector<record> w = {rec("q", "alone", words("a b")), rec("q", "control", words("a c")), warm};
  const report rw = compare_run(std::move(w), {{"identity", {{"probes", {"cache"}}}}});
  CHECK(verdict_exit_code(fail_findings(rw, fail_policy_parse("any")), false) == 1);
}

TEST_CASE("report verdict: one line naming the worst condition, beyond noise, p, drift, then the exit code") {
  const report r = compare_run(noise_run(10, 1, 5));
  const fail_policy any = fail_policy_parse("any");
  const std::vector<std::string> reasons = fail_reasons(r, any);
  CHECK(verdict_line(r, any, reasons, 1) ==
        "FAIL: 5 of 10 items differ under repeat (p = 0.016) [1 reason(s) above, --fail-on any]; exit 1");
  // Controls: 0 of 4 and 1 of 4 differ, pooled 1 of 8; repeat 2 of 4. Fisher, one-sided:
  // (C(4,2) C(8,1) + C(4,3) C(8,0)) / C(12,3) = 52 / 220 = 0.236.
  const report noisy = compare_run(noise_run(4, 2, 2, {0}));
  const fail_policy none = fail_policy_parse("none");
  CHECK(verdict_line(noisy, none, {}, 0) ==
        "PASS: 2 of 4 items differ (1 beyond noise) under repeat (p = 0.24), and in 1 other pair(s); exit 0");
  const report same = compare_run(noise_run(3, 1, 0));
  CHECK(verdict_line(same, any, fail_reasons(same, any), 0) == "PASS: no item differs in 2 pair(s) over 3 item(s); exit 0");
}

TEST_CASE("report trim: --only-differences and --max-items change what is listed, never the counts") {
  // repeat: q0..q2 differ; q3 drifted (same tokens, a moved log-prob); q4..q5 identical.
  std::vector<record> v = noise_run(6, 1, 3);
  for (record& x : v)
    if (x.item_id == "q3" && (x.condition == "alone" || x.condition == "repeat"))
      x.top_logprobs = {{{word_id("x3"), "x3", x.condition == "alone" ? -0.5 : -0.75}}};
  const report r = compare_run(std::move(v));
  const report only = report_trim(r, {true, -1});
  const pair_summary& rep = pair_named(only, "repeat");
  CHECK(rep.differ == 3);  // counts as before
  CHECK(rep.drifted == 1);
  std::vector<std::string> ids;
  for (const pair_item& row : rep.rows) ids.push_back(row.item_id);
  CHECK(ids == std::vector<std::string>{"q0", "q1", "q2", "q3"});
  CHECK(pair_named(only, "control").rows.empty());
  // At most 2 listed rows: the differing ones go first, the drifted one is left out; the identical
  // rows stay unless --only-differences.
  const report two = report_trim(r, {false, 2});
  ids.clear();
  for (const pair_item& row : pair_named(two, "repeat").rows) ids.push_back(row.item_id);
  CHECK(ids == std::vector<std::string>{"q0", "q1", "q4", "q5"});
  bool noted = false;
  for (const std::string& n : two.notes) noted = noted || n == "2 differing, drifted or failed row(s) beyond 2 per pair not listed "
                                                              "(--max-items); the counts include them";
  CHECK(noted);
  const nlohmann::json j = nlohmann::json::parse(report_render(report_trim(r, {true, 1}), "json"));
  CHECK(j["pairs"][1]["rows"].size() == 1);
  CHECK(j["pairs"][1]["differ"] == 3);
}

TEST_CASE("report text: an item that parts the same way under several conditions is one entry naming them all") {
  std::vector<record> v = {rec("q", "alone", words("a b c")), rec("q", "control", words("a b c")),
                           rec("q", "repeat", words("a b X"), "repeat"), rec("p", "alone", words("u v")),
                           rec("p", "control", words("u v")), rec("p", "repeat", words("u w"), "repeat")};
  record c = rec("q", "concurrent-8", words("a b X"), "concurrency");
  c.evidence = {{"overlap", true}, {"batch_width", 8}};
  v.push_back(c);
  record c2 = rec("p", "concurrent-8", words("u Z"), "concurrency");  // another divergence: its own entry
  c2.evidence = {{"overlap", true}, {"batch_width", 8}};
  v.push_back(c2);
  const std::string t = report_render(compare_run(std::move(v)), "text");
  CAPTURE(t);
  CHECK(t.find("  item q (alone vs repeat; also alone vs concurrent-8): token 2, byte 4: ' c'") != std::string::npos);
  CHECK(t.find("  item q (alone vs concurrent-8): the same divergence as under alone vs repeat, above\n") != std::string::npos);
  CHECK(t.find("  item p (alone vs repeat): token 1, byte 2: ' v'") != std::string::npos);
  CHECK(t.find("  item p (alone vs concurrent-8): token 1, byte 2: ' v'") != std::string::npos);
}

TEST_CASE("report junit: testcases carry the responses' real times, suites their sum, and the new figures as properties") {
  std::vector<record> v = noise_run(2, 1, 1);
  double ms = 100;
  for (record& x : v) x.timings = {{"latency_ms", ms}}, ms += 100;  // 100, 200, ... in record order
  v.push_back(rec("q9", "alone", words("z")));  // no timings: 0
  v.push_back(rec("q9", "repeat", words("z"), "repeat"));
  v.back().timings = {{"t_start", 10.0}, {"t_end", 10.5}};
  const std::string x = report_render(compare_run(std::move(v)), "junit");
  CAPTURE(x);
  // Records in order: q0 alone 100, control 200, repeat 300; q1 alone 400, control 500, repeat 600.
  CHECK(x.find("name=\"q0 [alone vs repeat]\" time=\"0.400\"") != std::string::npos);
  CHECK(x.find("name=\"q1 [alone vs repeat]\" time=\"1.000\"") != std::string::npos);
  CHECK(x.find("name=\"q9 [alone vs repeat]\" time=\"0.500\"") != std::string::npos);  // t_end - t_start, alone unknown
  CHECK(x.find("name=\"repeat: alone vs repeat\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"0\" time=\"1.900\"") !=
        std::string::npos);
  CHECK(x.find("<property name=\"differ_beyond_noise\" value=\"1\"/>") != std::string::npos);
  CHECK(x.find("<property name=\"mcnemar_p\" value=\"-\"/>") != std::string::npos);
}
