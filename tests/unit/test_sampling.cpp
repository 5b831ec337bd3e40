// Sampling: greedy ties, the counter-based RNG, seeded determinism, the distribution, the
// top-k / top-p / min-p cut sets, penalties and reported log-probabilities.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "runtime/sampling.h"
#include "util/error.h"

using namespace detaudit::runtime;

namespace {

// SplitMix64 as published (Steele, Lea, Flood 2014), written out independently of sampling.cpp.
struct splitmix64_ref {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

sampling_params plain(float temp) {
  sampling_params p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

std::vector<int32_t> ids_of(const std::vector<sampling_candidate>& c) {
  std::vector<int32_t> ids;
  for (const sampling_candidate& x : c) ids.push_back(x.id);
  return ids;
}

// Logits whose probabilities are proportional to 8 : 4 : 2 : 1 : 1 (ids 0..4).
std::vector<float> logits_8_4_2_1_1() {
  const float l2 = static_cast<float>(std::log(2.0));
  return {3 * l2, 2 * l2, l2, 0.0f, 0.0f};
}

}  // namespace

TEST_CASE("sampling: greedy picks the largest logit and breaks ties to the lowest id") {
  CHECK(sample_greedy(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}) == 1);
  CHECK(sample_greedy(std::vector<float>{5.0f, 5.0f}) == 0);
  CHECK(sample_greedy(std::vector<float>{-1.0f, -0.0f, 0.0f}) == 1);  // -0 and +0 tie
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(sample_greedy(std::vector<float>{nan, -7.0f, nan, -7.0f}) == 1);
  CHECK_THROWS_AS(sample_greedy(std::vector<float>{}), std::invalid_argument);
  CHECK_THROWS_AS(sample_greedy(std::vector<float>{nan}), std::invalid_argument);
  // temp 0 goes through greedy whatever the seed and step.
  sampling_params p = plain(0.0f);
  for (uint64_t step = 0; step < 10; ++step) {
    p.seed = step * 7919;
    CHECK(sample_token(std::vector<float>{0.5f, 2.0f, 2.0f}, {}, p, step) == 1);
  }
}

TEST_CASE("sampling: the RNG is SplitMix64 keyed by (seed, step) alone") {
  // The published first output of SplitMix64 from state 0.
  splitmix64_ref zero{0};
  CHECK(zero.next() == 0xE220A8397B1DCDAFull);
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}, uint64_t{0xFFFFFFFFFFFFFFFFull}}) {
    splitmix64_ref r{seed};
    splitmix64_ref stream{r.next()};  // the documented state: mix64(seed + GAMMA)
    for (uint64_t step = 0; step < 100; ++step) CHECK(sampling_rng_u64(seed, step) == stream.next());
  }
  CHECK(sampling_rng_u64(1, 0) != sampling_rng_u64(2, 0));
  CHECK(sampling_rng_u64(1, 0) != sampling_rng_u64(1, 1));
}

TEST_CASE("sampling: seeded temperature sampling depends only on seed, step and logits") {
  std::vector<float> logits(512);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 37) % 101) * 0.05f;
  sampling_params p = plain(0.8f);
  p.top_k = 50;
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  p.seed = 1234;
  std::vector<int32_t> alone;
  for (uint64_t step = 0; step < 200; ++step) alone.push_back(sample_token(logits, {}, p, step));
  // Interleaved with other requests (other seeds, other logits), in reverse step order: same tokens.
  sampling_params other = p;
  other.seed = 99;
  std::vector<float> other_logits(logits.rbegin(), logits.rend());
  for (uint64_t step = 200; step-- > 0;) {
    (void)sample_token(other_logits, {}, other, step);
    CHECK(sample_token(logits, {}, p, step) == alone[step]);
  }
  // A different seed gives a different sequence.
  sampling_params q = p;
  q.seed = 1235;
  int same = 0;
  for (uint64_t step = 0; step < 200; ++step) same += sample_token(logits, {}, q, step) == alone[step];
  CHECK(same < 150);
}

