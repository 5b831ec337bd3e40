// The legacy 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//
// Layouts (byte offsets within one block; fp16 and u32 fields little-endian), as in ggml's
// block_q4_0 ... block_q8_0:
//
//   q4_0 (18 B): | d fp16 |                           qs[16] |
//   q4_1 (20 B): | d fp16 | m fp16 |                  qs[16] |
//   q5_0 (22 B): | d fp16 |          qh u32 (4 B)   | qs[16] |
//   q5_1 (24 B): | d fp16 | m fp16 | qh u32 (4 B)   | qs[16] |
//   q8_0 (34 B): | d fp16 | qs[32] int8 |
//   mxfp4 (17 B): | e u8 (E8M0) | qs[16] |
//
// Element j (0..31) has code u_j: its low 4 bits are the low nibble of qs[j] for j < 16 and the
// high nibble of qs[j - 16] for j >= 16; for the 5-bit types bit 4 is bit j of qh.
// Decoding (the float expressions ggml evaluates):
//   q4_0: (u - 8) * d     q5_0: (u - 16) * d     q4_1 / q5_1: u * d + m     q8_0: qs[j] * d
//   mxfp4: MXFP4_DOUBLED[u] * 2^(e - 128): the e2m1 value of the 4-bit code, doubled to an integer
//          (0, 1, 2, 3, 4, 6, 8, 12, then the same negated), under half the E8M0 scale 2^(e - 127)
//
// Quantizing is round-to-nearest against one per-block scale, computed from the fp16-rounded
// scale that decoding will use. Symmetric types map the element of largest magnitude to the most
// negative code; affine types map the block minimum to 0 and the maximum to the top code. Both
// reproduce their own bytes when fed their own decoded output.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/quants_internal.h"

namespace detaudit::gguf::quants_detail {

namespace {

constexpr int BLOCK = 32;

struct legacy_format {
  dtype type;
  int bits;          // 4 or 5
  bool has_min;      // q4_1 / q5_1
  int64_t type_size;

