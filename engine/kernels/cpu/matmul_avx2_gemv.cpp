// The AVX2 few-token matmul rows (gemv_avx2, matmul_internal.h): q8_0, q4_0, q4_K, q5_K and q6_K
// hand-fused, the other integer types through gemv_blocks.h, each row against one token with its
// codes against the activations in even/odd order (act_pack::q_eo).
//
// Everything below the pragma is static or a plain extern function (no std:: templates).
// GCC 12's AVX2 intrinsics read a self-initialised undefined vector (_mm256_undefined_*), which
// -Wuninitialized reports at every use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "gguf/dtype.h"
#include "kernels/cpu/matmul_internal.h"
#include "numerics/exact.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include "kernels/cpu/gemv_blocks.h"
#include "kernels/cpu/matmul_avx2_common.h"

namespace detaudit::kernels::cpu {

namespace {

// ---- the few-token path: q8_0, q4_0, q4_K, q5_K and q6_K hand-fused, the other integer types through gemv_blocks.h ----

// Sums of lanes 0..3 of each of p[0..7] as the 8 lanes of *lo, of lanes 4..7 as those of *hi.
inline void reduce8_halves(const __m256i* p, __m256i* lo, __m256i* hi) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  // a: 128-bit lane L holds the lane-L halves' sums of p0..p3; b likewise for p4..p7.
  *lo = _mm256_permute2x128_si256(a, b, 0x20);
  *hi = _mm256_permute2x128_si256(a, b, 0x31);
}

// Sums of the 8 int32 lanes of each of p[0..7], as 8 lanes in order.
inline __m256i reduce8(const __m256i* p) {
  __m256i lo, hi;
  reduce8_halves(p, &lo, &hi);
  return _mm256_add_epi32(lo, hi);
}

// ---- codes against activations in even/odd order (act_pack::q_eo) ----
// A 16-bit lane of a block's packed codes holds two neighbouring elements, one per byte (or per
// nibble pair); masks and shifts within the lane give the even elements' codes in one vector and
// the odd elements' in another, which pair with the block's activations stored evens first. This
// replaces the byte-to-word widening (two shuffle uops per 16 codes on Zen 3, the bottleneck of
// the row kernels) with single-uop lane operations.

inline __m256i ld16(const int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Signed bytes: the low byte of each 16-bit lane (even elements) and the high byte (odd).
inline __m256i even_s8(__m256i w) { return _mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8); }
inline __m256i odd_s8(__m256i w) { return _mm256_srai_epi16(w, 8); }

// A block's products: even and odd codes with its 32 activations ae in q_eo order. Lanes 0..3
// hold elements 0..15 (the first half-block), lanes 4..7 elements 16..31.
inline __m256i eo_products(__m256i even, __m256i odd, const int16_t* ae) {
  return _mm256_add_epi32(_mm256_madd_epi16(even, ld16(ae)), _mm256_madd_epi16(odd, ld16(ae + 16)));
}

// The fused row kernels take GROUPS groups of eight blocks per iteration and compute every group's
// products before any group's epilogue. A group's block sums come at the end of a long dependent
// chain (products, the hadd tree, conversions, rounding); with one group per iteration the ~140
// vector uops of the next group sit behind that chain and too little is in flight (Zen 3, q4_K:
// 16.4 against 17.9 ns per super-block with rows in L2, 17.3 against 18.8 from DRAM). Rows stay one
// sequential stream: pairing two rows instead measured as fast in L2 and far slower from DRAM (two
// streams per thread).
constexpr int GROUPS = 2;


// One q8_0 row against one token, 8 blocks per epilogue; false for a non-finite scale.
bool gemv_row_q8_0_int(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  const int16_t* a = x.q + t * nb * 32;
  const int32_t* ea = x.exp + t * nb;
  const int64_t c_xmax = c - x.max_exp[t];
  __m256i acc = _mm256_setzero_si256();
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    __m256i p[8];
    alignas(32) int64_t dm[8], sh[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const int64_t b = b0 + k;
      p[k] = _mm256_setzero_si256();
      dm[k] = 0;
      sh[k] = 0;
      if (b >= nb) continue;
      const uint8_t* blk = row + b * 34;
      uint16_t h;
      __builtin_memcpy(&h, blk, 2);
      const int e = (h >> 10) & 31;
      if (e == 31) return false;
      const int32_t m = e == 0 ? (h & 1023) : 1024 + (h & 1023);
      if (m == 0 || ea[b] == numerics::EXP_ZERO) continue;
      dm[k] = (h & 0x8000) ? -m : m;
      sh[k] = c_xmax + ea[b] + (e == 0 ? -24 : e - 25) - bound;
      const __m256i c0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
      const __m256i c1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18)));
      const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + b * 32));
      const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + b * 32 + 16));
      p[k] = _mm256_add_epi32(_mm256_madd_epi16(c0, a0), _mm256_madd_epi16(c1, a1));
    }
    const __m256i sums = reduce8(p);
    __m256i lo, hi;
    widen(sums, &lo, &hi);
    acc = _mm256_add_epi64(acc, round_shift_v(_mm256_mul_epi32(lo, load4(dm)), load4(sh)));
    acc = _mm256_add_epi64(acc, round_shift_v(_mm256_mul_epi32(hi, load4(dm + 4)), load4(sh + 4)));
  }
  alignas(32) int64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  *out += lanes[0] + lanes[1] + lanes[2] + lanes[3];
  return true;
}

