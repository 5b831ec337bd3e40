// Block decoders of the few-token path (generation) for the weight types without a hand-fused
// kernel: eight 32-element blocks of one row at a time (one K-quant super-block, or eight legacy
// blocks) become int8 codes plus the integer terms of each block, exactly those of
// numerics::weight_decode_block (wblock.h):
//   w[i] = d * scale[i / 16] * q[i]  +  m * mcoef[i / 16]
// so that one kernel per instruction set (gemv_row_blocks in matmul_avx2_gemv.cpp / matmul_avx512.cpp)
// serves every type with the same block terms, rounded the same way, as the panel kernels.
//
// Every code of every supported type fits int8 (q8_0 -128..127, q6_K -32..31, q5 0..31 or
// -16..15, q4 0..15 or -8..7, q3_K -4..3, q2_K 0..3, mxfp4 -12..12). The min coefficient is stored with the sign
// of the offset term folded in (K-quants: m = -dmin, so mcoef is negated and the fp16 field is
// used as it is): the products m_mant * mcoef are the same integers.
//
// This header holds only static inline code using SSE4.1/AVX2 intrinsics. It is included by the
// instruction-set files after their `#pragma GCC target`, so each gets its own copy compiled for
// its target, and none of it is visible outside them.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "gguf/dtype.h"
#include "kernels/cpu/matmul_internal.h"

namespace detaudit::kernels::cpu {
namespace {

struct gemv_group {
  const int8_t* code[8];   // the 32 codes of block k (past the row's end: the zero block)
  int32_t hd[8];           // fp16 bits of d (0 past the row's end); mxfp4: the E8M0 byte (-1 past the end)
  int32_t hm[8];           // fp16 bits of the offset scale (0 without one)
  int32_t s0[8], s1[8];    // sub-block scales of elements 0..15 and 16..31
  int32_t m0[8], m1[8];    // signed min coefficients of elements 0..15 and 16..31
};

alignas(32) constexpr int8_t ZERO_BLOCK[32] = {};

// The row kernels of the few-token path read each row once, front to back, and the rows of a
// thread's range follow one another: one stream. The hardware prefetcher alone left bandwidth
// unused on it (Zen 3, q8_0, one token: 18.6 ns per 256 weights from memory without, 14.2 with a
// fetch 4 KiB ahead; 1B Q8_0 generation with 2 threads about 22 -> 25 t/s, docs/performance.md), so
// each iteration of a row kernel fetches the lines it will read ROW_PREFETCH_BYTES later: BYTES
// bytes from `at`, one line per 64 bytes, which leaves no line of the stream out. Past the
// matrix's end only the prefetch goes, which never faults. Always inlined: GCC 12 drops the calls
// of a prefetch-only function that is not inlined early (matmul_avx2_packed.cpp, pack_prefetch).
constexpr int64_t ROW_PREFETCH_BYTES = 4096;

template <int64_t BYTES>
__attribute__((always_inline)) inline void row_prefetch(const uint8_t* at) {
  // An address, not a pointer into the row: it may lie past the matrix.
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(at) + static_cast<uintptr_t>(ROW_PREFETCH_BYTES);
#pragma GCC unroll 16
  for (int64_t l = 0; l < (BYTES + 63) / 64; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
}

inline int32_t u16_at(const uint8_t* p) {
  uint16_t v;
  __builtin_memcpy(&v, p, 2);
  return v;
}

// 32 bits as 32 bytes: byte j is 0x10 when bit j of v is set, else 0.
inline __m256i bits_to_0x10(uint32_t v) {
  const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(v)),
                                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                           2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i sel = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(rep, sel), sel), _mm256_set1_epi8(0x10));
}

inline void store32(int8_t* dst, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(dst), v); }

// ---- legacy blocks of 32: q4_0 (18 B), q4_1 (20 B), q5_0 (22 B), q5_1 (24 B) ----

template <int SIZE, bool MIN, bool FIVE>
struct legacy_blocks {
  static constexpr bool HAS_MIN = MIN;
  static constexpr bool PER16 = false;
  static constexpr int64_t GROUP_BYTES = 8 * SIZE;  // the row bytes of one decode (eight blocks)
  static void decode(const uint8_t* row, int64_t b0, int64_t nb, int8_t* buf, gemv_group& g) {
    const __m128i m4 = _mm_set1_epi8(15);
    // Offsets removed as wblock does: q4_0 u - 8, q5_0 u - 16; the _1 types keep u and add m.
    const __m256i off = _mm256_set1_epi8(MIN ? 0 : (FIVE ? 16 : 8));
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      g.s0[k] = g.s1[k] = 1;
      g.m0[k] = g.m1[k] = MIN ? 1 : 0;
      if (b0 + k >= nb) {
        g.code[k] = ZERO_BLOCK;
        g.hd[k] = g.hm[k] = 0;
        continue;
      }
      const uint8_t* p = row + (b0 + k) * SIZE;
      g.hd[k] = u16_at(p);
      g.hm[k] = MIN ? u16_at(p + 2) : 0;
      const int qh_at = MIN ? 4 : 2;
      const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + qh_at + (FIVE ? 4 : 0)));
      __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), _mm_and_si128(qs, m4));
      if (FIVE) {
        uint32_t qh;
        __builtin_memcpy(&qh, p + qh_at, 4);
        q = _mm256_or_si256(q, bits_to_0x10(qh));
      }
      store32(buf + 32 * k, _mm256_sub_epi8(q, off));
      g.code[k] = buf + 32 * k;
    }
  }
};

