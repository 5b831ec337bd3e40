// Distribution compare of two `detaudit score --json` outputs over the same tokens (e.g. two
// quantizations of one model): the statistics llama-perplexity's KL-divergence mode prints.
//
// Input shape (engine/runtime/output.cpp score_to_json):
//
//   {"items": [{"steps": [{"id": 432, "logprob": -1.25, "top": [[432, -1.25], [383, -2.5], ...],
//                          "logit_hash": "..."}, ...], "chained_hash": "..."}, ...]}
//
// Per step, A is the reference distribution and B the one measured against it.
//
// The approximation. A score file keeps only the top-k log-probs per step, not the whole
// distribution, so the KL divergence is computed over a coarsened vocabulary: the set S = A's top-k
// tokens plus the scored token, and one bucket "rest" for every other token.
//   P_A(s)   = exp(A's log-prob of s)                      (known for every s in S)
//   P_B(s)   = exp(B's log-prob of s) when B reports s (its top-k or its scored token); otherwise
//              min(p_last, rest_B / (m + 1)), where p_last is the smallest probability in B's top-k
//              (an unreported token cannot exceed it), rest_B = 1 - the mass B reports, and m the number
//              of tokens of S that B does not report (they share rest_B with the rest bucket).
//   P(rest)  = max(0, 1 - sum over S), for each side.
//   KLD      = sum over S and rest of P_A * ln(P_A / P_B); a term with P_A = 0 is 0, and P_B is
//              floored at KLD_FLOOR.
// When B reports every token of S this is exactly the KL divergence of the two coarsened
// distributions, which is never above the full-vocabulary KL divergence (merging outcomes cannot
// increase it): the values are lower bounds, tighter with a larger --top-k.
//
// The summary follows llama-perplexity's KL-divergence mode (docs/lm-eval.md, "Comparing
// distributions", has every formula): A plays its "base", B its "Q". Its perplexities come from the
// scored token's log-prob on each side, which a score file holds exactly.
//
// Non-goals: token sequences that differ; item-level flips (a score file holds nothing graded).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reports/audit/record.h"

