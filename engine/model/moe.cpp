#include "model/moe.h"

namespace detaudit::model {

namespace {
// gpt-oss's clamped SwiGLU (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE constants).
constexpr float OAI_ALPHA = 1.702f, OAI_LIMIT = 7.0f;
}  // namespace

act moe_ffn(const model& m, ops& o, int64_t l, act h, std::vector<std::vector<std::vector<int32_t>>>* routes) {
  const hparams& hp = m.hp();
  const layer_weights& w = m.layers[l];
  const int64_t n = h.rows, k = hp.n_expert_used;
  const bool oai = arch_oai_block(hp.arch);
  act logits = o.alloc(n, hp.n_expert);
  o.matmul(w.router, h, logits);
  if (!w.router_b.empty()) o.add_bias(logits, w.router_b);  // gpt-oss
  std::vector<int32_t> ids;
  std::vector<float> weights;
  o.moe_route(logits, k, hp.expert_weights_norm, ids, weights);
  if (routes)
    for (int64_t t = 0; t < n; ++t) (*routes)[t].emplace_back(ids.begin() + t * k, ids.begin() + (t + 1) * k);

  // slots (n * k, n_embd): row t * k + j holds token t's j-th expert's weighted output.
  act slots = o.alloc(n * k, hp.n_embd);
  std::vector<std::vector<int64_t>> tokens(static_cast<size_t>(hp.n_expert)), dest(tokens.size());
  std::vector<std::vector<float>> scale(tokens.size());
  for (int64_t i = 0; i < n * k; ++i) {
    const size_t e = static_cast<size_t>(ids[i]);
    tokens[e].push_back(i / k);
    dest[e].push_back(i);
    scale[e].push_back(weights[i]);
  }
  for (int64_t e = 0; e < hp.n_expert; ++e) {
    if (tokens[e].empty()) continue;
    const size_t mark = o.alloc_mark();
    act xe = o.gather_rows(h, tokens[e]);
    act gate = o.alloc(xe.rows, hp.n_ff_exp), up = o.alloc(xe.rows, hp.n_ff_exp), down = o.alloc(xe.rows, hp.n_embd);
    o.matmul(w.exp_gate[e], xe, gate);
    o.matmul(w.exp_up[e], xe, up);
    if (oai) {  // gpt-oss: biased experts, the clamped SwiGLU
      o.add_bias(gate, w.exp_gate_b[e]);
      o.add_bias(up, w.exp_up_b[e]);
      o.swiglu_oai(gate, up, OAI_ALPHA, OAI_LIMIT, gate);
    } else {
      o.swiglu(gate, up, gate);
    }
    o.matmul(w.exp_down[e], gate, down);
    if (oai) o.add_bias(down, w.exp_down_b[e]);
    o.scale_rows(down, scale[e], down);
    o.scatter_rows(down, dest[e], slots);
    o.alloc_release(mark);
  }

  std::vector<int64_t> rank(static_cast<size_t>(n));
  auto rows_of_rank = [&](int64_t j) {
    for (int64_t t = 0; t < n; ++t) rank[t] = t * k + j;
    return rank;
  };
  act out = o.gather_rows(slots, rows_of_rank(0));
  for (int64_t j = 1; j < k; ++j) {
    const size_t mark = o.alloc_mark();
    o.add(out, o.gather_rows(slots, rows_of_rank(j)), out);
    o.alloc_release(mark);
  }
  return out;
}

}  // namespace detaudit::model
