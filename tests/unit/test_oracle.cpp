// The oracle (reports/oracle.cpp, probes/oracle.cpp): known-answer verdicts on crafted responses
// with crafted exact figures (each class, each reason a row is not judged, the tie bound's three
// sources, a condition's worse fidelity and the server-error gate), the oracle file read back, and
// the engine-backed pass: exact responses judged by the exact engine match it bit for bit, prefix
// sharing evaluates each distinct token once, a forked branch scores as a fresh sequence does, and
// responses without ids are aligned by bytes or said to be unalignable.
#include <doctest/doctest.h>

#include <cstring>
#include <latch>
#include <thread>

#include "model/model.h"
#include "model/synth.h"
#include "probes/oracle.h"
#include "probes/target_engine.h"
#include "reports/compare.h"
#include "reports/output.h"
#include "runtime/context.h"
#include "runtime/generate.h"
#include "runtime/score.h"
#include "synth_util.h"
#include "test_oracle_util.h"
#include "test_reports_util.h"
#include "test_util.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

using namespace detaudit;
using reports::json;
using reports::oracle_data;
using reports::oracle_response;
using reports::oracle_step;
using reports::record;
using namespace detaudit::oracle_test;

namespace {

// alone vs concurrent-8 over six items, each parting at token 1; the exact figures at that step
// make t1 a near-tie, t2 a server error, t3 both off, t4 sampled (B not greedy), t5 two prompts,
// t6 a response the oracle skipped. Returns the records and the figures.
std::pair<std::vector<record>, oracle_data> crafted() {
  std::vector<record> v;
  oracle_data d;
  auto add = [&](const std::string& item, int32_t tok_a, int32_t tok_b, oracle_response oa, oracle_response ob) {
    record a = greedy(test::rec(item, "alone", {{5, " x"}, {tok_a, " a" + std::to_string(tok_a)}}));
    record b = greedy(test::rec(item, "concurrent-8", {{5, " x"}, {tok_b, " b" + std::to_string(tok_b)}}, "concurrency"));
    d.responses[reports::record_key(a)] = std::move(oa);
    d.responses[reports::record_key(b)] = std::move(ob);
    v.push_back(a);
    v.push_back(b);
  };
  const oracle_step s0 = st(5, -0.01, 0, 5, -0.01, -5);
  // t1: 7 is the exact best (-0.70), 8 is 0.01 below: within 2 x 0.01.
  add("t1", 7, 8, resp({s0, st(7, -0.70, 0, 7, -0.70, -0.71)}), resp({s0, st(8, -0.71, 1, 7, -0.70, -0.71)}));
  // t2: B picked a token 3.29 nats below the best.
  add("t2", 7, 9, resp({s0, st(7, -0.12, 0, 7, -0.12, -2.5)}), resp({s0, st(9, -3.41, 2, 7, -0.12, -2.5)}));
  // t3: neither side picked 6, the exact best.
  add("t3", 7, 8, resp({s0, st(7, -2.0, 1, 6, -0.1, -2.0)}), resp({s0, st(8, -2.5, 2, 6, -0.1, -2.0)}));
  // t4: like t2, but B sampled at temperature 0.7.
  add("t4", 7, 9, resp({s0, st(7, -0.12, 0, 7, -0.12, -2.5)}), resp({s0, st(9, -3.41, 2, 7, -0.12, -2.5)}));
  // t5: the two sides' prompts are other tokens.
  add("t5", 7, 9, resp({s0, st(7, -0.12, 0, 7, -0.12, -2.5)}), resp({s0, st(9, -3.41, 2, 7, -0.12, -2.5)}, 0.01, "p2"));
  // t6: B was not evaluated.
  oracle_response skipped;
  skipped.skipped = "its prompt is 4 tokens to the oracle and 6 to the server (another template, tokenizer or model file)";
  add("t6", 7, 9, resp({s0, st(7, -0.12, 0, 7, -0.12, -2.5)}), skipped);
  for (record& r : v)
    if (r.item_id == "t4" && r.condition == "concurrent-8") r.temperature = 0.7;
  const std::vector<record> base = v;
  for (const record& r : base)  // the control pair: each alone answer again, identical
    if (r.condition == "alone") {
      record c = r;
      c.condition = "control";
      d.responses[reports::record_key(c)] = d.responses.at(reports::record_key(r));
      v.push_back(c);
    }
  return {v, d};
}

}  // namespace

