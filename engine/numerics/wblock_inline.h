// Weight-block decoding and the exact block dot product, written once for host and device.
//
// Goals: one definition of how every ggml block layout the exact engine computes becomes the
// integer form of numerics/wblock.h, run by numerics (weight_decode_block adds the input checks),
// the CPU kernels' reference paths and the CUDA kernels (kernels/cuda/exact_device.h includes this
// header; nvcc compiles it as device code). Block layouts are those of gguf/quants_legacy.cpp and
// gguf/quants_k.cpp (ggml's block_q4_0 ... block_q6_K); the element placement helpers mirror
// read_2bit / read_bit_plane / read_nibble / read_scales_k4 / read_scale_q3 there, and the unit
// tests check the decode against quants_dequantize_row on every type and every fixture tensor.
// The Vulkan shaders are GLSL and necessarily a second text (kernels/vulkan/shaders/wblock.glsl),
// held to this one by the op table's memcmp tests.
// Non-goals: input validation (a non-finite fp16 scale or weight, an unsupported type id: the
// caller checks, as numerics::weight_decode_block does; nothing here throws).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "gguf/dtype.h"
#include "numerics/contract.h"
#include "numerics/exact_inline.h"

namespace detaudit::numerics {

// One 32-element slice of a weight row in integer form (numerics/wblock.h states its value). In
// numerics, not inl, so that argument-dependent lookup on it finds numerics' checked functions
// only.
struct wblock {
  int16_t q[QBLOCK];   // codes, offset removed (e.g. q4_0: u - 8)
  int32_t scale[2];    // sub-block scale of elements 0..15 and 16..31 (1 when none)
  int32_t d_mant;      // block scale d = d_mant * 2^d_exp (fp16 decoded exactly; sign on mant)
  int32_t d_exp;
  int32_t mcoef[2];    // sub-block min coefficient of elements 0..15 and 16..31 (0 when none)
  int32_t m_mant;      // offset m = m_mant * 2^m_exp (q4_K: -dmin; q4_1: +m)
  int32_t m_exp;
};

namespace inl {

// The weight types decode_block decodes, as the int32 the CUDA launches carry (gguf's ids).
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
constexpr int32_t W_MXFP4 = static_cast<int32_t>(gguf::DTYPE_MXFP4);

DETAUDIT_HD uint32_t load_u16(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }
DETAUDIT_HD uint32_t load_u32(const uint8_t* p) { return load_u16(p) | load_u16(p + 2) << 16; }

// A finite fp16 value as mant * 2^exp, exactly: normal mant = 1024 + frac, exp = E - 25;
// subnormal mant = frac, exp = -24; zero mant = 0. The sign is on mant.
DETAUDIT_HD void fp16_split(uint32_t h, int32_t* mant, int32_t* exp) {
  const int e = (h >> 10) & 31;
  const int32_t frac = h & 1023;
  const int32_t m = e == 0 ? frac : 1024 + frac;
  *exp = e == 0 ? -24 : e - 25;
  *mant = (h & 0x8000u) ? -m : m;
}

// A finite fp16 value as a float (exact; gguf::fp16_to_f32 for finite values).
DETAUDIT_HD float fp16_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (e != 0) return bits_f(sign | ((e + 112) << 23) | (mant << 13));
  if (mant == 0) return bits_f(sign);
  int ex = -14;
  while (!(mant & 0x400u)) {
    mant <<= 1;
    --ex;
  }
  return bits_f(sign | (uint32_t(ex + 127) << 23) | ((mant & 0x3ffu) << 13));
}

DETAUDIT_HD void set_plain(wblock& w, int32_t sc0, int32_t sc1) {
  w.scale[0] = sc0;
  w.scale[1] = sc1;
  w.mcoef[0] = w.mcoef[1] = 0;
  w.m_mant = 0;
  w.m_exp = 0;
}

// ---- float rows: converted like activations (quantize_block) ----

// Element e of an F32 / F16 / BF16 row as a float (finite values: the caller checks).
DETAUDIT_HD float float_row_element(int32_t t, const uint8_t* row, int64_t e) {
  if (t == W_F32) return bits_f(load_u32(row + 4 * e));
  if (t == W_F16) return fp16_to_f32(load_u16(row + 2 * e));
  return bits_f(load_u16(row + 2 * e) << 16);
}

DETAUDIT_HD void decode_float(int32_t t, const uint8_t* row, int64_t b, int n_valid, wblock& w) {
  float x[QBLOCK];
  for (int i = 0; i < n_valid; ++i) x[i] = float_row_element(t, row, b * QBLOCK + i);
  const int32_t e = quantize_block(x, n_valid, w.q);
  w.d_mant = e == EXP_ZERO ? 0 : 1;
  w.d_exp = e == EXP_ZERO ? 0 : e;
  set_plain(w, 1, 1);
}

// ---- legacy 32-element blocks: q4_0 (18 B), q4_1 (20 B), q5_0 (22 B), q5_1 (24 B), q8_0 (34 B) ----

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

// gguf::MXFP4_DOUBLED[code] as arithmetic (no table in device memory): twice the e2m1 value of a
// 4-bit code, magnitudes 0 1 2 3 4 6 8 12, bit 3 the sign.
DETAUDIT_HD constexpr int mxfp4_doubled(int code) {
  const int m = code & 7;
  const int v = m < 4 ? m : ((m & 1) ? 3 : 2) << ((m >> 1) - 1);
  return (code & 8) ? -v : v;
}

// mxfp4 (17 B): e (E8M0), qs[16]. Element j < 16 is the low nibble of qs[j], j >= 16 the high
// nibble of qs[j - 16]; its value is the doubled e2m1 value times 2^(e - 128), exactly.
DETAUDIT_HD void decode_mxfp4(const uint8_t* row, int64_t b, wblock& w) {
  const uint8_t* p = row + b * 17;
  w.d_mant = 1;
  w.d_exp = static_cast<int32_t>(p[0]) - 128;
  set_plain(w, 1, 1);
  for (int j = 0; j < QBLOCK / 2; ++j) {
    w.q[j] = static_cast<int16_t>(mxfp4_doubled(p[1 + j] & 0xf));
    w.q[j + 16] = static_cast<int16_t>(mxfp4_doubled(p[1 + j] >> 4));
  }
}

DETAUDIT_HD void decode_q8_0(const uint8_t* row, int64_t b, wblock& w) {
  const uint8_t* p = row + b * 34;
  fp16_split(load_u16(p), &w.d_mant, &w.d_exp);
  set_plain(w, 1, 1);
  for (int j = 0; j < QBLOCK; ++j) w.q[j] = static_cast<int8_t>(p[2 + j]);
}

// ---- K-quant super-blocks of 256: slice s (0..7) holds elements 32s .. 32s+31 ----

DETAUDIT_HD int read_2bit(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
}
DETAUDIT_HD int read_bit_plane(const uint8_t* plane, int e) { return (plane[e % 32] >> (e / 32)) & 1; }
DETAUDIT_HD int read_nibble(const uint8_t* qs, int e) {
  return (qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 15;
}

// q4_K / q5_K: the six-bit (scale, min) pair of sub-block j (ggml get_scale_min_k4).
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

DETAUDIT_HD void decode_q2_k(const uint8_t* p, int s, wblock& w) {  // 84 B
  fp16_split(load_u16(p + 80), &w.d_mant, &w.d_exp);
  fp16_split(load_u16(p + 82), &w.m_mant, &w.m_exp);
  w.m_mant = -w.m_mant;
  for (int h = 0; h < 2; ++h) {
    w.scale[h] = p[2 * s + h] & 15;
    w.mcoef[h] = p[2 * s + h] >> 4;
  }
  for (int l = 0; l < QBLOCK; ++l) w.q[l] = static_cast<int16_t>(read_2bit(p + 16, 32 * s + l));
}

DETAUDIT_HD void decode_q3_k(const uint8_t* p, int s, wblock& w) {  // 110 B
  fp16_split(load_u16(p + 108), &w.d_mant, &w.d_exp);
  set_plain(w, read_scale_q3(p + 96, 2 * s) - 32, read_scale_q3(p + 96, 2 * s + 1) - 32);
  for (int l = 0; l < QBLOCK; ++l) {
    const int e = 32 * s + l;
    w.q[l] = static_cast<int16_t>(read_2bit(p + 32, e) - (read_bit_plane(p, e) ? 0 : 4));
  }
}

DETAUDIT_HD void decode_q45_k(const uint8_t* p, int s, bool five, wblock& w) {  // 144 B / 176 B
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

DETAUDIT_HD void decode_q6_k(const uint8_t* p, int s, wblock& w) {  // 210 B
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

// The 32-element slice b of a row of type t (any W_* type, finite scales and weights); elements
// at or past n_valid decode as q = 0 (only F32/F16/BF16 rows have a partial last block).
DETAUDIT_HD void decode_block(int32_t t, const uint8_t* row, int64_t b, int n_valid, wblock& w) {
  if (t == W_F32 || t == W_F16 || t == W_BF16) {
    decode_float(t, row, b, n_valid, w);
    return;
  }
  const int64_t sb = b / 8;
  const int s = static_cast<int>(b % 8);
  switch (t) {
    case W_Q8_0: decode_q8_0(row, b, w); break;
    case W_MXFP4: decode_mxfp4(row, b, w); break;
    case W_Q2_K: decode_q2_k(row + sb * 84, s, w); break;
    case W_Q3_K: decode_q3_k(row + sb * 110, s, w); break;
    case W_Q4_K: decode_q45_k(row + sb * 144, s, false, w); break;
    case W_Q5_K: decode_q45_k(row + sb * 176, s, true, w); break;
    case W_Q6_K: decode_q6_k(row + sb * 210, s, w); break;
    default: decode_legacy(t, row, b, w); break;
  }
  for (int i = n_valid; i < QBLOCK; ++i) w.q[i] = 0;
}

// ---- the exact dot product (docs/precision-contract.md section 7) ----

// The accumulator grid: x_max_exp + w_exp_bound + DOT_TERM_BITS + ceil_log2(2 n_blocks) - ACC_BITS.
DETAUDIT_HD int32_t dot_grid(int32_t x_max_exp, int32_t w_exp_bound, int64_t n_blocks) {
  return x_max_exp + w_exp_bound + DOT_TERM_BITS + ceil_log2(2 * n_blocks) - ACC_BITS;
}

// The block terms T1 (codes) and T2 (offsets) of a decoded block: int16 activation x weight code
// in 32-bit multiplies (exact: both factors are below 2^15), summed per 16-element half in int64;
// |T| < 2^DOT_TERM_BITS for every decoded block (numerics::dot_block_terms checks hand-made ones).
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

// One block's contribution on grid g: round_shift(T1, e_a + d_exp - g) + round_shift(T2, e_a +
// m_exp - g); an all-zero activation block (e_a == EXP_ZERO) contributes 0.
DETAUDIT_HD int64_t dot_block_fixed(const int16_t* a, int32_t e_a, const wblock& w, int32_t g) {
  if (e_a == EXP_ZERO) return 0;
  int64_t t1, t2;
  dot_block_terms(a, w, &t1, &t2);
  return round_shift(t1, e_a + w.d_exp - g) + round_shift(t2, e_a + w.m_exp - g);
}

}  // namespace inl

}  // namespace detaudit::numerics