// fp16 h as (mant, exp - bound); (0, 0) for zero. False when not finite.
inline bool fp16_parts(uint16_t h, int32_t bound, int64_t* mant, int64_t* off) {
  const int e = (h >> 10) & 31;
  const int32_t m = e == 0 ? (h & 1023) : 1024 + (h & 1023);
  *mant = (h & 0x8000) ? -m : m;
  *off = m == 0 ? 0 : static_cast<int64_t>(e == 0 ? -24 : e - 25) - bound;
  return e != 31;
}

// The rounded terms v_lo (blocks 0..3) and v_hi (4..7) at shifts base + ea[b] + off, added to acc.
inline __m256i add_terms8(__m256i acc, __m256i v_lo, __m256i v_hi, const int32_t* ea, int64_t base) {
  const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ea));
  __m256i e_lo, e_hi;
  widen(e, &e_lo, &e_hi);
  const __m256i b = _mm256_set1_epi64x(base);
  acc = _mm256_add_epi64(acc, round_shift_v(v_lo, _mm256_add_epi64(e_lo, b)));
  return _mm256_add_epi64(acc, round_shift_v(v_hi, _mm256_add_epi64(e_hi, b)));
}

// The eight block sums of a q4_K super-block sb (144 bytes) with its 256 activations ae (q_eo
// order); FIVE: a q5_K super-block (176 bytes: d, dmin, scales[12], qh[32], qs[128]), bit j of
// qh[l] the fifth bit (16) of element l of block j. Byte l of the 32 code bytes of blocks 2ch and
// 2ch + 1 holds element l of block 2ch (low nibble) and of block 2ch + 1 (high nibble), so
// 16-bit lane i holds, from bit 0: element 2i of block 2ch, 2i of 2ch + 1, 2i + 1 of 2ch, 2i + 1
// of 2ch + 1.
template <bool FIVE = false>
inline void q4k_products(const uint8_t* sb, const int16_t* ae, __m256i* p) {
  const __m256i low4 = _mm256_set1_epi16(15), bit4 = _mm256_set1_epi16(16);
  const uint8_t* qs = sb + (FIVE ? 48 : 16);
  __m256i qh = _mm256_setzero_si256();
  if (FIVE) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 16));
#pragma GCC unroll 4
  for (int ch = 0; ch < 4; ++ch) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * ch));
    __m256i e0 = _mm256_and_si256(w, low4), e1 = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
    __m256i o0 = _mm256_and_si256(_mm256_srli_epi16(w, 8), low4), o1 = _mm256_srli_epi16(w, 12);
    if (FIVE) {
      // Bit j of an even element's byte is bit j of the lane, of an odd element's bit 8 + j;
      // each moves to bit 4.
      const int j0 = 2 * ch, j1 = 2 * ch + 1;
      e0 = _mm256_or_si256(e0, _mm256_and_si256(shift16(qh, 4 - j0), bit4));
      e1 = _mm256_or_si256(e1, _mm256_and_si256(shift16(qh, 4 - j1), bit4));
      o0 = _mm256_or_si256(o0, _mm256_and_si256(_mm256_srli_epi16(qh, j0 + 4), bit4));
      o1 = _mm256_or_si256(o1, _mm256_and_si256(_mm256_srli_epi16(qh, j1 + 4), bit4));
    }
    p[2 * ch] = eo_products(e0, o0, ae + 64 * ch);
    p[2 * ch + 1] = eo_products(e1, o1, ae + 64 * ch + 32);
  }
}

