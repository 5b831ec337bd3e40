// The oracle's tie bound and near-tie rule (reports/oracle.h), known answers worked out by hand:
// a target's precision is half the largest spread of server - exact within a step, so a server
// whose log-probs all carry one offset is credited with none of it; and a side whose pick is below
// the server's own top alternative by more than the bound is off, whatever exact math says. Every
// log-prob below is a multiple of 1/32 (and each offset one of 1/8), so every sum and difference is
// exact in binary and the expected figures are exact too.
#include <doctest/doctest.h>

#include <map>

#include "reports/compare.h"
#include "reports/output.h"
#include "test_oracle_util.h"
#include "test_reports_util.h"

using namespace detaudit;
using namespace detaudit::oracle_test;
using reports::oracle_response;
using reports::record;

namespace {

// The server's numbers at one step: its log-prob of its token, and its alternatives (id, log-prob).
struct served {
  double chosen;
  std::vector<std::pair<int32_t, double>> alts;
};

// A greedy record of token ids 5 then `tok` reporting these pre-sampling numbers, one per step.
record served_record(const std::string& item, const std::string& cond, int32_t tok, const std::vector<served>& steps) {
  const std::string probe = cond == "concurrent-8" ? "concurrency" : "";
  record r = greedy(test::rec(item, cond, {{5, " x"}, {tok, " y" + std::to_string(tok)}}, probe));
  r.logprobs_kind = "pre-sampling";
  for (size_t k = 0; k < steps.size(); ++k) {
    r.tokens[k].logprob = steps[k].chosen;
    std::vector<reports::alt_rec> alts;
    for (const auto& [id, lp] : steps[k].alts) alts.push_back({id, "t" + std::to_string(id), lp});
    r.top_logprobs.push_back(alts);
  }
  return r;
}

// The oracle's figures for `r`: these exact steps, and the fidelity measured as the probe measures
// it (oracle_step_fidelity over each pre-sampling value the server reported, its token's included
// once), `exact[k]` giving the exact log-prob of each reported id at step k.
oracle_response measured(const record& r, std::vector<reports::oracle_step> steps,
                         const std::vector<std::map<int32_t, double>>& exact) {
  oracle_response o;
  o.alignment = "ids";
  o.prompt_hash = "p1";
  o.prompt_tokens = 4;
  o.steps = std::move(steps);
  if (r.logprobs_kind != "pre-sampling") return o;
  for (size_t k = 0; k < r.tokens.size(); ++k) {
    std::vector<std::pair<double, double>> server_exact;
    bool listed = false;
    for (const reports::alt_rec& a : r.top_logprobs[k]) {
      server_exact.emplace_back(a.logprob, exact[k].at(a.id));
      listed = listed || a.id == r.tokens[k].id;
    }
    if (!listed) server_exact.emplace_back(*r.tokens[k].logprob, exact[k].at(r.tokens[k].id));
    reports::oracle_step_fidelity(o, server_exact);
  }
  return o;
}

// alone, control and concurrent-8 on one target (A) whose every reported log-prob is exact + c,
// except where a row says otherwise. Step 0 is token 5 everywhere (exact 5: -0.125, 6: -2.5); the
// rows part at step 1:
//   o1  exact 7: -0.25 (best), 8: -1.0, 16: -1.875 (rank 9). B picked 16, 1.625 below the best,
//       and reported no alternatives there (only exact math can call it).
//   o2  exact 7: -0.5, 8: -0.53125. B picked 8, 1/32 below the best, and reported 7 and 8 as
//       exact + c: its own numbers put it 1/32 below its top alternative. A real close call.
//   o3  exact 7: -0.5, 9: -0.53125. B picked 9, 1/32 below the best by exact math, but reported it
//       at -2 + c with 7 at -0.5 + c: its own numbers put its pick 1.5 below its top alternative.
//   o4  o3 with B sampled (temperature 0.7).
//   o5  o3 with B's log-probs post-sampling (not the model's distribution: its own numbers do not
//       count).
// Each alone answer is sent again as control. A's quiet responses report every value at exact + c,
// so each step's spread is 0: precision 0, bound max(0.05, 0 + 0) = 0.05.
std::pair<std::vector<record>, reports::oracle_data> offset_run(double c) {
  std::vector<record> v;
  reports::oracle_data d;
  const std::map<int32_t, double> e0 = {{5, -0.125}, {6, -2.5}};
  const served s0 = {-0.125 + c, {{5, -0.125 + c}, {6, -2.5 + c}}};
  const reports::oracle_step x0 = st(5, -0.125, 0, 5, -0.125, -2.5);
  auto add = [&](const std::string& item, const std::map<int32_t, double>& e1, int32_t tok_a, const served& a1,
                 reports::oracle_step xa, int32_t tok_b, const served& b1, reports::oracle_step xb) {
    const record a = served_record(item, "alone", tok_a, {s0, a1});
    record ctl = a;
    ctl.condition = "control";
    const record b = served_record(item, "concurrent-8", tok_b, {s0, b1});
    d.responses[reports::record_key(a)] = measured(a, {x0, xa}, {e0, e1});
    d.responses[reports::record_key(ctl)] = measured(ctl, {x0, xa}, {e0, e1});
    d.responses[reports::record_key(b)] = measured(b, {x0, xb}, {e0, e1});
    v.insert(v.end(), {a, ctl, b});
  };
  add("o1", {{7, -0.25}, {8, -1.0}, {16, -1.875}}, 7, {-0.25 + c, {{7, -0.25 + c}, {8, -1.0 + c}}},
      st(7, -0.25, 0, 7, -0.25, -1.0), 16, {-1.875 + c, {}}, st(16, -1.875, 9, 7, -0.25, -1.0));
  add("o2", {{7, -0.5}, {8, -0.53125}}, 7, {-0.5 + c, {{7, -0.5 + c}, {8, -0.53125 + c}}},
      st(7, -0.5, 0, 7, -0.5, -0.53125), 8, {-0.53125 + c, {{7, -0.5 + c}, {8, -0.53125 + c}}},
      st(8, -0.53125, 1, 7, -0.5, -0.53125));
  for (const char* item : {"o3", "o4", "o5"})
    add(item, {{7, -0.5}, {9, -0.53125}}, 7, {-0.5 + c, {{7, -0.5 + c}, {9, -0.53125 + c}}},
        st(7, -0.5, 0, 7, -0.5, -0.53125), 9, {-2.0 + c, {{7, -0.5 + c}, {9, -2.0 + c}}},
        st(9, -0.53125, 1, 7, -0.5, -0.53125));
  for (record& r : v) {
    if (r.condition != "concurrent-8") continue;
    if (r.item_id == "o4") r.temperature = 0.7;
    if (r.item_id == "o5") r.logprobs_kind = "post-sampling";
  }
  return {v, d};
}

// The run at offset c, compared and judged (the report owns its records).
reports::report judged(double c) {
  auto [recs, d] = offset_run(c);
  reports::report rep = reports::compare_run(recs);
  reports::oracle_apply(rep, d);
  return rep;
}

const reports::row_oracle& verdict_of(const reports::report& rep, const std::string& item) {
  const reports::pair_item& row = row_of(pair_of(rep, "concurrent-8"), item);
  REQUIRE(row.oracle.has_value());
  return *row.oracle;
}

}  // namespace