namespace detaudit::reports {

inline constexpr double KLD_FLOOR = 1e-10;
// A log-prob above 0 by more than this is refused (a probability above 1); up to it, read as 0.
inline constexpr double KLD_LOGPROB_SLACK = 1e-6;
// llama-perplexity prints its summary only from this many positions on.
inline constexpr int64_t KLD_MIN_STEPS_LLAMA = 100;

// One scored step: the scored token, its log-prob, and the top-k (id, log-prob) best first.
struct kld_step_in {
  int32_t id = -1;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;
};

// The approximate KL divergence D(A || B) of one step, as described above.
double kld_step(const kld_step_in& a, const kld_step_in& b);

// What one step contributes to the summary. Both sides scored the same token.
struct kld_point {
  double kld = 0;           // kld_step(a, b)
  double nll_a = 0, nll_b = 0;  // -log-prob of the scored token, A and B
  double dp = 0;            // p_B - p_A of the scored token
  bool same_top = false;    // both top-k lists are non-empty and start with the same token
};
kld_point kld_point_of(const kld_step_in& a, const kld_step_in& b);

// llama-perplexity's summary of a set of steps. Percentiles interpolate linearly between the sorted
// values at position q * (n - 1) (the median is the mean of the middle two when n is even). Every
// *_unc is the uncertainty llama-perplexity prints after "±": the standard error of a mean is
// sqrt(sum (x - mean)^2 / (n (n - 1))), and 0 unless n > 10. Fractions, not percent.
struct kld_stats {
  int64_t n = 0;
  double kld_mean = 0, kld_mean_unc = 0;
  double kld_max = 0, kld_p999 = 0, kld_p99 = 0, kld_p95 = 0, kld_p90 = 0, kld_median = 0;
  double kld_p10 = 0, kld_p5 = 0, kld_p1 = 0, kld_p01 = 0, kld_min = 0;
  double dp_mean = 0, dp_mean_unc = 0;
  double dp_max = 0, dp_p999 = 0, dp_p99 = 0, dp_p95 = 0, dp_p90 = 0, dp_p75 = 0, dp_median = 0;
  double dp_p25 = 0, dp_p10 = 0, dp_p5 = 0, dp_p1 = 0, dp_p01 = 0, dp_min = 0;
  double dp_rms = 0, dp_rms_unc = 0;  // sqrt(mean dp^2); unc = unc(mean dp^2) / (2 rms), 0 when rms is 0
  double same_top = 0, same_top_unc = 0;  // share p of steps; unc = sqrt(p (1 - p) / (n - 1)), 0 when n < 2
  // Perplexities of the scored tokens: exp(mean nll), unc = PPL * unc(mean nll).
  double ppl_a = 0, ppl_a_unc = 0, ppl_b = 0, ppl_b_unc = 0;
  // cov = sum (nll_a - mean)(nll_b - mean) / (n (n - 1)), 0 unless n > 10. Correlation:
  // cov / (unc_a unc_b) of the mean nlls; nullopt when either uncertainty is 0.
  double ln_ppl_cov = 0;
  std::optional<double> ln_ppl_cor;
  // ln(PPL_B / PPL_A) = mean nll_b - mean nll_a, unc = sqrt(unc_b^2 + unc_a^2 - 2 cov);
  // the ratio is its exp, unc = ratio * that; the difference PPL_B - PPL_A has
  // unc = sqrt(ppl_b_unc^2 + ppl_a_unc^2 - 2 PPL_B PPL_A cov). A square root of a negative
  // rounding residue is 0.
  double ln_ppl_ratio = 0, ln_ppl_ratio_unc = 0, ppl_ratio = 0, ppl_ratio_unc = 0, ppl_diff = 0, ppl_diff_unc = 0;
};

// The summary of these steps (all zero when there are none).
kld_stats kld_summarize(const std::vector<kld_point>& points);

struct kld_item {
  int64_t index = 0;
  kld_stats stats;
};

struct kld_report {
  std::string path_a, path_b;
  std::vector<kld_item> items;
  kld_stats overall;
  std::vector<std::string> notes;
};

// Reads one score file's items. Throws input_error naming the file and field: a token id outside
// 0 .. 2^31 - 1, a log-prob that is not finite or is above 0 (beyond KLD_LOGPROB_SLACK), no step at all.
std::vector<std::vector<kld_step_in>> kld_read(const std::string& path);

// Item by item and over all steps. Throws input_error when the two sides differ in items, steps
// or scored tokens (they must score the same tokens).
kld_report kld_compare(const std::vector<std::vector<kld_step_in>>& a, const std::vector<std::vector<kld_step_in>>& b);
kld_report kld_compare_files(const std::string& path_a, const std::string& path_b);

// Two generated responses (a cross pair's row) as scored steps: from step 0, while both sides
// sampled the same token (same id and bytes, so each step has the same context and the same scored
// token on both sides) and both give pre-sampling top log-probs with token ids and the sampled
// token's log-prob (its own, else its entry in the top list). The step where the tokens part is left
// out: it has no common scored token. Appends one point per step to `out`; returns whether both
// records give pre-sampling log-probs with ids at all (false: nothing to compare, nothing appended).
bool kld_points_shared(const record& a, const record& b, std::vector<kld_point>& out);

// A stats object's JSON: the keys docs/lm-eval.md lists ("steps", "kld_mean", ...).
nlohmann::ordered_json kld_stats_json(const kld_stats& s);

// "text" (a table per item, then llama-perplexity's block over all steps, KLD in nats, dp and
// same top in percent) or "json". Throws input_error otherwise.
std::string kld_render(const kld_report& r, const std::string& format);

}  // namespace detaudit::reports
