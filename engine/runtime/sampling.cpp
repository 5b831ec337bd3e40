#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "kernels/ref/ref.h"
#include "numerics/exact.h"
#include "util/error.h"

namespace detaudit::runtime {
namespace {

__extension__ typedef unsigned __int128 u128;

constexpr uint64_t GAMMA = 0x9E3779B97F4A7C15ull;

// SplitMix64's output function (Steele, Lea, Flood 2014).
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool is_nan(float x) { return x != x; }

// round_half_even(exp_f32(x) * 2^bits) for x <= 0; 0 for x below the range where the product can
// reach 1/2 (and for -inf / NaN).
int64_t exp_weight(float x, int bits) {
  if (x == 0.0f) return int64_t{1} << bits;
  if (!(x >= -120.0f)) return 0;
  const float e = numerics::exp_f32(x);
  if (e == 0.0f) return 0;
  int32_t mant = 0;
  int ex = 0;
  numerics::f32_decompose(e, &mant, &ex);
  const int shift = ex + bits;
  if (shift < -40) return 0;  // |mant| < 2^24: the product is below 2^-16 and rounds to 0
  return numerics::round_shift(mant, shift);
}

// ceil(p * 2^bits) for p in [0, 1]: the product is exact in double (a power-of-two scaling).
int64_t ceil_fixed(double p, int bits) {
  const double x = p * static_cast<double>(int64_t{1} << bits);
  int64_t f = static_cast<int64_t>(x);
  if (static_cast<double>(f) < x) ++f;
  return f;
}

// Index of the largest non-NaN logit (lowest id among equals), or -1.
int64_t argmax_lowest(std::span<const float> logits) {
  int64_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (is_nan(l)) continue;
    if (best < 0 || l > logits[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  }
  return best;
}

float finite_max(std::span<const float> logits, const char* who) {
  const int64_t best = argmax_lowest(logits);
  if (best < 0) throw std::invalid_argument(std::string(who) + ": no logits (empty or all NaN)");
  const float m = logits[static_cast<size_t>(best)];
  if (m - m != 0.0f) throw std::invalid_argument(std::string(who) + ": the largest logit is not finite");
  return m;
}

bool cand_before(const sampling_candidate& a, const sampling_candidate& b) {
  return a.weight != b.weight ? a.weight > b.weight : a.id < b.id;
}

// Keeps the shortest prefix whose cumulative weight reaches top_p of the total (llama.cpp keeps
// the token that crosses the threshold).
void cut_top_p(std::vector<sampling_candidate>& c, float top_p) {
  if (top_p >= 1.0f || c.size() <= 1) return;
  int64_t total = 0;
  for (const sampling_candidate& x : c) total += x.weight;
  const u128 need = static_cast<u128>(ceil_fixed(top_p, SAMPLING_WEIGHT_BITS)) * static_cast<u128>(total);
  int64_t cum = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += c[i].weight;
    if ((static_cast<u128>(cum) << SAMPLING_WEIGHT_BITS) >= need) {
      c.resize(i + 1);
      return;
    }
  }
}

// Keeps the candidates whose weight is at least min_p times the best one.
void cut_min_p(std::vector<sampling_candidate>& c, float min_p) {
  if (min_p <= 0.0f || c.size() <= 1) return;
  const int64_t t = ceil_fixed(min_p, SAMPLING_WEIGHT_BITS);
  const int64_t w_max = c.front().weight;
  size_t keep = 1;
  while (keep < c.size() && (c[keep].weight << SAMPLING_WEIGHT_BITS) >= t * w_max) ++keep;
  c.resize(keep);
}

void check_finite(float v, const char* name) {
  if (v - v != 0.0f) throw input_error(std::string("sampling: ") + name + " must be a finite number");
}

std::string show(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", static_cast<double>(v));
  return b;
}

}  // namespace

void sampling_check_params(const sampling_params& p) {
  check_finite(p.temp, "'temperature' (--temp)");
  check_finite(p.top_p, "'top_p' (--top-p)");
  check_finite(p.min_p, "'min_p' (--min-p)");
  check_finite(p.repeat_penalty, "'repeat_penalty' (--repeat-penalty)");
  check_finite(p.presence_penalty, "'presence_penalty' (--presence-penalty)");
  check_finite(p.frequency_penalty, "'frequency_penalty' (--frequency-penalty)");
  auto bad = [](const std::string& what) { throw input_error("sampling: " + what); };
  if (p.temp < 0.0f) bad("'temperature' (--temp) must be >= 0 (0 is greedy), found " + show(p.temp));
  if (p.top_k < 0) bad("'top_k' (--top-k) must be >= 0 (0 is off), found " + std::to_string(p.top_k));
  if (p.top_p < 0.0f || p.top_p > 1.0f) bad("'top_p' (--top-p) must lie in [0, 1] (1 is off), found " + show(p.top_p));
  if (p.min_p < 0.0f || p.min_p > 1.0f) bad("'min_p' (--min-p) must lie in [0, 1] (0 is off), found " + show(p.min_p));
  if (!(p.repeat_penalty >= SAMPLING_REPEAT_PENALTY_MIN && p.repeat_penalty <= SAMPLING_REPEAT_PENALTY_MAX))
    bad("'repeat_penalty' (--repeat-penalty) must lie in [1/1024, 1024] (1 is off), found " + show(p.repeat_penalty));
  if (!(std::fabs(p.presence_penalty) <= SAMPLING_PENALTY_ABS_MAX))
    bad("'presence_penalty' (--presence-penalty) must lie in [-1e6, 1e6] (0 is off), found " + show(p.presence_penalty));
  if (!(std::fabs(p.frequency_penalty) <= SAMPLING_PENALTY_ABS_MAX))
    bad("'frequency_penalty' (--frequency-penalty) must lie in [-1e6, 1e6] (0 is off), found " + show(p.frequency_penalty));
  if (p.penalty_last_n < -1)
    bad("'repeat_last_n' (--repeat-last-n) must be >= -1 (-1 is all tokens), found " + std::to_string(p.penalty_last_n));
}

uint64_t sampling_rng_u64(uint64_t seed, uint64_t step) {
  const uint64_t state = mix64(seed + GAMMA);
  return mix64(state + (step + 1) * GAMMA);
}

int32_t sample_greedy(std::span<const float> logits) {
  const int64_t best = argmax_lowest(logits);
  if (best < 0) throw std::invalid_argument("sample_greedy: no logits (empty or all NaN)");
  return static_cast<int32_t>(best);
}

void sampling_apply_penalties(std::span<float> logits, std::span<const int32_t> history, const sampling_params& p) {
  if (p.penalty_last_n == 0 || history.empty()) return;
  if (p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
  size_t n = history.size();
  if (p.penalty_last_n > 0) n = std::min(n, static_cast<size_t>(p.penalty_last_n));
  std::unordered_map<int32_t, int32_t> counts;
  for (int32_t id : history.subspan(history.size() - n))
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) ++counts[id];
  for (const auto& [id, c] : counts) {
    float& l = logits[static_cast<size_t>(id)];
    // IEEE division on the host is correctly rounded everywhere; sampling never runs on a GPU.
    const float before = l;
    l = numerics::flush(l <= 0.0f ? l * p.repeat_penalty : l / p.repeat_penalty);
    const float freq = static_cast<float>(c) * p.frequency_penalty;
    l = numerics::flush(l - numerics::flush(freq + p.presence_penalty));
    if (before - before == 0.0f && l - l != 0.0f)
      throw input_error("sampling: the penalties turn token " + std::to_string(id) + "'s logit " + show(before) +
                        " into a non-finite number (repeat_penalty " + show(p.repeat_penalty) + ", presence_penalty " +
                        show(p.presence_penalty) + ", frequency_penalty " + show(p.frequency_penalty) + ")");
  }
}

std::vector<sampling_candidate> sampling_candidates(std::span<const float> logits, const sampling_params& p) {
  const float m = numerics::flush(finite_max(logits, "sampling_candidates"));
  const float inv_temp = static_cast<float>(1.0 / static_cast<double>(p.temp));
  std::vector<sampling_candidate> c;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (is_nan(logits[i])) continue;
    const float d = numerics::flush(numerics::flush(logits[i]) - m);
    const int64_t w = exp_weight(d == 0.0f ? 0.0f : numerics::flush(d * inv_temp), SAMPLING_WEIGHT_BITS);
    if (w > 0) c.push_back({static_cast<int32_t>(i), w});
  }
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) {
    std::partial_sort(c.begin(), c.begin() + p.top_k, c.end(), cand_before);
    c.resize(static_cast<size_t>(p.top_k));
  } else {
    std::sort(c.begin(), c.end(), cand_before);
  }
  cut_top_p(c, p.top_p);
  cut_min_p(c, p.min_p);
  return c;
}