TEST_CASE("oracle bound: a step's spread is max - min of server - exact over its values, and a single value has none") {
  oracle_response o;
  // d = 0.875 and 0.875: |d| sums to 1.75, max 0.875; spread 0.875 - 0.875 = 0.
  reports::oracle_step_fidelity(o, {{0.75, -0.125}, {-1.625, -2.5}});
  CHECK(o.fid_n == 2);
  CHECK(o.fid_sum == 1.75);
  CHECK(o.fid_max == 0.875);
  CHECK(o.fid_equal == 0);
  CHECK(o.spread_n == 1);
  CHECK(o.spread_max == 0.0);
  // d = 0, 0.25, -0.125: |d| adds 0.375 (2.125 in all), max stays 0.875; one equal; spread
  // 0.25 - (-0.125) = 0.375.
  reports::oracle_step_fidelity(o, {{-0.5, -0.5}, {-1.25, -1.5}, {-3.0, -2.875}});
  CHECK(o.fid_n == 5);
  CHECK(o.fid_sum == 2.125);
  CHECK(o.fid_equal == 1);
  CHECK(o.spread_n == 2);
  CHECK(o.spread_max == 0.375);
  // One value (d = 0.5): fidelity, no spread. A value written as "impossible" does not count, so
  // the second step is one value too (d = 0.25).
  reports::oracle_step_fidelity(o, {{-1.0, -1.5}});
  reports::oracle_step_fidelity(o, {{-1e308, -20.0}, {-2.0, -2.25}});
  CHECK(o.fid_n == 7);
  CHECK(o.fid_sum == 2.875);
  CHECK(o.spread_n == 2);
  CHECK(o.spread_max == 0.375);
}

