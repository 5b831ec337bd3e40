// The top-k KL divergence of hand-made steps, and every figure llama-perplexity's KL-divergence mode
// prints on a crafted pair (test_reports_util.h), against values worked out by hand; the same
// summary on a cross pair's rows. `detaudit compare --kld` on score files (the crafted pair, two
// quantizations of one synthetic model scored by `detaudit score`): tests/e2e/test_reports_kld.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "reports/audit/kld.h"
#include "reports/compare.h"
#include "test_reports_util.h"
#include "util/error.h"

using namespace detaudit;
using test::kld::step;

TEST_CASE("kld step: the top-k KL divergence matches values worked out by hand") {
  // Both sides report tokens 1 and 2. S = {1, 2}, rest = 1 - 0.8 = 0.2 on both sides.
  // KLD = 0.5 ln(0.5/0.4) + 0.3 ln(0.3/0.4) + 0.2 ln(0.2/0.2)
  //     = 0.5 * 0.2231435513 + 0.3 * (-0.2876820725) + 0 = 0.0252671539
  CHECK(reports::kld_step(step(1, {{1, 0.5}, {2, 0.3}}), step(1, {{1, 0.4}, {2, 0.4}})) ==
        doctest::Approx(0.0252671539).epsilon(1e-8));
  // B does not report token 2: p_last = 0.2, rest_B = 1 - 0.9 = 0.1, m = 1, so
  // P_B(2) = min(0.2, 0.1 / 2) = 0.05 and P_B(rest) = 1 - 0.75 = 0.25; P_A(rest) = 0.1.
  // KLD = 0.6 ln(0.6/0.7) + 0.3 ln(0.3/0.05) + 0.1 ln(0.1/0.25)
  //     = -0.0924904079 + 0.5375278408 - 0.0916290732 = 0.3534083597
  CHECK(reports::kld_step(step(1, {{1, 0.6}, {2, 0.3}}), step(1, {{1, 0.7}, {3, 0.2}})) ==
        doctest::Approx(0.3534083597).epsilon(1e-8));
  // The same distribution: exactly zero.
  const reports::kld_step_in s = step(4, {{4, 0.7}, {9, 0.1}});
  CHECK(reports::kld_step(s, s) == 0.0);
}


namespace {

nlohmann::json to_json(const reports::kld_stats& s) { return nlohmann::json::parse(reports::kld_stats_json(s).dump()); }

}  // namespace

TEST_CASE("kld summary: every llama-perplexity figure of the crafted pair matches the hand computation") {
  const test::kld::crafted c = test::kld::crafted_pair();
  const reports::kld_report r = reports::kld_compare(c.a, c.b);
  REQUIRE(r.items.size() == 2);
  test::kld::check_crafted_overall(to_json(r.overall));
  // The correlation's own definition: cov / (unc_a unc_b) of the two mean nlls, nats^2 cancelling.
  REQUIRE(r.overall.ln_ppl_cor.has_value());
  CHECK(*r.overall.ln_ppl_cor == doctest::Approx((1.5 / 132) / std::sqrt(83.0 / 12 / 132 * 5.0 / 132)).epsilon(1e-12));
}

