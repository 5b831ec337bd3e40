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

#include "kernels/cpu/matmul_internal.h"
#include "numerics/exact.h"

#if defined(__x86_64__)
#pragma GCC target("avx2")

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

}  // namespace detaudit::kernels::cpu

#else

namespace detaudit::kernels::cpu {
void panel_kernel_avx2(const panel&, const act_view&, int64_t, int64_t, int64_t*) {}
}  // namespace detaudit::kernels::cpu

#endif
