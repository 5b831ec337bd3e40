// The CUDA backend's per-thread arithmetic, written once for the device and the host.
//
// Goals: the .cu kernels only map threads to these functions and sum their integer results. The
// contract's arithmetic itself (flush, exp, 1/x, 1/sqrt(x), silu, the fixed-point conversions,
// activation quantization) is numerics/exact_inline.h's, the same lines numerics and the CPU
// kernels run, and the constants are numerics/contract.h's; this header adds the per-op pieces
// (RMS norm, RoPE, the weight-block decode, the exact dot product, attention), each the bit-exact
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

#include "gguf/dtype.h"
#include "numerics/contract.h"
#include "numerics/exact_inline.h"

namespace detaudit::kernels::cuda::xd {

using numerics::ACC_BITS;
using numerics::ATT_VALUE_BITS;
using numerics::ATT_WEIGHT_BITS;
using numerics::DOT_TERM_BITS;
using numerics::EXP_ZERO;
using numerics::QBLOCK;
using numerics::QMAX;
using numerics::SQUARE_BITS;

// The weight types the kernels decode, as the int32 the launches carry (gguf's ids).
constexpr int32_t W_F32 = static_cast<int32_t>(gguf::DTYPE_F32);
constexpr int32_t W_F16 = static_cast<int32_t>(gguf::DTYPE_F16);
constexpr int32_t W_BF16 = static_cast<int32_t>(gguf::DTYPE_BF16);
constexpr int32_t W_Q4_0 = static_cast<int32_t>(gguf::DTYPE_Q4_0);
constexpr int32_t W_Q4_1 = static_cast<int32_t>(gguf::DTYPE_Q4_1);
constexpr int32_t W_Q5_0 = static_cast<int32_t>(gguf::DTYPE_Q5_0);
constexpr int32_t W_Q5_1 = static_cast<int32_t>(gguf::DTYPE_Q5_1);
constexpr int32_t W_Q8_0 = static_cast<int32_t>(gguf::DTYPE_Q8_0);
constexpr int32_t W_Q2_K = static_cast<int32_t>(gguf::DTYPE_Q2_K);
constexpr int32_t W_Q3_K = static_cast<int32_t>(gguf::DTYPE_Q3_K);
constexpr int32_t W_Q4_K = static_cast<int32_t>(gguf::DTYPE_Q4_K);
constexpr int32_t W_Q5_K = static_cast<int32_t>(gguf::DTYPE_Q5_K);
constexpr int32_t W_Q6_K = static_cast<int32_t>(gguf::DTYPE_Q6_K);

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

// ---- weight blocks (numerics/wblock.cpp) ----

struct wblock {
  int16_t q[QBLOCK];
  int32_t scale[2];
  int32_t d_mant;
  int32_t d_exp;
  int32_t mcoef[2];
  int32_t m_mant;
  int32_t m_exp;
};

DETAUDIT_HD uint32_t load_u16(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }
DETAUDIT_HD uint32_t load_u32(const uint8_t* p) { return load_u16(p) | load_u16(p + 2) << 16; }

// A finite fp16 scale as mant * 2^exp.
DETAUDIT_HD void fp16_split(uint32_t h, int32_t* mant, int32_t* exp) {
  const int e = (h >> 10) & 31;
  const int32_t frac = h & 1023;
  const int32_t m = e == 0 ? frac : 1024 + frac;
  *exp = e == 0 ? -24 : e - 25;
  *mant = (h & 0x8000u) ? -m : m;
}

// gguf::fp16_to_f32 for a finite value (exact).
DETAUDIT_HD float fp16_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (e != 0) return u2f(sign | ((e + 112) << 23) | (mant << 13));
  if (mant == 0) return u2f(sign);
  int ex = -14;
  while (!(mant & 0x400u)) {
    mant <<= 1;
    --ex;
  }
  return u2f(sign | (uint32_t(ex + 127) << 23) | ((mant & 0x3ffu) << 13));
}

DETAUDIT_HD void set_plain(wblock& w, int32_t sc0, int32_t sc1) {
  w.scale[0] = sc0;
  w.scale[1] = sc1;
  w.mcoef[0] = w.mcoef[1] = 0;
  w.m_mant = 0;
  w.m_exp = 0;
}