using q4_0_blocks = legacy_blocks<18, false, false>;
using q4_1_blocks = legacy_blocks<20, true, false>;
using q5_0_blocks = legacy_blocks<22, false, true>;
using q5_1_blocks = legacy_blocks<24, true, true>;

// mxfp4 (17 B): e (E8M0), qs[16]. Codes are the doubled E2M1 values (-12..12), looked up by
// nibble; the scale is the exponent e - 128 with mantissa 1, which the row kernels take from hd
// when the decoder says E8M0 (hd = e, or -1 past the row's end: no scale term).
struct mxfp4_blocks {
  static constexpr bool HAS_MIN = false;
  static constexpr bool PER16 = false;
  static constexpr bool E8M0 = true;
  static constexpr int64_t GROUP_BYTES = 8 * 17;
  static void decode(const uint8_t* row, int64_t b0, int64_t nb, int8_t* buf, gemv_group& g) {
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i m4 = _mm_set1_epi8(15);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      g.s0[k] = g.s1[k] = 1;
      g.m0[k] = g.m1[k] = 0;
      g.hm[k] = 0;
      if (b0 + k >= nb) {
        g.code[k] = ZERO_BLOCK;
        g.hd[k] = -1;
        continue;
      }
      const uint8_t* p = row + (b0 + k) * 17;
      g.hd[k] = p[0];
      const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 1));
      const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(qs, m4));
      const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(qs, 4), m4));
      store32(buf + 32 * k, _mm256_set_m128i(hi, lo));
      g.code[k] = buf + 32 * k;
    }
  }
};

// Whether decoder D gives E8M0 scale exponents in hd instead of fp16 bits (mxfp4).
template <class D>
constexpr bool gemv_e8m0 = requires { D::E8M0; };

// ---- K-quant super-blocks of 256 (8 blocks; rows are whole super-blocks) ----

// q2_K (84 B): scales[16] (low nibble scale, high nibble min of each 16), qs[64] (2-bit codes:
// element e at bits 2 * ((e / 32) % 4) of qs[32 * (e / 128) + e % 32]), d, dmin.
struct q2_k_blocks {
  static constexpr bool HAS_MIN = true;
  static constexpr bool PER16 = true;
  static constexpr int64_t GROUP_BYTES = 84;
  static void decode(const uint8_t* row, int64_t b0, int64_t, int8_t* buf, gemv_group& g) {
    const uint8_t* p = row + (b0 / 8) * 84;
    const __m256i m2 = _mm256_set1_epi8(3);
    const int32_t hd = u16_at(p + 80), hm = u16_at(p + 82);
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * (s / 4)));
      store32(buf + 32 * s, _mm256_and_si256(_mm256_srli_epi16(qs, 2 * (s % 4)), m2));
      g.code[s] = buf + 32 * s;
      g.hd[s] = hd;
      g.hm[s] = hm;
      g.s0[s] = p[2 * s] & 15;
      g.s1[s] = p[2 * s + 1] & 15;
      g.m0[s] = -(p[2 * s] >> 4);
      g.m1[s] = -(p[2 * s + 1] >> 4);
    }
  }
};

// q3_K (110 B): hmask[32] (bit s of byte l: the high bit of element 32 s + l; clear means -4),
// qs[64] (2-bit codes laid out as q2_K's), scales[12] (sixteen 6-bit values, minus 32), d.
struct q3_k_blocks {
  static constexpr bool HAS_MIN = false;
  static constexpr bool PER16 = true;
  static constexpr int64_t GROUP_BYTES = 110;
  static int32_t scale(const uint8_t* s, int i) {
    const int low = i < 8 ? (s[i] & 15) : (s[i - 8] >> 4);
    return (low | ((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4) - 32;
  }
  static void decode(const uint8_t* row, int64_t b0, int64_t, int8_t* buf, gemv_group& g) {
    const uint8_t* p = row + (b0 / 8) * 110;
    const __m256i m2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
    const __m256i hmask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const int32_t hd = u16_at(p + 108);
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 32 * (s / 4)));
      const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * (s % 4)), m2);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, s), one);  // 1: keep, 0: minus 4
      const __m256i minus = _mm256_andnot_si256(_mm256_slli_epi16(high, 2), four);
      store32(buf + 32 * s, _mm256_sub_epi8(low, minus));
      g.code[s] = buf + 32 * s;
      g.hd[s] = hd;
      g.hm[s] = 0;
      g.s0[s] = scale(p + 96, 2 * s);
      g.s1[s] = scale(p + 96, 2 * s + 1);
      g.m0[s] = g.m1[s] = 0;
    }
  }
};

