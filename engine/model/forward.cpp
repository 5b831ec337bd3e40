#include "model/forward.h"

#include <cmath>
#include <stdexcept>

#include <xxhash.h>

#include "model/moe.h"
#include "numerics/exact.h"

namespace detaudit::model {

rope_params layer_rope(const hparams& hp, int64_t l) {
  rope_params p;
  p.freq_base = layer_swa(hp, l) ? hp.rope_freq_base_swa : hp.rope_freq_base;
  p.freq_scale = layer_swa(hp, l) ? hp.rope_scale_linear_swa : hp.rope_scale_linear;
  // Computed once per layer in double with numerics' own log (no libm: the tables are the same
  // bits on every machine). llama.cpp's attn_factor: rope.scaling.attn_factor, and under YaRN get_mscale(factor) / (1 +
  // 0.1 ln factor) with get_mscale(f) = 1 + 0.1 ln f above 1, else 1 (its llama-context.cpp).
  const double factor = 1.0 / hp.rope_scale_linear;
  double attn_factor = hp.rope_attn_factor;
  if (hp.rope_yarn) {
    const double mscale = factor <= 1.0 ? 1.0 : 1.0 + 0.1 * numerics::log_f64(factor);
    attn_factor *= mscale / (1.0 + 0.1 * numerics::log_f64(factor));
    // ggml_rope_yarn_corr_dims: the dimensions where beta_fast = 32 and beta_slow = 1 rotations fit
    // in the original context, floor / ceil, clamped to [0, n_rot - 1].
    const double n_dims = static_cast<double>(hp.n_rot), orig = static_cast<double>(hp.n_ctx_orig_yarn);
    auto corr_dim = [&](double beta) { return n_dims * numerics::log_f64(orig / (beta * 2.0 * M_PI)) / (2.0 * numerics::log_f64(p.freq_base)); };
    p.ext_factor = 1.0;
    p.corr_low = std::max(0.0, std::floor(corr_dim(32.0)));
    p.corr_high = std::min(n_dims - 1.0, std::ceil(corr_dim(1.0)));
    p.mscale = attn_factor * (1.0 + 0.1 * numerics::log_f64(1.0 / p.freq_scale));  // ggml_rope's magnitude under YaRN
  } else {
    p.mscale = attn_factor;
  }
  return p;
}

attn_params layer_attn(const hparams& hp, int64_t l) {
  attn_params p;
  p.kq_scale = hp.attn_scale_override > 0 ? hp.attn_scale_override : 1.0 / std::sqrt(static_cast<double>(hp.head_dim));
  p.window = layer_swa(hp, l) ? hp.n_swa : 0;
  p.softcap = hp.attn_softcap;
  return p;
}

namespace {

// Appends the xxh3-64 of each row of x (as f32) to the token's trace.
void trace_rows(ops& o, act x, step_output& out) {
  std::vector<float> buf(static_cast<size_t>(x.rows * x.cols));
  o.read_f32(x, buf.data());
  for (int64_t t = 0; t < x.rows; ++t)
    out.traces[t].push_back(XXH3_64bits(buf.data() + t * x.cols, sizeof(float) * static_cast<size_t>(x.cols)));
}

// One transformer block on the residual stream x (n_tokens, n_embd), in place. Its temporaries
// are released at the end, so a step holds one block's activations, not every layer's.
// routes: when non-null, receives each token's experts of this layer (mixture of experts).
void block(const model& m, ops& o, int64_t l, act x, std::vector<std::vector<std::vector<int32_t>>>* routes) {
  const hparams& hp = m.hp();
  const layer_weights& w = m.layers[l];
  const int64_t n = x.rows, q_dim = hp.n_head * hp.head_dim, kv_dim = hp.n_head_kv * hp.head_dim;
  const size_t mark = o.alloc_mark();

  act h = o.alloc(n, hp.n_embd);
  o.rms_norm(x, w.attn_norm, hp.n_embd, h);
  act q = o.alloc(n, q_dim), k = o.alloc(n, kv_dim), v = o.alloc(n, kv_dim);
  o.matmul(w.wq, h, q);
  o.matmul(w.wk, h, k);
  o.matmul(w.wv, h, v);
  if (!w.bq.empty()) {  // qwen2, gpt-oss
    o.add_bias(q, w.bq);
    o.add_bias(k, w.bk);
    o.add_bias(v, w.bv);
  }
  if (!w.q_norm.empty()) {  // qwen3: per-head norms before RoPE
    o.rms_norm(q, w.q_norm, hp.head_dim, q);
    o.rms_norm(k, w.k_norm, hp.head_dim, k);
  }
  const rope_params rp = layer_rope(hp, l);
  o.rope(q, hp.n_head, rp);
  o.rope(k, hp.n_head_kv, rp);
  o.kv_store(l, k, v);
  act att = o.alloc(n, q_dim);
  attn_params ap = layer_attn(hp, l);
  if (!w.sinks.empty()) ap.sinks = w.sinks.data();  // gpt-oss
  o.attention(l, q, att, ap);
  act proj = o.alloc(n, hp.n_embd);
  o.matmul(w.wo, att, proj);
  if (!w.bo.empty()) o.add_bias(proj, w.bo);  // gpt-oss
  if (!w.post_attn_norm.empty()) o.rms_norm(proj, w.post_attn_norm, hp.n_embd, proj);  // gemma
  o.add(x, proj, x);

  o.rms_norm(x, w.ffn_norm, hp.n_embd, h);
  if (!w.exp_gate.empty()) {
    o.add(x, moe_ffn(m, o, l, h, routes), x);
    o.alloc_release(mark);
    return;
  }
  act gate = o.alloc(n, hp.n_ff), up = o.alloc(n, hp.n_ff);
  o.matmul(w.w_gate, h, gate);
  o.matmul(w.w_up, h, up);
  if (arch_gemma_block(hp.arch)) o.geglu(gate, up, gate);
  else o.swiglu(gate, up, gate);
  o.matmul(w.w_down, gate, proj);
  if (!w.post_ffn_norm.empty()) o.rms_norm(proj, w.post_ffn_norm, hp.n_embd, proj);  // gemma
  o.add(x, proj, x);
  o.alloc_release(mark);
}

}  // namespace

void forward_step(const model& m, ops& o, const std::vector<step_token>& toks, bool trace, step_output& out) {
  if (toks.empty()) throw std::logic_error("forward_step: empty step");
  const hparams& hp = m.hp();
  const int64_t n = static_cast<int64_t>(toks.size());
  out.logits.clear();
  out.traces.assign(trace ? toks.size() : 0, {});
  out.routes.assign(trace && hp.n_expert > 0 ? toks.size() : 0, {});

  o.begin_step(toks);
  act x = o.alloc(n, hp.n_embd);
  o.embed(m.tok_embd, x);
  // gemma: the embeddings times sqrt(n_embd), rounded to float as llama.cpp's sqrtf does
  if (arch_gemma_block(hp.arch)) o.scale(x, std::sqrt(static_cast<float>(hp.n_embd)), x);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    block(m, o, l, x, out.routes.empty() ? nullptr : &out.routes);
    if (trace) trace_rows(o, x, out);
  }
  o.rms_norm(x, m.output_norm, hp.n_embd, x);
  if (trace) trace_rows(o, x, out);

  std::vector<int64_t> rows;
  for (int64_t t = 0; t < n; ++t)
    if (toks[t].logits) rows.push_back(t);
  if (!rows.empty()) {
    act sel = o.gather_rows(x, rows);
    act logits = o.alloc(sel.rows, hp.n_vocab);
    o.matmul(m.output, sel, logits);
    if (hp.final_softcap > 0) o.softcap(logits, static_cast<float>(hp.final_softcap), logits);  // gemma2
    out.logits.resize(static_cast<size_t>(logits.rows * logits.cols));
    o.read_f32(logits, out.logits.data());
  }
  o.end_step();
}

}  // namespace detaudit::model
