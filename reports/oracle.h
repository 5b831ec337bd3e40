// The exact engine as arbiter: every response's tokens teacher-forced through `--numerics exact` on
// the model file the server serves, and each divergence judged against exact math.
//
// probes/oracle.cpp computes the per-step figures (it runs the engine) and writes them to the run
// folder's oracle.json, whose shape reports/audit/oracle_data.h owns; this file says what the
// reports make of them:
//   - per divergent row, at the first token where the two sides' token ids part: each side's exact
//     log-prob and rank, the exact argmax and its margin, which side equals the argmax, and a class
//       near-tie      neither side is off
//       server-error  one side is off, at a step where its request was greedy (temperature 0)
//       both-off      both sides are
//       sampled       one side is, and its request was not greedy (sampling may pick it)
//     where a side is off when its token is below the exact best by more than the tie bound, or
//     when the server's own numbers rank it lower: its reported log-prob of the token is below its
//     best reported alternative's by more than the tie bound (pre-sampling log-probs, steps that map
//     one to one to the server's tokens; a greedy server that picked a token its own log-probs put
//     that far down did not pick its argmax, whatever exact math says of the two tokens); and no
//     class (with a note) when the row cannot be judged (other prompt tokens, no token on one side
//     at that step, tokens that could not be mapped to the vocabulary);
//   - fidelity: |server log-prob - exact log-prob| over every log-prob the server reported for a
//     token of the vocabulary (the chosen token's and each alternative's), pre-sampling only; mean
//     and max per condition, per pair and per run; and a KL estimate D(exact || server) over the
//     server's alternatives (reports/audit/kld.h's coarsened form);
//   - a step's spread: with d = server - exact over the values above at one step, max d - min d
//     (a step with fewer than two values has none). It is the largest error the server makes on the
//     difference of two log-probs of that step, and it ignores an offset the step's values share
//     (unnormalised logits, a log-softmax shifted by a constant): such an offset changes no order,
//     so it must not widen the bound. Half the spread is max |d - c| for the best offset c (the
//     midrange of the step's d), the error left once the offset is removed;
//   - the tie bound of a row: side A's target's precision plus side B's, a target's precision being
//     half the largest spread over its alone and control responses (the server at its quietest; a
//     server whose log-prob differences within a step are each within 2p of exact can order two
//     tokens wrongly only when their exact gap is at most 2p, and a condition that pushes a server
//     further from exact than that is what the verdict is to catch, so the conditions under test do
//     not set it), never below ORACLE_EXACT_BOUND; ORACLE_DEFAULT_TIE / 2 for a target that
//     reported no step with two comparable log-probs; --near-tie instead of all of it. A target
//     whose precision exceeds ORACLE_MAX_PRECISION alone, or whose model_sha256 is not the
//     oracle's, gets no verdicts.
// Non-goals: judging responses to prompts the oracle cannot rebuild (their count of prompt tokens
// differs from the server's); post-sampling probabilities (a server's trimmed, renormalised list).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reports/audit/oracle_data.h"
#include "reports/audit/record.h"

namespace detaudit::reports {

// The precision contract's bound on |exact - float64| for one log-prob (docs/precision-contract.md
// section 14): two tokens whose exact log-probs are closer than this are both "the argmax".
inline constexpr double ORACLE_EXACT_BOUND = 0.05;
// The tie bound when the server reported no log-probs to measure it by: above every max |Δ|
// measured between llama.cpp (b4748 and 2026-08) and exact on the fixtures (0.074 nats), doubled
// as the measured bound is, rounded down.
inline constexpr double ORACLE_DEFAULT_TIE = 0.1;
// A condition's fidelity is a finding when its mean |Δ| exceeds alone's by this factor and by at
// least ORACLE_WORSE_ABS nats (two figures near zero are not told apart).
inline constexpr double ORACLE_WORSE_RATIO = 1.5;
// A target whose precision (half its largest spread) exceeds this even alone is not judged: the
// oracle is not its model, or its log-probs are not the model's distribution (measured servers are
// within 0.1 nats of exact, offset or not).
inline constexpr double ORACLE_MAX_PRECISION = 1.0;
inline constexpr double ORACLE_WORSE_ABS = 1e-4;

// What a report row carries when the oracle judged it.
struct row_oracle {
  std::string cls;     // near-tie | server-error | both-off | sampled | "" (not judged, see note)
  std::string note;    // why not judged, or what else to know
  int64_t step = -1;   // the oracle step judged: where the two sides' token ids first differ
  int32_t id_a = -1, id_b = -1;
  std::string token_a, token_b;
  std::optional<double> logprob_a, logprob_b;
  int rank_a = -1, rank_b = -1;
  int32_t argmax_id = -1;
  std::string argmax_token;
  double argmax_logprob = 0;
  double margin = 0;        // exact best - exact second at that step
  std::string argmax_side;  // a | b | both | neither (ORACLE_EXACT_BOUND)
  double bound = 0;         // the tie bound applied
  // The server's own numbers at that step: its best reported alternative's log-prob minus its
  // reported log-prob of its token, and that alternative's text; nullopt when it reported no such
  // pair (no alternatives, no log-prob of its token, post-sampling, steps retokenized).
  std::optional<double> own_gap_a, own_gap_b;
  std::string own_best_a, own_best_b;
  // The token is not among the server's own alternatives and its log-prob was not reported: the
  // own gap is a lower bound (the best minus the last listed).
  bool own_unlisted_a = false, own_unlisted_b = false;
  bool off_a = false, off_b = false;  // the side is off (the rule above)
};

// The run-level summary, also the pair's fidelity (over the records of one side's condition).
struct oracle_fidelity {
  int64_t n = 0;          // log-prob values compared
  double mean = 0, max = 0;
  int64_t equal = 0;      // values equal bit for bit
  int64_t kl_n = 0;
  double kl_mean = 0;
  int64_t responses = 0;  // evaluated responses
  int64_t off_argmax = 0; // greedy responses with a step whose token is below the exact best by more than the bound
};

// Options of oracle_apply.
struct oracle_apply_options {
  std::optional<double> near_tie;  // --near-tie: the tie bound, instead of the measured one
};

}  // namespace detaudit::reports