// One q4_K row against one token: one 144-byte super-block (8 blocks) per group.
bool gemv_row_q4_k_int(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  const int16_t* a = x.q_eo + t * nb * 32;
  const int64_t c_xmax = c - x.max_exp[t];
  __m256i acc = _mm256_setzero_si256();
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    const uint8_t* sb = row + (b0 / 8) * 144;
    uint16_t hd, hm;
    __builtin_memcpy(&hd, sb, 2);
    __builtin_memcpy(&hm, sb + 2, 2);
    int64_t dm, doff, mm, moff;
    if (!fp16_parts(hd, bound, &dm, &doff) || !fp16_parts(hm, bound, &mm, &moff)) return false;
    __m256i p[8];
    q4k_products(sb, a + b0 * 32, p);
    alignas(32) int32_t sc[8], mn[8], a_sum[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const uint8_t* s = sb + 4;
      sc[k] = k < 4 ? s[k] & 63 : (s[k + 4] & 15) | (s[k - 4] >> 6) << 4;
      mn[k] = k < 4 ? s[k + 4] & 63 : (s[k + 4] >> 4) | (s[k] >> 6) << 4;
      const int32_t* hs = x.half_sum + (t * nb + b0 + k) * 2;
      a_sum[k] = hs[0] + hs[1];
    }
    const int32_t* ea = x.exp + t * nb + b0;
    __m256i v_lo, v_hi;
    widen(_mm256_mullo_epi32(reduce8(p), _mm256_load_si256(reinterpret_cast<const __m256i*>(sc))), &v_lo, &v_hi);
    const __m256i dmv = _mm256_set1_epi64x(dm);
    acc = add_terms8(acc, _mm256_mul_epi32(v_lo, dmv), _mm256_mul_epi32(v_hi, dmv), ea, c_xmax + doff);
    widen(_mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(a_sum)),
                             _mm256_load_si256(reinterpret_cast<const __m256i*>(mn))), &v_lo, &v_hi);
    const __m256i mmv = _mm256_set1_epi64x(-mm);
    acc = add_terms8(acc, _mm256_mul_epi32(v_lo, mmv), _mm256_mul_epi32(v_hi, mmv), ea, c_xmax + moff);
  }
  alignas(32) int64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  *out += lanes[0] + lanes[1] + lanes[2] + lanes[3];
  return true;
}

// The products of a decoded group's live blocks with their activations a (32 per block): each
// half-block's 16 in one vpmaddwd, p1 added into p0 unless PER16; zeros past live.
template <bool PER16>
inline void group_products(const gemv_group& g, const int16_t* a, int live, __m256i* p0, __m256i* p1) {
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    p0[k] = p1[k] = _mm256_setzero_si256();
    if (k >= live) continue;
    const int16_t* ak = a + k * 32;
    const __m256i c0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.code[k])));
    const __m256i c1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.code[k] + 16)));
    p0[k] = _mm256_madd_epi16(c0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ak)));
    p1[k] = _mm256_madd_epi16(c1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ak + 16)));
    if (!PER16) p0[k] = _mm256_add_epi32(p0[k], p1[k]);
  }
}

// One row of any type with a decoder in gemv_blocks.h against one token: eight blocks per group,
// each half-block's 16 products in one vpmaddwd (their sums kept apart when the halves' scales
// differ, PER16), the epilogue four int64 lanes at a time with 32 x 32 -> 64-bit products only
// (d_mant * scale and m_mant * mcoef fit 18 bits, half-block sums 25 bits).
template <class D>
struct gemv_row_blocks_int {
  static bool run(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
    const int16_t* a = x.q + t * nb * 32;
    const int64_t c_xmax = c - x.max_exp[t];
    __m256i acc = _mm256_setzero_si256();
    alignas(32) int8_t buf[256];
    gemv_group g;
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
      D::decode(row, b0, nb, buf, g);
      const int live = nb - b0 >= 8 ? 8 : static_cast<int>(nb - b0);
      __m256i p0[8], p1[8];
      group_products<D::PER16>(g, a + b0 * 32, live, p0, p1);
      alignas(32) int64_t f0[8], f1[8], g0[8], g1[8], doff[8], moff[8];
      alignas(32) int32_t a0[8], a1[8];
  #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        int64_t dm, mm;
        if constexpr (gemv_e8m0<D>) {  // mxfp4: mantissa 1, exponent e - 128; 253.. may overflow: the panel path decides
          if (g.hd[k] >= 253) return false;
          dm = g.hd[k] < 0 ? 0 : 1;
          doff[k] = g.hd[k] < 0 ? 0 : static_cast<int64_t>(g.hd[k]) - 128 - bound;
        } else if (!fp16_parts(static_cast<uint16_t>(g.hd[k]), bound, &dm, &doff[k])) {
          return false;
        }
        f0[k] = dm * g.s0[k];
        f1[k] = dm * g.s1[k];
        if (D::HAS_MIN) {
          if (!fp16_parts(static_cast<uint16_t>(g.hm[k]), bound, &mm, &moff[k])) return false;
          g0[k] = mm * g.m0[k];
          g1[k] = mm * g.m1[k];
          a0[k] = k < live ? x.half_sum[(t * nb + b0 + k) * 2] : 0;
          a1[k] = k < live ? x.half_sum[(t * nb + b0 + k) * 2 + 1] : 0;
        }
      }
      alignas(32) int32_t ea[8];
  #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) ea[k] = k < live ? x.exp[t * nb + b0 + k] : numerics::EXP_ZERO;
      __m256i s_lo, s_hi;
      widen(_mm256_load_si256(reinterpret_cast<const __m256i*>(ea)), &s_lo, &s_hi);
      s_lo = _mm256_add_epi64(s_lo, _mm256_set1_epi64x(c_xmax));
      s_hi = _mm256_add_epi64(s_hi, _mm256_set1_epi64x(c_xmax));
      __m256i v_lo, v_hi;
      widen(reduce8(p0), &v_lo, &v_hi);
      __m256i t_lo = _mm256_mul_epi32(v_lo, load4(f0)), t_hi = _mm256_mul_epi32(v_hi, load4(f0 + 4));
      if (D::PER16) {
        widen(reduce8(p1), &v_lo, &v_hi);
        t_lo = _mm256_add_epi64(t_lo, _mm256_mul_epi32(v_lo, load4(f1)));
        t_hi = _mm256_add_epi64(t_hi, _mm256_mul_epi32(v_hi, load4(f1 + 4)));
      }
      acc = _mm256_add_epi64(acc, round_shift_v(t_lo, _mm256_add_epi64(s_lo, load4(doff))));
      acc = _mm256_add_epi64(acc, round_shift_v(t_hi, _mm256_add_epi64(s_hi, load4(doff + 4))));
      if (D::HAS_MIN) {
        __m256i x_lo, x_hi;
        widen(_mm256_load_si256(reinterpret_cast<const __m256i*>(a0)), &x_lo, &x_hi);
        t_lo = _mm256_mul_epi32(x_lo, load4(g0));
        t_hi = _mm256_mul_epi32(x_hi, load4(g0 + 4));
        widen(_mm256_load_si256(reinterpret_cast<const __m256i*>(a1)), &x_lo, &x_hi);
        t_lo = _mm256_add_epi64(t_lo, _mm256_mul_epi32(x_lo, load4(g1)));
        t_hi = _mm256_add_epi64(t_hi, _mm256_mul_epi32(x_hi, load4(g1 + 4)));
        acc = _mm256_add_epi64(acc, round_shift_v(t_lo, _mm256_add_epi64(s_lo, load4(moff))));
        acc = _mm256_add_epi64(acc, round_shift_v(t_hi, _mm256_add_epi64(s_hi, load4(moff + 4))));
      }
    }
    alignas(32) int64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
    *out += lanes[0] + lanes[1] + lanes[2] + lanes[3];
    return true;
  }
};

