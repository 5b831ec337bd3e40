// The pieces of attention_exact_cpu (cpu.h) shared by its instruction-set variants.
//
// attention_exact_cpu runs docs/precision-contract.md section 11 as three passes, each with one
// function per instruction set, and does the rest (quantizing q, the maximum score, the value
// grids, the final division) in portable code:
//   scores:  s[t] = flush(fixed_to_f32(sum_b round_shift(T_tb, e_b + ek_tb - G_t), G_t) * scale)
//            with T_tb = sum_i q_i k_ti over block b, G_t = max_exp + Ek_t + 44 + clog2(2 nb) - 62
//            (Ek_t = max nonzero K exponent of position t; blocks with a zero side add nothing)
//   weights: W[t] = rne(exp_f32(flush(s[t] - m)) * 2^30), returns S = sum_t W[t]
//   values:  acc[b * 32 + i] += round_shift(W[t] * v_t[b * 32 + i], ev_tb - gv[b]) for W[t] != 0
//            and ev_tb != EXP_ZERO
// These are the reference's attention_score_ref / attention_weight_ref / attention_accumulate_ref
// bit for bit. Preconditions the caller guarantees: every s[t] finite, m = max s[t] finite, scale
// finite and flushed; n_kv >= 1.
//
// Integer bounds the variants rely on, for K/V as quantize_block writes them (values in
// [-QMAX, QMAX], exponents in [-140, 113] or EXP_ZERO): a vpmaddwd pair sum is below 2^31;
// |T| <= 32 * 32767^2 < 2^35; the shift onto G_t is at most 18 - clog2(2 nb), so a score's sum
// has |sum| < 2^52 (exact in a double); |W v| < 2^45.
#pragma once

#include <cstdint>
#include <cstring>

#include "numerics/exact_inline.h"
#include "kernels/ref/ref.h"

namespace detaudit::kernels::cpu {

using numerics::inl::fixed_to_f32_fast;
using numerics::inl::round_shift_fast;

// The quantized query as plain pointers (what the SIMD files may touch: no std:: code there).
struct attn_query {
  const int16_t* q = nullptr;    // (n_blocks * 32), values in [-QMAX, QMAX] as quantize_act writes them
  const int32_t* exp = nullptr;  // (n_blocks)
  int32_t max_exp = 0;           // not EXP_ZERO (the caller handles an all-zero query)
  int64_t n_blocks = 0;
};

// s: (n_kv) scores of positions [0, n_kv).
void attention_scores_scalar(const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                             float* s);
void attention_scores_avx2(const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                           float* s);
void attention_scores_avx512(const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                             float* s);

// w: (n_kv) weights in [0, 2^30]; returns their sum.
int64_t attention_weights_scalar(const float* s, int64_t n_kv, float m, int32_t* w);
int64_t attention_weights_avx2(const float* s, int64_t n_kv, float m, int32_t* w);
int64_t attention_weights_avx512(const float* s, int64_t n_kv, float m, int32_t* w);

// acc: (n_blocks * 32), added to. gv: (n_blocks) attention_value_grids_ref.
void attention_values_scalar(const int32_t* w, const kv_head_view& v, int64_t n_kv,
                             const int32_t* gv, int64_t n_blocks, int64_t* acc);
void attention_values_avx2(const int32_t* w, const kv_head_view& v, int64_t n_kv,
                           const int32_t* gv, int64_t n_blocks, int64_t* acc);
// attention_values_avx2 for n_heads heads sharing v: head h's weights at w + h * w_stride, its
// acc at acc + h * n_blocks * 32; heads with skip[h] != 0 are left alone (skip may be null). Each
// V block is widened once for all heads.
void attention_values_heads_avx2(const int32_t* w, int64_t w_stride, int64_t n_heads, const char* skip,
                                 const kv_head_view& v, int64_t n_kv, const int32_t* gv, int64_t n_blocks, int64_t* acc);
void attention_values_avx512(const int32_t* w, const kv_head_view& v, int64_t n_kv,
                             const int32_t* gv, int64_t n_blocks, int64_t* acc);

}  // namespace detaudit::kernels::cpu