TEST_CASE("oracle: each divergence gets the class its exact log-probs call for") {
  auto [recs, d] = crafted();
  reports::report rep = reports::compare_run(recs);
  reports::oracle_apply(rep, d);
  // Measured: every response's max |Δ| is 0.01, so 0.02, raised to the floor of 0.05.
  CHECK(rep.oracle["bound"].get<double>() == reports::ORACLE_EXACT_BOUND);
  CHECK(rep.oracle["precision"]["A"] == 0.01);
  CHECK(rep.oracle["bound_source"].get<std::string>().rfind("measured", 0) == 0);
  const reports::pair_summary& p = pair_of(rep, "concurrent-8");

  const reports::row_oracle& t1 = *row_of(p, "t1").oracle;
  CHECK(t1.cls == "near-tie");
  CHECK(t1.step == 1);
  CHECK(t1.argmax_side == "both");
  CHECK(*t1.logprob_a == -0.70);
  CHECK(*t1.logprob_b == -0.71);
  CHECK(t1.rank_b == 1);

  const reports::row_oracle& t2 = *row_of(p, "t2").oracle;
  CHECK(t2.cls == "server-error");
  CHECK(t2.argmax_side == "a");
  CHECK(t2.argmax_token == "t7");
  CHECK(t2.margin == doctest::Approx(2.38));
  const std::string sentence = reports::oracle_sentence(row_of(p, "t2"));
  CHECK(sentence.find("at token 1 the server under concurrent-8 't9' (exact log-prob -3.41, rank 2) picked a token 3.29 "
                      "nats below what exact math gives, 't7' (-0.12): not a near-tie") != std::string::npos);

  CHECK(row_of(p, "t3").oracle->cls == "both-off");
  CHECK(row_of(p, "t3").oracle->argmax_side == "neither");
  CHECK(row_of(p, "t4").oracle->cls == "sampled");

  const reports::row_oracle& t5 = *row_of(p, "t5").oracle;
  CHECK(t5.cls.empty());
  CHECK(t5.note.find("prompts are different tokens") != std::string::npos);
  CHECK_FALSE(t5.logprob_a.has_value());
  const reports::row_oracle& t6 = *row_of(p, "t6").oracle;
  CHECK(t6.cls.empty());
  CHECK(t6.note.find("side B: its prompt is 4 tokens to the oracle and 6") != std::string::npos);

  CHECK(p.near_tie == 1);
  CHECK(p.server_error == 1);
  CHECK(p.both_off == 1);
  CHECK(p.sampled == 1);
  CHECK(p.unjudged == 2);
  CHECK(rep.oracle["classes"]["server-error"] == 1);
  // Identical rows (the control pair) get no verdict.
  for (const reports::pair_item& row : pair_of(rep, "control").rows) CHECK_FALSE(row.oracle.has_value());
}

TEST_CASE("oracle: the tie bound is --near-tie, else measured, else the documented default") {
  auto [recs, d] = crafted();
  {
    reports::report rep = reports::compare_run(recs);
    reports::oracle_apply_options o;
    o.near_tie = 5.0;  // a bound this wide makes t2's 3.29 nats a near-tie
    reports::oracle_apply(rep, d, o);
    CHECK(rep.oracle["bound"] == 5.0);
    CHECK(rep.oracle["bound_source"] == "--near-tie");
    CHECK(row_of(pair_of(rep, "concurrent-8"), "t2").oracle->cls == "near-tie");
  }
  for (auto& [k, o] : d.responses) o.fid_n = 0, o.spread_n = 0;  // the server reported nothing comparable
  reports::report rep = reports::compare_run(recs);
  reports::oracle_apply(rep, d);
  CHECK(rep.oracle["bound"] == reports::ORACLE_DEFAULT_TIE);
  CHECK(rep.oracle["bound_source"].get<std::string>().rfind("default", 0) == 0);
  CHECK(rep.oracle["fidelity"]["mean"].is_null());
  // 0.1: t1's 0.01 stays a near-tie, t2's 3.29 stays a server error.
  CHECK(row_of(pair_of(rep, "concurrent-8"), "t1").oracle->cls == "near-tie");
  CHECK(row_of(pair_of(rep, "concurrent-8"), "t2").oracle->cls == "server-error");
}

TEST_CASE("oracle: rows whose ids agree to the end of one side, or whose exact figures disagree, are not judged") {
  std::vector<record> v;
  oracle_data d;
  record a = greedy(test::rec("u1", "alone", {{5, " x"}, {7, " y"}}));
  record b = greedy(test::rec("u1", "concurrent-8", {{5, " x"}, {7, " y"}, {8, " z"}}, "concurrency"));
  d.responses[reports::record_key(a)] = resp({st(5, -0.1, 0, 5, -0.1, -3), st(7, -0.1, 0, 7, -0.1, -3)});
  d.responses[reports::record_key(b)] =
      resp({st(5, -0.1, 0, 5, -0.1, -3), st(7, -0.1, 0, 7, -0.1, -3), st(8, -0.1, 0, 8, -0.1, -3)});
  record a2 = greedy(test::rec("u2", "alone", {{5, " x"}, {7, " y"}}));
  record b2 = greedy(test::rec("u2", "concurrent-8", {{5, " x"}, {8, " z"}}, "concurrency"));
  d.responses[reports::record_key(a2)] = resp({st(5, -0.1, 0, 5, -0.1, -3), st(7, -0.1, 0, 7, -0.1, -3)});
  d.responses[reports::record_key(b2)] = resp({st(5, -0.1, 0, 5, -0.1, -3), st(8, -0.2, 1, 9, -0.05, -3)});
  v = {a, b, a2, b2};
  reports::report rep = reports::compare_run(v);
  reports::oracle_apply(rep, d);
  const reports::pair_summary& p = pair_of(rep, "concurrent-8");
  const reports::row_oracle& u1 = *row_of(p, "u1").oracle;
  CHECK(u1.cls.empty());
  CHECK(u1.note.find("agree for 2 steps, where side A ends") != std::string::npos);
  const reports::row_oracle& u2 = *row_of(p, "u2").oracle;
  CHECK(u2.cls.empty());
  CHECK(u2.note.find("detaudit bug") != std::string::npos);
}

