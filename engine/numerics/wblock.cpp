// Integer decoding of ggml weight blocks, 32 elements at a time, and the per-block dot terms.
//
// Block layouts are those of gguf/quants_legacy.cpp and gguf/quants_k.cpp (ggml's block_q4_0 ...
// block_q6_K); the element placement helpers below mirror read_2bit / read_bit_plane /
// read_nibble / read_scales_k4 / read_scale_q3 there, and the unit tests check this decoder
// against quants_dequantize_row on every type and on every tensor of the fixture models.
#include "numerics/wblock.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "gguf/quants.h"
#include "util/error.h"

namespace detaudit::numerics {

namespace {

using gguf::dtype;

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// An fp16 scale as mant * 2^exp (exact). Throws for inf / NaN.
void fp16_split(uint16_t h, int32_t* mant, int32_t* exp, const char* what) {
  const int e = (h >> 10) & 31;
  const int32_t frac = h & 1023;
  if (e == 31) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "%04x", static_cast<unsigned>(h));
    throw input_error(std::string("weight block: non-finite fp16 ") + what + " (bits 0x" + hex +
                      "), expected a finite scale");
  }
  int32_t m = e == 0 ? frac : 1024 + frac;
  *exp = e == 0 ? -24 : e - 25;
  *mant = (h & 0x8000) ? -m : m;
}

void set_plain(wblock& w, int32_t sc0, int32_t sc1) {
  w.scale[0] = sc0;
  w.scale[1] = sc1;
  w.mcoef[0] = 0;
  w.mcoef[1] = 0;
  w.m_mant = 0;
  w.m_exp = 0;
}

// ---- float rows: converted like activations ----

void decode_float(dtype t, const uint8_t* row, int64_t b, int n_valid, wblock& w) {
  float x[QBLOCK];
  for (int i = 0; i < n_valid; ++i) {
    const int64_t e = b * QBLOCK + i;
    if (t == gguf::DTYPE_F32) {
      std::memcpy(&x[i], row + 4 * e, 4);
    } else {
      const uint16_t h = load_u16(row + 2 * e);
      x[i] = t == gguf::DTYPE_F16 ? gguf::fp16_to_f32(h) : gguf::bf16_to_f32(h);
    }
  }
  const int32_t e = quantize_block(x, n_valid, w.q);
  w.d_mant = e == EXP_ZERO ? 0 : 1;
  w.d_exp = e == EXP_ZERO ? 0 : e;
  set_plain(w, 1, 1);
}

// ---- legacy 32-element blocks ----

void decode_legacy(dtype t, const uint8_t* row, int64_t b, wblock& w) {
  int bits = 4;
  bool has_min = false;
  int64_t size = 18;
  if (t == gguf::DTYPE_Q4_1) { has_min = true; size = 20; }
  if (t == gguf::DTYPE_Q5_0) { bits = 5; size = 22; }
  if (t == gguf::DTYPE_Q5_1) { bits = 5; has_min = true; size = 24; }
  const uint8_t* p = row + b * size;
  fp16_split(load_u16(p), &w.d_mant, &w.d_exp, "d");
  set_plain(w, 1, 1);
  if (has_min) {
    fp16_split(load_u16(p + 2), &w.m_mant, &w.m_exp, "m");
    w.mcoef[0] = 1;
    w.mcoef[1] = 1;
  }
  const int off_qh = has_min ? 4 : 2;
  const int off_qs = off_qh + (bits == 5 ? 4 : 0);
  uint32_t qh = 0;
  if (bits == 5) std::memcpy(&qh, p + off_qh, 4);
  const uint8_t* qs = p + off_qs;
  const int offset = has_min ? 0 : 1 << (bits - 1);
  for (int j = 0; j < QBLOCK; ++j) {
    const int nibble = j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
    w.q[j] = static_cast<int16_t>((nibble | static_cast<int>((qh >> j) & 1u) << 4) - offset);
  }
}

void decode_q8_0(const uint8_t* row, int64_t b, wblock& w) {
  const uint8_t* p = row + b * 34;
  fp16_split(load_u16(p), &w.d_mant, &w.d_exp, "d");
  set_plain(w, 1, 1);
  for (int j = 0; j < QBLOCK; ++j) w.q[j] = static_cast<int8_t>(p[2 + j]);
}

}  // namespace

const char* mxfp4_block_problem(uint8_t e, int max_code) {
  if (e == 255) return "is NaN in the OCP MX format (expected a finite scale)";
  // max_code * 2^(e - 128) >= 2^128 (exact in double): not a finite float, ggml's decode gives inf
  if (std::ldexp(static_cast<double>(max_code), static_cast<int>(e) - 128) >= 0x1p128)
    return "makes an element overflow a float (expected values below 2^128)";
  return nullptr;
}

