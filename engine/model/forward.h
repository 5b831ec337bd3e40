// The forward pass, written once for every architecture (llama, qwen2, qwen3, phi3, gemma2, gemma3, qwen3moe) as a sequence of
// named ops, and the op interface that each numerics backend implements.
//
// Goals: one place that says what a transformer block computes; backends (backends/ops_exact,
// ops_float, ops_reference, ops_gpu) implement ops, never whole forward passes, so any op can be compared
// across backends. A step evaluates tokens of many sequences at once, each at its own position,
// and each token attends only to its own sequence's cache.
// Non-goals: scheduling (runtime/context.h), sampling.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace detaudit::backends {
class kv_cache;
}

namespace detaudit::model {

// An activation of the current step: (rows, cols), one row per token, stored by the backend in
// its own number format (f32 or f64). Handles are valid until the next begin_step().
struct act {
  int32_t id = -1;
  int64_t rows = 0;
  int64_t cols = 0;
};

// One token of a forward step. Its sequence's cache already holds positions [0, pos) and has
// room for position pos; tokens of one sequence in one step have consecutive positions.
struct step_token {
  backends::kv_cache* cache = nullptr;
  int64_t pos = 0;
  int32_t token = 0;
  bool logits = false;
};

// The RoPE of one layer: theta_i = pos * freq_scale * freq_base^(-2i / n_rot) (model hparams give
// n_rot, NORM or NEOX pairing and the Llama 3 factors). Gemma's sliding layers have their own.
// YaRN (ext_factor != 0), as ggml's rope: with e_i = pos * freq_base^(-2i / n_rot), ramp_i =
// 1 - clamp((i - corr_low) / max(0.001, corr_high - corr_low), 0, 1) * ext_factor, the angle is
// freq_scale * e_i * (1 - ramp_i) + e_i * ramp_i, and cos / sin are multiplied by mscale.
struct rope_params {
  double freq_base = 10000.0;
  double freq_scale = 1.0;
  double ext_factor = 0;
  double corr_low = 0, corr_high = 0;
  double mscale = 1.0;
  bool operator==(const rope_params&) const = default;
};

// The attention of one layer.
// kq_scale and softcap are given in double: the exact and float backends round them to float once,
// the reference computes with them as they are.
struct attn_params {
  double kq_scale = 0;  // score = q . k * kq_scale (1 / sqrt(head_dim) unless the model says otherwise)
  int64_t window = 0;   // > 0: the token at position p sees positions (p - window, p] only
  double softcap = 0;   // > 0: score = softcap * tanh(score / softcap) before the softmax
  // gpt-oss's attention sinks: n_head learned scores (blk.N.attn_sinks), head h's one more term of
  // the softmax's maximum and denominator with no value (it takes weight away from every position).
  // nullptr: none. Points into the model's weights.
  const float* sinks = nullptr;
};

// The RoPE and attention settings of layer l, from the hyperparameters.
rope_params layer_rope(const hparams& hp, int64_t l);
attn_params layer_attn(const hparams& hp, int64_t l);
// The first position a token at `pos` attends to under window w (0: none).
inline int64_t attn_first(int64_t pos, int64_t w) { return w > 0 && pos >= w ? pos - w + 1 : 0; }

// The op interface. Every op works on whole activations (all tokens of the step); `x` and `out`
// may be the same activation unless stated otherwise.
class ops {
 public:
  virtual ~ops() = default;

  // Bytes of one cache cell: the K and V of every KV head of one position of one layer.
  virtual uint64_t kv_cell_bytes() const = 0;
  // Starts a step over `toks` (which stay alive until the step ends); frees earlier activations.
  virtual void begin_step(const std::vector<step_token>& toks) = 0;
  // Ends a step that ran to completion (forward_step calls it last, whether or not it read
  // logits): a backend whose ops run asynchronously waits for them here and throws the errors
  // they found, so an error surfaces in the step it belongs to.
  virtual void end_step() {}
  virtual act alloc(int64_t rows, int64_t cols) = 0;
  // A mark of the activations allocated so far in this step; alloc_release(mark) frees every
  // activation allocated after it (their storage is reused by later allocs).
  virtual size_t alloc_mark() const = 0;
  virtual void alloc_release(size_t mark) = 0;

