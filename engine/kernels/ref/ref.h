// Reference kernels of `--numerics exact`: plain scalar C++, the oracle every SIMD / Vulkan /
// CUDA kernel is compared with by memcmp. docs/precision-contract.md is their specification.
//
// Goals: each op's result is a function of its own inputs only, bit for bit, whatever the order or
// partition of its reductions (rows split across threads, split-K, GPU tiles, KV chunks).
// Non-goals: speed.
//
// Conventions: float inputs are read through flush() (a subnormal input counts as a signed zero);
// every float output is flushed, never subnormal. Shapes are given as // (rows, cols), row-major.
// Bad input (mismatched lengths, NaN/inf where a finite value is required) throws input_error.
// Thread-safety: pure functions; distinct calls may run concurrently on disjoint outputs.
#pragma once

#include <cstdint>

#include "gguf/dtype.h"
#include "numerics/exact.h"
#include "numerics/wblock.h"

namespace detaudit::kernels {

// ---- matmul ----

// The exact dot product of activation x (x.n == n) with a weight row of n elements of type t
// (row: dtype_row_bytes(t, n) bytes). +0 when x or the row is all zero.
float dot_exact_ref(const numerics::qvec& x, gguf::dtype t, const uint8_t* row, int64_t n);

// The same from a row already decoded into ceil(n / 32) blocks (the block-term API behind
// dot_exact_ref, exposed so callers and tests can sum the terms in any order or split):
//   g = dot_grid(x.max_exp, wblock_exp_bound(w, n_blocks), n_blocks)
//   result = fixed_to_f32(sum_b dot_block_fixed(x block b, w[b], g), g)
float dot_exact_blocks_ref(const numerics::qvec& x, const numerics::wblock* w, int64_t n_blocks);

// Decodes a row of n elements of type t into ceil(n / 32) blocks (the last one partial when n is
// not a multiple of 32; only F32/F16/BF16 rows can be).
void weight_decode_row(gguf::dtype t, const uint8_t* row, int64_t n, numerics::wblock* out);

// y[tok * n_out + r] = dot_exact_ref(xs[tok], row r of w) for r in [row_begin, row_end) and every
// token; other entries of y are untouched, so threads may split the rows.
//   xs: (n_tokens) qvecs of n_in;  w: (n_out) rows of dtype_row_bytes(t, n_in);  y: (n_tokens, n_out)
void matmul_exact_ref(const numerics::qvec* xs, int64_t n_tokens, gguf::dtype t, const uint8_t* w,
                      int64_t n_in, int64_t n_out, float* y, int64_t row_begin, int64_t row_end);

// ---- element-wise ----

// out = x * rsqrt(mean(x^2) + eps) * w, with the sum of squares exact (integer grid).
// x, out: (n); w: (n) or null for no weight. eps > 0. out may alias x.
void rms_norm_f32_ref(const float* x, const float* w, int64_t n, float eps, float* out);

// out[i] = flush(silu_f32(gate[i]) * up[i]). (n) each; out may alias either input.
void swiglu_f32_ref(const float* gate, const float* up, int64_t n, float* out);

// out[i] = flush(a[i] + b[i]) (the residual add). (n) each; out may alias either input.
void add_f32_ref(const float* a, const float* b, int64_t n, float* out);

// out[i] = flush(gelu_f32(gate[i]) * up[i]) (gemma's GeGLU). (n) each; out may alias either input.
void geglu_f32_ref(const float* gate, const float* up, int64_t n, float* out);

// out[i] = swiglu_oai_f32(gate[i], up[i], alpha, limit) (gpt-oss's clamped SwiGLU: alpha 1.702,
// limit 7). (n) each; out may alias either input.
void swiglu_oai_f32_ref(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out);

// out[i] = flush(flush(x[i]) * flush(s)) (gemma's embedding scale; an expert's output row times its
// routing weight). out may alias x.
void scale_f32_ref(const float* x, int64_t n, float s, float* out);

// out[i] = softcap_f32(x[i], cap) (gemma2's logit soft-capping). cap > 0, finite; out may alias x.
void softcap_f32_ref(const float* x, int64_t n, float cap, float* out);

// ---- RoPE ----

// The (cos, sin) pairs of one position, computed on the host in double and rounded to float once:
// theta_i = pos * freq_scale * freq_base^(-2i / n_rot) [/ factors[i]], i < n_rot / 2.
// out: (n_rot / 2, 2) = cos, sin. factors: (n_rot / 2) (Llama 3 rope_freqs) or null.
// YaRN when ext_factor != 0 (model::rope_params says how): e_i = pos * freq_base^(-2i / n_rot)
// [/ factors[i]], theta_i = freq_scale * e_i * (1 - r_i) + e_i * r_i with the ramp r_i; cos and
// sin are multiplied by mscale (skipped when it is 1, so a table without YaRN is unchanged).
void rope_table_row(int64_t pos, int64_t n_rot, double freq_base, double freq_scale,
                    const float* factors, float* out, double ext_factor = 0, double corr_low = 0,
                    double corr_high = 0, double mscale = 1.0);

// Rotates x in place: (n_head, head_dim). Pairs (2i, 2i+1) (normal) or (i, i + n_rot/2) (neox)
// for i < n_rot / 2 use table row (cos_i, sin_i) from rope_table_row(pos, ...):
//   x0' = flush(flush(x0*c) - flush(x1*s)),  x1' = flush(flush(x0*s) + flush(x1*c)).
// Dimensions >= n_rot are unchanged. n_rot even, n_rot <= head_dim.
void rope_f32_ref(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int64_t pos, bool neox,
                  const float* cos_sin_table_row);

// ---- attention (one query token, one head) ----

// One KV head of a sequence's cache, as int16 blocks: position t's head vector is blocks
// q[t * q_stride + b * 32 ..] with exponents exp[t * exp_stride + b], b < ceil(head_dim / 32)
// (as quantize_act writes them; the last block zero-padded).
struct kv_head_view {
  const int16_t* q = nullptr;   // (n_kv, q_stride)
  const int32_t* exp = nullptr; // (n_kv, exp_stride)
  int64_t q_stride = 0;         // int16 elements from one position to the next
  int64_t exp_stride = 0;       // int32 elements from one position to the next
};

// out = sum_t softmax_t(q . k_t * kq_scale) * v_t over exactly the n_kv positions given (masking
// is the caller's: pass the positions the query may see; a sliding window is a later first
// position). q: (head_dim) floats, already roped; out: (head_dim). kq_scale = (float)(1 /
// sqrt(head_dim)) computed in double on the host, or the architecture's own scale. softcap > 0
// caps each score as softcap_f32(s, softcap) before the softmax (gemma2); 0: no cap.
// sink: when not null, the head's attention sink (gpt-oss): flush(*sink) joins the maximum m and
// adds attention_weight_ref(sink, m) to the denominator, as a position whose value is zero; a
// non-finite sink throws input_error.
// n_kv == 0 gives zeros. The result does not depend on the order of the positions.
void attention_exact_ref(const float* q, int64_t head_dim, const kv_head_view& k,
                         const kv_head_view& v, int64_t n_kv, float kq_scale, float* out,
                         float softcap = 0.0f, const float* sink = nullptr);

// kq_scale for a head size: (float)(1 / sqrt(head_dim)), computed on the host in double without
// libm (Newton's iteration to double precision, then one rounding to float).
float attention_kq_scale(int64_t head_dim);

// The pieces of attention_exact_ref, for kernels that split the KV range (and for tests):
// s_t = flush(dot(qq, k_t) * kq_scale), the dot on the matmul grid with k_t as unit-scale blocks,
// then softcap_f32(s_t, softcap) when softcap > 0.
float attention_score_ref(const numerics::qvec& qq, const kv_head_view& k, int64_t t, float kq_scale,
                          float softcap = 0.0f);
// W = round-half-even(exp_f32(flush(s - m)) * 2^30), an integer in [0, 2^30].
int64_t attention_weight_ref(float s, float m);
// gv[b] = max over the n_kv positions with a nonzero V block b of its exp, + 30 + 15 +
// ceil_log2(n_kv) - 62 (EXP_ZERO when no position has one). gv: (n_hblocks).
void attention_value_grids_ref(const kv_head_view& v, int64_t n_kv, int64_t n_hblocks, int32_t* gv);
// acc[d] += round_shift(W * v_t[d], ev_{t,b} - gv[b]) for d < head_dim (b = d / 32).
void attention_accumulate_ref(int64_t w, const kv_head_view& v, int64_t t, const int32_t* gv,
                              int64_t head_dim, int64_t* acc);
// out[d] = flush(fixed_to_f32(acc[d], gv[b]) * recip_f32(fixed_to_f32(s_sum, 0))).
void attention_finish_ref(const int64_t* acc, int64_t s_sum, const int32_t* gv, int64_t head_dim,
                          float* out);

// ---- log-softmax for reporting ----

struct token_logprob {
  int32_t id = 0;
  float logprob = 0;
};

// log Z - m of the logits on the exact grid: with m = max l_i, W_i = round-half-even(
// exp_f32(flush(l_i - m)) * 2^30), S = sum W_i (int64), returns log_f32(fixed_to_f32(S, -30)) and
// writes m. logprob_i = flush(flush(l_i - m) - logZ). Logits may be -inf (masked), not NaN/+inf,
// and at least one must be finite.
float log_softmax_logz_ref(const float* logits, int64_t n_vocab, float* max_out);

// The k most likely tokens (k clamped to n_vocab), ordered by logit descending then id ascending,
// with their log-probabilities. out: (min(k, n_vocab)). Returns the number written.
int64_t log_softmax_top_ref(const float* logits, int64_t n_vocab, int64_t k, token_logprob* out);

// ---- mixture of experts (docs/precision-contract.md, "Expert routing") ----

// The experts one token uses and their weights, from its router logits (n_expert floats, finite):
// with l_i = flush(logits[i]) and m = max l_i, W_i = attention_weight_ref(l_i, m) (the softmax
// numerators on the 2^-30 grid, W = 2^30 for the largest), the n_used experts of largest l_i
// (ties: lower id first) in that order, and
//   weights[k] = flush(fixed_to_f32(W_{ids[k]}, -30) * recip_f32(fixed_to_f32(D, -30)))
// where D = sum of W over the chosen experts when norm (the top-k weights renormalised to sum to
// 1), else over all n_expert (the softmax probabilities). D >= 2^30, so no clamp is needed. Every
// sum is an integer sum: the result does not depend on the order of the experts.
// ids, weights: (n_used). 1 <= n_used <= n_expert. Throws input_error on a NaN or infinite logit.
void moe_route_exact_ref(const float* logits, int64_t n_expert, int64_t n_used, bool norm, int32_t* ids,
                         float* weights);

}  // namespace detaudit::kernels
