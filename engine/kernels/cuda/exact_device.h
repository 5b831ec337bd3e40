// The CUDA backend's per-thread arithmetic, written once for the device and the host.
//
// Goals: the .cu kernels only map threads to these functions and sum their integer results. The
// contract's arithmetic itself (flush, exp, 1/x, 1/sqrt(x), silu, the fixed-point conversions,
// activation quantization) is numerics/exact_inline.h's, the same lines numerics and the CPU
// kernels run, and the constants are numerics/contract.h's; this header adds the per-op pieces
// (RMS norm, RoPE, the int8 form of the exact dot product, attention), each the bit-exact
// twin of its numerics/ or kernels/ref counterpart (docs/precision-contract.md).
// tests/unit/test_kernels_cuda_portable.cpp calls these functions on the host (compiled by the
// ordinary C++ compiler) and compares them with kernels/ref by memcmp. Device intrinsics (__clzll,
// __float_as_uint, __fmul_rn, __dp4a and the PTX dp4a.s32.u32, ...) have host twins, so the code
// around them is tested on the host too.
// Non-goals: input validation. Callers guarantee finite inputs where the reference would throw
// (the device checks them on the host before a call) and valid shapes; nothing here throws.
//
// Float operations go through fmul/fadd/fsub: on the device these are __fmul_rn / __fadd_rn /
// __fsub_rn, which are never contracted into an FMA whatever the compiler flags.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "numerics/contract.h"
#include "numerics/exact_inline.h"
#include "numerics/wblock_inline.h"