  // out(t, :) = row toks[t].token of the embedding matrix.
  virtual void embed(const weight& w, act out) = 0;
  // Per row, per group of `group` columns (a row or a head): x / rms(x) * w (w has `group` entries).
  virtual void rms_norm(act x, const std::vector<float>& w, int64_t group, act out) = 0;
  // y(t, r) = sum_i w(r, i) * x(t, i); y must differ from x.
  virtual void matmul(const weight& w, act x, act y) = 0;
  // x(t, :) += b
  virtual void add_bias(act x, const std::vector<float>& b) = 0;
  // Rotates the first n_rot dimensions of each of the n_head heads of each row at its token's
  // position (p: freq base and linear scale; model hparams: rope_freqs, NORM or NEOX pairing).
  virtual void rope(act x, int64_t n_head, const rope_params& p) = 0;
  // Writes k and v (rows: tokens; cols: n_head_kv * head_dim) into each token's cache cell.
  virtual void kv_store(int64_t layer, act k, act v) = 0;
  // Causal attention of each token's q heads over positions [attn_first(pos, p.window), pos] of
  // its own cache, head h reading KV head h / (n_head / n_head_kv); out must differ from q.
  virtual void attention(int64_t layer, act q, act out, const attn_params& p) = 0;
  // out = silu(gate) * up, element-wise.
  virtual void swiglu(act gate, act up, act out) = 0;
  // out = gelu(gate) * up, element-wise (GELU's tanh form).
  virtual void geglu(act gate, act up, act out) = 0;
  // out = min(gate, limit) * sigmoid(alpha * min(gate, limit)) * (clamp(up, -limit, limit) + 1),
  // element-wise (gpt-oss's clamped SwiGLU).
  virtual void swiglu_oai(act gate, act up, float alpha, float limit, act out) = 0;
  // out = x * s, element-wise.
  virtual void scale(act x, float s, act out) = 0;
  // out = cap * tanh(x / cap), element-wise (cap > 0).
  virtual void softcap(act x, float cap, act out) = 0;
  // out = a + b, element-wise.
  virtual void add(act a, act b, act out) = 0;
  // A new activation holding the listed rows of x, in order.
  virtual act gather_rows(act x, const std::vector<int64_t>& rows) = 0;
  // The activation as f32 (rows * cols floats), rounded once where the backend is wider.
  virtual void read_f32(act x, float* out) = 0;

  // ---- mixture of experts (model/moe.h) ----
  // Per row t of the router logits (rows: tokens; cols: n_expert), on the host: the n_used experts
  // the token uses, best first (ties: the lower expert id), and their weights: the softmax over all
  // experts at those ids, divided by their sum when norm. ids, weights: (rows, n_used).
  virtual void moe_route(act logits, int64_t n_used, bool norm, std::vector<int32_t>& ids, std::vector<float>& weights) = 0;
  // out(t, :) = x(t, :) * s[t], element-wise (s: x.rows weights).
  virtual void scale_rows(act x, const std::vector<float>& s, act out) = 0;
  // out(rows[i], :) = x(i, :) for each i, the inverse of gather_rows; other rows of out keep their
  // values. out must differ from x.
  virtual void scatter_rows(act x, const std::vector<int64_t>& rows, act out) = 0;
};

// What one step returns: logits of the tokens with logits = true, in step order, and (when
// traced) per token the xxh3-64 of each layer's f32 output then of the final norm's.
struct step_output {
  std::vector<float> logits;                     // (n_logit_rows, n_vocab)
  std::vector<std::vector<uint64_t>> traces;     // (n_tokens) x (n_layer + 1), when traced
  // When traced and the model has experts: per token, per layer, the experts it used, best first.
  std::vector<std::vector<std::vector<int32_t>>> routes;  // (n_tokens) x (n_layer) x (n_expert_used)
};

// Evaluates one step. Throws std::logic_error on an empty step.
void forward_step(const model& m, ops& o, const std::vector<step_token>& toks, bool trace, step_output& out);

}  // namespace detaudit::model
