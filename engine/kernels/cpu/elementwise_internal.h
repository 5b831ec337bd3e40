// The pieces of the element-wise kernels of cpu.h (rms_norm_f32_cpu, swiglu_f32_cpu,
// add_f32_cpu) shared by their instruction-set variants, and vectorised exp_f32 / recip_f32 /
// silu_f32 over arrays.
//
// Every variant runs the sequence of numerics/elementwise.cpp and kernels/ref/elementwise_ref.cpp
// lane by lane: the same correctly rounded f32 +, -, * (no FMA), the same integer operations on
// the bits and the same flushes, with the special inputs (zero, inf, NaN, arguments past the
// overflow and underflow thresholds) blended in as the scalar code returns them. Where the
// scalar code multiplies two NaNs (silu of a NaN), the order of the operands picks the payload
// and is the compiler's choice, so those lanes call numerics::silu_f32 itself.
// RMS norm is split so that the branchy O(1) part (grid, fixed_to_f32, rsqrt) stays portable:
//   maxfield = max over i of the biased exponent field of x_i (0: every x_i is zero/subnormal)
//   g        = 2 * (maxfield - 150) + 48 + clog2(n) - 62
//   S        = sum_i round_shift(m_i^2, 2 e_i - g)   (m_i = 0 for zero/subnormal x_i)
//   out_i    = flush(flush(x_i) * r), then flush(out_i * flush(w_i)) when w is given
// S is an integer sum, so the lanes may add in any order.
// Preconditions the caller guarantees: n >= 0; for max_exp_field and sum_squares every x_i is
// finite; out equals an input or overlaps none.
//
// Everything here is declared before any target pragma: the SIMD files define plain extern
// functions only.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu.h"

namespace detaudit::kernels::cpu {

// The largest biased exponent field (0..255) of x[0, n); 0 when n == 0.
uint32_t elem_max_exp_field_scalar(const float* x, int64_t n);
uint32_t elem_max_exp_field_avx2(const float* x, int64_t n);
uint32_t elem_max_exp_field_avx512(const float* x, int64_t n);

// S above for grid g (every shift 2 e_i - g <= 14, so each term is < 2^62).
int64_t elem_sum_squares_scalar(const float* x, int64_t n, int32_t g);
int64_t elem_sum_squares_avx2(const float* x, int64_t n, int32_t g);
int64_t elem_sum_squares_avx512(const float* x, int64_t n, int32_t g);

// out_i = flush(flush(x_i) * r), times flush(w_i) and flushed again when w != nullptr.
void elem_scale_scalar(const float* x, const float* w, int64_t n, float r, float* out);
void elem_scale_avx2(const float* x, const float* w, int64_t n, float r, float* out);
void elem_scale_avx512(const float* x, const float* w, int64_t n, float r, float* out);

// swiglu_f32_ref and add_f32_ref, bit for bit.
void elem_swiglu_scalar(const float* gate, const float* up, int64_t n, float* out);
void elem_swiglu_avx2(const float* gate, const float* up, int64_t n, float* out);
void elem_swiglu_avx512(const float* gate, const float* up, int64_t n, float* out);
void elem_add_scalar(const float* a, const float* b, int64_t n, float* out);
void elem_add_avx2(const float* a, const float* b, int64_t n, float* out);
void elem_add_avx512(const float* a, const float* b, int64_t n, float* out);

// geglu_f32_ref (numerics::gelu_f32 of the gate times up) and softcap_f32_ref (inv_cap =
// recip_f32(cap), hoisted), bit for bit. NaN lanes take the scalar numerics function's answer.
void elem_geglu_scalar(const float* gate, const float* up, int64_t n, float* out);
void elem_geglu_avx2(const float* gate, const float* up, int64_t n, float* out);
void elem_geglu_avx512(const float* gate, const float* up, int64_t n, float* out);
void elem_softcap_scalar(const float* x, int64_t n, float cap, float inv_cap, float* out);
void elem_softcap_avx2(const float* x, int64_t n, float cap, float inv_cap, float* out);
void elem_softcap_avx512(const float* x, int64_t n, float cap, float inv_cap, float* out);

// swiglu_oai_f32_ref (numerics::swiglu_oai_f32 per pair), bit for bit; lanes where gate or up is
// NaN take the scalar function's answer.
void elem_swiglu_oai_scalar(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out);
void elem_swiglu_oai_avx2(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out);
void elem_swiglu_oai_avx512(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out);

// out_i = numerics::exp_f32 / recip_f32 / silu_f32 of x_i, bit for bit (out may equal x).
void elem_exp_scalar(const float* x, int64_t n, float* out);
void elem_exp_avx2(const float* x, int64_t n, float* out);
void elem_exp_avx512(const float* x, int64_t n, float* out);
void elem_recip_scalar(const float* x, int64_t n, float* out);
void elem_recip_avx2(const float* x, int64_t n, float* out);
void elem_recip_avx512(const float* x, int64_t n, float* out);
void elem_silu_scalar(const float* x, int64_t n, float* out);
void elem_silu_avx2(const float* x, int64_t n, float* out);
void elem_silu_avx512(const float* x, int64_t n, float* out);

// The same three over arrays, dispatched on i (throws input_error when i is not supported).
void exp_f32_array_cpu(isa i, const float* x, int64_t n, float* out);
void recip_f32_array_cpu(isa i, const float* x, int64_t n, float* out);
void silu_f32_array_cpu(isa i, const float* x, int64_t n, float* out);

}  // namespace detaudit::kernels::cpu