TEST_CASE("oracle: a condition further from exact than alone is a finding, and --fail-on server-error fails on it") {
  auto [recs, d] = crafted();
  for (auto& [k, o] : d.responses) {
    const bool conc = k.find("concurrent-8") != std::string::npos;
    o.fid_sum = conc ? 0.02 : 0.002;  // mean 0.01 under concurrency, 0.001 alone
    o.fid_max = conc ? 0.015 : 0.0015;
  }
  reports::report rep = reports::compare_run(recs);
  reports::oracle_apply(rep, d);
  const reports::pair_summary& p = pair_of(rep, "concurrent-8");
  REQUIRE(p.fidelity.has_value());
  REQUIRE(p.fidelity_a.has_value());
  CHECK(p.fidelity->mean == doctest::Approx(0.01));
  CHECK(p.fidelity_a->mean == doctest::Approx(0.001));
  CHECK(p.fidelity_worse);
  CHECK_FALSE(pair_of(rep, "control").fidelity_worse);
  bool noted = false;
  for (const std::string& n : rep.notes) noted = noted || n.find("further from exact math under concurrent-8") != std::string::npos;
  CHECK(noted);
  const auto findings = reports::fail_findings(rep, reports::fail_policy_parse("server-error"));
  REQUIRE(findings.size() == 3);  // the server-error row, the rows not judged, the worse fidelity
  CHECK(findings[0].gate == "--fail-on server-error");
  CHECK(findings[0].text.find("divergence(s) where the server picked") != std::string::npos);
  CHECK(findings[1].text.find("2 divergence(s) the oracle could not judge") != std::string::npos);
  CHECK(findings[2].text.find("further from exact math") != std::string::npos);
  // Without the oracle's figures the gate has tested nothing, and does not pass.
  const reports::report bare = reports::compare_run(recs);
  const auto none = reports::fail_findings(bare, reports::fail_policy_parse("server-error"));
  REQUIRE(none.size() == 1);
  CHECK(none[0].text.find("no oracle figures") != std::string::npos);
  CHECK(reports::fail_findings(rep, reports::fail_policy_parse("flips")).empty());
  // The same figures with equal fidelity: no finding.
  for (auto& [k, o] : d.responses) o.fid_sum = 0.002, o.fid_max = 0.0015;
  reports::report same = reports::compare_run(recs);
  reports::oracle_apply(same, d);
  CHECK_FALSE(pair_of(same, "concurrent-8").fidelity_worse);
}

TEST_CASE("oracle: every report format carries the verdicts, and JSON log-probs read back as the same float") {
  auto [recs, d] = crafted();
  reports::report rep = reports::compare_run(recs);
  reports::oracle_apply(rep, d);
  const json j = json::parse(reports::report_render(rep, "json"));
  CHECK(j["oracle"]["classes"]["near-tie"] == 1);
  const json* pair = nullptr;
  for (const json& p : j["pairs"])
    if (p["cond_b"] == "concurrent-8") pair = &p;
  REQUIRE(pair);
  CHECK((*pair)["fidelity_max"] == 0.01);
  CHECK((*pair)["oracle_classes"]["server-error"] == 1);
  bool found = false;
  for (const json& row : (*pair)["rows"])
    if (row["item_id"] == "t2") {
      found = true;
      CHECK(row["oracle"]["class"] == "server-error");
      CHECK(row["oracle"]["logprob_b"] == -3.41);
      CHECK(row["oracle"]["rank_b"] == 2);
      CHECK(row["oracle"]["argmax_token"] == "t7");
      CHECK(row["oracle"]["sentence"].get<std::string>().find("not a near-tie") != std::string::npos);
    }
  CHECK(found);
  for (const char* f : {"text", "md", "html"}) {
    const std::string out = reports::report_render(rep, f);
    INFO(f);
    CHECK(out.find("server-error") != std::string::npos);
    CHECK(out.find("not a near-tie") != std::string::npos);
    CHECK(out.find("tie bound") != std::string::npos);
  }
  CHECK(reports::report_render(rep, "junit").find("(oracle: server-error)") != std::string::npos);
  // A float log-prob printed in the report's JSON parses back to the same bits.
  for (float f : {-3.41f, -0.1f, -1e-7f, -17.123456f}) {
    oracle_data d2 = d;
    for (auto& [k, o] : d2.responses)
      for (oracle_step& s : o.steps) s.logprob = static_cast<double>(f);
    reports::report r2 = reports::compare_run(recs);
    reports::oracle_apply(r2, d2);
    const json j2 = json::parse(reports::report_render(r2, "json"));
    for (const json& p : j2["pairs"])
      for (const json& row : p["rows"])
        if (row["oracle"].is_object() && row["oracle"]["logprob_a"].is_number()) {
          const float back = static_cast<float>(row["oracle"]["logprob_a"].get<double>());
          CHECK(std::memcmp(&back, &f, sizeof f) == 0);
          CHECK(row["oracle"]["logprob_a"].get<double>() == static_cast<double>(f));
        }
  }
}