TEST_CASE("sampling: empirical frequencies match the softmax within a statistical bound") {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  for (float temp : {1.0f, 0.5f, 2.0f}) {
    CAPTURE(temp);
    sampling_params p = plain(temp);
    p.seed = 7;
    const int n = 20000;
    std::vector<int> counts(logits.size());
    for (int step = 0; step < n; ++step) ++counts.at(static_cast<size_t>(sample_token(logits, {}, p, static_cast<uint64_t>(step))));
    double z = 0;
    for (float l : logits) z += std::exp(static_cast<double>(l) / temp);
    for (size_t i = 0; i < logits.size(); ++i) {
      const double pi = std::exp(static_cast<double>(logits[i]) / temp) / z;
      const double f = counts[i] / static_cast<double>(n);
      const double sigma = std::sqrt(pi * (1 - pi) / n);
      CAPTURE(i);
      CAPTURE(pi);
      CAPTURE(f);
      CHECK(std::fabs(f - pi) <= 5 * sigma + 1e-4);
    }
  }
}

TEST_CASE("sampling: top-k keeps the k best in the order weight desc then id asc") {
  sampling_params p = plain(1.0f);
  p.top_k = 3;
  CHECK(ids_of(sampling_candidates(std::vector<float>{0.1f, 0.9f, 0.5f, 0.7f, 0.3f}, p)) == std::vector<int32_t>{1, 3, 2});
  // Equal logits: lower ids first, and the cut keeps the lowest ids.
  CHECK(ids_of(sampling_candidates(std::vector<float>{1.0f, 2.0f, 1.0f, 2.0f, 1.0f}, p)) == std::vector<int32_t>{1, 3, 0});
  p.top_k = 0;
  CHECK(sampling_candidates(std::vector<float>{0.1f, 0.9f, 0.5f, 0.7f, 0.3f}, p).size() == 5);
  p.top_k = 100;
  CHECK(sampling_candidates(std::vector<float>{0.1f, 0.9f, 0.5f}, p).size() == 3);
  // The best token weighs exactly 2^30.
  CHECK(sampling_candidates(std::vector<float>{0.1f, 0.9f, 0.5f}, p).front().weight == (int64_t{1} << SAMPLING_WEIGHT_BITS));
}

TEST_CASE("sampling: top-p keeps the shortest prefix reaching p of the total") {
  sampling_params p = plain(1.0f);
  const std::vector<float> l = logits_8_4_2_1_1();  // cumulative 0.5, 0.75, 0.875, 0.9375, 1
  const std::pair<float, size_t> cases[] = {{0.0f, 1}, {0.4f, 1}, {0.7f, 2}, {0.8f, 3}, {0.9f, 4}, {0.95f, 5}, {1.0f, 5}};
  for (auto [top_p, n] : cases) {
    CAPTURE(top_p);
    p.top_p = top_p;
    std::vector<int32_t> want = {0, 1, 2, 3, 4};
    want.resize(n);
    CHECK(ids_of(sampling_candidates(l, p)) == want);
  }
  // After top-k, top-p works on the remaining total: 8 / (8 + 4) = 0.67 < 0.7 keeps both.
  p.top_k = 2;
  p.top_p = 0.7f;
  CHECK(sampling_candidates(l, p).size() == 2);
  p.top_p = 0.6f;
  CHECK(sampling_candidates(l, p).size() == 1);
}

TEST_CASE("sampling: min-p keeps tokens at least min-p as probable as the best") {
  sampling_params p = plain(1.0f);
  const std::vector<float> l = logits_8_4_2_1_1();  // relative 1, 0.5, 0.25, 0.125, 0.125
  const std::pair<float, size_t> cases[] = {{0.0f, 5}, {0.1f, 5}, {0.2f, 3}, {0.3f, 2}, {0.6f, 1}, {1.0f, 1}};
  for (auto [min_p, n] : cases) {
    CAPTURE(min_p);
    p.min_p = min_p;
    CHECK(sampling_candidates(l, p).size() == n);
  }
  // Temperature is applied before the cut: at temp 0.5 the ratios square (1, .25, .0625, ...).
  p = plain(0.5f);
  p.min_p = 0.2f;
  CHECK(sampling_candidates(l, p).size() == 2);
}

