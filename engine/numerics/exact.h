// Exact-arithmetic primitives: the building blocks of `--numerics exact`.
//
// Goals: every function here gives the same bits on every machine and backend, for the same
// inputs, whatever the order or partition of the work around it. Reductions are integer sums on
// fixed-point grids chosen from order-independent exponent bounds; the remaining float arithmetic
// is element-wise, a fixed written sequence of correctly rounded +, -, * and conversions (no FMA,
// no libm, no float division or sqrt), and no result is ever subnormal (flushed to a signed zero).
// docs/precision-contract.md states every rounding point; this header is its C++ form.
// Non-goals: speed (kernels/cpu does that, checked against kernels/ref by memcmp).
//
// Thread-safety: every function is pure (no state), safe to call from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "numerics/contract.h"

namespace detaudit::numerics {

// PRECISION_CONTRACT_VERSION, QBLOCK, EXP_ZERO, QMAX and the grids' bit widths: contract.h.

// ---- integer helpers ----

// The smallest c >= 0 with 2^c >= v (v >= 1); ceil_log2(1) == 0.
int ceil_log2(int64_t v);

// ---- float helpers (bit-level, identical everywhere) ----

// A subnormal float becomes a zero of the same sign; others are returned unchanged.
float flush(float x);
// True when x is subnormal (nonzero with a zero exponent field).
bool is_subnormal(float x);
// x = m * 2^e with m an integer, |m| < 2^24, sign on m. Normal x: |m| in [2^23, 2^24), e = E - 150;
// subnormal x: m = +-fraction, e = -149; zero: m = 0, e = 0. Non-finite x: throws input_error.
void f32_decompose(float x, int32_t* m, int* e);
// The float nearest to v * 2^e: v is rounded to 24 significant bits (half to even) with an
// unbounded exponent; a result below 2^-126 in magnitude becomes a signed zero (+0 for v == 0),
// one of 2^128 or more becomes +-inf. Integer operations only.
float fixed_to_f32(int64_t v, int e);
// v * 2^shift rounded half to even (shift may be any negative or positive value). For shift > 0
// the result must fit int64 (the callers' grids guarantee it); shifts <= -64 give 0.
int64_t round_shift(int64_t v, int shift);
// 2^k as a float, k in [-126, 127], built from the exponent bits.
float pow2_f32(int k);

// ---- element-wise functions: fixed sequences of correctly rounded f32 operations ----
// All results are flushed. NaN in gives NaN out.

float exp_f32(float x);     // e^x within 2 ulp; 0 below about -87.34 (flushed), +inf above
                            // about 88.72; exp_f32(0) == 1 exactly
float log_f32(float x);     // natural log within 2 ulp; x <= 0 gives -inf (x == 0) or NaN
float recip_f32(float x);   // 1 / x within 1 ulp (usually correctly rounded); 1/+-0 = +-inf
float rsqrt_f32(float x);   // 1 / sqrt(x) within 1 ulp; rsqrt(+0) = +inf, x < 0 gives NaN
float silu_f32(float x);    // flush(x * recip_f32(flush(1 + exp_f32(-x))))
// GELU, tanh form (gemma's GeGLU): x * sigmoid(2u), u = sqrt(2/pi) * x * (1 + 0.044715 x^2):
// flush(x * recip_f32(flush(1 + exp_f32(-z)))), z = flush(flush(1.5957691216 * x) *
// flush(1 + flush(0.044715 * flush(x * x)))).
float gelu_f32(float x);
// gpt-oss's clamped SwiGLU of one gate / up pair: x = min(gate, limit), y = clamp(up, -limit,
// limit), z = flush(alpha * x), g = flush(x * recip_f32(flush(1 + exp_f32(-z)))), result
// flush(g * flush(y + 1)) (llama.cpp's ggml_swiglu_oai with alpha 1.702, limit 7).
float swiglu_oai_f32(float gate, float up, float alpha, float limit);
// Soft-capping (gemma2's attention scores and logits): cap * tanh(x / cap), in (-cap, cap).
// y = flush(x * recip_f32(cap)), e = exp_f32(-2|y|), t = flush(1 - flush(flush(e + e) *
// recip_f32(flush(1 + e)))), result flush(cap * t) with y's sign. Absolute error about
// cap * 2^-23 (t near 0 is a difference of values near 1). cap: a positive normal float.
float softcap_f32(float x, float cap);
// A cap softcap_f32 takes: a positive normal float whose reciprocal is normal too (about 1.2e-38
// to 8.5e37); kernels refuse others.
bool softcap_cap_ok(float cap);

// ---- host-side float64 functions for tables (RoPE), computed once on the CPU ----
// Ports of fdlibm's algorithms (e_exp.c, e_log.c, k_sin.c, k_cos.c with a three-part pi/2
// reduction); within 1 ulp of double. Deterministic because every step is a correctly rounded
// double operation (the project is built with -ffp-contract=off).

double exp_f64(double x);
double log_f64(double x);  // x > 0
// sin and cos of x for |x| <= 2^20 * pi/2 (about 1.6e6); larger |x| throws input_error.
void sincos_f64(double x, double* s, double* c);

// ---- activation blocks ----

// A vector quantized to blocks of QBLOCK int16 values with a power-of-two scale each:
// x[i] ~= q[i] * 2^exp[i / QBLOCK]. The last block is zero-padded to QBLOCK.
// exp[b] = floor(log2(max |x| over block b)) - 14, so the block's largest value maps into
// [2^14, 2^15); values round half to even and clamp to [-QMAX, QMAX]. An all-zero block has
// exp EXP_ZERO and q = 0. max_exp is the largest exp (EXP_ZERO when every block is zero).
struct qvec {
  int64_t n = 0;               // logical length
  std::vector<int16_t> q;      // (n_blocks * QBLOCK)
  std::vector<int32_t> exp;    // (n_blocks)
  int32_t max_exp = EXP_ZERO;
  int64_t n_blocks() const { return static_cast<int64_t>(exp.size()); }
};

// Quantizes n floats into out. Pure integer arithmetic on the float bits.
// Throws input_error for a NaN or infinite element.
void quantize_act(const float* x, int64_t n, qvec& out);
// quantize_act with each block quantized by `block`, which must give quantize_block's integers
// (the CPU kernels pass their faster form of it, kernels/cpu/cpu.h's quantize_block_cpu).
void quantize_act_by(const float* x, int64_t n, qvec& out, int32_t (*block)(const float* x, int n, int16_t* q));
// Quantizes one block of n (0..QBLOCK) values into q[QBLOCK] (zero-padded); returns its exp.
// Throws input_error for a NaN or infinite element.
int32_t quantize_block(const float* x, int n, int16_t* q);

}  // namespace detaudit::numerics
