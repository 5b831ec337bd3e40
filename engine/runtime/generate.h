// Generation on a context: the library behind `detaudit generate` and the engine target.
//
// Goals: one request at a time on its own sequence of a context — prefill in one decode() call
// (the context splits it by n_ubatch), then one token per step (runtime/token_step.h: logits ->
// step hash -> top-N log-probs -> sample -> stop on an end-of-generation token, a stop string,
// n_predict or a full context), optionally beside companion sequences that vary the batch.
// Scoring is runtime/score.h, output formats runtime/output.h, prompts runtime/prompt.h.
// Non-goals: scheduling many requests (serve/), prompt caches, speculative decoding.
//
// Thread-safety: a call uses its context exclusively (context is single-threaded).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/context.h"
#include "runtime/prompt.h"
#include "runtime/sampling.h"
#include "runtime/token_step.h"

namespace detaudit::runtime {

struct generate_params {
  int64_t n_predict = 128;        // most tokens to generate; -1: until EOG or the context is full
  sampling_params sampling;
  std::vector<std::string> stop;  // generation ends when the text contains one; the text ends before it
  int n_top_logprobs = 5;         // top log-probs reported per step (0: none)
  // Other sequences evaluated in the same forward steps as this one (the "beside N others"
  // condition): each companion's prompt is prefilled in the request's prefill step and it then
  // continues greedily, one token per step, while the request generates. Their output is
  // discarded; they exist so batch composition can be varied.
  std::vector<std::vector<int32_t>> companions;
};

// n companion prompts (built-in filler texts, cycled) tokenized with v, for generate_params.
std::vector<std::vector<int32_t>> generate_filler_prompts(const tokenizer::vocab& v, int n);

// Generates from `prompt` on a new sequence of ctx (freed on return). Throws input_error for an
// empty prompt, bad sampling parameters, an empty stop string, n_predict < -1, or a prompt that
// does not fit the context (from context::decode).
generate_result generate(context& ctx, std::span<const int32_t> prompt, const generate_params& p,
                         const text_callback& on_text = {});

}  // namespace detaudit::runtime