TEST_CASE("oracle: the oracle file reads back as written, and a malformed one is an error naming the field") {
  auto [recs, d] = crafted();
  d.model = {{"path", "m.gguf"}};
  d.cost = {{"seconds", 1.5}};
  d.notes = {"a note"};
  const std::string dir = test::scratch_dir("oracle_file");
  CHECK_FALSE(reports::oracle_present(dir));
  reports::oracle_write(dir, d);
  CHECK(reports::oracle_present(dir));
  const oracle_data back = reports::oracle_read(dir);
  CHECK(reports::oracle_to_json(back) == reports::oracle_to_json(d));
  json j = reports::oracle_to_json(d);
  j["responses"][0]["steps"][1].erase("rank");
  CHECK_THROWS_WITH_AS(reports::oracle_from_json(j, "x.json"), doctest::Contains("steps[1]: missing field 'rank'"), input_error);
  json k = reports::oracle_to_json(d);
  k["schema"] = 99;
  CHECK_THROWS_WITH_AS(reports::oracle_from_json(k, "x.json"), doctest::Contains("schema 99"), input_error);
  // Schema 1 holds no spread, and its absolute max would put the offset back into the bound.
  k["schema"] = 1;
  CHECK_THROWS_WITH_AS(reports::oracle_from_json(k, "x.json"), doctest::Contains("schema 1, written before"), input_error);
  CHECK_THROWS_WITH_AS(reports::oracle_from_json(k, "x.json"), doctest::Contains("recompute it with --oracle"), input_error);
  json no_spread = reports::oracle_to_json(d);
  no_spread["responses"][0]["fidelity"].erase("spread_max");
  CHECK_THROWS_WITH_AS(reports::oracle_from_json(no_spread, "x.json"), doctest::Contains("missing field 'spread_max'"),
                       input_error);
  test::write_file(dir + "/oracle.json", "{\"schema\": 1, \"mod");
  CHECK_THROWS_WITH_AS(reports::oracle_read(dir), doctest::Contains("not valid JSON"), input_error);
}

// ---- the engine-backed oracle ----

namespace {

std::string oracle_model() {
  static const std::string path = [] {
    model::synth_options o = test::small_model(model::ARCH_LLAMA, gguf::DTYPE_Q8_0, 11, 1024);
    o.n_embd = 128;
    o.n_ff = 384;
    o.vocab_from = test::fixture("models/stories260K.gguf");
    const std::string p = test::process_scratch_dir("oracle_model") + "/model.gguf";
    model::synth_write(o, p);
    return p;
  }();
  return path;
}

const char* const PROMPTS[] = {"Once upon a time", "The cat sat on", "Lily liked to play"};

// Each prompt alone, then all of them at once, from an engine target in `numerics`.
std::vector<record> engine_records(const std::string& numerics, int64_t n_predict = 10, const std::string& model = "") {
  probes::target_options topt;
  auto t = probes::target_make_engine("engine:" + (model.empty() ? oracle_model() : model) + "?threads=1&numerics=" + numerics, topt);
  std::vector<record> out;
  auto req = [&](const char* p) {
    probes::gen_request r;
    r.prompt = p;
    r.n_predict = n_predict;
    r.n_probs = 4;
    r.temperature = 0;
    return r;
  };
  for (const char* p : PROMPTS) {
    record r = t->complete(req(p));
    r.item_id = p;
    r.condition = "alone";
    r.probe = "base";
    r.temperature = 0.0;
    r.target = {{"label", "A"}};
    out.push_back(r);
  }
  std::vector<record> together(std::size(PROMPTS));
  std::latch start(static_cast<std::ptrdiff_t>(std::size(PROMPTS)));
  std::vector<std::thread> th;
  for (size_t i = 0; i < std::size(PROMPTS); ++i)
    th.emplace_back([&, i] {
      start.arrive_and_wait();
      together[i] = t->complete(req(PROMPTS[i]));
    });
  for (std::thread& x : th) x.join();
  for (size_t i = 0; i < together.size(); ++i) {
    together[i].item_id = PROMPTS[i];
    together[i].condition = "concurrent-3";
    together[i].probe = "concurrency";
    together[i].temperature = 0.0;
    together[i].target = {{"label", "A"}};
    out.push_back(together[i]);
  }
  for (const record& r : out) REQUIRE_MESSAGE(r.error.empty(), r.error);
  return out;
}

oracle_data evaluate(const std::vector<record>& recs, const std::string& model = "") {
  probes::oracle_options o;
  o.spec = "engine:" + (model.empty() ? oracle_model() : model) + "?threads=1";
  return probes::oracle_evaluate(recs, o);
}

}  // namespace

TEST_CASE("oracle engine: exact responses match the exact oracle bit for bit, and each prompt is prefilled once") {
  const std::vector<record> recs = engine_records("exact");
  const oracle_data d = evaluate(recs);
  int64_t prompt_total = 0, distinct_steps = 0;
  for (const record& r : recs) {
    const oracle_response& o = d.responses.at(reports::record_key(r));
    INFO(r.item_id << " " << r.condition << ": " << o.skipped);
    REQUIRE(o.skipped.empty());
    CHECK(o.alignment == "ids");
    REQUIRE(o.steps.size() == r.tokens.size());
    CHECK(o.fid_n > 0);
    CHECK(o.fid_equal == o.fid_n);  // every reported log-prob is the oracle's, bit for bit
    CHECK(o.fid_max == 0.0);
    for (size_t k = 0; k < o.steps.size(); ++k) {
      CHECK(o.steps[k].id == r.tokens[k].id);
      CHECK(o.steps[k].rank == 0);  // greedy exact picks the exact argmax
      CHECK(o.steps[k].best_id == r.tokens[k].id);
      REQUIRE(r.tokens[k].logprob.has_value());
      CHECK(o.steps[k].logprob == *r.tokens[k].logprob);
    }
    if (r.condition == "alone") {
      prompt_total += o.prompt_tokens;
      distinct_steps += static_cast<int64_t>(o.steps.size()) - 1;  // the last token's logits are never needed
    }
  }
  // Exact responses alone and together are the same tokens: one prefill per prompt, each
  // continuation evaluated once for both conditions.
  CHECK(d.cost["prefills"] == 3);
  CHECK(d.cost["responses"] == 6);
  CHECK(d.cost["tokens_evaluated"].get<int64_t>() == prompt_total + distinct_steps);
  CHECK(d.cost["tokens_scored"].get<int64_t>() == 2 * (distinct_steps + 3));

  reports::report rep = reports::compare_run(recs);
  reports::oracle_apply(rep, d);
  CHECK(rep.oracle["fidelity"]["max"] == 0.0);
  CHECK(rep.oracle["fidelity"]["equal"] == rep.oracle["fidelity"]["values"]);
  CHECK(rep.oracle["precision"]["A"] == 0.0);
  CHECK(rep.oracle["bound"] == reports::ORACLE_EXACT_BOUND);  // the floor
  CHECK(rep.oracle["fidelity"]["off_argmax"] == 0);
}