// The activations' powers of two of blocks [b0, b0 + 8) of token t (zeros past the row's end),
// copied into tail (room for 8) at the end of a row.
inline const double* scales8(const double* s, int64_t b0, int64_t nb, double* tail) {
  if (nb - b0 >= 8) return s + b0;
  for (int k = 0; k < 8; ++k) tail[k] = b0 + k < nb ? s[b0 + k] : 0.0;
  return tail;
}

// The eight 6-bit scales and mins of a q4_K super-block (its 12 scale bytes s, read as 16: the
// super-block goes on) as int32 lanes. Bytes 0..3 hold scales 0..3 (low 6 bits), 4..7 mins 0..3,
// 8..11 the low nibbles of scales 4..7 (low) and mins 4..7 (high), whose top two bits are the top
// bits of bytes 0..3 (scales) and 4..7 (mins). One shuffle lines the low parts up as scales 0..7
// then mins 0..7, another the bytes with the top bits; shifts and masks within bytes finish it.
inline void q4k_scales8(const uint8_t* s, __m256i* sc, __m256i* mn) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i lo = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  // Mins 4..7 take the high nibbles of bytes 8..11 (dword 3 shifted); 16-bit shifts carry bits
  // across bytes, which the masks drop.
  const __m128i low = _mm_and_si128(_mm_blend_epi32(lo, _mm_srli_epi16(lo, 4), 8), _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(top, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  const __m128i all = _mm_or_si128(low, high);
  *sc = _mm256_cvtepu8_epi32(all);
  *mn = _mm256_cvtepu8_epi32(_mm_srli_si128(all, 8));
}

// Eight fp16 fields (low 16 bits of each int32 lane of h) times 2^-bound as doubles, exact (an
// fp16 value times a power of two: wblock's mant * 2^(exp - bound)); false when one is not finite.
inline bool fp16x8_scaled(__m128i h16, __m256d rb, __m256d* lo, __m256d* hi) {
  const __m128i e = _mm_and_si128(h16, _mm_set1_epi16(0x7c00));
  if (!_mm_testz_si128(_mm_cmpeq_epi16(e, _mm_set1_epi16(0x7c00)), _mm_set1_epi16(-1))) return false;
  const __m256 f = _mm256_cvtph_ps(h16);
  *lo = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(f)), rb);
  *hi = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)), rb);
  return true;
}