TEST_CASE("oracle bound: a server whose log-probs are all shifted by a constant is credited with no imprecision") {
  // 0.875: the absolute max |Δ| would make the bound 1.75, and o1's rank-9 pick 1.625 below the
  // best a near-tie. 1.875: over ORACLE_MAX_PRECISION, the target would get no verdict at all.
  for (const double c : {0.875, 1.875}) {
    INFO("offset " << c);
    const reports::report rep = judged(c);
    CHECK(rep.oracle["precision"]["A"] == 0.0);
    CHECK(rep.oracle["bound"] == reports::ORACLE_EXACT_BOUND);
    CHECK(rep.oracle["by_condition"]["alone"]["max"] == c);  // the absolute figures are still reported
    CHECK(rep.oracle["notes"].dump().find("nats from exact math alone") == std::string::npos);
    const reports::row_oracle& o1 = verdict_of(rep, "o1");
    CHECK(o1.cls == "server-error");  // 1.625 > 0.05, B greedy
    CHECK(o1.bound == reports::ORACLE_EXACT_BOUND);
    CHECK(o1.rank_b == 9);
    CHECK(o1.argmax_side == "a");
    CHECK_FALSE(o1.own_gap_b.has_value());  // B reported no alternatives at step 1
    CHECK(o1.own_gap_a == 0.0);             // A's token is its own top: (-0.25 + c) - (-0.25 + c)
    CHECK(reports::oracle_sentence(row_of(pair_of(rep, "concurrent-8"), "o1"))
              .find("picked a token 1.62 nats below what exact math gives, 't7' (-0.25): not a near-tie (tie bound "
                    "0.05 nats)") != std::string::npos);
  }
}

TEST_CASE("oracle bound: a pick below the server's own top alternative by more than the bound is not a near-tie") {
  for (const double c : {0.0, 0.875}) {
    INFO("offset " << c);
    const reports::report rep = judged(c);
    // o3: exact math puts B's pick 1/32 below the best (within 0.05), the server's own numbers
    // 1.5 below its top alternative ((-0.5 + c) - (-2 + c)): greedy, so a server error.
    const reports::row_oracle& o3 = verdict_of(rep, "o3");
    CHECK(o3.cls == "server-error");
    CHECK(o3.argmax_side == "both");
    CHECK(o3.own_gap_b == 1.5);
    CHECK(o3.own_best_b == "t7");
    CHECK(o3.off_b);
    CHECK_FALSE(o3.off_a);
    CHECK(reports::oracle_sentence(row_of(pair_of(rep, "concurrent-8"), "o3"))
              .find("picked a token its own log-probs put 1.5 nats below its top alternative 't7' (exact math puts it "
                    "0.0312 nats below the best, 't7' (-0.5)): not a near-tie") != std::string::npos);
    CHECK(verdict_of(rep, "o4").cls == "sampled");  // the same pick, not greedy
    // o5: post-sampling numbers are not the model's distribution; exact math alone calls it.
    const reports::row_oracle& o5 = verdict_of(rep, "o5");
    CHECK(o5.cls == "near-tie");
    CHECK_FALSE(o5.own_gap_b.has_value());
    const reports::json j = reports::json::parse(reports::report_render(rep, "json"));
    for (const reports::json& p : j["pairs"])
      for (const reports::json& row : p["rows"])
        if (row["item_id"] == "o3" && row["oracle"].is_object()) CHECK(row["oracle"]["own_gap_b"] == 1.5);
    CHECK(pair_of(rep, "concurrent-8").server_error == 2);  // o1 (exact math) and o3 (its own numbers)
  }
}

TEST_CASE("oracle bound: a real close call stays a near-tie") {
  for (const double c : {0.0, 0.875, 1.875}) {
    INFO("offset " << c);
    const reports::report rep = judged(c);
    // o2: 1/32 below the best by exact math and by the server's own numbers, both within 0.05.
    const reports::row_oracle& o2 = verdict_of(rep, "o2");
    CHECK(o2.cls == "near-tie");
    CHECK(o2.own_gap_b == 0.03125);
    CHECK_FALSE(o2.off_a);
    CHECK_FALSE(o2.off_b);
    CHECK(o2.bound == reports::ORACLE_EXACT_BOUND);
    CHECK(pair_of(rep, "concurrent-8").near_tie == 2);  // o2, and o5 (exact math only)
  }
}

namespace {

// Issue 46.9: item m1 where only alone moved. At step 1 alone (and its control) picked token 16,
// exact -1.875, rank 9, 1.625 below the best (7, -0.25); concurrent-8 picked 7, the best. The
// server's log-probs are exact (c = 0), so the bound is the floor 0.05: alone's side is off, the
// condition's is not.
reports::report alone_moved() {
  std::vector<record> v;
  reports::oracle_data d;
  const std::map<int32_t, double> e0 = {{5, -0.125}, {6, -2.5}}, e1 = {{7, -0.25}, {8, -1.0}, {16, -1.875}};
  const served s0 = {-0.125, {{5, -0.125}, {6, -2.5}}};
  const reports::oracle_step x0 = st(5, -0.125, 0, 5, -0.125, -2.5);
  const record a = served_record("m1", "alone", 16, {s0, {-1.875, {{7, -0.25}, {8, -1.0}, {16, -1.875}}}});
  record ctl = a;
  ctl.condition = "control";
  const record b = served_record("m1", "concurrent-8", 7, {s0, {-0.25, {{7, -0.25}, {8, -1.0}, {16, -1.875}}}});
  for (const record* r : {&a, static_cast<const record*>(&ctl)})
    d.responses[reports::record_key(*r)] = measured(*r, {x0, st(16, -1.875, 9, 7, -0.25, -1.0)}, {e0, e1});
  d.responses[reports::record_key(b)] = measured(b, {x0, st(7, -0.25, 0, 7, -0.25, -1.0)}, {e0, e1});
  v = {a, ctl, b};
  reports::report rep = reports::compare_run(v);
  reports::oracle_apply(rep, d);
  return rep;
}

}  // namespace

