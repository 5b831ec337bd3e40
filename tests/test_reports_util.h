// Hand-built inputs for the reports tests, in-process (tests/unit) and through the binary
// (tests/e2e): run records whose token lists are all written out, so each expected divergence point
// is known before the code under test runs; scored steps for the KL divergence; lm-eval sample
// files; and the check that an HTML page holds its plots.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "reports/audit/kld.h"
#include "reports/audit/record.h"
#include "test_util.h"

namespace detaudit::test {

// One generated token: id (-1: the target gives none) and its text.
using tok = std::pair<int32_t, std::string>;

// A record whose text is the concatenation of its tokens' texts.
inline reports::record rec(const std::string& item, const std::string& condition, const std::vector<tok>& toks,
                           const std::string& probe = "", const std::string& label = "A", int repetition = 0) {
  reports::record r;
  r.run_id = "run-test";
  r.item_id = item;
  r.condition = condition;
  r.probe = probe.empty() ? (condition == "alone" || condition == "control" ? "base" : condition) : probe;
  r.repetition = repetition;
  r.target = {{"label", label}, {"spec", "engine:test.gguf"}};
  for (const auto& [id, text] : toks) {
    reports::token_rec t;
    t.id = id;
    t.text = text;
    r.tokens.push_back(t);
    r.text += text;
  }
  r.finish_reason = "length";
  return r;
}

// A record with these tokens (bytes and all) and this text, for the cases where a text is not the
// concatenation of its tokens' strings (bytes that are not UTF-8, a stop string).
inline reports::record with_tokens(const std::string& cond, std::vector<reports::token_rec> toks, const std::string& text) {
  reports::record r = rec("q", cond, {});
  r.tokens = std::move(toks);
  r.text = text;
  return r;
}

// The same record graded: GSM8K-style reference "... #### N" and the gsm8k grader.
inline reports::record graded(reports::record r, const std::string& answer) {
  r.reference = "Work it out.\n#### " + answer;
  r.grader = "gsm8k";
  return r;
}

// A token id that depends only on the token's text (FNV-1a, folded below 100000).
inline int32_t word_id(const std::string& text) {
  uint32_t h = 2166136261u;
  for (unsigned char c : text) h = (h ^ c) * 16777619u;
  return static_cast<int32_t>(h % 100000u);
}

// Tokens of a text split before each space (the space starts the next token), ids from word_id.
inline std::vector<tok> words(const std::string& text) {
  std::vector<tok> out;
  size_t start = 0;
  for (size_t i = 1; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ' ') {
      out.push_back({word_id(text.substr(start, i - start)), text.substr(start, i - start)});
      start = i;
    }
  return out;
}

// alone vs concurrent-8 over seven items, each also sent again alone as the control (identical):
// q1 (token 2, margins 0.5 / 0.125, hash step 2), q2 (token 2, graded right -> wrong), q3 (token 0,
// no ids) and q7 (token 1, markup and bad bytes) differ; q4 failed; q5 (token 1) not exercised
// (no overlap); q6 drifted (same tokens, a logit hash differs).
inline std::vector<reports::record> sample_records() {
  using reports::record;
  std::vector<record> v;
  record a1 = rec("q1", "alone", {{1, "a"}, {2, " b"}, {3, " c"}, {4, " d"}});
  record b1 = rec("q1", "concurrent-8", {{1, "a"}, {2, " b"}, {9, " X"}, {4, " d"}}, "concurrency");
  a1.top_logprobs = {{}, {}, {{3, " c", -0.25}, {9, " X", -0.75}}, {}};
  b1.top_logprobs = {{}, {}, {{9, " X", -0.5}, {3, " c", -0.625}}, {}};
  a1.logit_hashes = {1, 2, 3, 4};
  b1.logit_hashes = {1, 2, 5, 6};
  v.push_back(a1);
  v.push_back(b1);
  v.push_back(graded(rec("q2", "alone", words("so #### 18")), "18"));
  v.push_back(graded(rec("q2", "concurrent-8", words("so #### 17"), "concurrency"), "18"));
  v.push_back(rec("q3", "alone", {{-1, "line one\nline two"}}));
  v.push_back(rec("q3", "concurrent-8", {{-1, "line one\nline 2"}}, "concurrency"));
  v.push_back(rec("q4", "alone", words("fine")));
  record b4 = rec("q4", "concurrent-8", {}, "concurrency");
  b4.error = "HTTP 500: <oops> & \"boom\"";
  v.push_back(b4);
  v.push_back(rec("q5", "alone", words("p q")));
  record b5 = rec("q5", "concurrent-8", words("p r"), "concurrency");
  b5.evidence = {{"overlap", false}};
  v.push_back(b5);
  record a6 = rec("q6", "alone", words("same text"));
  record b6 = rec("q6", "concurrent-8", words("same text"), "concurrency");
  a6.logit_hashes = {7, 8};
  b6.logit_hashes = {7, 9};
  v.push_back(a6);
  v.push_back(b6);
  v.push_back(rec("q7", "alone", {{-1, "x<&>\"y"}, {-1, "\x01" "\xff" "z"}}));
  v.push_back(rec("q7", "concurrent-8", {{-1, "x<&>\"y"}, {-1, "\x02" "]]>"}}, "concurrency"));
  for (record& r : v)  // the evidence that the item shared forward steps with the others
    if (r.condition == "concurrent-8" && r.evidence.empty()) r.evidence = {{"overlap", true}, {"batch_width", 8}};
  const std::vector<record> base = v;
  for (const record& r : base)
    if (r.condition == "alone") {
      record c = r;
      c.condition = "control";
      v.push_back(c);
    }
  return v;
}

// The KL divergence tests (tests/unit and tests/e2e test_reports_kld.cpp).
namespace kld {

// A scored step: token `id`, its top alternatives as (token, probability), and its own log-prob
// when it is among them.
inline reports::kld_step_in step(int32_t id, std::vector<std::pair<int32_t, double>> top_probs) {
  reports::kld_step_in s;
  s.id = id;
  for (auto& [t, p] : top_probs) {
    s.top.push_back({t, std::log(p)});
    if (t == id) s.logprob = std::log(p);
  }
  return s;
}

// The crafted pair the llama-perplexity figures are checked on: A (base) and B (Q), two items of
// six steps, each step one of six shapes. Every probability is a power of two, so each step's
// figures are short sums of ln 2 and ln 3 (scored token 1 everywhere; dp = p_B - p_A of token 1;
// nll in units of ln 2):
//   shape  A top                B top                 KLD D(A||B)                  dp      nll A, B  same top
//   X      1:1/2  2:1/4         1:1/2  2:1/4          0                            0       1, 1      yes
//   Y      1:1/2  2:1/4         2:1/2  1:1/4          1/2 ln 2 + 1/4 ln 1/2        -1/4    1, 2      no
//   Z      2:1/2  1:1/4         1:1/2  2:1/4          1/2 ln 2 + 1/4 ln 1/2        +1/4    2, 1      no
//   W      1:1/2  2:1/4         1:1/2  3:1/4          1/4 ln 2 + 1/4 ln(1/4 / 3/8)  0       1, 1      yes
//   V      1:1/2  2:1/4         2:1/4  1:1/8          1/2 ln 4 + 1/4 ln(1/4 / 5/8)  -3/8    1, 3      no
//   U      2:1/2  1:1/8         2:1/2  1:1/4          1/8 ln 1/2 + 3/8 ln 3/2       +1/8    3, 2      yes
// W: B does not list token 2, so P_B(2) = min(1/4, (1 - 3/4) / 2) = 1/8 and B's rest is 3/8.
// V: both rests are 1/4 and 5/8. U: A's rest 3/8, B's 1/4.
// Item 0 is X Y Z W V U; item 1 is X Y X U X W.
struct crafted {
  std::vector<std::vector<reports::kld_step_in>> a, b;
};
inline crafted crafted_pair() {
  using s = reports::kld_step_in;
  const std::pair<s, s> X{step(1, {{1, 0.5}, {2, 0.25}}), step(1, {{1, 0.5}, {2, 0.25}})};
  const std::pair<s, s> Y{step(1, {{1, 0.5}, {2, 0.25}}), step(1, {{2, 0.5}, {1, 0.25}})};
  const std::pair<s, s> Z{step(1, {{2, 0.5}, {1, 0.25}}), step(1, {{1, 0.5}, {2, 0.25}})};
  const std::pair<s, s> W{step(1, {{1, 0.5}, {2, 0.25}}), step(1, {{1, 0.5}, {3, 0.25}})};
  const std::pair<s, s> V{step(1, {{1, 0.5}, {2, 0.25}}), step(1, {{2, 0.25}, {1, 0.125}})};
  const std::pair<s, s> U{step(1, {{2, 0.5}, {1, 0.125}}), step(1, {{2, 0.5}, {1, 0.25}})};
  crafted c;
  for (const auto& item : {std::vector{X, Y, Z, W, V, U}, std::vector{X, Y, X, U, X, W}}) {
    c.a.emplace_back();
    c.b.emplace_back();
    for (const auto& [sa, sb] : item) {
      c.a.back().push_back(sa);
      c.b.back().push_back(sb);
    }
  }
  return c;
}

// The crafted pair's figures over all 12 steps, written out by hand from the table above.
namespace hand {
inline const double LN2 = std::log(2.0);
inline const double K_Y = 0.25 * LN2, K_W = 0.25 * std::log(4.0 / 3.0), K_V = LN2 + 0.25 * std::log(0.4),
                    K_U = -0.125 * LN2 + 0.375 * std::log(1.5);
}  // namespace hand

// Every llama-perplexity figure of the crafted pair over all 12 steps, as a stats object's JSON
// (reports::kld_stats_json, `compare --kld --format json`'s "overall").
inline void check_crafted_overall(const nlohmann::json& all) {
  using doctest::Approx;
  using namespace hand;
  const auto v = [&all](const char* key) { INFO(key); return all.at(key).get<double>(); };
  CHECK(all.at("steps") == 12);
  // KLD: 4 X (0), 2 U, 2 W, 3 Y or Z (K_Y), 1 V. Sorted: 0 0 0 0 U U W W Y Y Y V, position q * 11.
  const double mean = (2 * K_U + 2 * K_W + 3 * K_Y + K_V) / 12;
  const double sum_sq = 2 * K_U * K_U + 2 * K_W * K_W + 3 * K_Y * K_Y + K_V * K_V;
  CHECK(v("kld_mean") == Approx(mean).epsilon(1e-12));
  CHECK(v("kld_mean_unc") == Approx(std::sqrt((sum_sq - 12 * mean * mean) / (12 * 11))).epsilon(1e-12));
  CHECK(v("kld_max") == Approx(K_V).epsilon(1e-12));
  CHECK(v("kld_p99_9") == Approx(0.011 * K_Y + 0.989 * K_V).epsilon(1e-12));  // 10.989
  CHECK(v("kld_p99") == Approx(0.11 * K_Y + 0.89 * K_V).epsilon(1e-12));     // 10.89
  CHECK(v("kld_p95") == Approx(0.55 * K_Y + 0.45 * K_V).epsilon(1e-12));     // 10.45
  CHECK(v("kld_p90") == Approx(K_Y).epsilon(1e-12));                         // 9.9: Y and Y
  CHECK(v("kld_median") == Approx((K_U + K_W) / 2).epsilon(1e-12));           // 5.5: the middle two
  for (const char* k : {"kld_p10", "kld_p5", "kld_p1", "kld_p0_1", "kld_min"}) CHECK(v(k) == Approx(0).epsilon(1e-12));
  // dp sorted: -3/8, -1/4, -1/4, 0 x 6, 1/8, 1/8, 1/4. Sum -3/8: mean -1/32. sum dp^2 = 23/64, so
  // sum (dp - mean)^2 = 23/64 - 12/1024 = 89/256; sum dp^4 = 131/4096, so
  // sum (dp^2 - 23/768)^2 = 131/4096 - 12 (23/768)^2 = 1043/49152.
  CHECK(v("dp_mean") == Approx(-1.0 / 32).epsilon(1e-12));
  CHECK(v("dp_mean_unc") == Approx(std::sqrt(89.0 / 256 / 132)).epsilon(1e-12));
  CHECK(v("dp_max") == Approx(0.25).epsilon(1e-12));
  CHECK(v("dp_p99_9") == Approx(0.125 + 0.989 * 0.125).epsilon(1e-12));
  CHECK(v("dp_p99") == Approx(0.125 + 0.89 * 0.125).epsilon(1e-12));
  CHECK(v("dp_p95") == Approx(0.125 + 0.45 * 0.125).epsilon(1e-12));
  CHECK(v("dp_p90") == Approx(0.125).epsilon(1e-12));          // 9.9
  CHECK(v("dp_p75") == Approx(0.25 * 0.125).epsilon(1e-12));   // 8.25: between 0 and 1/8
  CHECK(v("dp_median") == Approx(0).epsilon(1e-12));
  CHECK(v("dp_p25") == Approx(-0.25 * 0.25).epsilon(1e-12));   // 2.75: between -1/4 and 0
  CHECK(v("dp_p10") == Approx(-0.25).epsilon(1e-12));          // 1.1
  CHECK(v("dp_p5") == Approx(-0.375 + 0.55 * 0.125).epsilon(1e-12));
  CHECK(v("dp_p1") == Approx(-0.375 + 0.11 * 0.125).epsilon(1e-12));
  CHECK(v("dp_p0_1") == Approx(-0.375 + 0.011 * 0.125).epsilon(1e-12));
  CHECK(v("dp_min") == Approx(-0.375).epsilon(1e-12));
  CHECK(v("dp_rms") == Approx(std::sqrt(23.0 / 768)).epsilon(1e-12));
  CHECK(v("dp_rms_unc") == Approx(0.5 / std::sqrt(23.0 / 768) * std::sqrt(1043.0 / 49152 / 132)).epsilon(1e-12));
  // Same top: X, W, U = 8 of 12.
  CHECK(v("same_top") == Approx(2.0 / 3).epsilon(1e-12));
  CHECK(v("same_top_unc") == Approx(std::sqrt(2.0 / 3 * (1.0 / 3) / 11)).epsilon(1e-12));
  // nll / ln 2: B 1 x7, 2 x4, 3 x1 (sum 18, mean 3/2, sum of squared deviations 5); A 1 x9, 2, 3 x2
  // (sum 17, squared deviations 31 - 17^2/12 = 83/12); sum A*B = 27, so sum of the products of
  // deviations 27 - 17 * 18 / 12 = 3/2.
  const double ua = LN2 * std::sqrt(83.0 / 12 / 132), ub = LN2 * std::sqrt(5.0 / 132), cov = LN2 * LN2 * 1.5 / 132;
  CHECK(v("ppl_b") == Approx(std::pow(2.0, 1.5)).epsilon(1e-12));
  CHECK(v("ppl_b_unc") == Approx(std::pow(2.0, 1.5) * ub).epsilon(1e-12));
  CHECK(v("ppl_a") == Approx(std::pow(2.0, 17.0 / 12)).epsilon(1e-12));
  CHECK(v("ppl_a_unc") == Approx(std::pow(2.0, 17.0 / 12) * ua).epsilon(1e-12));
  CHECK(v("ln_ppl_cov") == Approx(cov).epsilon(1e-12));
  CHECK(v("ln_ppl_cor") == Approx(cov / (ua * ub)).epsilon(1e-12));
  // ln ratio: (18 - 17) / 12 ln 2; its unc from the differences B - A (0 x6, 1 x2, -1 x3, 2):
  // sum (d - 1/12)^2 = 9 - 1/12 = 107/12.
  CHECK(v("ln_ppl_ratio") == Approx(LN2 / 12).epsilon(1e-12));
  CHECK(v("ln_ppl_ratio_unc") == Approx(LN2 * std::sqrt(107.0 / 12 / 132)).epsilon(1e-12));
  CHECK(v("ppl_ratio") == Approx(std::pow(2.0, 1.0 / 12)).epsilon(1e-12));
  CHECK(v("ppl_ratio_unc") == Approx(std::pow(2.0, 1.0 / 12) * LN2 * std::sqrt(107.0 / 12 / 132)).epsilon(1e-12));
  const double pb = std::pow(2.0, 1.5), pa = std::pow(2.0, 17.0 / 12);
  CHECK(v("ppl_diff") == Approx(pb - pa).epsilon(1e-12));
  CHECK(v("ppl_diff_unc") == Approx(std::sqrt(pb * pb * ub * ub + pa * pa * ua * ua - 2 * pb * pa * cov)).epsilon(1e-12));
}

}  // namespace kld

// lm-evaluation-harness sample files (tests/unit and tests/e2e test_reports_lmeval.cpp).
namespace lmeval {

using json = nlohmann::json;

// One gsm8k-style sample line.
inline json sample(int64_t doc_id, const std::string& filter, const std::string& resp, const std::string& filtered,
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

inline std::string write_lines(const std::string& path, const std::vector<json>& lines) {
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
inline void write_pair(const std::string& dir) {
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

}  // namespace lmeval

// The HTML report's four plots are all on the page `h`.
inline void check_plots_present(const std::string& h) {
  for (const char* id : {"plot-token-index", "plot-margin", "plot-conditions", "plot-flips"})
    CHECK_MESSAGE(contains(h, std::string("<svg id=\"") + id + "\""), id);
}

}  // namespace detaudit::test