// q8_0 (34-byte blocks: fp16 d, 32 int8 codes; Q40 false) and q4_0 rows (18-byte blocks: fp16 d,
// 16 bytes of nibbles, element l < 16 the low nibble of byte l, the others the high nibble of byte
// l - 16; codes u - 8, so each block sum is the nibbles' products less 8 times the activation block
// sum, an int32) against one token: gemv_row_q8_0_int / the q4_0 block decoder's row with the
// epilogue through double, x = T * d * 2^-bound * 2^(C + e_a - max), eight blocks to an epilogue,
// two such groups per iteration (GROUPS).
template <bool Q40>
bool gemv_row_d16(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  constexpr int64_t BLOCK = Q40 ? 18 : 34;
  const int16_t* a = x.q_eo + t * nb * 32;
  const double* sa = x.scale + t * nb;
  const int32_t* hs = x.half_sum + t * nb * 2;
  const __m256d rb = _mm256_set1_pd(bound == numerics::EXP_ZERO ? 0.0 : pow2(-static_cast<int64_t>(bound)));
  // q4_0: 16-bit lane i (of 8) of a block's bytes holds, from bit 0, elements 2i, 2i + 16, 2i + 1,
  // 2i + 17; the bytes in both 128-bit halves, each 32-bit lane shifted by its own count.
  const __m256i even_shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), odd_shift = _mm256_setr_epi32(8, 8, 8, 8, 12, 12, 12, 12);
  const __m256i low4 = _mm256_set1_epi32(0x000f000f);
  dround r;
  r.init();
  int64_t n = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += 8 * GROUPS) {
    const int live = nb - b0 > 8 ? GROUPS : 1;  // groups of eight blocks this iteration
    row_prefetch<8 * GROUPS * BLOCK>(row + b0 * BLOCK);
    __m256i sums[GROUPS];
    __m128i h16[GROUPS];
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      __m256i p[8];
      // The blocks' fp16 d, four to a 64-bit word, assembled in general registers (one insert
      // per block would cost two vector uops each). Blocks with a zero activation block are
      // multiplied like the others: their terms are zeros times 0.0.
      uint64_t hw[2] = {0, 0};
      const int64_t nk = nb - b0 - 8 * g;  // blocks left in the row
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const int64_t b = b0 + 8 * g + k;
        p[k] = _mm256_setzero_si256();
        if (k >= nk) continue;
        const uint8_t* blk = row + b * BLOCK;
        uint16_t h;
        __builtin_memcpy(&h, blk, 2);
        hw[k / 4] |= static_cast<uint64_t>(h) << (16 * (k % 4));
        __m256i even, odd;
        if (Q40) {
          const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
          even = _mm256_and_si256(_mm256_srlv_epi32(bytes, even_shift), low4);
          odd = _mm256_and_si256(_mm256_srlv_epi32(bytes, odd_shift), low4);
        } else {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
          even = even_s8(w);
          odd = odd_s8(w);
        }
        p[k] = eo_products(even, odd, a + b * 32);
      }
      h16[g] = _mm_set_epi64x(static_cast<int64_t>(hw[1]), static_cast<int64_t>(hw[0]));
      sums[g] = reduce8(p);
    }
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      const int64_t bg = b0 + 8 * g;
      __m256d d_lo, d_hi;
      if (!fp16x8_scaled(h16[g], rb, &d_lo, &d_hi)) return false;
      __m256i v = sums[g];
      if (Q40) {
        // Block sums of the activations: pairs of half sums added, back in block order.
        alignas(32) int32_t tail_hs[16];
        const int32_t* h8 = hs + bg * 2;
        if (nb - bg < 8) {
          for (int i = 0; i < 16; ++i) tail_hs[i] = bg * 2 + i < nb * 2 ? h8[i] : 0;
          h8 = tail_hs;
        }
        const __m256i asum = _mm256_permute4x64_epi64(
            _mm256_hadd_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h8)), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h8 + 8))),
            0xd8);
        v = _mm256_sub_epi32(v, _mm256_slli_epi32(asum, 3));
      }
      alignas(32) double tail[8];
      const double* s8 = scales8(sa, bg, nb, tail);
      r.fma(0, _mm256_mul_pd(lo_pd(v), d_lo), _mm256_loadu_pd(s8));
      r.fma(1, _mm256_mul_pd(hi_pd(v), d_hi), _mm256_loadu_pd(s8 + 4));
      ++n;
    }
  }
  // q4_0 cannot reach this by the bounds (a term is below 8 * 32 * 32767 * 2047 * 2^17 < 2^51); the
  // kernel stands on its own rather than on that arithmetic.
  if (!r.ok()) return Q40 ? gemv_row_blocks_int<q4_0_blocks>::run(row, nb, x, t, bound, c, out) : gemv_row_q8_0_int(row, nb, x, t, bound, c, out);
  *out += r.total(2, n);
  return true;
}