TEST_CASE("oracle engine: a branch forked from a shared prefix scores as a fresh sequence does") {
  std::vector<record> recs = engine_records("exact", 12);
  std::shared_ptr<const model::model> m = model::model::load(oracle_model());
  record alt = recs[0];
  const size_t k = 5;
  alt.condition = "concurrent-3";
  alt.probe = "concurrency";
  alt.tokens[k].id = 300 + (alt.tokens[k].id + 17) % 200;  // force another (normal) token at step 5
  alt.tokens[k].text = tokenizer::token_to_piece(m->vocab(), alt.tokens[k].id, true);
  alt.tokens[k].bytes.clear();
  alt.text.clear();
  for (const reports::token_rec& t : alt.tokens) alt.text += t.text;
  alt.top_logprobs.clear();
  alt.evidence = {{"overlap", true}, {"batch_width", 3}};
  const std::vector<record> two = {recs[0], alt};
  const oracle_data d = evaluate(two);
  const oracle_response& o = d.responses.at(reports::record_key(alt));
  REQUIRE(o.skipped.empty());
  const size_t n = alt.tokens.size();
  CHECK(d.cost["tokens_evaluated"].get<int64_t>() ==
        o.prompt_tokens + static_cast<int64_t>(n - 1) + static_cast<int64_t>(n - 1 - k));
  // The same continuation scored on a fresh context.
  runtime::context_params cp;
  cp.n_ctx = 256;
  runtime::context ctx(m, cp);
  const std::vector<int32_t> prompt = runtime::generate_tokenize(m->vocab(), PROMPTS[0]);
  std::vector<int32_t> cont;
  for (const reports::token_rec& t : alt.tokens) cont.push_back(t.id);
  const runtime::score_result s = runtime::score(ctx, prompt, cont, 2);
  REQUIRE(s.steps.size() == o.steps.size());
  for (size_t i = 0; i < n; ++i) {
    INFO("step " << i);
    CHECK(o.steps[i].logprob == static_cast<double>(s.steps[i].logprob));
    CHECK(o.steps[i].best_id == s.steps[i].top[0].id);
    CHECK(o.steps[i].best_logprob == static_cast<double>(s.steps[i].top[0].logprob));
    CHECK(o.steps[i].second_logprob == static_cast<double>(s.steps[i].top[1].logprob));
  }
  CHECK(o.steps[k].rank > 0);
  // The row's verdict: alone picked the exact argmax, the forced token is far below it.
  reports::report rep = reports::compare_run(two);
  reports::oracle_apply(rep, d, reports::oracle_apply_options{0.01});
  bool judged = false;
  for (const reports::pair_summary& p : rep.pairs)
    for (const reports::pair_item& row : p.rows) {
      if (row.oracle) {
        judged = true;
        CHECK(row.oracle->step == static_cast<int64_t>(k));
        CHECK(row.oracle->argmax_side == "a");
        CHECK(row.oracle->cls == (o.steps[k].best_logprob - o.steps[k].logprob > 0.01 ? "server-error" : "near-tie"));
      }
    }
  CHECK(judged);
}