TEST_CASE("kld summary: an item of 6 steps, whose means carry no uncertainty as in llama-perplexity") {
  using namespace test::kld::hand;
  const test::kld::crafted c = test::kld::crafted_pair();
  const reports::kld_stats s = reports::kld_compare(c.a, c.b).items[0].stats;  // X Y Z W V U
  CHECK(s.n == 6);
  CHECK(s.kld_mean == doctest::Approx((2 * K_Y + K_W + K_V + K_U) / 6).epsilon(1e-12));
  // Sorted 0 U W Y Z V: median (W + Y) / 2; 90%: position 4.5, between Z (= Y) and V.
  CHECK(s.kld_median == doctest::Approx((K_W + K_Y) / 2).epsilon(1e-12));
  CHECK(s.kld_p90 == doctest::Approx((K_Y + K_V) / 2).epsilon(1e-12));
  CHECK(s.dp_mean == doctest::Approx(-0.25 / 6).epsilon(1e-12));  // 0 - 1/4 + 1/4 + 0 - 3/8 + 1/8
  // nll / ln 2: B 1 2 1 1 3 2 (mean 10/6), A 1 1 2 1 1 3 (mean 9/6).
  CHECK(s.ppl_b == doctest::Approx(std::pow(2.0, 10.0 / 6)).epsilon(1e-12));
  CHECK(s.ppl_a == doctest::Approx(std::pow(2.0, 1.5)).epsilon(1e-12));
  CHECK(s.ppl_ratio == doctest::Approx(std::pow(2.0, 1.0 / 6)).epsilon(1e-12));
  // Up to 10 steps every mean's uncertainty is 0 and there is no correlation; same top's is not
  // (3 of 6: sqrt(1/2 * 1/2 / 5)).
  CHECK(s.kld_mean_unc == 0.0);
  CHECK(s.dp_mean_unc == 0.0);
  CHECK(s.dp_rms_unc == 0.0);
  CHECK(s.ppl_a_unc == 0.0);
  CHECK(s.ppl_ratio_unc == 0.0);
  CHECK(s.ppl_diff_unc == 0.0);
  CHECK_FALSE(s.ln_ppl_cor.has_value());
  CHECK(s.same_top == 0.5);
  CHECK(s.same_top_unc == doctest::Approx(std::sqrt(0.05)).epsilon(1e-12));
}

TEST_CASE("kld render: llama-perplexity's block, label for label, and the notes on few steps and flips") {
  const test::kld::crafted c = test::kld::crafted_pair();
  const std::string t = reports::kld_render(reports::kld_compare(c.a, c.b), "text");
  // Values by hand (check_crafted_overall): 2^1.5 = 2.828427, 2^(17/12) = 2.669680, ratio
  // 2^(1/12) = 1.059463, same top 2/3 +- sqrt(2/99) = 14.213%, mean dp -1/32 = -3.125%.
  for (const char* line : {"Mean PPL(Q)                   :   2.828427 \u00b1",
                           "Mean PPL(base)                :   2.669680 \u00b1",
                           "Mean PPL(Q)/PPL(base)         :   1.059463 \u00b1", "Cor(ln(PPL(Q)), ln(PPL(base))):  25.51%",
                           "Maximum KLD:   0.464074", "Median  KLD:   0.068663", " 0.1%   KLD:   0.000000",
                           "Mean    \u0394p: -3.125 \u00b1 5.132 %", "75.0%   \u0394p:  3.125%", "Minimum \u0394p: -37.500%",
                           "RMS \u0394p    : 17.305 \u00b1 3.663 %", "Same top p: 66.667 \u00b1 14.213 %"})
    CHECK_MESSAGE(t.find(line) != std::string::npos, line);
  CHECK(t.find("note: 12 step(s): llama-perplexity prints this summary only from 100 positions on") != std::string::npos);
  CHECK(t.find("note: no item-level flips or McNemar p") != std::string::npos);
  CHECK(t.find("10 steps or fewer") == std::string::npos);  // 12 steps: the uncertainties are there
}