DETAUDIT_HD void decode_float(int32_t t, const uint8_t* row, int64_t b, int n_valid, wblock& w) {
  float x[QBLOCK];
  for (int i = 0; i < n_valid; ++i) {
    const int64_t e = b * QBLOCK + i;
    if (t == W_F32) x[i] = u2f(load_u32(row + 4 * e));
    else if (t == W_F16) x[i] = fp16_to_f32(load_u16(row + 2 * e));
    else x[i] = u2f(load_u16(row + 2 * e) << 16);
  }
  const int32_t e = quantize_block(x, n_valid, w.q);
  w.d_mant = e == EXP_ZERO ? 0 : 1;
  w.d_exp = e == EXP_ZERO ? 0 : e;
  set_plain(w, 1, 1);
}

DETAUDIT_HD void decode_legacy(int32_t t, const uint8_t* row, int64_t b, wblock& w) {
  const bool five = t == W_Q5_0 || t == W_Q5_1;
  const bool has_min = t == W_Q4_1 || t == W_Q5_1;
  const int64_t size = t == W_Q4_0 ? 18 : t == W_Q4_1 ? 20 : t == W_Q5_0 ? 22 : 24;
  const uint8_t* p = row + b * size;
  fp16_split(load_u16(p), &w.d_mant, &w.d_exp);
  set_plain(w, 1, 1);
  if (has_min) {
    fp16_split(load_u16(p + 2), &w.m_mant, &w.m_exp);
    w.mcoef[0] = w.mcoef[1] = 1;
  }
  const int off_qh = has_min ? 4 : 2;
  const uint32_t qh = five ? load_u32(p + off_qh) : 0u;
  const uint8_t* qs = p + off_qh + (five ? 4 : 0);
  const int offset = has_min ? 0 : (five ? 16 : 8);
  for (int j = 0; j < QBLOCK; ++j) {
    const int nibble = j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
    w.q[j] = static_cast<int16_t>((nibble | static_cast<int>((qh >> j) & 1u) << 4) - offset);
  }
}

DETAUDIT_HD void decode_q8_0(const uint8_t* row, int64_t b, wblock& w) {
  const uint8_t* p = row + b * 34;
  fp16_split(load_u16(p), &w.d_mant, &w.d_exp);
  set_plain(w, 1, 1);
  for (int j = 0; j < QBLOCK; ++j) w.q[j] = static_cast<int8_t>(p[2 + j]);
}