TEST_CASE("sampling: the draw compares the scaled uniform with integer cumulative weights") {
  const std::vector<sampling_candidate> c = {{5, 3}, {2, 1}};
  CHECK(sampling_draw(c, 0) == 5);
  CHECK(sampling_draw(c, 0xBFFFFFFFFFFFFFFFull) == 5);  // floor(u * 4 / 2^64) = 2
  CHECK(sampling_draw(c, 0xC000000000000000ull) == 2);  // = 3
  CHECK(sampling_draw(c, 0xFFFFFFFFFFFFFFFFull) == 2);
  CHECK_THROWS_AS(sampling_draw(std::vector<sampling_candidate>{}, 0), std::invalid_argument);
}

TEST_CASE("sampling: repeat, presence and frequency penalties follow llama.cpp") {
  sampling_params p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  std::vector<float> l = {2.0f, -2.0f, 1.0f};
  sampling_apply_penalties(l, std::vector<int32_t>{0, 1, 0}, p);
  CHECK(l == std::vector<float>{1.0f, -4.0f, 1.0f});  // positive divided, negative multiplied, once per token

  p.repeat_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  l = {2.0f, -2.0f, 1.0f};
  sampling_apply_penalties(l, std::vector<int32_t>{0, 0, 2}, p);
  CHECK(l == std::vector<float>{1.0f, -2.0f, 0.25f});  // 2 - (2*0.25 + 0.5), 1 - (0.25 + 0.5)

  // Only the last N tokens count; ids outside the vocabulary are ignored.
  p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.penalty_last_n = 1;
  l = {2.0f, 2.0f};
  sampling_apply_penalties(l, std::vector<int32_t>{0, 1}, p);
  CHECK(l == std::vector<float>{2.0f, 1.0f});
  p.penalty_last_n = 0;
  l = {2.0f, 2.0f};
  sampling_apply_penalties(l, std::vector<int32_t>{0, 1}, p);
  CHECK(l == std::vector<float>{2.0f, 2.0f});
  p.penalty_last_n = -1;
  sampling_apply_penalties(l, std::vector<int32_t>{0, 7, -1}, p);
  CHECK(l == std::vector<float>{1.0f, 2.0f});

  // Greedy sees the penalised logits: token 0 was repeated, so 1 wins.
  p = plain(0.0f);
  p.repeat_penalty = 1.5f;
  CHECK(sample_token(std::vector<float>{2.0f, 1.5f}, std::vector<int32_t>{0}, p, 0) == 1);
  CHECK(sample_token(std::vector<float>{2.0f, 1.5f}, {}, p, 0) == 0);
}

TEST_CASE("sampling: top log-probabilities are ordered and normalised") {
  const std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f, 0.0f};
  const std::vector<token_logprob> top = top_logprobs(l, 10);
  REQUIRE(top.size() == 5);
  CHECK(top[0].id == 1);
  CHECK(top[1].id == 2);
  CHECK(top[0].logprob == top[1].logprob);
  CHECK(top[2].id == 0);
  double z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  double total = 0;
  for (const token_logprob& t : top) {
    CHECK(std::fabs(t.logprob - (l[static_cast<size_t>(t.id)] - std::log(z))) < 2e-6);
    total += std::exp(static_cast<double>(t.logprob));
  }
  CHECK(std::fabs(total - 1.0) < 1e-5);
  CHECK(top_logprobs(l, 2).size() == 2);
  CHECK(top_logprobs(l, 0).empty());
  const log_softmax_norm n = log_softmax_normalizer(l);
  CHECK(n.logprob(l[1]) == top[0].logprob);
}