TEST_CASE("kld cross pair: the distributions before the tokens part, from pre-sampling log-probs with ids") {
  using namespace test::kld::hand;
  // Target A and B answer item q alone. Steps 0 and 1 are the crafted shapes Y and V (B leaves its
  // token's own log-prob out: it is read from its top list); at step 2 the tokens part.
  auto make = [](const std::string& label, std::vector<std::vector<reports::alt_rec>> tops, bool own_logprob) {
    reports::record r = test::rec("q", "alone", {{1, " a"}, {1, " a"}, {label == "A" ? 5 : 6, " z"}}, "", label);
    r.logprobs_kind = "pre-sampling";
    r.top_logprobs = std::move(tops);
    for (size_t k = 0; k < 2 && own_logprob; ++k) r.tokens[k].logprob = r.top_logprobs[k][0].logprob;
    return r;
  };
  const auto alt = [](int32_t id, double p) { return reports::alt_rec{id, "t", std::log(p)}; };
  std::vector<reports::record> recs = {
      make("A", {{alt(1, 0.5), alt(2, 0.25)}, {alt(1, 0.5), alt(2, 0.25)}, {alt(5, 0.9)}}, true),
      make("B", {{alt(2, 0.5), alt(1, 0.25)}, {alt(2, 0.25), alt(1, 0.125)}, {alt(6, 0.9)}}, false)};
  recs[1].tokens[0].logprob = std::log(0.25);  // B's own log-prob of step 0; step 1's comes from its list
  const reports::report rep = reports::compare_run(recs);
  REQUIRE(rep.pairs.size() == 1);
  const reports::pair_summary& s = rep.pairs[0];
  CHECK(s.probe == "cross");
  REQUIRE(s.kld.has_value());
  CHECK(s.kld_rows == 1);
  CHECK(s.kld->n == 2);
  CHECK(s.kld->kld_mean == doctest::Approx((K_Y + K_V) / 2).epsilon(1e-12));
  CHECK(s.kld->kld_max == doctest::Approx(K_V).epsilon(1e-12));
  CHECK(s.kld->dp_mean == doctest::Approx((-0.25 - 0.375) / 2).epsilon(1e-12));
  CHECK(s.kld->same_top == 0.0);
  CHECK(s.kld->ppl_ratio == doctest::Approx(std::pow(2.0, 1.5)).epsilon(1e-12));  // nll / ln 2: B 2, 3; A 1, 1
  const nlohmann::json j = nlohmann::json::parse(reports::report_render(rep, "json"));
  const nlohmann::json& k = j.at("pairs").at(0).at("kld");
  CHECK(k.at("rows") == 1);
  CHECK(k.at("steps") == 2);
  CHECK(k.at("kld_max").get<double>() == doctest::Approx(K_V).epsilon(1e-12));
  CHECK(reports::report_render(rep, "text").find("kld A:alone vs B:alone: 2 step(s) of 1 row(s) before the tokens part: mean KLD 0.318681") !=
        std::string::npos);  // (K_Y + K_V) / 2 = (0.1732868 + 0.4640745) / 2

  // Post-sampling log-probs (another distribution) on one side: no summary.
  recs[1].logprobs_kind = "post-sampling";
  const reports::report post = reports::compare_run(recs);
  CHECK_FALSE(post.pairs[0].kld.has_value());
  CHECK(nlohmann::json::parse(reports::report_render(post, "json")).at("pairs").at(0).at("kld").is_null());
}

// Score files that hold no distribution are refused, naming the file and field: no step at all,
// a log-prob above 0 (a probability above 1), one that is not finite, a token id past 2^31 - 1.
TEST_CASE("kld read: files with nothing to compare or impossible values are refused") {
  const std::string dir = test::scratch_dir("kld_refused");
  auto refused = [&dir](const std::string& name, const std::string& text, const std::string& why) {
    const std::string path = test::write_file(dir + "/" + name, text);
    CAPTURE(name);
    CHECK_THROWS_WITH_AS(reports::kld_read(path), doctest::Contains(why.c_str()), detaudit::input_error);
  };
  refused("empty.json", R"({"items": []})", "no scored step");
  refused("no_steps.json", R"({"items": [{"steps": []}]})", "no scored step");
  refused("above_one.json", R"({"items": [{"steps": [{"id": 1, "logprob": 3.0, "top": [[1, 3.0]]}]}]})",
          "steps[0].logprob: expected a log-prob (a finite number <= 0), found 3.0");
  refused("huge.json", R"({"items": [{"steps": [{"id": 1, "logprob": -0.5, "top": [[1, 1e308]]}]}]})",
          "steps[0].top: expected a log-prob");
  refused("big_id.json", R"({"items": [{"steps": [{"id": 4294967297, "logprob": -0.5, "top": []}]}]})",
          "steps[0].id: expected a token id (an integer 0 to 2147483647), found 4294967297");
  refused("neg_id.json", R"({"items": [{"steps": [{"id": -3, "logprob": -0.5, "top": []}]}]})", "expected a token id");
}
