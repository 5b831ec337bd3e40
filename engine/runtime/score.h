// Teacher-forced scoring: the log-probability the model gives each token of a fixed continuation,
// the library behind `detaudit score` (and the fidelity comparisons with llama.cpp).
//
// Goals: prompt + continuation evaluated in one decode(), per continuation token the same record a
// generation step has (id, log-prob, top-N, logit hash) and a chained hash over them.
// Non-goals: sampling, generation.
//
// Thread-safety: a call uses its context exclusively.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/context.h"
#include "runtime/sampling.h"
#include "runtime/token_step.h"

namespace detaudit::runtime {

struct score_step {
  int32_t id = 0;          // the continuation token at this step
  float logprob = 0.0f;    // its log-probability
  std::vector<token_logprob> top;
  uint64_t logit_hash = 0;
};

struct score_result {
  std::vector<score_step> steps;  // one per continuation token
  uint64_t chained_hash = 0;
  run_timings timings;            // n_prompt = prompt + continuation tokens evaluated, prompt_ms their decode
};

// Evaluates prompt + continuation (all but the last continuation token, whose logits no step
// needs) in one decode() on a new sequence, with logits at the positions that predict each
// continuation token. Throws input_error for an empty prompt or continuation, or an id outside
// the vocabulary.
score_result score(context& ctx, std::span<const int32_t> prompt, std::span<const int32_t> continuation, int top_k);

struct score_item {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
};

// The items of a llama.cpp reference file ({"items": [{"prompt_tokens": [...], "tokens": [...],
// ...}, ...]}, as in the fixtures' reference/*.json), in file order. Throws input_error naming the
// file and item when the structure differs.
std::vector<score_item> score_read_reference(const std::string& path);

}  // namespace detaudit::runtime