namespace detaudit::kernels::cuda::xd {

using numerics::ACC_BITS;
using numerics::ATT_VALUE_BITS;
using numerics::ATT_WEIGHT_BITS;
using numerics::DOT_TERM_BITS;
using numerics::EXP_ZERO;
using numerics::QBLOCK;
using numerics::QMAX;
using numerics::SQUARE_BITS;

// ---- the contract's arithmetic: numerics/exact_inline.h ----

using numerics::inl::ceil_log2;
using numerics::inl::decompose;
using numerics::inl::fadd;
using numerics::inl::fixed_to_f32;
using numerics::inl::flush;
using numerics::inl::fmul;
using numerics::inl::fsub;
using numerics::inl::quantize_block;
using numerics::inl::round_shift;

DETAUDIT_HD uint32_t f2u(float f) { return numerics::inl::f_bits(f); }
DETAUDIT_HD float u2f(uint32_t u) { return numerics::inl::bits_f(u); }
DETAUDIT_HD float pow2_f32(int k) { return numerics::inl::pow2(k); }
DETAUDIT_HD float exp_f32(float x) { return numerics::inl::exp(x); }
DETAUDIT_HD float recip_f32(float x) { return numerics::inl::recip(x); }
DETAUDIT_HD float rsqrt_f32(float x) { return numerics::inl::rsqrt(x); }
DETAUDIT_HD float silu_f32(float x) { return numerics::inl::silu(x); }

// ---- element-wise ops (kernels/ref/elementwise_ref.cpp, one element) ----

// The contract's NaN from finite inputs (section 1, rule 4): x86's 0xffc00000, not NVIDIA's 0x7fffffff.
DETAUDIT_HD float canon_nan(float x) { return (f2u(x) & 0x7fffffffu) > 0x7f800000u ? u2f(0xffc00000u) : x; }

DETAUDIT_HD float swiglu_one(float g, float u) { return canon_nan(flush(fmul(silu_f32(g), flush(u)))); }
DETAUDIT_HD float add_one(float a, float b) { return flush(fadd(flush(a), flush(b))); }
// gpu::act's activations, one element; p0, p1 as gpu::act_kernel_params gives them (softcap: cap and
// its reciprocal; scale: the flushed factor; swiglu_oai: alpha and limit).
enum act_kind : int { ACT_GEGLU = 0, ACT_SWIGLU_OAI = 1, ACT_SOFTCAP = 2, ACT_SCALE = 3 };
DETAUDIT_HD float act_one(int kind, float a, float b, float p0, float p1) {
  switch (kind) {
    case ACT_GEGLU: return canon_nan(flush(fmul(numerics::inl::gelu(a), flush(b))));
    case ACT_SWIGLU_OAI: return canon_nan(numerics::inl::swiglu_oai(a, b, p0, p1));
    case ACT_SOFTCAP: return canon_nan(numerics::inl::softcap(a, p0, p1));
    default: return canon_nan(flush(fmul(flush(a), p0)));
  }
}
// The bias add of gpu::device::add_bias: add_f32_ref's, as the CPU backend and Vulkan compute it
// (inputs flushed too: a subnormal bias read from a model file must not reach the sum).
DETAUDIT_HD float bias_one(float x, float b) { return add_one(x, b); }

// The RMS norm's pieces: exponent of x's square term (EXP_ZERO for a zero), the grid from the
// largest one, one element's term on it, and the final scale of one element.
DETAUDIT_HD int rms_exp(float x) {
  int32_t m;
  int e;
  decompose(flush(x), &m, &e);
  return m != 0 ? e : EXP_ZERO;
}
DETAUDIT_HD int rms_grid(int maxe, int64_t n) { return 2 * maxe + SQUARE_BITS + ceil_log2(n) - ACC_BITS; }
DETAUDIT_HD int64_t rms_term(float x, int g) {
  int32_t m;
  int e;
  decompose(flush(x), &m, &e);
  if (m == 0) return 0;
  return round_shift(static_cast<int64_t>(m) * m, 2 * e - g);
}
// r = rsqrt_f32(flush(mean + eps)) from the exact sum S on grid g (maxe == EXP_ZERO: all zero).
DETAUDIT_HD float rms_scale(int64_t s, int g, int maxe, float inv_n, float eps) {
  const float ss = maxe == EXP_ZERO ? 0.0f : fixed_to_f32(s, g);
  const float mean = flush(fmul(ss, inv_n));
  return rsqrt_f32(flush(fadd(mean, eps)));
}
DETAUDIT_HD float rms_out(float x, float r, const float* w, int64_t i) {
  const float v = flush(fmul(flush(x), r));
  return canon_nan(w ? flush(fmul(v, flush(w[i]))) : v);
}

// One rotated pair of rope_f32_ref: (x0, x1) in place with (c, s).
DETAUDIT_HD void rope_pair(float* x0p, float* x1p, float c, float s) {
  const float x0 = flush(*x0p);
  const float x1 = flush(*x1p);
  *x0p = flush(fsub(flush(fmul(x0, c)), flush(fmul(x1, s))));
  *x1p = flush(fadd(flush(fmul(x0, s)), flush(fmul(x1, c))));
}

// ---- weight blocks and the plain dot product: numerics/wblock_inline.h ----

using numerics::inl::W_BF16;
using numerics::inl::W_F16;
using numerics::inl::W_F32;
using numerics::inl::decode_block;
using numerics::inl::dot_block_fixed;
using numerics::inl::dot_block_terms;
using numerics::inl::dot_grid;
using numerics::wblock;

// ---- the int8 path (integer block types) ----
//
// Every code of an integer block type fits int8 (q8_0 reaches -128; the others lie in [-32, 31]).
// An activation a in [-32767, 32767] is hi * 256 + lo with hi = a >> 8 in [-128, 127] (signed)
// and lo = a & 255 in [0, 255] (unsigned), so per 16-element half
//   sum q_i a_i = 256 * sum q_i hi_i + sum q_i lo_i
// with both sums exact in int32 (|sum q hi| <= 2^18, |sum q lo| < 2^19, the half below 2^26).
// The byte sums are 4-way dot products: dp4a on the device. The half sums of a come from the same
// bytes against codes of 1.

constexpr int PACK_WORDS = QBLOCK / 4;           // words of one packed block (codes, hi or lo bytes)
constexpr int ACT_PACK_WORDS = 2 * PACK_WORDS;  // one packed activation block: hi words, lo words

DETAUDIT_HD bool is_int8_type(int32_t t) { return t != W_F32 && t != W_F16 && t != W_BF16; }

DETAUDIT_HD int32_t sbyte(uint32_t w, int k) { return static_cast<int8_t>(static_cast<uint8_t>(w >> (8 * k))); }
DETAUDIT_HD int32_t ubyte(uint32_t w, int k) { return static_cast<int32_t>((w >> (8 * k)) & 0xffu); }

// c + the dot of a's four signed bytes with b's four signed bytes.
DETAUDIT_HD int32_t dp4a_ss(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int k = 0; k < 4; ++k) c += sbyte(a, k) * sbyte(b, k);
  return c;
#endif
}