TEST_CASE("oracle verdict line: when only alone moved the headline names both sides, not the condition") {
  const reports::report rep = alone_moved();
  const reports::row_oracle& o = verdict_of(rep, "m1");
  CHECK(o.off_a);
  CHECK_FALSE(o.off_b);
  const reports::fail_policy any = reports::fail_policy_parse("any");
  const std::string line = reports::verdict_line(rep, any, reports::fail_reasons(rep, any), 1);
  INFO(line);
  CHECK(line.find("1 of 1 items differ between alone and concurrent-8 (the oracle puts the error on alone's side in 1, "
                  "on concurrent-8's in none)") != std::string::npos);
  CHECK(line.find("under concurrent-8") == std::string::npos);
  // The counterpart: in the offset run every error the oracle found is on concurrent-8's side.
  const reports::report other = judged(0.0);
  const std::string line_b = reports::verdict_line(other, any, reports::fail_reasons(other, any), 1);
  INFO(line_b);
  CHECK(line_b.find("items differ under concurrent-8") != std::string::npos);
}

// A greedy pick the server left out of its own list of alternatives, without its own log-prob (as
// llama.cpp's older shape gives a token outside its top-n): it is below every listed alternative,
// so at least best - last listed below its own top. Item u1: exact math calls the pick a close call
// (9 at -0.53125 against 7 at -0.5, within the 0.05 bound), but the server listed 7 at -0.5 and 8
// at -2 and not 9: at least 1.5 nats below its own top -> off, server-error, the gap a lower bound.
TEST_CASE("oracle bound: a greedy pick missing from the server's own alternatives is below them all") {
  const std::map<int32_t, double> e0 = {{5, -0.125}, {6, -2.5}}, e1 = {{7, -0.5}, {8, -2.0}, {9, -0.53125}};
  const served s0 = {-0.125, {{5, -0.125}, {6, -2.5}}};
  const reports::oracle_step x0 = st(5, -0.125, 0, 5, -0.125, -2.5);
  const record a = served_record("u1", "alone", 7, {s0, {-0.5, {{7, -0.5}, {8, -2.0}}}});
  record ctl = a;
  ctl.condition = "control";
  record b = served_record("u1", "concurrent-8", 9, {s0, {-0.53125, {{7, -0.5}, {8, -2.0}}}});
  reports::oracle_data d;
  for (const record* r : {&a, static_cast<const record*>(&ctl)})
    d.responses[reports::record_key(*r)] = measured(*r, {x0, st(7, -0.5, 0, 7, -0.5, -0.53125)}, {e0, e1});
  d.responses[reports::record_key(b)] = measured(b, {x0, st(9, -0.53125, 1, 7, -0.5, -0.53125)}, {e0, e1});
  b.tokens[1].logprob.reset();  // the server did not report its pick's log-prob
  reports::report rep = reports::compare_run({a, ctl, b});
  reports::oracle_apply(rep, d);
  const reports::row_oracle& o = verdict_of(rep, "u1");
  CHECK(o.own_gap_b == 1.5);
  CHECK(o.own_unlisted_b);
  CHECK(o.off_b);
  CHECK(o.cls == "server-error");
  CHECK(reports::oracle_sentence(row_of(pair_of(rep, "concurrent-8"), "u1")).find("its own list of alternatives leaves out, at least 1.5") !=
        std::string::npos);
}

// oracle.json figures are believed only for the tokens they were computed for: a record without
// ids whose tokens' bytes (" x", " y16") are not the oracle's pieces ("t5", "t16") is not judged.
TEST_CASE("oracle bound: figures whose pieces are not an id-less record's tokens are not believed") {
  auto [recs, d] = offset_run(0.0);
  for (record& r : recs)
    for (reports::token_rec& t : r.tokens) t.id = -1;
  reports::report rep = reports::compare_run(recs);
  reports::oracle_apply(rep, d);
  const reports::pair_item& row = row_of(pair_of(rep, "concurrent-8"), "o1");
  REQUIRE(row.oracle.has_value());
  CHECK(row.oracle->cls.empty());
  CHECK(row.oracle->note.find("do not match this response's tokens") != std::string::npos);
}