TEST_CASE("oracle engine: tokens without ids are aligned by their bytes, then by the text, else said to be unalignable") {
  // stories260K itself: a trained model emits the normal token for bytes a byte token also spells.
  const std::string stories = test::fixture("models/stories260K.gguf");
  const std::vector<record> recs = engine_records("exact", 8, stories);
  const oracle_data with_ids = evaluate({recs[0]}, stories);
  record no_ids = recs[0];
  for (reports::token_rec& t : no_ids.tokens) t.id = -1;
  for (auto& alts : no_ids.top_logprobs)
    for (reports::alt_rec& a : alts) a.id = -1;
  record text_only = recs[0];
  text_only.condition = "text-only";
  text_only.tokens.clear();
  text_only.top_logprobs.clear();
  record lost = recs[0];
  lost.condition = "lost";
  for (reports::token_rec& t : lost.tokens) t.id = -1;
  lost.tokens[1].text = "\xEF\xBF\xBD";  // the server replaced the token's bytes
  lost.tokens[1].bytes.clear();
  lost.text = "a\xEF\xBF\xBD";
  record other_vocab = recs[0];
  other_vocab.condition = "other-vocab";
  other_vocab.tokens[0].text = "zzz-not-this-token";
  other_vocab.tokens[0].bytes.clear();
  record prompt_count = recs[0];
  prompt_count.condition = "prompt-count";
  prompt_count.usage["prompt_tokens"] = 99;
  // Ids the model has no row for (issue 47.5: one aborted report --oracle): skipped, with why.
  record big_id = recs[0];
  big_id.condition = "big-id";
  big_id.tokens[1].id = 512;  // stories260K has 512 tokens, one row each
  record big_prompt = recs[0];
  big_prompt.condition = "big-prompt";
  big_prompt.request = {{"prompt", json::array({1, 70000})}};
  big_prompt.usage = json::object();
  const oracle_data d = evaluate({no_ids, text_only, lost, other_vocab, prompt_count, big_id, big_prompt}, stories);
  CHECK(d.responses.at(reports::record_key(big_id)).skipped.find("token 1 has id 512, outside this vocabulary (512 tokens)") == 0);
  CHECK(d.responses.at(reports::record_key(big_prompt)).skipped == "its prompt holds token id 70000, outside this vocabulary");
  const oracle_response& a = with_ids.responses.at(reports::record_key(recs[0]));
  const oracle_response& b = d.responses.at(reports::record_key(no_ids));
  CHECK(b.alignment == "pieces");
  REQUIRE(b.steps.size() == a.steps.size());
  for (size_t k = 0; k < a.steps.size(); ++k) CHECK(b.steps[k].logprob == a.steps[k].logprob);
  CHECK(b.fid_n == a.fid_n);  // the alternatives are mapped by their strings too
  CHECK(b.fid_max == 0.0);
  const oracle_response& t = d.responses.at(reports::record_key(text_only));
  CHECK(t.alignment == "retokenized");
  CHECK_FALSE(t.steps.empty());
  CHECK(t.fid_n == 0);
  CHECK(d.responses.at(reports::record_key(lost)).skipped.find("U+FFFD") != std::string::npos);
  CHECK(d.responses.at(reports::record_key(other_vocab)).skipped.find("is --oracle the model file the server serves?") !=
        std::string::npos);
  CHECK(d.responses.at(reports::record_key(prompt_count)).skipped.find("99 to the server") != std::string::npos);
}

TEST_CASE("oracle engine: float responses are judged near-ties within a measured bound") {
  const std::vector<record> recs = engine_records("float", 16);
  const oracle_data d = evaluate(recs);
  reports::report rep = reports::compare_run(recs);
  reports::oracle_apply(rep, d);
  const json& f = rep.oracle["fidelity"];
  CHECK(f["values"].get<int64_t>() > 0);
  CHECK(f["max"].get<double>() > 0.0);    // float numerics are not exact
  CHECK(f["max"].get<double>() < reports::ORACLE_DEFAULT_TIE);  // but close (float rounds activations as llama.cpp does)
  // The precision is half the largest spread of server - exact within a step: above 0, and never
  // above the largest |server - exact| (max d - min d <= 2 max |d|).
  const double precision = rep.oracle["precision"]["A"].get<double>();
  CHECK(precision > 0.0);
  CHECK(precision <= f["max"].get<double>());
  CHECK(rep.oracle["bound"].get<double>() == std::max(reports::ORACLE_EXACT_BOUND, 2 * precision));
  for (const reports::pair_summary& p : rep.pairs) {
    CHECK(p.server_error == 0);
    CHECK(p.both_off == 0);
  }
}

TEST_CASE("oracle engine: a server that adds one constant to every log-prob has a spread of 0 and the floor for a bound") {
  std::vector<record> recs = engine_records("exact");
  for (record& r : recs) {  // unnormalised: exact + 0.875 everywhere
    for (reports::token_rec& t : r.tokens)
      if (t.logprob) *t.logprob += 0.875;
    for (auto& alts : r.top_logprobs)
      for (reports::alt_rec& a : alts) a.logprob += 0.875;
  }
  const oracle_data d = evaluate(recs);
  for (const record& r : recs) {
    const oracle_response& o = d.responses.at(reports::record_key(r));
    REQUIRE(o.skipped.empty());
    CHECK(o.spread_n > 0);
    // Each exact log-prob is a float: adding 0.875 in double is exact unless the float has bits
    // below 2^-53 (|log-prob| < 2e-9), and then each d is within a few 2^-53 of 0.875.
    CHECK(o.spread_max < 1e-12);
    CHECK(o.fid_max == doctest::Approx(0.875));
    CHECK(o.fid_equal == 0);
  }
  reports::report rep = reports::compare_run(recs);
  reports::oracle_apply(rep, d);
  CHECK(rep.oracle["precision"]["A"].get<double>() < 1e-12);
  CHECK(rep.oracle["bound"] == reports::ORACLE_EXACT_BOUND);  // not 2 x 0.875
  CHECK(rep.oracle["fidelity"]["max"].get<double>() == doctest::Approx(0.875));
}