// One q6_K row (210-byte super-blocks: ql[128], qh[64], 16 int8 scales, fp16 d) against one token,
// fused: codes q - 32 from the low nibbles and two high bits, each half-block's 16 products in one
// vpmaddwd, the sixteen scales as two vectors (even and odd half-blocks), the epilogue through
// double: (T0 * s0 + T1 * s1) * d * 2^-bound * 2^(C + e_a - max). Each T * s is an int32 product:
// |T| <= 16 * 32 * 32767 < 2^24 and |s| <= 128, so |T * s| < 2^31; the two become doubles and their
// sum (below 2^32) and its product with d (11 significant bits) are exact. Two super-blocks per
// iteration (GROUPS).
bool gemv_row_q6_k(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  const int16_t* a = x.q_eo + t * nb * 32;
  const double* sa = x.scale + t * nb;
  const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  dround r;
  r.init();
  int64_t n = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += 8 * GROUPS) {
    const int live = nb - b0 > 8 ? GROUPS : 1;
    row_prefetch<GROUPS * 210>(row + (b0 / 8) * 210);
    __m256i v0[GROUPS], v1[GROUPS];  // half-block sums: first halves, second halves
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      const uint8_t* sb = row + (b0 / 8 + g) * 210;
      __m256i p[8];  // lanes 0..3: first half-block, 4..7: second
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const __m256i code = q6k_codes(sb, s);
        p[s] = eo_products(even_s8(code), odd_s8(code), a + (b0 + 8 * g + s) * 32);
      }
      reduce8_halves(p, &v0[g], &v1[g]);
    }
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      const uint8_t* sb = row + (b0 / 8 + g) * 210;
      const int64_t bg = b0 + 8 * g;
      uint16_t hd;
      __builtin_memcpy(&hd, sb + 208, 2);
      if (((hd >> 10) & 31) == 31) return false;
      const __m128i sc = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 192)), even_odd);
      const __m256i s0 = _mm256_cvtepi8_epi32(sc), s1 = _mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8));
      const __m256d d = _mm256_set1_pd(fp16_scaled(hd, bound));
      const __m256i w0 = _mm256_mullo_epi32(v0[g], s0), w1 = _mm256_mullo_epi32(v1[g], s1);
      const __m256d t_lo = _mm256_mul_pd(_mm256_add_pd(lo_pd(w0), lo_pd(w1)), d);
      const __m256d t_hi = _mm256_mul_pd(_mm256_add_pd(hi_pd(w0), hi_pd(w1)), d);
      r.fma(0, t_lo, _mm256_loadu_pd(sa + bg));
      r.fma(1, t_hi, _mm256_loadu_pd(sa + bg + 4));
      ++n;
    }
  }
  if (!r.ok()) return gemv_row_blocks_int<q6_k_blocks>::run(row, nb, x, t, bound, c, out);
  *out += r.total(2, n);
  return true;
}

// One q4_K row (FIVE: q5_K) against one token, the fused gemv_row_q4_k_int with the epilogue
// through double: T * scale * d * 2^-bound * 2^(C + e_a - max) and min * A * (-dmin) * 2^-bound *
// 2^(C + e_a - max) (A * 2^(...) is act_pack::sum_scaled); q5_K's integer fallback is the block
// decoder's. Two super-blocks per iteration, both products before either epilogue (GROUPS). The
// four term vectors go to one sum (the row's total adds every lane anyway): with four sums live
// the loop spilled them to the stack (Zen 3: 38.8 -> 36.2 cycles per super-block in L2).
template <bool FIVE>
bool gemv_row_qk(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  constexpr int64_t SB = FIVE ? 176 : 144;
  const int16_t* a = x.q_eo + t * nb * 32;
  const double* sa = x.scale + t * nb;
  const double* ss = x.sum_scaled + t * nb;
  const double pb = bound == numerics::EXP_ZERO ? 0.0 : pow2(-static_cast<int64_t>(bound));
  const __m128d rb = _mm_setr_pd(pb, -pb);
  dround r;
  r.init();
  int64_t n = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += 8 * GROUPS) {
    const int live = nb - b0 > 8 ? GROUPS : 1;  // super-blocks this iteration
    row_prefetch<GROUPS * SB>(row + (b0 / 8) * SB);
    __m256i v[GROUPS];
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      __m256i p[8];
      q4k_products<FIVE>(row + (b0 / 8 + g) * SB, a + (b0 + 8 * g) * 32, p);
      v[g] = reduce8(p);
    }
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      const uint8_t* sb = row + (b0 / 8 + g) * SB;
      const int64_t bg = b0 + 8 * g;
      uint32_t hdm;  // d, dmin
      __builtin_memcpy(&hdm, sb, 4);
      if ((hdm & 0x7c00u) == 0x7c00u || (hdm & 0x7c000000u) == 0x7c000000u) return false;
      __m256i scv, mv;
      q4k_scales8(sb + 4, &scv, &mv);
      // d * 2^-bound and -dmin * 2^-bound, exact: an fp16 value widens exactly (F16C), times a power of two.
      const __m256d dm = _mm256_castpd128_pd256(_mm_mul_pd(_mm_cvtps_pd(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(hdm)))), rb));
      const __m256d d = _mm256_permute4x64_pd(dm, 0x00), m = _mm256_permute4x64_pd(dm, 0x55);
      const __m256i sv = _mm256_mullo_epi32(v[g], scv);
      r.fma(0, _mm256_mul_pd(lo_pd(sv), d), _mm256_loadu_pd(sa + bg));
      r.fma(0, _mm256_mul_pd(hi_pd(sv), d), _mm256_loadu_pd(sa + bg + 4));
      r.fma(0, _mm256_mul_pd(lo_pd(mv), m), _mm256_loadu_pd(ss + bg));
      r.fma(0, _mm256_mul_pd(hi_pd(mv), m), _mm256_loadu_pd(ss + bg + 4));
      ++n;
    }
  }
  if (!r.ok()) return FIVE ? gemv_row_blocks_int<q5_k_blocks>::run(row, nb, x, t, bound, c, out) : gemv_row_q4_k_int(row, nb, x, t, bound, c, out);
  *out += r.total(1, 4 * n);
  return true;
}

