// The 256-element super-block types: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
//
// Layouts (byte offsets within one super-block; fp16/f32/i16 little-endian), as in ggml's
// block_q2_K ... block_q8_K:
//
//   q2_K (84 B):  scales[16] @0 | qs[64] @16 | d fp16 @80 | dmin fp16 @82
//   q3_K (110 B): hmask[32] @0 | qs[64] @32 | scales[12] @96 | d fp16 @108
//   q4_K (144 B): d fp16 @0 | dmin fp16 @2 | scales[12] @4 | qs[128] @16
//   q5_K (176 B): d fp16 @0 | dmin fp16 @2 | scales[12] @4 | qh[32] @16 | qs[128] @48
//   q6_K (210 B): ql[128] @0 | qh[64] @128 | scales[16] int8 @192 | d fp16 @208
//   q8_K (292 B): d f32 @0 | qs[256] int8 @4 | bsums[16] i16 @260 (sum of each 16 qs)
//
// Where element e (0..255) keeps its code:
//   2-bit fields (q2_K qs, q3_K qs low bits): e = 128h + 32g + l  ->  bits 2g of qs[32h + l]
//   bit planes (q3_K hmask, q5_K qh):          e = 32k + l         ->  bit k of plane[l]
//   nibbles (q4_K, q5_K qs):                   e = 64c + 32s + l   ->  nibble s of qs[32c + l]
//   q6_K:  e = 128h + 32g + l  ->  nibble (g >> 1) of ql[64h + 32(g & 1) + l],
//                                  bits 2g of qh[32h + l] as bits 4..5
// Sub-block scales:
//   q2_K: scales[j] = sc | m << 4 for sub-block j of 16 elements.
//   q3_K: 16 six-bit values v = sc + 32; low nibble of v_i in scales[i] (i < 8) or the high
//         nibble of scales[i - 8]; bits 4..5 of v_i are bits 2(i / 4) of scales[8 + i % 4].
//   q4_K, q5_K: 8 six-bit (sc, m) pairs, ggml's get_scale_min_k4: for j < 4 sc = s[j] & 63,
//         m = s[j + 4] & 63; for j >= 4 sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4,
//         m = (s[j + 4] >> 4) | (s[j] >> 6) << 4.
//   q6_K: scales[j] int8 per 16 elements.
// Decoding (the float expressions ggml evaluates; q is the code, minus its offset for q3_K
// (4) and q6_K (32)):
//   q2_K, q4_K, q5_K: (d * sc) * q - dmin * m      q3_K, q6_K: (d * sc) * q      q8_K: d * q
//
// Quantizing: each sub-block gets a least-squares (scale, min) or scale from a scan of a few
// candidate scales around the min/max one; the sub-block values are then quantized against
// fp16 super-block scales, and each sub-block tries its quantized scale (and min) +-1, keeping
// the choice of least squared error after re-rounding the codes.
#include <cstddef>
#include <cstring>

#include "gguf/quants_internal.h"