TEST_CASE("oracle engine: a bad spec is an error naming it") {
  CHECK_THROWS_WITH_AS(probes::oracle_spec_check("http://x"), doctest::Contains("expected engine:MODEL.gguf"), input_error);
  CHECK_THROWS_WITH_AS(probes::oracle_spec_check("engine:/nope.gguf"), doctest::Contains("not found"), input_error);
  CHECK_THROWS_WITH_AS(probes::oracle_spec_check("engine:" + oracle_model() + "?numerics=float"),
                       doctest::Contains("numerics must be exact"), input_error);
  CHECK_THROWS_WITH_AS(probes::oracle_spec_check("engine:" + oracle_model() + "?np=2"), doctest::Contains("unknown setting 'np'"),
                       input_error);
}

TEST_CASE("oracle engine: a token whose bytes the server put into the next token's text is checked with it") {
  // llama-server gives one log-probs entry per chunk of whole UTF-8 characters, carrying the
  // chunk's text and its last id; the tokens before it in the chunk come with an id and no text.
  const std::string stories = test::fixture("models/stories260K.gguf");
  const std::vector<record> recs = engine_records("exact", 8, stories);
  std::shared_ptr<const model::model> m = model::model::load(stories);
  record chunked = recs[0];
  chunked.tokens[3].text = chunked.tokens[2].text + chunked.tokens[3].text;
  chunked.tokens[3].bytes.clear();
  chunked.tokens[2].text.clear();
  chunked.tokens[2].bytes.clear();
  record wrong = chunked;
  wrong.condition = "wrong";
  wrong.tokens[3].text = "x" + wrong.tokens[3].text;
  record control = recs[0];  // a control token mid-answer, which llama-server writes as ""
  control.condition = "control-token";
  control.tokens[1].id = m->vocab().ids().bos;
  control.tokens[1].text.clear();
  control.tokens[1].bytes.clear();
  const oracle_data d = evaluate({chunked, wrong, control}, stories);
  CHECK(d.responses.at(reports::record_key(control)).skipped.empty());
  const oracle_response& c = d.responses.at(reports::record_key(chunked));
  CHECK(c.skipped.empty());
  CHECK(c.steps.size() == chunked.tokens.size());
  const oracle_response& w = d.responses.at(reports::record_key(wrong));
  CHECK(w.skipped.find("token 3") != std::string::npos);
  CHECK(w.skipped.find("is --oracle the model file the server serves?") != std::string::npos);
}

TEST_CASE("oracle: token texts that are part of a UTF-8 sequence are written and read back") {
  oracle_data d;
  oracle_response o = resp({st(5, -0.1, 0, 5, -0.1, -3)});
  o.steps[0].token = "\xE6";
  o.steps[0].best_token = "\xE6\x97";
  d.responses["k"] = o;
  const std::string dir = test::scratch_dir("oracle_utf8");
  reports::oracle_write(dir, d);
  const oracle_data back = reports::oracle_read(dir);
  CHECK(back.responses.at("k").steps[0].token == "\xEF\xBF\xBD");  // written as U+FFFD
  CHECK(back.responses.at("k").steps[0].id == 5);
}

TEST_CASE("oracle: figures from another model, figures that are not the record's, or a server far from exact are not believed") {
  auto [recs, d] = crafted();
  SUBCASE("the target names another model file") {
    d.model = {{"sha256", std::string(64, 'a')}};
    for (record& r : recs) r.target["model_sha256"] = std::string(64, 'b');
    reports::report rep = reports::compare_run(recs);
    reports::oracle_apply(rep, d);
    const reports::row_oracle& t2 = *row_of(pair_of(rep, "concurrent-8"), "t2").oracle;
    CHECK(t2.cls.empty());
    CHECK(t2.note.find("is not the file this target serves") != std::string::npos);
    CHECK(rep.oracle["notes"].dump().find("model_sha256 differs") != std::string::npos);
  }
  SUBCASE("the figures' steps are not the record's tokens") {
    for (auto& [k, o] : d.responses)
      if (k.find("t2") == 0) o.steps.pop_back();
    reports::report rep = reports::compare_run(recs);
    reports::oracle_apply(rep, d);
    const reports::row_oracle& t2 = *row_of(pair_of(rep, "concurrent-8"), "t2").oracle;
    CHECK(t2.cls.empty());
    CHECK(t2.note.find("do not match this response's tokens") != std::string::npos);
  }
  SUBCASE("the server is over a nat from exact even alone") {
    for (auto& [k, o] : d.responses) o.fid_max = 32, o.fid_sum = 32, o.spread_max = 64;  // precision 64 / 2
    reports::report rep = reports::compare_run(recs);
    reports::oracle_apply(rep, d);
    const reports::row_oracle& t2 = *row_of(pair_of(rep, "concurrent-8"), "t2").oracle;
    CHECK(t2.cls.empty());  // not a near-tie under a 64-nat bound: no verdict
    CHECK(t2.note.find("up to 32 nats from exact math even alone") != std::string::npos);
    CHECK(row_of(pair_of(rep, "concurrent-8"), "t1").oracle->cls.empty());
  }
}