namespace {

// mxfp4 (17 B): e (E8M0), qs[16]. Element j < 16 is the low nibble of qs[j], j >= 16 the high
// nibble of qs[j - 16]; its value is the doubled e2m1 code value times 2^(e - 128), exactly.
void decode_mxfp4(const uint8_t* row, int64_t b, wblock& w) {
  const int8_t* VALUES = gguf::MXFP4_DOUBLED;
  const uint8_t* p = row + b * 17;
  w.d_mant = 1;
  w.d_exp = static_cast<int32_t>(p[0]) - 128;
  set_plain(w, 1, 1);
  int amax = 0;
  for (int j = 0; j < QBLOCK / 2; ++j) {
    w.q[j] = VALUES[p[1 + j] & 0xf];
    w.q[j + 16] = VALUES[p[1 + j] >> 4];
    amax = std::max({amax, std::abs(static_cast<int>(w.q[j])), std::abs(static_cast<int>(w.q[j + 16]))});
  }
  if (const char* why = mxfp4_block_problem(p[0], amax))
    throw input_error("weight block: mxfp4 scale byte " + std::to_string(p[0]) + " " + why);
}

// ---- K-quant super-blocks: slice s (0..7) holds elements 32s .. 32s+31 ----

int read_2bit(const uint8_t* qs, int e) {
  const int h = e / 128, g = (e / 32) % 4, l = e % 32;
  return (qs[32 * h + l] >> (2 * g)) & 3;
}

int read_bit_plane(const uint8_t* plane, int e) { return (plane[e % 32] >> (e / 32)) & 1; }

int read_nibble(const uint8_t* qs, int e) {
  const int c = e / 64, s = (e / 32) % 2, l = e % 32;
  return (qs[32 * c + l] >> (4 * s)) & 15;
}

// q4_K / q5_K: the six-bit (scale, min) pair of sub-block j (ggml get_scale_min_k4).
void read_scale_min_k4(const uint8_t* s, int j, int32_t* sc, int32_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

int read_scale_q3(const uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 15) : (s[i - 8] >> 4);
  return low | ((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4;
}

void decode_q2_k(const uint8_t* p, int s, wblock& w) {  // 84 B
  fp16_split(load_u16(p + 80), &w.d_mant, &w.d_exp, "d");
  fp16_split(load_u16(p + 82), &w.m_mant, &w.m_exp, "dmin");
  w.m_mant = -w.m_mant;
  for (int h = 0; h < 2; ++h) {
    w.scale[h] = p[2 * s + h] & 15;
    w.mcoef[h] = p[2 * s + h] >> 4;
  }
  for (int l = 0; l < QBLOCK; ++l) w.q[l] = static_cast<int16_t>(read_2bit(p + 16, 32 * s + l));
}

void decode_q3_k(const uint8_t* p, int s, wblock& w) {  // 110 B
  fp16_split(load_u16(p + 108), &w.d_mant, &w.d_exp, "d");
  set_plain(w, read_scale_q3(p + 96, 2 * s) - 32, read_scale_q3(p + 96, 2 * s + 1) - 32);
  for (int l = 0; l < QBLOCK; ++l) {
    const int e = 32 * s + l;
    w.q[l] = static_cast<int16_t>(read_2bit(p + 32, e) - (read_bit_plane(p, e) ? 0 : 4));
  }
}

void decode_q45_k(const uint8_t* p, int s, bool five, wblock& w) {  // 144 B / 176 B
  fp16_split(load_u16(p), &w.d_mant, &w.d_exp, "d");
  fp16_split(load_u16(p + 2), &w.m_mant, &w.m_exp, "dmin");
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

void decode_q6_k(const uint8_t* p, int s, wblock& w) {  // 210 B
  fp16_split(load_u16(p + 208), &w.d_mant, &w.d_exp, "d");
  set_plain(w, static_cast<int8_t>(p[192 + 2 * s]), static_cast<int8_t>(p[192 + 2 * s + 1]));
  for (int l = 0; l < QBLOCK; ++l) {
    const int e = 32 * s + l;
    const int h = e / 128, g = (e / 32) % 4, ll = e % 32;
    const int low = (p[64 * h + 32 * (g & 1) + ll] >> (4 * (g >> 1))) & 15;
    const int high = (p[128 + 32 * h + ll] >> (2 * g)) & 3;
    w.q[l] = static_cast<int16_t>((low | high << 4) - 32);
  }
}

bool decode_k(dtype t, const uint8_t* row, int64_t b, wblock& w) {
  const int64_t sb = b / 8;
  const int s = static_cast<int>(b % 8);
  switch (t) {
    case gguf::DTYPE_Q2_K: decode_q2_k(row + sb * 84, s, w); return true;
    case gguf::DTYPE_Q3_K: decode_q3_k(row + sb * 110, s, w); return true;
    case gguf::DTYPE_Q4_K: decode_q45_k(row + sb * 144, s, false, w); return true;
    case gguf::DTYPE_Q5_K: decode_q45_k(row + sb * 176, s, true, w); return true;
    case gguf::DTYPE_Q6_K: decode_q6_k(row + sb * 210, s, w); return true;
    default: return false;
  }
}

}  // namespace

bool weight_type_supported(gguf::dtype t) {
  switch (t) {
    case gguf::DTYPE_F32: case gguf::DTYPE_F16: case gguf::DTYPE_BF16:
    case gguf::DTYPE_Q4_0: case gguf::DTYPE_Q4_1: case gguf::DTYPE_Q5_0: case gguf::DTYPE_Q5_1:
    case gguf::DTYPE_Q8_0: case gguf::DTYPE_Q2_K: case gguf::DTYPE_Q3_K: case gguf::DTYPE_Q4_K:
    case gguf::DTYPE_Q5_K: case gguf::DTYPE_Q6_K: case gguf::DTYPE_MXFP4:
      return true;
    default:
      return false;
  }
}

void weight_check_type(gguf::dtype t) {
  if (weight_type_supported(t)) return;
  const gguf::dtype_traits* tr = gguf::dtype_find(t);
  throw input_error(std::string("exact numerics: weight type ") + (tr ? tr->name : "unknown") +
                    " (id " + std::to_string(static_cast<uint32_t>(t)) +
                    ") is not supported; expected f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                    "q2_K, q3_K, q4_K, q5_K, q6_K or mxfp4");
}

void weight_decode_block(gguf::dtype t, const uint8_t* row, int64_t block32_index, wblock& out,
                         int n_valid) {
  weight_check_type(t);
  if (n_valid < 1 || n_valid > QBLOCK) {
    throw std::logic_error("weight_decode_block: n_valid " + std::to_string(n_valid) + " not in 1..32");
  }
  if (t == gguf::DTYPE_F32 || t == gguf::DTYPE_F16 || t == gguf::DTYPE_BF16) {
    decode_float(t, row, block32_index, n_valid, out);
    return;
  }
  if (t == gguf::DTYPE_Q8_0) {
    decode_q8_0(row, block32_index, out);
  } else if (t == gguf::DTYPE_MXFP4) {
    decode_mxfp4(row, block32_index, out);
  } else if (!decode_k(t, row, block32_index, out)) {
    decode_legacy(t, row, block32_index, out);
  }
  for (int i = n_valid; i < QBLOCK; ++i) out.q[i] = 0;
  if (n_valid < QBLOCK && out.m_mant != 0) {
    throw std::logic_error("weight_decode_block: a partial block of an affine type");
  }
}

double wblock_value(const wblock& w, int i) {
  const int h = i / 16;
  const double d = static_cast<double>(w.d_mant) * static_cast<double>(w.scale[h]) *
                   static_cast<double>(w.q[i]);
  const double m = static_cast<double>(w.m_mant) * static_cast<double>(w.mcoef[h]);
  // ldexp without libm: multiply by exact powers of two built from the bits.
  auto pow2 = [](int k) { return std::bit_cast<double>(static_cast<uint64_t>(k + 1023) << 52); };
  return d * pow2(w.d_exp) + m * pow2(w.m_exp);
}

dot_terms dot_block_terms(const int16_t* a, int32_t e_a, const wblock& w) {
  int64_t qa[2] = {0, 0};
  int64_t sa[2] = {0, 0};
  for (int i = 0; i < QBLOCK; ++i) {
    qa[i / 16] += static_cast<int64_t>(w.q[i]) * a[i];
    sa[i / 16] += a[i];
  }
  // Computed in 128 bits so that the guard also catches a hand-made block that would overflow.
  const __int128 t1 = static_cast<__int128>(w.d_mant) *
                      (static_cast<__int128>(w.scale[0]) * qa[0] + static_cast<__int128>(w.scale[1]) * qa[1]);
  const __int128 t2 = static_cast<__int128>(w.m_mant) *
                      (static_cast<__int128>(w.mcoef[0]) * sa[0] + static_cast<__int128>(w.mcoef[1]) * sa[1]);
  const __int128 bound = static_cast<__int128>(1) << DOT_TERM_BITS;
  if (t1 >= bound || t1 <= -bound || t2 >= bound || t2 <= -bound) {
    throw std::logic_error("dot_block_terms: a block term reached 2^44 (a malformed wblock)");
  }
  dot_terms t;
  t.t1 = static_cast<int64_t>(t1);
  t.t2 = static_cast<int64_t>(t2);
  t.p1 = e_a + w.d_exp;
  t.p2 = e_a + w.m_exp;
  return t;
}

int32_t wblock_exp_bound(const wblock* w, int64_t n_blocks) {
  int32_t e = EXP_ZERO;
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (w[b].d_mant != 0 && w[b].d_exp > e) e = w[b].d_exp;
    if (w[b].m_mant != 0 && w[b].m_exp > e) e = w[b].m_exp;
  }
  return e;
}

int32_t dot_grid(int32_t x_max_exp, int32_t w_exp_bound, int64_t n_blocks) {
  return x_max_exp + w_exp_bound + DOT_TERM_BITS + ceil_log2(2 * n_blocks) - ACC_BITS;
}

int64_t dot_block_fixed(const int16_t* a, int32_t e_a, const wblock& w, int32_t g) {
  if (e_a == EXP_ZERO) return 0;
  const dot_terms t = dot_block_terms(a, e_a, w);
  return round_shift(t.t1, t.p1 - g) + round_shift(t.t2, t.p2 - g);
}

}  // namespace detaudit::numerics
