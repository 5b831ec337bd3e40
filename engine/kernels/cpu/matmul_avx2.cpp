// The AVX2 variant of the exact matmul kernel (matmul_internal.h): vpmaddwd of a broadcast
// activation pair with 8 rows' code pairs per vector (two vectors per panel), int32 sums per
// block (per half-block in wide panels), then the int64 epilogue four lanes at a time. AVX2 has no
// 64-bit arithmetic right shift; it is built from the logical one on the one's complement.
//
// Everything below the pragma is static or a plain extern function (no std:: templates).
// GCC 12's AVX-512 intrinsics read a self-initialised undefined vector (_mm512_undefined_*), which
// -Wuninitialized reports at every use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "gguf/dtype.h"
#include "kernels/cpu/matmul_internal.h"
#include "numerics/exact.h"

#if defined(__x86_64__)
#pragma GCC target("avx2")
#include "kernels/cpu/gemv_blocks.h"

namespace detaudit::kernels::cpu {

namespace {

inline __m256i sra64(__m256i v, __m256i n) {
  const __m256i sign = _mm256_cmpgt_epi64(_mm256_setzero_si256(), v);
  return _mm256_xor_si256(_mm256_srlv_epi64(_mm256_xor_si256(v, sign), n), sign);
}

inline __m256i round_shift_v(__m256i v, __m256i s) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i neg = _mm256_cmpgt_epi64(zero, s);
  const __m256i left = _mm256_sllv_epi64(v, _mm256_andnot_si256(neg, s));
  if (_mm256_testz_si256(neg, neg)) return left;
  const __m256i one = _mm256_set1_epi64x(1);
  __m256i n = _mm256_sub_epi64(zero, s);
  n = _mm256_blendv_epi8(n, _mm256_set1_epi64x(63), _mm256_cmpgt_epi64(n, _mm256_set1_epi64x(63)));
  const __m256i half_m1 = _mm256_sub_epi64(_mm256_sllv_epi64(one, _mm256_sub_epi64(n, one)), one);
  const __m256i odd = _mm256_and_si256(sra64(v, n), one);
  const __m256i right = sra64(_mm256_add_epi64(_mm256_add_epi64(v, half_m1), odd), n);
  return _mm256_blendv_epi8(left, right, neg);
}

inline __m256i load4(const int64_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Widens 8 int32 lanes to two vectors of 4 int64.
inline void widen(__m256i v, __m256i* lo, __m256i* hi) {
  *lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v));
  *hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1));
}

// The block's products for 16 rows: sums[0..1] (rows 0-7, 8-15) over pairs 0..7 (all pairs in
// narrow panels), sums[2..3] over pairs 8..15 (wide panels only).
template <bool WIDE>
inline void block_products(const int32_t* cb, const int16_t* a, __m256i* sums) {
  #pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) sums[i] = _mm256_setzero_si256();
  #pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    int32_t pair;
    __builtin_memcpy(&pair, a + 2 * j, 4);
    const __m256i aj = _mm256_set1_epi32(pair);
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(cb + j * PANEL_ROWS));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(cb + j * PANEL_ROWS + 8));
    const int h = (WIDE && j >= 8) ? 2 : 0;
    sums[h] = _mm256_add_epi32(sums[h], _mm256_madd_epi16(aj, w0));
    sums[h + 1] = _mm256_add_epi32(sums[h + 1], _mm256_madd_epi16(aj, w1));
  }
}

template <bool WIDE, bool MIN>
void kernel_token(const panel& p, const act_view& x, int64_t t, int64_t* out) {
  const int64_t nb = p.n_blocks;
  const int64_t c = matmul_shift_const(nb);
  __m256i acc[4];
  #pragma GCC unroll 16
  for (int q = 0; q < 4; ++q) acc[q] = load4(out + 4 * q);
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t ea = x.exp[t * nb + b];
    if (ea == numerics::EXP_ZERO) continue;
    __m256i sums[4];
    block_products<WIDE>(p.codes + b * 16 * PANEL_ROWS, x.q + (t * nb + b) * numerics::QBLOCK, sums);
    __m256i v[4];
    widen(sums[0], &v[0], &v[1]);
    widen(sums[1], &v[2], &v[3]);
    const int64_t o = b * PANEL_ROWS;
    const __m256i s = _mm256_set1_epi64x(c + ea - x.max_exp[t]);
    __m256i u[4];
    if (WIDE) {
      widen(sums[2], &u[0], &u[1]);
      widen(sums[3], &u[2], &u[3]);
    }
    #pragma GCC unroll 16
    for (int q = 0; q < 4; ++q) {
      const __m256i dm = load4(p.dm + o + 4 * q);
      __m256i t1 = _mm256_mul_epi32(v[q], dm);
      if (WIDE) t1 = _mm256_add_epi64(t1, _mm256_mul_epi32(u[q], dm));
      acc[q] = _mm256_add_epi64(acc[q], round_shift_v(t1, _mm256_add_epi64(load4(p.dsh + o + 4 * q), s)));
    }
    if (MIN) {
      const int32_t* hs = x.half_sum + (t * nb + b) * 2;
      const __m256i h0 = _mm256_set1_epi64x(hs[0]), h1 = _mm256_set1_epi64x(hs[1]);
      #pragma GCC unroll 16
      for (int q = 0; q < 4; ++q) {
        const __m256i t2 = _mm256_add_epi64(_mm256_mul_epi32(load4(p.mm0 + o + 4 * q), h0),
                                            _mm256_mul_epi32(load4(p.mm1 + o + 4 * q), h1));
        acc[q] = _mm256_add_epi64(acc[q], round_shift_v(t2, _mm256_add_epi64(load4(p.msh + o + 4 * q), s)));
      }
    }
  }
  #pragma GCC unroll 16
  for (int q = 0; q < 4; ++q) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * q), acc[q]);
}