int32_t sampling_draw(std::span<const sampling_candidate> cands, uint64_t u) {
  if (cands.empty()) throw std::invalid_argument("sampling_draw: no candidates");
  int64_t total = 0;
  for (const sampling_candidate& x : cands) total += x.weight;
  const auto r = static_cast<int64_t>((static_cast<u128>(u) * static_cast<u128>(total)) >> 64);  // in [0, total)
  int64_t cum = 0;
  for (const sampling_candidate& x : cands) {
    cum += x.weight;
    if (cum > r) return x.id;
  }
  return cands.back().id;  // unreachable: cum reaches total > r
}

int32_t sample_token(std::span<const float> logits, std::span<const int32_t> history, const sampling_params& p,
                     uint64_t step) {
  std::vector<float> work(logits.begin(), logits.end());
  sampling_apply_penalties(work, history, p);
  if (p.temp <= 0.0f) return sample_greedy(work);
  const std::vector<sampling_candidate> c = sampling_candidates(work, p);
  return sampling_draw(c, sampling_rng_u64(p.seed, step));
}

float log_softmax_norm::logprob(float logit) const {
  return numerics::flush(numerics::flush(numerics::flush(logit) - max) - log_z);
}

log_softmax_norm log_softmax_normalizer(std::span<const float> logits) {
  log_softmax_norm n;
  n.log_z = kernels::log_softmax_logz_ref(logits.data(), static_cast<int64_t>(logits.size()), &n.max);
  return n;
}

std::vector<token_logprob> top_logprobs(std::span<const float> logits, int n) {
  if (n <= 0 || logits.empty()) return {};
  std::vector<kernels::token_logprob> top(std::min(logits.size(), static_cast<size_t>(n)));
  const int64_t k = kernels::log_softmax_top_ref(logits.data(), static_cast<int64_t>(logits.size()), n, top.data());
  std::vector<token_logprob> out;
  out.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) out.push_back({top[static_cast<size_t>(i)].id, top[static_cast<size_t>(i)].logprob});
  return out;
}

}  // namespace detaudit::runtime