// gemv_row_blocks_int with the epilogue through double: the block's scale (and offset scale)
// times 2^-bound as one double per block, times the sub-block scales (or min coefficients), times
// the activation's power of two. PER16: both halves' products are integers times the same power of
// two, their sum below 2^44, so the fused sum is exact.
template <class D>
struct gemv_row_blocks {
  static bool run(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
    const int16_t* a = x.q + t * nb * 32;
    const double* sa = x.scale + t * nb;
    const double* hsc = x.half_scaled + t * nb * 2;
    dround r;
    r.init();
    int64_t n = 0;
    alignas(32) int8_t buf[256];
    gemv_group g;
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
      row_prefetch<D::GROUP_BYTES>(row + (b0 / 8) * D::GROUP_BYTES);
      D::decode(row, b0, nb, buf, g);
      const int live = nb - b0 >= 8 ? 8 : static_cast<int>(nb - b0);
      __m256i p0[8], p1[8];
      group_products<D::PER16>(g, a + b0 * 32, live, p0, p1);
      // Per block: f0, f1 = d * 2^-bound * scale (halves), g0, g1 = m * 2^-bound * mcoef (halves),
      // each an integer below 2^18 times a power of two; the activation's side comes after.
      double f0[8], f1[8], g0[8] = {}, g1[8] = {}, h0[8] = {}, h1[8] = {}, s8[8];
  #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        double dv;
        if constexpr (gemv_e8m0<D>) {  // mxfp4: mantissa 1, exponent e - 128; 253.. may overflow: the panel path decides
          if (g.hd[k] >= 253) return false;
          dv = g.hd[k] < 0 ? 0.0 : pow2(static_cast<int64_t>(g.hd[k]) - 128 - bound);
        } else {
          if (((g.hd[k] >> 10) & 31) == 31) return false;
          dv = fp16_scaled(static_cast<uint16_t>(g.hd[k]), bound);
        }
        f0[k] = dv * g.s0[k];
        f1[k] = dv * g.s1[k];
        s8[k] = k < live ? sa[b0 + k] : 0.0;
        if (D::HAS_MIN) {
          if (((g.hm[k] >> 10) & 31) == 31) return false;
          const double mv = fp16_scaled(static_cast<uint16_t>(g.hm[k]), bound);
          g0[k] = mv * g.m0[k];
          g1[k] = mv * g.m1[k];
          h0[k] = k < live ? hsc[(b0 + k) * 2] : 0.0;
          h1[k] = k < live ? hsc[(b0 + k) * 2 + 1] : 0.0;
        }
      }
      // The per-block doubles go into vectors from registers: loaded from the arrays just written
      // element by element, each vector would wait for its four stores (no store forwarding).
      const __m256i v0 = reduce8(p0);
      __m256d t_lo = _mm256_mul_pd(lo_pd(v0), v4(f0)), t_hi = _mm256_mul_pd(hi_pd(v0), v4(f0 + 4));
      if (D::PER16) {
        const __m256i v1 = reduce8(p1);
        t_lo = _mm256_fmadd_pd(lo_pd(v1), v4(f1), t_lo);
        t_hi = _mm256_fmadd_pd(hi_pd(v1), v4(f1 + 4), t_hi);
      }
      r.fma(0, t_lo, v4(s8));
      r.fma(1, t_hi, v4(s8 + 4));
      if (D::HAS_MIN) {
        r.add(2, _mm256_fmadd_pd(v4(g1), v4(h1), _mm256_mul_pd(v4(g0), v4(h0))));
        r.add(3, _mm256_fmadd_pd(v4(g1 + 4), v4(h1 + 4), _mm256_mul_pd(v4(g0 + 4), v4(h0 + 4))));
      }
      ++n;
    }
    if (!r.ok()) return gemv_row_blocks_int<D>::run(row, nb, x, t, bound, c, out);
    *out += r.total(D::HAS_MIN ? 4 : 2, n);
    return true;
  }
};

}  // namespace