// q4_K / q5_K's six-bit (scale, min) pair of block j from the 12 scale bytes s.
inline void scale_min_k4(const uint8_t* s, int j, int32_t* sc, int32_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

// q5_K (176 B): d, dmin, scales[12], qh[32] (bit s of byte l: bit 4 of element 32 s + l),
// qs[128] (element e: nibble (e / 32) % 2 of qs[32 * (e / 64) + e % 32]).
struct q5_k_blocks {
  static constexpr bool HAS_MIN = true;
  static constexpr bool PER16 = false;
  static constexpr int64_t GROUP_BYTES = 176;
  static void decode(const uint8_t* row, int64_t b0, int64_t, int8_t* buf, gemv_group& g) {
    const uint8_t* p = row + (b0 / 8) * 176;
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
    const int32_t hd = u16_at(p), hm = u16_at(p + 2);
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 48 + 32 * (s / 2)));
      const __m256i low = _mm256_and_si256(s % 2 ? _mm256_srli_epi16(qs, 4) : qs, m4);
      const __m256i high = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, s), one), 4);
      store32(buf + 32 * s, _mm256_or_si256(low, high));
      g.code[s] = buf + 32 * s;
      g.hd[s] = hd;
      g.hm[s] = hm;
      int32_t sc, m;
      scale_min_k4(p + 4, s, &sc, &m);
      g.s0[s] = g.s1[s] = sc;
      g.m0[s] = g.m1[s] = -m;
    }
  }
};

// q6_K (210 B): ql[128] (low nibbles), qh[64] (high bit pairs), scales[16] (int8, one per 16), d.
// The 32 codes (q - 32) of block s (0..7) of the q6_K super-block p (ql[128], qh[64], ...).
inline __m256i q6k_codes(const uint8_t* p, int s) {
  const int h = s / 4, q = s % 4;
  const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * h + 32 * (q & 1)));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * h));
  const __m256i low = _mm256_and_si256(q >> 1 ? _mm256_srli_epi16(ql, 4) : ql, _mm256_set1_epi8(15));
  const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * q), _mm256_set1_epi8(3));
  return _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
}

struct q6_k_blocks {
  static constexpr bool HAS_MIN = false;
  static constexpr bool PER16 = true;
  static constexpr int64_t GROUP_BYTES = 210;
  static void decode(const uint8_t* row, int64_t b0, int64_t, int8_t* buf, gemv_group& g) {
    const uint8_t* p = row + (b0 / 8) * 210;
    const int32_t hd = u16_at(p + 208);
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      store32(buf + 32 * s, q6k_codes(p, s));
      g.code[s] = buf + 32 * s;
      g.hd[s] = hd;
      g.hm[s] = 0;
      g.s0[s] = static_cast<int8_t>(p[192 + 2 * s]);
      g.s1[s] = static_cast<int8_t>(p[192 + 2 * s + 1]);
      g.m0[s] = g.m1[s] = 0;
    }
  }
};

// A row kernel of the few-token path: one row against token t into *out (false: non-finite scale).
using gemv_row_fn = bool (*)(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c,
                             int64_t* out);

// ROW<D>::run for the type's decoder D; nullptr for a type without one (f32, f16, bf16, q8_0,
// q4_K: the instruction-set files fuse those themselves).
template <template <class> class ROW>
gemv_row_fn gemv_blocks_row(gguf::dtype t) {
  switch (t) {
    case gguf::DTYPE_Q4_0: return ROW<q4_0_blocks>::run;
    case gguf::DTYPE_Q4_1: return ROW<q4_1_blocks>::run;
    case gguf::DTYPE_Q5_0: return ROW<q5_0_blocks>::run;
    case gguf::DTYPE_Q5_1: return ROW<q5_1_blocks>::run;
    case gguf::DTYPE_Q2_K: return ROW<q2_k_blocks>::run;
    case gguf::DTYPE_Q3_K: return ROW<q3_k_blocks>::run;
    case gguf::DTYPE_Q5_K: return ROW<q5_k_blocks>::run;
    case gguf::DTYPE_Q6_K: return ROW<q6_k_blocks>::run;
    case gguf::DTYPE_MXFP4: return ROW<mxfp4_blocks>::run;
    default: return nullptr;
  }
}

// Runs fn on rows [r0, r1) of w for tokens [0, n_tokens), summing into acc[tok * (r1 - r0) + r - r0].
inline bool gemv_rows(gemv_row_fn fn, const act_view& x, int64_t n_tokens, const uint8_t* w, uint64_t row_bytes,
                      const int32_t* row_bounds, int64_t r0, int64_t r1, int64_t* acc) {
  const int64_t nb = x.n_blocks, c = matmul_shift_const(nb), n_rows = r1 - r0;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + static_cast<uint64_t>(r) * row_bytes;
    for (int64_t tok = 0; tok < n_tokens; ++tok)
      if (!fn(row, nb, x, tok, row_bounds[r], c, acc + tok * n_rows + (r - r0))) return false;
  }
  return true;
}

}  // namespace
}  // namespace detaudit::kernels::cpu