TEST_CASE("sampling: parameters out of range are input errors") {
  auto bad = [](auto set) {
    sampling_params p;
    set(p);
    CHECK_THROWS_AS(sampling_check_params(p), detaudit::input_error);
  };
  bad([](sampling_params& p) { p.temp = -0.5f; });
  bad([](sampling_params& p) { p.temp = std::numeric_limits<float>::infinity(); });
  bad([](sampling_params& p) { p.top_k = -1; });
  bad([](sampling_params& p) { p.top_p = 1.5f; });
  bad([](sampling_params& p) { p.min_p = -0.1f; });
  bad([](sampling_params& p) { p.repeat_penalty = 0.0f; });
  bad([](sampling_params& p) { p.penalty_last_n = -2; });
  bad([](sampling_params& p) { p.presence_penalty = std::numeric_limits<float>::quiet_NaN(); });
  CHECK_NOTHROW(sampling_check_params(sampling_params{}));
}

// Issue 47.1: penalties that turn a logit into inf (and so end the process on the scheduler thread)
// are refused by name; the range's ends are accepted.
TEST_CASE("sampling: penalties that could overflow a logit are refused, naming the field") {
  auto refused = [](auto set, const char* field) {
    sampling_params p;
    set(p);
    const std::string want = std::string("'") + field + "'";
    CAPTURE(want);
    CHECK_THROWS_WITH_AS(sampling_check_params(p), doctest::Contains(want.c_str()), detaudit::input_error);
  };
  refused([](sampling_params& p) { p.repeat_penalty = 1e-45f; }, "repeat_penalty");
  refused([](sampling_params& p) { p.repeat_penalty = 5e-4f; }, "repeat_penalty");
  refused([](sampling_params& p) { p.repeat_penalty = 2000.0f; }, "repeat_penalty");
  refused([](sampling_params& p) { p.presence_penalty = -3e38f; }, "presence_penalty");
  refused([](sampling_params& p) { p.frequency_penalty = -3e38f; }, "frequency_penalty");
  refused([](sampling_params& p) { p.frequency_penalty = 1.5e6f; }, "frequency_penalty");
  refused([](sampling_params& p) { p.top_p = 2.0f; }, "top_p");
  for (float rp : {SAMPLING_REPEAT_PENALTY_MIN, SAMPLING_REPEAT_PENALTY_MAX, 1.1f}) {
    sampling_params p;
    p.repeat_penalty = rp;
    p.presence_penalty = -SAMPLING_PENALTY_ABS_MAX;
    p.frequency_penalty = SAMPLING_PENALTY_ABS_MAX;
    CHECK_NOTHROW(sampling_check_params(p));
  }
}

TEST_CASE("sampling: a penalty that would make a finite logit infinite throws instead of sampling inf") {
  sampling_params p;
  p.repeat_penalty = SAMPLING_REPEAT_PENALTY_MIN;  // in range: a logit of 1e37 / (1/1024) is not
  std::vector<float> l = {1e37f, 1.0f, -2.0f};
  const std::vector<int32_t> history = {0};
  CHECK_THROWS_WITH_AS(sampling_apply_penalties(l, history, p), doctest::Contains("non-finite"), detaudit::input_error);
  // An ordinary logit under the same penalty stays finite: 1 / (1/1024) = 1024 exactly.
  std::vector<float> ok = {1.0f, 0.5f};
  sampling_apply_penalties(ok, history, p);
  CHECK(ok[0] == 1024.0f);
  // The smallest temperature a float holds: 1/temp is inf in float, and the best token still wins.
  p = sampling_params{};
  p.temp = 1e-45f;
  const std::vector<float> logits = {0.5f, 2.0f, 1.0f};
  const std::vector<sampling_candidate> c = sampling_candidates(logits, p);
  REQUIRE(c.size() == 1);
  CHECK(c[0].id == 1);
}