namespace detaudit::gguf::quants_detail {

namespace {

constexpr int QK = 256;

struct block_q2_k {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
struct block_q3_k {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
struct block_q4_k {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct block_q5_k {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct block_q6_k {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct block_q8_k {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
static_assert(sizeof(block_q2_k) == 84 && offsetof(block_q2_k, d) == 80);
static_assert(sizeof(block_q3_k) == 110 && offsetof(block_q3_k, d) == 108);
static_assert(sizeof(block_q4_k) == 144 && offsetof(block_q4_k, qs) == 16);
static_assert(sizeof(block_q5_k) == 176 && offsetof(block_q5_k, qs) == 48);
static_assert(sizeof(block_q6_k) == 210 && offsetof(block_q6_k, d) == 208);
static_assert(sizeof(block_q8_k) == 292 && offsetof(block_q8_k, bsums) == 260);

// ---- Code placement -------------------------------------------------------------------------

void pack_2bit(const uint8_t* u, uint8_t* qs) {  // (256) codes -> (64) bytes
  std::memset(qs, 0, 64);
  for (int e = 0; e < QK; ++e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    qs[32 * h + l] |= uint8_t((u[e] & 3) << (2 * g));
  }
}

int read_2bit(const uint8_t* qs, int e) {
  const int h = e / 128, g = (e / 32) % 4, l = e % 32;
  return (qs[32 * h + l] >> (2 * g)) & 3;
}

void pack_bit_plane(const uint8_t* u, int bit, uint8_t* plane) {  // (256) codes -> (32) bytes
  std::memset(plane, 0, 32);
  for (int e = 0; e < QK; ++e) plane[e % 32] |= uint8_t(((u[e] >> bit) & 1) << (e / 32));
}

int read_bit_plane(const uint8_t* plane, int e) { return (plane[e % 32] >> (e / 32)) & 1; }

void pack_nibbles(const uint8_t* u, uint8_t* qs) {  // (256) codes -> (128) bytes
  std::memset(qs, 0, 128);
  for (int e = 0; e < QK; ++e) {
    const int c = e / 64, s = (e / 32) % 2, l = e % 32;
    qs[32 * c + l] |= uint8_t((u[e] & 15) << (4 * s));
  }
}

int read_nibble(const uint8_t* qs, int e) {
  const int c = e / 64, s = (e / 32) % 2, l = e % 32;
  return (qs[32 * c + l] >> (4 * s)) & 15;
}

// q4_K / q5_K: 8 six-bit scales and mins into 12 bytes.
void pack_scales_k4(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(sc[j] | (sc[j + 4] >> 4) << 6);
    s[j + 4] = uint8_t(m[j] | (m[j + 4] >> 4) << 6);
    s[j + 8] = uint8_t((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
  }
}

void read_scales_k4(const uint8_t* s, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    m[j] = s[j + 4] & 63;
    sc[j + 4] = uint8_t((s[j + 8] & 15) | (s[j] >> 6) << 4);
    m[j + 4] = uint8_t((s[j + 8] >> 4) | (s[j + 4] >> 6) << 4);
  }
}

// q3_K: 16 six-bit values into 12 bytes.
void pack_scales_q3(const uint8_t* v, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int i = 0; i < 16; ++i) {
    s[i % 8] |= uint8_t((v[i] & 15) << (i < 8 ? 0 : 4));
    s[8 + i % 4] |= uint8_t(((v[i] >> 4) & 3) << (2 * (i / 4)));
  }
}

int read_scale_q3(const uint8_t* s, int i) {
  const int low = i < 8 ? (s[i] & 15) : (s[i - 8] >> 4);
  return low | ((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4;
}

// ---- Fitting ---------------------------------------------------------------------------------

constexpr int SEARCH_STEPS = 10;      // candidates at nmax + k/10 for k in [-10, 10]
constexpr float SEARCH_DELTA = 0.1f;

// Affine super-block, unpacked: element e decodes to (d * sc[j]) * u[e] - dmin * m[j] where
// j = e / sub_len.
struct affine_superblock {
  uint16_t d16 = 0;
  uint16_t dmin16 = 0;
  uint8_t sc[16] = {};
  uint8_t m[16] = {};
  uint8_t u[QK] = {};
};

// Symmetric super-block, unpacked: element e decodes to (d * sc[j]) * q[e], j = e / 16.
struct symmetric_superblock {
  uint16_t d16 = 0;
  int sc[16] = {};
  int q[QK] = {};
};

// Best codes in [0, nmax] for x ~= dl * q - ml; writes them to q (n) and returns the squared error.
float affine_codes(const float* x, int n, int nmax, float dl, float ml, uint8_t* q) {
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    q[i] = uint8_t(dl > 0.0f ? round_clamp((x[i] + ml) / dl, 0, nmax) : 0);
    const float diff = dl * float(q[i]) - ml - x[i];
    err += diff * diff;
  }
  return err;
}

// Best codes in [qlo, qhi] for x ~= dl * q; writes them to q (n) and returns the squared error.
float symmetric_codes(const float* x, int n, int qlo, int qhi, float dl, int* q) {
  float err = 0.0f;
  for (int i = 0; i < n; ++i) {
    q[i] = dl != 0.0f ? round_clamp(x[i] / dl, qlo, qhi) : 0;
    const float diff = dl * float(q[i]) - x[i];
    err += diff * diff;
  }
  return err;
}

struct affine_fit {
  float scale;  // >= 0
  float min;    // >= 0; x ~= scale * q - min
};

// Least-squares (scale, min) for n values and codes in [0, nmax], from a scan of candidate
// inverse scales around nmax / (max - min) with a refit of both parameters for each.
affine_fit fit_affine(const float* x, int n, int nmax) {
  float lo = 0.0f, hi = x[0] == x[0] ? x[0] : 0.0f;
  for (int i = 0; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
  }
  if (!(hi > lo)) return {0.0f, -lo};
  affine_fit best = {(hi - lo) / float(nmax), -lo};
  uint8_t q[32];
  float best_err = affine_codes(x, n, nmax, best.scale, best.min, q);
  for (int k = -SEARCH_STEPS; k <= SEARCH_STEPS; ++k) {
    const float iscale = (float(nmax) + SEARCH_DELTA * float(k)) / (hi - lo);
    double sq = 0, sqq = 0, sx = 0, sxq = 0;
    for (int i = 0; i < n; ++i) {
      q[i] = uint8_t(round_clamp((x[i] - lo) * iscale, 0, nmax));
      sq += q[i];
      sqq += double(q[i]) * q[i];
      sx += x[i];
      sxq += double(x[i]) * q[i];
    }
    const double det = n * sqq - sq * sq;
    if (!(det > 0)) continue;
    double scale = (n * sxq - sq * sx) / det;
    double offset = (sqq * sx - sq * sxq) / det;
    if (offset > 0) {
      offset = 0;
      scale = sxq / sqq;
    }
    if (!(scale > 0)) continue;
    const affine_fit cand = {float(scale), float(-offset)};
    const float err = affine_codes(x, n, nmax, cand.scale, cand.min, q);
    if (err < best_err) {
      best_err = err;
      best = cand;
    }
  }
  return best;
}

// Least-squares scale (either sign) for n values and codes in [qlo, qhi], from a scan of
// candidates mapping the largest-magnitude value near qlo or near qhi.
float fit_symmetric(const float* x, int n, int qlo, int qhi) {
  float amax = 0.0f, vmax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = x[i] < 0 ? -x[i] : x[i];
    if (a > amax) {
      amax = a;
      vmax = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  int q[32];
  float best = vmax / float(qlo);
  float best_err = symmetric_codes(x, n, qlo, qhi, best, q);
  for (const int side : {qlo, qhi}) {
    for (int k = -SEARCH_STEPS; k <= SEARCH_STEPS; ++k) {
      const float iscale = (float(side) + SEARCH_DELTA * float(k)) / vmax;
      double sxq = 0, sqq = 0;
      for (int i = 0; i < n; ++i) {
        q[i] = round_clamp(x[i] * iscale, qlo, qhi);
        sxq += double(x[i]) * q[i];
        sqq += double(q[i]) * q[i];
      }
      if (!(sqq > 0)) continue;
      const float cand = float(sxq / sqq);
      const float err = symmetric_codes(x, n, qlo, qhi, cand, q);
      if (err < best_err) {
        best_err = err;
        best = cand;
      }
    }
  }
  return best;
}

// Quantizes 256 values into an affine super-block of 256 / sub_len sub-blocks, codes in
// [0, nmax], sub-block scale and min codes in [0, scale_max].
void quantize_affine_superblock(const float* x, int sub_len, int nmax, int scale_max,
                                affine_superblock* out) {
  const int n_sub = QK / sub_len;
  affine_fit fits[16];
  float smax = 0.0f, mmax = 0.0f;
  for (int j = 0; j < n_sub; ++j) {
    fits[j] = fit_affine(x + j * sub_len, sub_len, nmax);
    if (fits[j].scale > smax) smax = fits[j].scale;
    if (fits[j].min > mmax) mmax = fits[j].min;
  }
  out->d16 = fp16_scale(smax / float(scale_max));
  out->dmin16 = fp16_scale(mmax / float(scale_max));
  const float d = fp16_to_f32(out->d16);
  const float dmin = fp16_to_f32(out->dmin16);
  for (int j = 0; j < n_sub; ++j) {
    const float* xj = x + j * sub_len;
    const int sc0 = d > 0.0f ? round_clamp(fits[j].scale / d, 0, scale_max) : 0;
    const int m0 = dmin > 0.0f ? round_clamp(fits[j].min / dmin, 0, scale_max) : 0;
    float best_err = -1.0f;
    uint8_t q[32];
    for (int sc = sc0 - 1; sc <= sc0 + 1; ++sc) {
      for (int m = m0 - 1; m <= m0 + 1; ++m) {
        if (sc < 0 || sc > scale_max || m < 0 || m > scale_max) continue;
        const float err = affine_codes(xj, sub_len, nmax, d * float(sc), dmin * float(m), q);
        if (best_err < 0.0f || err < best_err) {
          best_err = err;
          out->sc[j] = uint8_t(sc);
          out->m[j] = uint8_t(m);
          std::memcpy(out->u + j * sub_len, q, size_t(sub_len));
        }
      }
    }
  }
}

// Quantizes 256 values into a symmetric super-block of 16 sub-blocks, codes in [qlo, qhi],
// sub-block scale codes in [sc_lo, sc_hi] (sc_lo < 0).
void quantize_symmetric_superblock(const float* x, int qlo, int qhi, int sc_lo, int sc_hi,
                                   symmetric_superblock* out) {
  float scales[16];
  float amax = 0.0f, smax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(x + 16 * j, 16, qlo, qhi);
    const float a = scales[j] < 0 ? -scales[j] : scales[j];
    if (a > amax) {
      amax = a;
      smax = scales[j];
    }
  }
  out->d16 = fp16_scale(amax > 0.0f ? smax / float(sc_lo) : 0.0f);
  const float d = fp16_to_f32(out->d16);
  for (int j = 0; j < 16; ++j) {
    const int sc0 = d != 0.0f ? round_clamp(scales[j] / d, sc_lo, sc_hi) : 0;
    float best_err = -1.0f;
    int q[16];
    for (int sc = sc0 - 1; sc <= sc0 + 1; ++sc) {
      if (sc < sc_lo || sc > sc_hi) continue;
      const float err = symmetric_codes(x + 16 * j, 16, qlo, qhi, d * float(sc), q);
      if (best_err < 0.0f || err < best_err) {
        best_err = err;
        out->sc[j] = sc;
        std::memcpy(out->q + 16 * j, q, sizeof(q));
      }
    }
  }
}

void decode_affine(const affine_superblock& sb, int sub_len, float* y) {
  const float d = fp16_to_f32(sb.d16);
  const float dmin = fp16_to_f32(sb.dmin16);
  for (int e = 0; e < QK; ++e) {
    const int j = e / sub_len;
    y[e] = d * float(sb.sc[j]) * float(sb.u[e]) - dmin * float(sb.m[j]);
  }
}

void decode_symmetric(const symmetric_superblock& sb, float* y) {
  const float d = fp16_to_f32(sb.d16);
  for (int e = 0; e < QK; ++e) y[e] = d * float(sb.sc[e / 16]) * float(sb.q[e]);
}

// ---- Per type --------------------------------------------------------------------------------

template <typename B>
B load(const uint8_t* p) {
  B b;
  std::memcpy(&b, p, sizeof(B));
  return b;
}

template <typename B>
void store(const B& b, uint8_t* p) {
  std::memcpy(p, &b, sizeof(B));
}

void encode_q2_k(const float* x, uint8_t* p) {
  affine_superblock sb;
  quantize_affine_superblock(x, 16, 3, 15, &sb);
  block_q2_k b{};
  for (int j = 0; j < 16; ++j) b.scales[j] = uint8_t(sb.sc[j] | sb.m[j] << 4);
  pack_2bit(sb.u, b.qs);
  b.d = sb.d16;
  b.dmin = sb.dmin16;
  store(b, p);
}

void decode_q2_k(const uint8_t* p, float* y) {
  const block_q2_k b = load<block_q2_k>(p);
  affine_superblock sb;
  sb.d16 = b.d;
  sb.dmin16 = b.dmin;
  for (int j = 0; j < 16; ++j) {
    sb.sc[j] = b.scales[j] & 15;
    sb.m[j] = b.scales[j] >> 4;
  }
  for (int e = 0; e < QK; ++e) sb.u[e] = uint8_t(read_2bit(b.qs, e));
  decode_affine(sb, 16, y);
}

void encode_q3_k(const float* x, uint8_t* p) {
  symmetric_superblock sb;
  quantize_symmetric_superblock(x, -4, 3, -32, 31, &sb);
  block_q3_k b{};
  uint8_t u[QK];
  for (int e = 0; e < QK; ++e) u[e] = uint8_t(sb.q[e] + 4);
  pack_2bit(u, b.qs);
  pack_bit_plane(u, 2, b.hmask);
  uint8_t v[16];
  for (int j = 0; j < 16; ++j) v[j] = uint8_t(sb.sc[j] + 32);
  pack_scales_q3(v, b.scales);
  b.d = sb.d16;
  store(b, p);
}

void decode_q3_k(const uint8_t* p, float* y) {
  const block_q3_k b = load<block_q3_k>(p);
  symmetric_superblock sb;
  sb.d16 = b.d;
  for (int j = 0; j < 16; ++j) sb.sc[j] = read_scale_q3(b.scales, j) - 32;
  for (int e = 0; e < QK; ++e) sb.q[e] = read_2bit(b.qs, e) - (read_bit_plane(b.hmask, e) ? 0 : 4);
  decode_symmetric(sb, y);
}

void encode_q45_k(const float* x, int nmax, uint16_t* d, uint16_t* dmin, uint8_t* scales,
                  uint8_t* qs, uint8_t* qh) {
  affine_superblock sb;
  quantize_affine_superblock(x, 32, nmax, 63, &sb);
  *d = sb.d16;
  *dmin = sb.dmin16;
  pack_scales_k4(sb.sc, sb.m, scales);
  pack_nibbles(sb.u, qs);
  if (qh) pack_bit_plane(sb.u, 4, qh);
}

void decode_q45_k(uint16_t d, uint16_t dmin, const uint8_t* scales, const uint8_t* qs,
                  const uint8_t* qh, float* y) {
  affine_superblock sb;
  sb.d16 = d;
  sb.dmin16 = dmin;
  read_scales_k4(scales, sb.sc, sb.m);
  for (int e = 0; e < QK; ++e) {
    sb.u[e] = uint8_t(read_nibble(qs, e) | (qh ? read_bit_plane(qh, e) << 4 : 0));
  }
  decode_affine(sb, 32, y);
}

void encode_q6_k(const float* x, uint8_t* p) {
  symmetric_superblock sb;
  quantize_symmetric_superblock(x, -32, 31, -128, 127, &sb);
  block_q6_k b{};
  for (int e = 0; e < QK; ++e) {
    const int u = sb.q[e] + 32;
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    b.ql[64 * h + 32 * (g & 1) + l] |= uint8_t((u & 15) << (4 * (g >> 1)));
    b.qh[32 * h + l] |= uint8_t((u >> 4) << (2 * g));
  }
  for (int j = 0; j < 16; ++j) b.scales[j] = int8_t(sb.sc[j]);
  b.d = sb.d16;
  store(b, p);
}

void decode_q6_k(const uint8_t* p, float* y) {
  const block_q6_k b = load<block_q6_k>(p);
  symmetric_superblock sb;
  sb.d16 = b.d;
  for (int j = 0; j < 16; ++j) sb.sc[j] = b.scales[j];
  for (int e = 0; e < QK; ++e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    const int low = (b.ql[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 15;
    const int high = (b.qh[32 * h + l] >> (2 * g)) & 3;
    sb.q[e] = (low | high << 4) - 32;
  }
  decode_symmetric(sb, y);
}

// q8_K: x ~= d * q, q in [-127, 127], d = max|x| / 127 kept as f32.
void encode_q8_k(const float* x, uint8_t* p) {
  block_q8_k b{};
  float amax = 0.0f;
  for (int e = 0; e < QK; ++e) {
    const float a = x[e] < 0 ? -x[e] : x[e];
    if (a > amax) amax = a;
  }
  b.d = amax / 127.0f;
  for (int e = 0; e < QK; ++e) {
    b.qs[e] = int8_t(b.d != 0.0f ? round_clamp(x[e] / b.d, -127, 127) : 0);
    b.bsums[e / 16] = int16_t(b.bsums[e / 16] + b.qs[e]);
  }
  store(b, p);
}

void decode_q8_k(const uint8_t* p, float* y) {
  const block_q8_k b = load<block_q8_k>(p);
  for (int e = 0; e < QK; ++e) y[e] = b.d * float(b.qs[e]);
}

void encode_q4_k(const float* x, uint8_t* p) {
  block_q4_k b{};
  encode_q45_k(x, 15, &b.d, &b.dmin, b.scales, b.qs, nullptr);
  store(b, p);
}

void decode_q4_k(const uint8_t* p, float* y) {
  const block_q4_k b = load<block_q4_k>(p);
  decode_q45_k(b.d, b.dmin, b.scales, b.qs, nullptr, y);
}

void encode_q5_k(const float* x, uint8_t* p) {
  block_q5_k b{};
  encode_q45_k(x, 31, &b.d, &b.dmin, b.scales, b.qs, b.qh);
  store(b, p);
}

void decode_q5_k(const uint8_t* p, float* y) {
  const block_q5_k b = load<block_q5_k>(p);
  decode_q45_k(b.d, b.dmin, b.scales, b.qs, b.qh, y);
}

struct k_format {
  dtype type;
  int64_t type_size;
  void (*encode)(const float* x, uint8_t* p);
  void (*decode)(const uint8_t* p, float* y);
};

constexpr k_format FORMATS[] = {
    {DTYPE_Q2_K, 84, encode_q2_k, decode_q2_k},   {DTYPE_Q3_K, 110, encode_q3_k, decode_q3_k},
    {DTYPE_Q4_K, 144, encode_q4_k, decode_q4_k},  {DTYPE_Q5_K, 176, encode_q5_k, decode_q5_k},
    {DTYPE_Q6_K, 210, encode_q6_k, decode_q6_k},  {DTYPE_Q8_K, 292, encode_q8_k, decode_q8_k},
};

const k_format* find_format(dtype t) {
  for (const k_format& f : FORMATS) {
    if (f.type == t) return &f;
  }
  return nullptr;
}

}  // namespace

bool k_quantize(dtype t, const float* src, uint8_t* dst, int64_t n_blocks) {
  const k_format* f = find_format(t);
  if (!f) return false;
  for (int64_t i = 0; i < n_blocks; ++i) f->encode(src + i * QK, dst + i * f->type_size);
  return true;
}

bool k_dequantize(dtype t, const uint8_t* src, float* dst, int64_t n_blocks) {
  const k_format* f = find_format(t);
  if (!f) return false;
  for (int64_t i = 0; i < n_blocks; ++i) f->decode(src + i * f->type_size, dst + i * QK);
  return true;
}

}  // namespace detaudit::gguf::quants_detail
