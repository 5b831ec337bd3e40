// Helpers the AVX2 matmul kernels share: the int64 shifts AVX2 lacks, rounding through double
// (dround), fp16 scales as doubles, lane widening. Included by matmul_avx2.cpp (prompt panels),
// matmul_avx2_gemv.cpp (the few-token rows) and matmul_avx2_packed.cpp (the packed generation
// tiles), each after its `#pragma GCC target("avx2,fma,f16c")`: everything here is inline in an
// anonymous namespace, so no AVX2 code leaks into another translation unit.
#pragma once

#include <immintrin.h>

#include <cstdint>

#if defined(__x86_64__)

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

// ---- rounding through double ----
// AVX2 has no double -> int64 conversion. Doubles in [2, 4) are the multiples of 2^-51, so for a
// term x, M + x * 2^-51 with M = 3 + 2^-50 (itself a multiple of 2^-51, an even one) rounds x to
// an integer, half to even (the default rounding mode, which the engine never changes), and while
// the result lies in [2, 4) its bit pattern less M's is that integer. Every block term is an exact
// double (matmul_internal.h: an integer below 2^44 times powers of two) and the act_pack's powers
// of two carry the 2^-51 (act_pack::scale), so the term's last product and the rounding are one
// fused multiply-add: round_shift of the contract where the integer form takes some twenty
// instructions. The kernels add the bit patterns into int64 lanes, take M off once per lane at the
// end (wrapping sums, exact modulo 2^64), and OR the patterns together: a term of about 2^51 or
// more (a left shift of a large product, short rows only) leaves [2, 4), which changes the sign
// or exponent bits of the OR, and the sum is then redone on the integer path. No term can give
// exactly 0 (whose pattern would hide in the OR): M has 52 significant bits, a term at most 45.
// ROUND_MAGIC and ROUND_MAGIC_BITS (M and its pattern) are in matmul_internal.h, whose act_pack
// code derives the per-block constants of the bounded pass (matmul_avx2.cpp) from M.
constexpr uint64_t ROUND_TOP = 0xfff0000000000000ull;  // sign and exponent
constexpr uint64_t ROUND_TOP_OK = 0x4000000000000000ull;  // positive, in [2, 4)

// True when every pattern ORed into any kept the sign and exponent of [2, 4).
inline bool round_ok(__m256i any) {
  const __m256i top = _mm256_and_si256(any, _mm256_set1_epi64x(static_cast<int64_t>(ROUND_TOP)));
  return _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(top, _mm256_set1_epi64x(static_cast<int64_t>(ROUND_TOP_OK))))) == 15;
}

struct dround {
  __m256i acc[4];  // bit patterns, one vector per four lanes
  __m256i any;     // every pattern ORed
  void init() {
    #pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) acc[q] = _mm256_setzero_si256();
    any = _mm256_set1_epi64x(static_cast<int64_t>(ROUND_MAGIC_BITS));
  }
  void put(int q, __m256d r) {
    const __m256i b = _mm256_castpd_si256(r);
    acc[q] = _mm256_add_epi64(acc[q], b);
    any = _mm256_or_si256(any, b);
  }
  // A term x * 2^-51 that is exact as it stands (a sum of exact products).
  void add(int q, __m256d x) { put(q, _mm256_add_pd(x, _mm256_set1_pd(ROUND_MAGIC))); }
  // The term y * s, s an act_pack power of two (2^-51 included), y * s exact: one rounding.
  void fma(int q, __m256d y, __m256d s) { put(q, _mm256_fmadd_pd(y, s, _mm256_set1_pd(ROUND_MAGIC))); }
  bool ok() const { return round_ok(any); }
  // Lanes of vector q after n additions each.
  __m256i value(int q, int64_t n) const {
    return _mm256_sub_epi64(acc[q], _mm256_set1_epi64x(static_cast<int64_t>(static_cast<uint64_t>(n) * ROUND_MAGIC_BITS)));
  }
  // The sum of every lane of vectors 0 .. nv - 1 after n additions each.
  int64_t total(int nv, int64_t n) const {
    alignas(32) int64_t lanes[16];
    for (int q = 0; q < nv; ++q) _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 4 * q), value(q, n));
    int64_t sum = 0;
    for (int i = 0; i < 4 * nv; ++i) sum += lanes[i];
    return sum;
  }
};

// 2^e as a double for -1022 <= e <= 1023.
inline double pow2(int64_t e) {
  const uint64_t bits = static_cast<uint64_t>(e + 1023) << 52;
  double d;
  __builtin_memcpy(&d, &bits, 8);
  return d;
}

// The value of a finite fp16 field times 2^-bound (bound: the row's exponent bound, wblock's
// exponent of the largest scale), exact: mant * 2^(exp - bound) with wblock's mant and exp.
inline double fp16_scaled(uint16_t h, int32_t bound) {
  const int e = (h >> 10) & 31;
  const int32_t m = e == 0 ? (h & 1023) : 1024 + (h & 1023);
  if (m == 0) return 0.0;
  const double v = static_cast<double>((h & 0x8000) ? -m : m);
  return v * pow2(static_cast<int64_t>(e == 0 ? -24 : e - 25) - bound);
}

// Four doubles as a vector, built from their values (registers once unrolled), not a load.
inline __m256d v4(const double* a) { return _mm256_setr_pd(a[0], a[1], a[2], a[3]); }

// int32 lanes 0..3 and 4..7 of v as doubles.
inline __m256d lo_pd(__m256i v) { return _mm256_cvtepi32_pd(_mm256_castsi256_si128(v)); }
inline __m256d hi_pd(__m256i v) { return _mm256_cvtepi32_pd(_mm256_extracti128_si256(v, 1)); }

inline __m256i load4(const int64_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Widens 8 int32 lanes to two vectors of 4 int64.
inline void widen(__m256i v, __m256i* lo, __m256i* hi) {
  *lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v));
  *hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1));
}

// v shifted left by s bits (right by -s when s < 0) in each 16-bit lane.
inline __m256i shift16(__m256i v, int s) { return s >= 0 ? _mm256_slli_epi16(v, s) : _mm256_srli_epi16(v, -s); }

}  // namespace
}  // namespace detaudit::kernels::cpu

#endif