TEST_CASE("oracle: the verdict sentence escapes each token once, for the format it goes into") {
  std::vector<record> v;
  oracle_data d;
  record a = greedy(test::rec("n1", "alone", {{5, " x"}, {7, "\n"}}));
  record b = greedy(test::rec("n1", "concurrent-8", {{5, " x"}, {9, "*b*`"}}, "concurrency"));
  oracle_response oa = resp({st(5, -0.1, 0, 5, -0.1, -3), st(7, -0.1, 0, 7, -0.1, -3)});
  oracle_response ob = resp({st(5, -0.1, 0, 5, -0.1, -3), st(9, -5, 3, 7, -0.1, -3)});
  oa.steps[1].token = "\n";
  oa.steps[1].best_token = "\n";
  ob.steps[1].token = "*b*`";
  ob.steps[1].best_token = "\n";
  d.responses[reports::record_key(a)] = oa;
  d.responses[reports::record_key(b)] = ob;
  reports::report rep = reports::compare_run({a, b});
  reports::oracle_apply(rep, d);
  const std::string text = reports::report_render(rep, "text");
  CHECK(text.find("under alone '\\n' (exact log-prob") != std::string::npos);  // \n once escaped, not \\n
  CHECK(text.find("'\\\\n'") == std::string::npos);
  const std::string md = reports::report_render(rep, "md");
  CHECK(md.find("under concurrent-8 `` *b*` `` (exact log-prob") != std::string::npos);  // a code span its backtick cannot end
  const json j = json::parse(reports::report_render(rep, "json"));
  CHECK(j.dump().find("under alone '\\n'") != std::string::npos);  // JSON keeps the raw token
}

TEST_CASE("oracle: a malformed oracle file is refused whole: negative counts, huge numbers, deep nesting") {
  auto [recs, d] = crafted();
  const json good = reports::oracle_to_json(d);
  json neg = good;
  neg["responses"][0]["fidelity"]["n"] = -1000;
  CHECK_THROWS_WITH_AS(reports::oracle_from_json(neg, "x.json"), doctest::Contains("'n' must be >= 0"), input_error);
  json big = good;
  big["responses"][0]["fidelity"]["n"] = uint64_t(1) << 63;
  CHECK_THROWS_WITH_AS(reports::oracle_from_json(big, "x.json"), doctest::Contains("must be an integer"), input_error);
  json eq = good;
  eq["responses"][0]["fidelity"]["equal"] = 3;
  CHECK_THROWS_WITH_AS(reports::oracle_from_json(eq, "x.json"), doctest::Contains("'equal' exceeds 'n'"), input_error);
  json deep = good;
  json nest = json::array();
  for (int i = 0; i < 200; ++i) nest = json::array({nest});
  deep["cost"] = nest;
  CHECK_THROWS_WITH_AS(reports::oracle_from_json(deep, "x.json"), doctest::Contains("nested deeper"), input_error);
}

TEST_CASE("oracle engine: a server log-prob written as a huge negative number is not measured") {
  const std::string stories = test::fixture("models/stories260K.gguf");
  std::vector<record> recs = engine_records("exact", 8, stories);
  record r = recs[0];
  REQUIRE(r.top_logprobs.size() > 1);
  r.top_logprobs[1].back().logprob = -1e308;  // "impossible", as some servers write -inf
  const oracle_data d = evaluate({r}, stories);
  const oracle_response& o = d.responses.at(reports::record_key(r));
  CHECK(std::isfinite(o.fid_sum));
  CHECK(o.fid_max == 0.0);  // the other values are exact
  const oracle_data back = reports::oracle_from_json(reports::oracle_to_json(d), "x");  // and the file reads back
  CHECK(back.responses.at(reports::record_key(r)).fid_n == o.fid_n);
}

TEST_CASE("oracle engine: a text tokenized again is a continuation, with no leading space added") {
  const std::string stories = test::fixture("models/stories260K.gguf");
  const std::vector<record> recs = engine_records("exact", 8, stories);
  record text_only = recs[0];
  text_only.tokens.clear();
  text_only.top_logprobs.clear();
  const oracle_data with_ids = evaluate({recs[0]}, stories);
  const oracle_data d = evaluate({text_only}, stories);
  const oracle_response& t = d.responses.at(reports::record_key(text_only));
  const oracle_response& a = with_ids.responses.at(reports::record_key(recs[0]));
  REQUIRE(t.alignment == "retokenized");
  // A trained model's greedy answer tokenizes back into its own tokens: the same steps, every one
  // the exact argmax.
  REQUIRE(t.steps.size() == a.steps.size());
  for (size_t k = 0; k < t.steps.size(); ++k) {
    CHECK(t.steps[k].id == a.steps[k].id);
    CHECK(t.steps[k].rank == 0);
  }
}

TEST_CASE("oracle: fidelity is compared with alone's on the same target only, never across targets") {
  std::vector<record> v;
  oracle_data d;
  for (const char* label : {"A", "B"}) {
    record r = greedy(test::rec("x1", "alone", {{5, " x"}, {7, " y"}}, "", label));
    oracle_response o = resp({st(5, -0.1, 0, 5, -0.1, -3), st(7, -0.1, 0, 7, -0.1, -3)});
    o.fid_sum = std::string(label) == "A" ? 0.002 : 0.02;  // B is ten times further from exact
    o.fid_max = o.fid_sum;
    d.responses[reports::record_key(r)] = o;
    v.push_back(r);
  }
  reports::report rep = reports::compare_run(v);
  reports::oracle_apply(rep, d);
  bool cross = false;
  for (const reports::pair_summary& p : rep.pairs) {
    INFO(p.cond_a << " vs " << p.cond_b);
    cross = cross || (p.fidelity && p.fidelity_a);
    CHECK_FALSE(p.fidelity_worse);
  }
  CHECK(cross);  // the cross pair carries both sides' fidelity
  for (const std::string& n : rep.notes) CHECK(n.find("further from exact") == std::string::npos);
}
