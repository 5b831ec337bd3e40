// Sampling: choosing the next token from one position's logits, exactly and order-independently.
//
// Goals: the token a request samples depends only on (its logits, its own previous tokens, its
// sampling parameters, its seed, its step index) — never on the slot, the batch, the thread count
// or the machine. To that end the whole path is integer arithmetic after one element-wise exp:
//
//   1. penalties (llama.cpp llama_sampler_penalties semantics) over the request's own last N tokens;
//   2. greedy when temp <= 0: the largest logit, ties broken to the LOWEST token id;
//   3. otherwise integer weights W_i = round_half_even(exp_f32(flush(flush(l_i - m) * inv_temp)) * 2^30),
//      m = max logit, inv_temp = (float)(1.0 / temp) computed in double on the host; tokens with
//      W_i = 0 are dropped (probability below 2^-31 of the best one);
//   4. candidates ordered by (W desc, id asc); cut by top-k, then top-p on the remaining integer
//      total, then min-p relative to the best weight — every comparison on integers;
//   5. a 64-bit uniform u from the counter-based RNG sampling_rng_u64(seed, step) picks the first
//      candidate whose integer cumulative weight exceeds floor(u * total / 2^64).
//
// No libm on this path: exp and log are numerics::exp_f32 / log_f32; differences and scaled
// differences are flushed (never subnormal), as everywhere on the exact path.
// Differences from llama.cpp, on purpose: temperature is applied before top-k/top-p/min-p (as
// Hugging Face does; llama.cpp cuts on the untempered softmax), and the p thresholds are rounded up
// to the 2^-30 grid. docs/generate.md states the contract.
// Non-goals: grammars, DRY, XTC, mirostat, typical-p.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace detaudit::runtime {

constexpr int SAMPLING_WEIGHT_BITS = 30;  // W_i = exp(...) on a 2^-30 grid; the best token is 2^30

struct sampling_params {
  float temp = 0.0f;               // <= 0: greedy
  uint64_t seed = 0;
  int32_t top_k = 40;              // 0: off
  float top_p = 0.95f;             // 1: off
  float min_p = 0.05f;             // 0: off
  float repeat_penalty = 1.0f;     // 1: off; > 1 discourages repeats
  float presence_penalty = 0.0f;   // 0: off
  float frequency_penalty = 0.0f;  // 0: off
  int32_t penalty_last_n = 64;     // tokens of history the penalties look at; -1: all; 0: none
};

// The penalties' range: wide enough for every value people use (llama.cpp's 1.1, OpenAI's [-2, 2])
// and narrow enough that a penalised logit stays finite for any logit a model gives (|l| < 2^100):
// a repeat penalty of 1e-45 or a presence penalty of -3e38 would turn a logit into inf.
constexpr float SAMPLING_REPEAT_PENALTY_MIN = 1.0f / 1024.0f, SAMPLING_REPEAT_PENALTY_MAX = 1024.0f;
constexpr float SAMPLING_PENALTY_ABS_MAX = 1.0e6f;  // |presence_penalty|, |frequency_penalty|

// Throws input_error naming the parameter (its JSON name, then its command-line flag) when a
// value is out of range or not finite: temp < 0, top_k < 0, top_p or min_p outside [0, 1],
// repeat_penalty outside [1/1024, 1024], |presence_penalty| or |frequency_penalty| above 1e6,
// penalty_last_n < -1.
void sampling_check_params(const sampling_params& p);

// The counter-based RNG: the step-th output (step 0 first) of the SplitMix64 sequence whose state
// starts at mix64(seed + GAMMA), i.e. mix64(mix64(seed + GAMMA) + (step + 1) * GAMMA) with
// GAMMA = 0x9E3779B97F4A7C15 and mix64 SplitMix64's finalizer. Pure function; thread-safe.
uint64_t sampling_rng_u64(uint64_t seed, uint64_t step);

// A seed as a request or the command line gives it, 0 to 2^63-1 or -1: -1 is seed 0 (llama.cpp's
// -1 draws a random seed; detaudit never does), so the same number samples alike from `generate`
// and from `serve`. The caller has checked the range.
inline uint64_t seed_from_signed(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

// Index of the largest logit; among equal logits the lowest id (so +0 and -0 tie). NaN logits are
// never chosen. Throws std::invalid_argument when logits is empty or all NaN.
int32_t sample_greedy(std::span<const float> logits);

// Applies repeat / presence / frequency penalties in place, as llama.cpp does: for each token that
// occurs c > 0 times in the last penalty_last_n entries of `history`, a logit l becomes
// (l <= 0 ? l * repeat_penalty : l / repeat_penalty) - (c * frequency_penalty + presence_penalty).
// Ids outside [0, logits.size()) in history are ignored. Throws input_error when a finite logit
// becomes infinite or NaN (a logit beyond what the penalties' range is made for).
void sampling_apply_penalties(std::span<float> logits, std::span<const int32_t> history, const sampling_params& p);

struct sampling_candidate {
  int32_t id = 0;
  int64_t weight = 0;  // W_i, in (0, 2^30]
};

// The candidate set of steps 3-4 above (temperature, top-k, top-p, min-p), in the order
// (weight desc, id asc); never empty for finite logits. Requires p.temp > 0. Throws
// std::invalid_argument when logits is empty or the largest logit is not finite.
std::vector<sampling_candidate> sampling_candidates(std::span<const float> logits, const sampling_params& p);

// The candidate chosen by uniform u: the first whose cumulative weight exceeds
// floor(u * total / 2^64). Requires a non-empty list.
int32_t sampling_draw(std::span<const sampling_candidate> cands, uint64_t u);

// One sampling step: penalties over `history` (the request's prompt and generated tokens so
// far), then greedy when p.temp <= 0, else candidates and a draw with sampling_rng_u64(p.seed,
// step). `logits` is not modified.
int32_t sample_token(std::span<const float> logits, std::span<const int32_t> history, const sampling_params& p,
                     uint64_t step);

// ---- log-probabilities for reporting (pre-sampling: raw logits, temperature 1, no penalties) ----
// These delegate to kernels::log_softmax_logz_ref / log_softmax_top_ref (the numerics contract):
// log p_i = flush(flush(l_i - m) - log_z), log_z = log_f32(S * 2^-30), S = sum_j round_half_even(
// exp_f32(flush(l_j - m)) * 2^30) an integer sum, m the largest logit. Logits may be -inf, never
// NaN or +inf (input_error).

struct log_softmax_norm {
  float max = 0.0f;
  float log_z = 0.0f;
  float logprob(float logit) const;
};

log_softmax_norm log_softmax_normalizer(std::span<const float> logits);

struct token_logprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// The n most probable tokens (fewer when the vocabulary is smaller), ordered by logit descending
// then id ascending, with their log-probabilities. n <= 0 gives an empty list.
std::vector<token_logprob> top_logprobs(std::span<const float> logits, int n);

}  // namespace detaudit::runtime
