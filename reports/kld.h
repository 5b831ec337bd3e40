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
// Non-goals: perplexity (the score file holds no full distribution); token sequences that differ.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "reports/record.h"

namespace detaudit::reports {

inline constexpr double KLD_FLOOR = 1e-10;

// One scored step: the scored token, its log-prob, and the top-k (id, log-prob) best first.
struct kld_step_in {
  int32_t id = -1;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;
};

// The approximate KL divergence D(A || B) of one step, as described above.
double kld_step(const kld_step_in& a, const kld_step_in& b);

// llama-perplexity's summary of a set of steps. Percentiles interpolate linearly between the
// sorted values (position q * (n - 1)). dp = p_B(scored token) - p_A(scored token).
struct kld_stats {
  int64_t n = 0;
  double kld_mean = 0, kld_median = 0, kld_p99 = 0, kld_p999 = 0, kld_max = 0;
  double same_top = 0;  // fraction of steps whose top-1 token is the same in A and B
  double dp_mean = 0, dp_rms = 0;
};

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

// Reads one score file's items. Throws input_error naming the file and field.
std::vector<std::vector<kld_step_in>> kld_read(const std::string& path);

// Item by item and over all steps. Throws input_error when the two sides differ in items, steps
// or scored tokens (they must score the same tokens).
kld_report kld_compare(const std::vector<std::vector<kld_step_in>>& a, const std::vector<std::vector<kld_step_in>>& b);
kld_report kld_compare_files(const std::string& path_a, const std::string& path_b);

// "text" (a table, KLD in nats, dp in percentage points) or "json". Throws input_error otherwise.
std::string kld_render(const kld_report& r, const std::string& format);

}  // namespace detaudit::reports