DETAUDIT_HD int read_2bit(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
}
DETAUDIT_HD int read_bit_plane(const uint8_t* plane, int e) { return (plane[e % 32] >> (e / 32)) & 1; }
DETAUDIT_HD int read_nibble(const uint8_t* qs, int e) {
  return (qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 15;
}

DETAUDIT_HD void read_scale_min_k4(const uint8_t* s, int j, int32_t* sc, int32_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

DETAUDIT_HD int read_scale_q3(const uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 15) : (s[i - 8] >> 4);
  return low | ((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4;
}

DETAUDIT_HD void decode_q2_k(const uint8_t* p, int s, wblock& w) {
  fp16_split(load_u16(p + 80), &w.d_mant, &w.d_exp);
  fp16_split(load_u16(p + 82), &w.m_mant, &w.m_exp);
  w.m_mant = -w.m_mant;
  for (int h = 0; h < 2; ++h) {
    w.scale[h] = p[2 * s + h] & 15;
    w.mcoef[h] = p[2 * s + h] >> 4;
  }
  for (int l = 0; l < QBLOCK; ++l) w.q[l] = static_cast<int16_t>(read_2bit(p + 16, 32 * s + l));
}

DETAUDIT_HD void decode_q3_k(const uint8_t* p, int s, wblock& w) {
  fp16_split(load_u16(p + 108), &w.d_mant, &w.d_exp);
  set_plain(w, read_scale_q3(p + 96, 2 * s) - 32, read_scale_q3(p + 96, 2 * s + 1) - 32);
  for (int l = 0; l < QBLOCK; ++l) {
    const int e = 32 * s + l;
    w.q[l] = static_cast<int16_t>(read_2bit(p + 32, e) - (read_bit_plane(p, e) ? 0 : 4));
  }
}

DETAUDIT_HD void decode_q45_k(const uint8_t* p, int s, bool five, wblock& w) {
  fp16_split(load_u16(p), &w.d_mant, &w.d_exp);
  fp16_split(load_u16(p + 2), &w.m_mant, &w.m_exp);
  w.m_mant = -w.m_mant;
  int32_t sc, m;
  read_scale_min_k4(p + 4, s, &sc, &m);
  w.scale[0] = w.scale[1] = sc;
  w.mcoef[0] = w.mcoef[1] = m;
  const uint8_t* qs = p + (five ? 48 : 16);
  for (int l = 0; l < QBLOCK; ++l) {
    const int e = 32 * s + l;
    w.q[l] = static_cast<int16_t>(read_nibble(qs, e) | (five ? read_bit_plane(p + 16, e) << 4 : 0));
  }
}

DETAUDIT_HD void decode_q6_k(const uint8_t* p, int s, wblock& w) {
  fp16_split(load_u16(p + 208), &w.d_mant, &w.d_exp);
  set_plain(w, static_cast<int8_t>(p[192 + 2 * s]), static_cast<int8_t>(p[192 + 2 * s + 1]));
  for (int l = 0; l < QBLOCK; ++l) {
    const int e = 32 * s + l;
    const int h = e / 128, g = (e / 32) % 4, ll = e % 32;
    const int low = (p[64 * h + 32 * (g & 1) + ll] >> (4 * (g >> 1))) & 15;
    const int high = (p[128 + 32 * h + ll] >> (2 * g)) & 3;
    w.q[l] = static_cast<int16_t>((low | high << 4) - 32);
  }
}

// numerics::weight_decode_block for a supported type t and finite scales / weights: the 32-element
// slice b of a row; elements at or past n_valid decode as q = 0 (only F32/F16/BF16 rows have a
// partial last block).
DETAUDIT_HD void decode_block(int32_t t, const uint8_t* row, int64_t b, int n_valid, wblock& w) {
  if (t == W_F32 || t == W_F16 || t == W_BF16) {
    decode_float(t, row, b, n_valid, w);
    return;
  }
  const int64_t sb = b / 8;
  const int s = static_cast<int>(b % 8);
  switch (t) {
    case W_Q8_0: decode_q8_0(row, b, w); break;
    case W_Q2_K: decode_q2_k(row + sb * 84, s, w); break;
    case W_Q3_K: decode_q3_k(row + sb * 110, s, w); break;
    case W_Q4_K: decode_q45_k(row + sb * 144, s, false, w); break;
    case W_Q5_K: decode_q45_k(row + sb * 176, s, true, w); break;
    case W_Q6_K: decode_q6_k(row + sb * 210, s, w); break;
    default: decode_legacy(t, row, b, w); break;
  }
  for (int i = n_valid; i < QBLOCK; ++i) w.q[i] = 0;
}

// ---- the exact dot product (contract section 7) ----

// The plain path (every type; the only one for F32/F16/BF16 rows, whose codes are int16): int16
// activation x weight code in 32-bit multiplies (exact: both factors are below 2^15), summed per
// 16-element half in int64 (int16 weights reach 2^34 there); the block terms T1, T2 (below 2^44)
// are int64.
DETAUDIT_HD void dot_block_terms(const int16_t* a, const wblock& w, int64_t* t1, int64_t* t2) {
  int64_t qa[2] = {0, 0};
  int64_t sa[2] = {0, 0};
  for (int i = 0; i < QBLOCK; ++i) {
    qa[i / 16] += static_cast<int32_t>(w.q[i]) * static_cast<int32_t>(a[i]);
    sa[i / 16] += a[i];
  }
  *t1 = static_cast<int64_t>(w.d_mant) * (w.scale[0] * qa[0] + w.scale[1] * qa[1]);
  *t2 = static_cast<int64_t>(w.m_mant) * (w.mcoef[0] * sa[0] + w.mcoef[1] * sa[1]);
}

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

// numerics::dot_grid.
DETAUDIT_HD int32_t dot_grid(int32_t x_max_exp, int32_t w_exp_bound, int64_t n_blocks) {
  return x_max_exp + w_exp_bound + DOT_TERM_BITS + ceil_log2(2 * n_blocks) - ACC_BITS;
}

// numerics::dot_block_fixed: one block's two terms rounded to grid g and added.
DETAUDIT_HD int64_t dot_block_fixed(const int16_t* a, int32_t e_a, const wblock& w, int32_t g) {
  if (e_a == EXP_ZERO) return 0;
  int64_t t1, t2;
  dot_block_terms(a, w, &t1, &t2);
  return round_shift(t1, e_a + w.d_exp - g) + round_shift(t2, e_a + w.m_exp - g);
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