// quantize_block_scalar over eight lanes (matmul_cpu.cpp): the same integers. |x| as bits gives
// the exponent e and the 24-bit m; the shift n = emax - e + 9 is at least 9 and, clamped to 32
// (where m >> n and the rounded value are 0, as the scalar form's 40 gives), fits the 32-bit
// variable shifts: m + 2^(n - 1) - 1 + odd < 2^24 + 2^31.
int32_t quantize_block_avx2(const float* x, int16_t* q) {
  __m256i bits[4], a[4];
  __m256i bad = _mm256_setzero_si256(), amax = _mm256_setzero_si256();
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    bits[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 8 * v));
    a[v] = _mm256_and_si256(bits[v], abs_mask);
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(a[v], _mm256_set1_epi32(0x7f7fffff)));
    // Subnormals count as zero for the block's exponent (the contract flushes them).
    amax = _mm256_max_epu32(amax, _mm256_and_si256(a[v], _mm256_cmpgt_epi32(a[v], _mm256_set1_epi32(0x007fffff))));
  }
  if (!_mm256_testz_si256(bad, bad)) return numerics::quantize_block(x, numerics::QBLOCK, q);  // reports the value
  __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(amax), _mm256_extracti128_si256(amax, 1));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4e));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xb1));
  const uint32_t top = static_cast<uint32_t>(_mm_cvtsi128_si32(m4));
  if (top == 0) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_setzero_si256());
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16), _mm256_setzero_si256());
    return numerics::EXP_ZERO;
  }
  const int32_t emax = static_cast<int32_t>(top >> 23);
  const __m256i one = _mm256_set1_epi32(1);
  __m256i out[4];
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    const __m256i e = _mm256_srli_epi32(a[v], 23);
    const __m256i n = _mm256_min_epi32(_mm256_sub_epi32(_mm256_set1_epi32(emax + 9), e), _mm256_set1_epi32(32));
    const __m256i m = _mm256_andnot_si256(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()),
                                          _mm256_or_si256(_mm256_and_si256(a[v], _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00800000)));
    const __m256i half_m1 = _mm256_sub_epi32(_mm256_sllv_epi32(one, _mm256_sub_epi32(n, one)), one);
    const __m256i odd = _mm256_and_si256(_mm256_srlv_epi32(m, n), one);
    __m256i r = _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(m, half_m1), odd), n);
    r = _mm256_min_epu32(r, _mm256_set1_epi32(numerics::QMAX));
    const __m256i neg = _mm256_srai_epi32(bits[v], 31);
    out[v] = _mm256_sub_epi32(_mm256_xor_si256(r, neg), neg);
  }
  // packs interleaves 128-bit halves: (0 lo, 1 lo, 0 hi, 1 hi), put back in order.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permute4x64_epi64(_mm256_packs_epi32(out[0], out[1]), 0xd8));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 16), _mm256_permute4x64_epi64(_mm256_packs_epi32(out[2], out[3]), 0xd8));
  return emax - 127 - 14;
}

bool gemv_avx2(gguf::dtype t, const act_view& x, int64_t n_tokens, const uint8_t* w,
               uint64_t row_bytes, const int32_t* row_bounds, int64_t r0, int64_t r1, int64_t* acc) {
  if (x.q_eo == nullptr) return false;
  gemv_row_fn fn = gemv_blocks_row<gemv_row_blocks>(t);
  if (t == gguf::DTYPE_Q8_0) fn = gemv_row_d16<false>;
  if (t == gguf::DTYPE_Q4_0) fn = gemv_row_d16<true>;
  if (t == gguf::DTYPE_Q4_K) fn = gemv_row_qk<false>;
  if (t == gguf::DTYPE_Q5_K) fn = gemv_row_qk<true>;
  if (t == gguf::DTYPE_Q6_K) fn = gemv_row_q6_k;
  return fn != nullptr && gemv_rows(fn, x, n_tokens, w, row_bytes, row_bounds, r0, r1, acc);
}


}  // namespace detaudit::kernels::cpu

#else

namespace detaudit::kernels::cpu {
bool gemv_avx2(gguf::dtype, const act_view&, int64_t, const uint8_t*, uint64_t, const int32_t*, int64_t, int64_t, int64_t*) {
  return false;
}
int32_t quantize_block_avx2(const float* x, int16_t* q) { return quantize_block_scalar(x, q); }
}  // namespace detaudit::kernels::cpu

#endif
