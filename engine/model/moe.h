// The mixture-of-experts feed-forward (qwen3moe, gpt-oss), as a composition of ops.
//
// Goals: routing and expert evaluation written once, over the ordinary ops (matmul, swiglu,
// gather_rows) and three of their own (moe_route, scale_rows, scatter_rows), so every numerics
// and backend runs it and each expert is an ordinary matrix to every kernel. The result of a token
// depends only on its own row: its experts see the rows of the tokens routed to them, and each
// row of a matmul is computed from that row alone.
// Non-goals: skipping experts no token uses is the only optimisation (no fused kernels).
#pragma once

#include <cstdint>
#include <vector>

#include "model/forward.h"

namespace detaudit::model {

// The feed-forward of layer l on the normed rows h (tokens, n_embd): a new activation (tokens,
// n_embd) = sum over each token's experts, best first, of weight * down(silu(gate(h)) * up(h)),
// added in rank order as llama.cpp adds them. gpt-oss adds the router's and the experts' biases and
// uses the clamped SwiGLU (swiglu_oai); its routing weights, a softmax over the chosen experts'
// logits, are the renormalised softmax (the same ratios; moe_route with norm). routes: when non-null, (*routes)[t] receives token
// t's expert ids of this layer (rank order).
act moe_ffn(const model& m, ops& o, int64_t l, act h, std::vector<std::vector<std::vector<int32_t>>>* routes);

}  // namespace detaudit::model
