// Results as `detaudit generate` and `detaudit score` write them: JSON, a hash listing that
// compares with cmp, a layer-hash trace, a summary; and the build's environment block shared by
// every run record.
//
// Goals: formats that carry nothing that varies between identical runs except where named
// (timings, environment).
// Non-goals: run records of audits (probes/), reports (reports/).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "model/model.h"
#include "runtime/generate.h"
#include "runtime/score.h"

namespace detaudit::runtime {

// {version, precision_contract, simd, backend[, device]} of this build; `device` is a context's
// device_description() ("cpu avx512", "vulkan 0: llvmpipe ..."): backend is its first word.
nlohmann::json run_environment(const std::string& device = "");

// {model {path, sha256}, numerics, sampling, prompt_tokens, tokens [{id, piece, top [[id,
// logprob]...], logit_hash}], text, chained_hash, finish_reason, stop_type, [stop_word], timings,
// environment}. Reads the whole model file once for its sha256.
nlohmann::json generate_to_json(const generate_result& r, const model::model& m, numerics_mode numerics,
                                const generate_params& p);

// One line per step "step token_id logit_hash" (step from 0) and a last line "chained <hash>":
// nothing that varies between identical runs, so two outputs compare with cmp.
std::string generate_hashes_text(const generate_result& r);
// "trace POS LAYER HASH" per traced position and layer ("norm" for the final norm), for diffing
// two runs: the first differing line names the first position and layer where they part.
std::string generate_trace_text(const generate_result& r);
// With a mixture-of-experts model, generate_trace_text also writes "route POS LAYER E0,E1,..."
// after each position's trace lines: the experts the token used in that layer, best first.

// Where two traces of the same request first part, positions matched by order (the first
// max(len) entries): in the first position that differs, the first layer whose output hash
// differs, and separately the first position and layer whose experts differ. -1: no difference.
struct trace_parting {
  int64_t hash_pos = -1, hash_layer = -1;    // hash_layer == n_layer: the final norm
  int64_t route_pos = -1, route_layer = -1;
  std::vector<int32_t> route_a, route_b;     // the experts of route_layer on each side
};
trace_parting trace_compare(const std::vector<token_trace>& a, const std::vector<token_trace>& b);
// "layers: first differ at position P, layer L" (or "layers: identical") and "routing: first
// differs at position P, layer L: experts 3,1 vs 3,7" (or "routing: identical"), one line each.
std::string trace_parting_text(const trace_parting& d);

// Timings and the finish reason, for stderr.
std::string generate_summary_text(const generate_result& r);

// {"items": [{"steps": [{"id", "logprob", "top": [[id, logprob], ...], "logit_hash"}, ...],
// "chained_hash"}, ...]} in item order.
nlohmann::json score_to_json(const std::vector<score_result>& items);

// Per item a header line and one line per step: step, id, logprob, logit hash, top entries.
std::string score_to_text(const std::vector<score_result>& items);

}  // namespace detaudit::runtime