// c + the dot of a's four signed bytes with b's four unsigned bytes (no intrinsic: PTX).
DETAUDIT_HD int32_t dp4a_su(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  int32_t d;
  asm("dp4a.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  for (int k = 0; k < 4; ++k) c += sbyte(a, k) * ubyte(b, k);
  return c;
#endif
}

// The 32 codes of a decoded integer block as int8, four to a word (element 4k + j in byte j of
// word k).
DETAUDIT_HD void pack_codes(const wblock& w, uint32_t* wq) {
  for (int k = 0; k < PACK_WORDS; ++k) {
    uint32_t v = 0;
    for (int j = 0; j < 4; ++j) v |= static_cast<uint32_t>(static_cast<uint8_t>(w.q[4 * k + j])) << (8 * j);
    wq[k] = v;
  }
}

// An activation block as its hi bytes (words 0..7) and lo bytes (words 8..15), same layout.
DETAUDIT_HD void pack_act(const int16_t* a, uint32_t* p) {
  for (int k = 0; k < PACK_WORDS; ++k) {
    uint32_t hi = 0, lo = 0;
    for (int j = 0; j < 4; ++j) {
      const int32_t v = a[4 * k + j];
      hi |= static_cast<uint32_t>(static_cast<uint8_t>(v >> 8)) << (8 * j);
      lo |= static_cast<uint32_t>(v & 255) << (8 * j);
    }
    p[k] = hi;
    p[PACK_WORDS + k] = lo;
  }
}

// sum q_i a_i over half h (elements 16h .. 16h+15) of packed codes wq and a packed block p.
DETAUDIT_HD int32_t half_dot8(const uint32_t* wq, const uint32_t* p, int h) {
  int32_t s_hi = 0, s_lo = 0;
  for (int k = 4 * h; k < 4 * h + 4; ++k) {
    s_hi = dp4a_ss(wq[k], p[k], s_hi);
    s_lo = dp4a_su(wq[k], p[PACK_WORDS + k], s_lo);
  }
  return s_hi * 256 + s_lo;
}

// dot_block_terms for an integer block type from its packed codes wq and the packed block p.
DETAUDIT_HD void dot_block_terms8(const uint32_t* p, const wblock& w, const uint32_t* wq, int64_t* t1, int64_t* t2) {
  const uint32_t ones[PACK_WORDS] = {0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u,
                                     0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u};
  const int64_t qa0 = half_dot8(wq, p, 0), qa1 = half_dot8(wq, p, 1);
  const int64_t sa0 = half_dot8(ones, p, 0), sa1 = half_dot8(ones, p, 1);
  *t1 = static_cast<int64_t>(w.d_mant) * (w.scale[0] * qa0 + w.scale[1] * qa1);
  *t2 = static_cast<int64_t>(w.m_mant) * (w.mcoef[0] * sa0 + w.mcoef[1] * sa1);
}

// dot_block_fixed on the int8 path: p = pack_act of the block, wq = pack_codes of w.
DETAUDIT_HD int64_t dot_block_fixed8(const uint32_t* p, int32_t e_a, const wblock& w, const uint32_t* wq, int32_t g) {
  if (e_a == EXP_ZERO) return 0;
  int64_t t1, t2;
  dot_block_terms8(p, w, wq, &t1, &t2);
  return round_shift(t1, e_a + w.d_exp - g) + round_shift(t2, e_a + w.m_exp - g);
}

// The dot's result from its integer sum (x_max_exp / w_bound EXP_ZERO: +0).
DETAUDIT_HD float dot_finish(int64_t acc, int32_t x_max_exp, int32_t w_bound, int64_t n_blocks) {
  if (x_max_exp == EXP_ZERO || w_bound == EXP_ZERO) return 0.0f;
  return fixed_to_f32(acc, dot_grid(x_max_exp, w_bound, n_blocks));
}

// ---- attention (contract section 11) ----

// One K block (int16 values, exponent ek) as a unit-scale weight block's T1 against the query
// block (a, ea) on grid g: the block's term of the score's integer sum.
DETAUDIT_HD int64_t score_block_fixed(const int16_t* a, int32_t ea, const int16_t* k, int32_t ek, int32_t g) {
  if (ea == EXP_ZERO || ek == EXP_ZERO) return 0;
  int64_t s = 0;
  for (int i = 0; i < QBLOCK; ++i) s += static_cast<int32_t>(a[i]) * static_cast<int32_t>(k[i]);
  return round_shift(s, ea + ek - g);
}

// attention_score_ref for query blocks (qa, qe, q_max_exp) and one position's K blocks (k, ke),
// nb blocks each.
DETAUDIT_HD float attention_score(const int16_t* qa, const int32_t* qe, int32_t q_max_exp, const int16_t* k,
                                  const int32_t* ke, int64_t nb, float kq_scale) {
  int32_t ek = EXP_ZERO;
  for (int64_t b = 0; b < nb; ++b) ek = ke[b] > ek ? ke[b] : ek;
  if (q_max_exp == EXP_ZERO || ek == EXP_ZERO) return flush(fmul(0.0f, flush(kq_scale)));
  const int32_t g = dot_grid(q_max_exp, ek, nb);
  int64_t acc = 0;
  for (int64_t b = 0; b < nb; ++b) acc += score_block_fixed(qa + b * QBLOCK, qe[b], k + b * QBLOCK, ke[b], g);
  return flush(fmul(fixed_to_f32(acc, g), flush(kq_scale)));
}

// attention_score_ref's cap: softcap_f32(s, cap) with inv_cap = recip_f32(cap) when cap > 0.
DETAUDIT_HD float attention_capped(float s, float cap, float inv_cap) {
  return cap > 0.0f ? numerics::inl::softcap(s, cap, inv_cap) : s;
}

// attention_weight_ref: rne(exp_f32(flush(s - m)) * 2^30), in [0, 2^30].
DETAUDIT_HD int64_t attention_weight(float s, float m) {
  int32_t mw;
  int ew;
  decompose(flush(exp_f32(flush(fsub(s, m)))), &mw, &ew);
  return round_shift(mw, ew + ATT_WEIGHT_BITS);
}

// The value grid of one block from the largest exponent of the attended positions' V blocks.
DETAUDIT_HD int32_t attention_value_grid(int32_t max_ev, int64_t n_kv) {
  return max_ev == EXP_ZERO ? EXP_ZERO
                            : max_ev + ATT_WEIGHT_BITS + ATT_VALUE_BITS + ceil_log2(n_kv) - ACC_BITS;
}

// One position's term of acc_d: weight w, value a of a block with exponent ev, grid gv.
DETAUDIT_HD int64_t attention_value_term(int64_t w, int16_t a, int32_t ev, int32_t gv) {
  if (w == 0 || ev == EXP_ZERO) return 0;
  return round_shift(w * a, ev - gv);
}

// out_d from acc_d on grid gv and inv_s = recip_f32(fixed_to_f32(S, 0)).
DETAUDIT_HD float attention_out(int64_t acc, int32_t gv, float inv_s) {
  return gv == EXP_ZERO ? 0.0f : flush(fmul(fixed_to_f32(acc, gv), inv_s));
}

}  // namespace detaudit::kernels::cuda::xd