template <bool WIDE, bool MIN>
void kernel_all(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc) {
  for (int64_t t = t0; t < t1; ++t) kernel_token<WIDE, MIN>(p, x, t, acc + (t - t0) * PANEL_ROWS);
}

// ---- the few-token path: q8_0 and q4_K hand-fused, every other integer type through gemv_blocks.h ----

// Sums of the 8 int32 lanes of each of p[0..7], as 8 lanes in order.
inline __m256i reduce8(const __m256i* p) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  // a: 128-bit lane L holds the lane-L halves' sums of p0..p3; b likewise for p4..p7.
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// One q8_0 row against one token, 8 blocks per epilogue; false for a non-finite scale.
bool gemv_row_q8_0(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
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

// One q4_K row against one token: one 144-byte super-block (8 blocks) per group.
bool gemv_row_q4_k(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  const int16_t* a = x.q + t * nb * 32;
  const int64_t c_xmax = c - x.max_exp[t];
  const __m128i low4 = _mm_set1_epi8(15);
  __m256i acc = _mm256_setzero_si256();
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    const uint8_t* sb = row + (b0 / 8) * 144;
    uint16_t hd, hm;
    __builtin_memcpy(&hd, sb, 2);
    __builtin_memcpy(&hm, sb + 2, 2);
    int64_t dm, doff, mm, moff;
    if (!fp16_parts(hd, bound, &dm, &doff) || !fp16_parts(hm, bound, &mm, &moff)) return false;
    __m256i p[8];
#pragma GCC unroll 4
    for (int ch = 0; ch < 4; ++ch) {
      const int16_t* a0 = a + (b0 + 2 * ch) * 32;
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 16 + 32 * ch + 16 * half));
        const __m256i lo = _mm256_cvtepu8_epi16(_mm_and_si128(bytes, low4));
        const __m256i hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
        const __m256i plo = _mm256_madd_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a0 + 16 * half)));
        const __m256i phi = _mm256_madd_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a0 + 32 + 16 * half)));
        p[2 * ch] = half ? _mm256_add_epi32(p[2 * ch], plo) : plo;
        p[2 * ch + 1] = half ? _mm256_add_epi32(p[2 * ch + 1], phi) : phi;
      }
    }
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

// One row of any type with a decoder in gemv_blocks.h against one token: eight blocks per group,
// each half-block's 16 products in one vpmaddwd (their sums kept apart when the halves' scales
// differ, PER16), the epilogue four int64 lanes at a time with 32 x 32 -> 64-bit products only
// (d_mant * scale and m_mant * mcoef fit 18 bits, half-block sums 25 bits).
template <class D>
struct gemv_row_blocks {
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
  #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        p0[k] = p1[k] = _mm256_setzero_si256();
        if (k >= live) continue;
        const int16_t* ak = a + (b0 + k) * 32;
        const __m256i c0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.code[k])));
        const __m256i c1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.code[k] + 16)));
        p0[k] = _mm256_madd_epi16(c0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ak)));
        p1[k] = _mm256_madd_epi16(c1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ak + 16)));
        if (!D::PER16) p0[k] = _mm256_add_epi32(p0[k], p1[k]);
      }
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

}  // namespace

void panel_kernel_avx2(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc) {
  if (p.wide) {
    if (p.has_min) kernel_all<true, true>(p, x, t0, t1, acc);
    else kernel_all<true, false>(p, x, t0, t1, acc);
  } else {
    if (p.has_min) kernel_all<false, true>(p, x, t0, t1, acc);
    else kernel_all<false, false>(p, x, t0, t1, acc);
  }
}

bool gemv_avx2(gguf::dtype t, const act_view& x, int64_t n_tokens, const uint8_t* w,
               uint64_t row_bytes, const int32_t* row_bounds, int64_t r0, int64_t r1, int64_t* acc) {
  gemv_row_fn fn = gemv_blocks_row<gemv_row_blocks>(t);
  if (t == gguf::DTYPE_Q8_0) fn = gemv_row_q8_0;
  if (t == gguf::DTYPE_Q4_K) fn = gemv_row_q4_k;
  return fn != nullptr && gemv_rows(fn, x, n_tokens, w, row_bytes, row_bounds, r0, r1, acc);
}

}  // namespace detaudit::kernels::cpu

#else

namespace detaudit::kernels::cpu {
void panel_kernel_avx2(const panel&, const act_view&, int64_t, int64_t, int64_t*) {}
bool gemv_avx2(gguf::dtype, const act_view&, int64_t, const uint8_t*, uint64_t, const int32_t*, int64_t, int64_t, int64_t*) {
  return false;
}
}  // namespace detaudit::kernels::cpu

#endif