  int off_qh() const { return has_min ? 4 : 2; }
  int off_qs() const { return off_qh() + (bits == 5 ? 4 : 0); }
};

constexpr legacy_format FORMATS[] = {
    {DTYPE_Q4_0, 4, false, 18},
    {DTYPE_Q4_1, 4, true, 20},
    {DTYPE_Q5_0, 5, false, 22},
    {DTYPE_Q5_1, 5, true, 24},
};

const legacy_format* find_format(dtype t) {
  for (const legacy_format& f : FORMATS) {
    if (f.type == t) return &f;
  }
  return nullptr;
}

// Codes u in [0, 2*half) for x ~= (u - half) * d. Writes the fp16 scale to *d16.
void quantize_symmetric(const float* x, int half, uint16_t* d16, uint8_t* u) {
  float amax = 0.0f;
  float vmax = 0.0f;  // the signed value of largest magnitude (first one on ties)
  for (int j = 0; j < BLOCK; ++j) {
    const float a = x[j] < 0 ? -x[j] : x[j];
    if (a > amax) {
      amax = a;
      vmax = x[j];
    }
  }
  *d16 = fp16_scale(vmax / float(-half));
  const float d = fp16_to_f32(*d16);
  for (int j = 0; j < BLOCK; ++j) {
    u[j] = uint8_t(d != 0.0f ? round_clamp(x[j] / d, -half, half - 1) + half : half);
  }
}

// Codes u in [0, nmax] for x ~= u * d + m. Writes the fp16 scale and minimum.
void quantize_affine(const float* x, int nmax, uint16_t* d16, uint16_t* m16, uint8_t* u) {
  float lo = x[0] == x[0] ? x[0] : 0.0f;
  float hi = lo;
  for (int j = 1; j < BLOCK; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  *m16 = fp16_scale(lo);
  const float m = fp16_to_f32(*m16);
  const float span = hi - m;
  *d16 = fp16_scale(span > 0.0f ? span / float(nmax) : 0.0f);
  const float d = fp16_to_f32(*d16);
  for (int j = 0; j < BLOCK; ++j) {
    u[j] = uint8_t(d > 0.0f ? round_clamp((x[j] - m) / d, 0, nmax) : 0);
  }
}

void encode_block(const legacy_format& f, const float* x, uint8_t* b) {
  uint8_t u[BLOCK];
  uint16_t d16 = 0;
  uint16_t m16 = 0;
  if (f.has_min) {
    quantize_affine(x, (1 << f.bits) - 1, &d16, &m16, u);
    std::memcpy(b + 2, &m16, 2);
  } else {
    quantize_symmetric(x, 1 << (f.bits - 1), &d16, u);
  }
  std::memcpy(b, &d16, 2);
  if (f.bits == 5) {
    uint32_t qh = 0;
    for (int j = 0; j < BLOCK; ++j) qh |= uint32_t(u[j] >> 4) << j;
    std::memcpy(b + f.off_qh(), &qh, 4);
  }
  uint8_t* qs = b + f.off_qs();
  for (int j = 0; j < BLOCK / 2; ++j) qs[j] = uint8_t((u[j] & 0xf) | ((u[j + 16] & 0xf) << 4));
}

void decode_block(const legacy_format& f, const uint8_t* b, float* y) {
  uint16_t d16;
  uint16_t m16 = 0;
  std::memcpy(&d16, b, 2);
  if (f.has_min) std::memcpy(&m16, b + 2, 2);
  const float d = fp16_to_f32(d16);
  const float m = fp16_to_f32(m16);
  uint32_t qh = 0;
  if (f.bits == 5) std::memcpy(&qh, b + f.off_qh(), 4);
  const uint8_t* qs = b + f.off_qs();
  const int offset = f.has_min ? 0 : 1 << (f.bits - 1);
  for (int j = 0; j < BLOCK; ++j) {
    const int nibble = j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
    const int q = (nibble | int((qh >> j) & 1u) << 4) - offset;
    y[j] = f.has_min ? float(q) * d + m : float(q) * d;
  }
}

// mxfp4: the scale exponent puts the block's largest magnitude in [4, 8) half-scales (ggml's rule,
// e = floor(log2 max|x|) - 2 + 127, clamped to a byte), then each element takes the nearest code
// (the first on ties, so 0 is +0).
float mxfp4_half_scale(uint8_t e) {
  // 2^(e - 128) as a float: subnormal for e < 2 (2^-128, 2^-127), normal above.
  const uint32_t bits = e < 2 ? (uint32_t(0x00200000u) << e) : uint32_t(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  return d;
}

void encode_mxfp4(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < BLOCK; ++j) {
    const float a = x[j] < 0 ? -x[j] : x[j];
    if (a > amax) amax = a;
  }
  int e = 0;
  if (amax > 0.0f && amax <= 3.4028235e38f) {
    int ex;
    std::frexp(amax, &ex);  // amax = m * 2^ex, m in [0.5, 1): floor(log2 amax) = ex - 1
    e = std::min(254, std::max(0, ex - 1 - 2 + 127));
  }
  b[0] = uint8_t(e);
  const float d = mxfp4_half_scale(uint8_t(e));
  uint8_t u[BLOCK];
  for (int j = 0; j < BLOCK; ++j) {
    int best = 0;
    float best_err = std::fabs(float(MXFP4_DOUBLED[0]) * d - x[j]);
    for (int c = 1; c < 16; ++c) {
      const float err = std::fabs(float(MXFP4_DOUBLED[c]) * d - x[j]);
      if (err < best_err) {
        best = c;
        best_err = err;
      }
    }
    u[j] = uint8_t(best);
  }
  for (int j = 0; j < BLOCK / 2; ++j) b[1 + j] = uint8_t(u[j] | (u[j + 16] << 4));
}

void decode_mxfp4(const uint8_t* b, float* y) {
  const float d = mxfp4_half_scale(b[0]);
  for (int j = 0; j < BLOCK / 2; ++j) {
    y[j] = float(MXFP4_DOUBLED[b[1 + j] & 0xf]) * d;
    y[j + 16] = float(MXFP4_DOUBLED[b[1 + j] >> 4]) * d;
  }
}

// q8_0: x ~= q * d with q in [-127, 127] and d = max|x| / 127.
void encode_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < BLOCK; ++j) {
    const float a = x[j] < 0 ? -x[j] : x[j];
    if (a > amax) amax = a;
  }
  const uint16_t d16 = fp16_scale(amax / 127.0f);
  const float d = fp16_to_f32(d16);
  std::memcpy(b, &d16, 2);
  for (int j = 0; j < BLOCK; ++j) {
    const int q = d != 0.0f ? round_clamp(x[j] / d, -127, 127) : 0;
    b[2 + j] = uint8_t(int8_t(q));
  }
}

void decode_q8_0(const uint8_t* b, float* y) {
  uint16_t d16;
  std::memcpy(&d16, b, 2);
  const float d = fp16_to_f32(d16);
  for (int j = 0; j < BLOCK; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

}  // namespace

bool legacy_quantize(dtype t, const float* src, uint8_t* dst, int64_t n_blocks) {
  if (t == DTYPE_MXFP4) {
    for (int64_t i = 0; i < n_blocks; ++i) encode_mxfp4(src + i * BLOCK, dst + i * 17);
    return true;
  }
  if (t == DTYPE_Q8_0) {
    for (int64_t i = 0; i < n_blocks; ++i) encode_q8_0(src + i * BLOCK, dst + i * 34);
    return true;
  }
  const legacy_format* f = find_format(t);
  if (!f) return false;
  for (int64_t i = 0; i < n_blocks; ++i) encode_block(*f, src + i * BLOCK, dst + i * f->type_size);
  return true;
}

bool legacy_dequantize(dtype t, const uint8_t* src, float* dst, int64_t n_blocks) {
  if (t == DTYPE_MXFP4) {
    for (int64_t i = 0; i < n_blocks; ++i) decode_mxfp4(src + i * 17, dst + i * BLOCK);
    return true;
  }
  if (t == DTYPE_Q8_0) {
    for (int64_t i = 0; i < n_blocks; ++i) decode_q8_0(src + i * 34, dst + i * BLOCK);
    return true;
  }
  const legacy_format* f = find_format(t);
  if (!f) return false;
  for (int64_t i = 0; i < n_blocks; ++i) decode_block(*f, src + i * f->type_size, dst + i * BLOCK);
  return true;
}

}  // namespace detaudit::gguf::quants_detail
