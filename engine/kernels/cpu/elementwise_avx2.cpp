// The AVX2 variant of the element-wise kernels (elementwise_internal.h): elementwise_lanes.h's
// kernels over eight lanes. Masks are compare results (all-ones lanes); a partial last vector is
// read and written with vmaskmovps. RMS norm's squares use 64-bit lanes (vpmuludq, vpsllvq,
// vpsrlvq), four at a time.
//
// Everything below the pragma is static or a plain extern function, and no std:: template is
// instantiated there, so no AVX2 code can leak into the rest of the program.
// GCC 12's AVX2 intrinsics read a self-initialised undefined vector (_mm*_undefined_*),
// which -Wuninitialized reports at every use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/elementwise_internal.h"
#include "numerics/exact.h"

#if defined(__x86_64__)
#pragma GCC target("avx2")

#include "kernels/cpu/elementwise_lanes.h"

namespace detaudit::kernels::cpu {

namespace {

// The lane type of elementwise_lanes.h: eight float / int32 lanes.
struct v256 {
  using f = __m256;
  using i = __m256i;
  using m = __m256i;  // all-ones lanes
  using q = __m256i;  // four int64 lanes
  static constexpr int LANES = 8;

  static m lanes_at(int64_t at, int64_t n) {
    const int64_t left = n - at;
    const int32_t k = left >= LANES ? static_cast<int32_t>(LANES) : static_cast<int32_t>(left);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static f load(const float* p, m live) { return _mm256_maskload_ps(p, live); }
  static void store(float* p, m live, f v) { _mm256_maskstore_ps(p, live, v); }
  static f loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, f v) { _mm256_storeu_ps(p, v); }

  static f splat(float v) { return _mm256_set1_ps(v); }
  static i splat_i(uint32_t v) { return _mm256_set1_epi32(static_cast<int32_t>(v)); }
  static i ibits(f x) { return _mm256_castps_si256(x); }
  static f fbits(i b) { return _mm256_castsi256_ps(b); }

  static f add(f a, f b) { return _mm256_add_ps(a, b); }
  static f sub(f a, f b) { return _mm256_sub_ps(a, b); }
  static f mul(f a, f b) { return _mm256_mul_ps(a, b); }
  static f min(f a, f b) { return _mm256_min_ps(a, b); }
  static f max(f a, f b) { return _mm256_max_ps(a, b); }
  static i add_i(i a, i b) { return _mm256_add_epi32(a, b); }
  static i sub_i(i a, i b) { return _mm256_sub_epi32(a, b); }
  static i and_i(i a, i b) { return _mm256_and_si256(a, b); }
  static i or_i(i a, i b) { return _mm256_or_si256(a, b); }
  static i xor_i(i a, i b) { return _mm256_xor_si256(a, b); }
  static i andnot_i(i a, i b) { return _mm256_andnot_si256(a, b); }
  static i min_i(i a, i b) { return _mm256_min_epi32(a, b); }
  static i max_u(i a, i b) { return _mm256_max_epu32(a, b); }
  static i shl(i a, int k) { return _mm256_slli_epi32(a, k); }
  static i shr(i a, int k) { return _mm256_srli_epi32(a, k); }
  static i cvtt(f x) { return _mm256_cvttps_epi32(x); }

  static m lt(f a, f b) { return ibits(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  static m gt(f a, f b) { return ibits(_mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
  static m nan(f x) { return ibits(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }
  static m lt_i(i a, i b) { return _mm256_cmpgt_epi32(b, a); }
  static m eq_i(i a, i b) { return _mm256_cmpeq_epi32(a, b); }
  static m m_or(m a, m b) { return _mm256_or_si256(a, b); }
  static m m_and(m a, m b) { return _mm256_and_si256(a, b); }
  static f select(m s, f a, f b) { return _mm256_blendv_ps(b, a, fbits(s)); }
  static i select_i(m s, i a, i b) { return _mm256_blendv_epi8(b, a, s); }
  static unsigned bits(m s) { return static_cast<unsigned>(_mm256_movemask_ps(fbits(s))); }

  // round_shift(a, s) for a in [0, 2^48) in four 64-bit lanes, s as four int32.
  static __m256i round_shift_u(__m256i a, __m128i s32) {
    const __m256i s = _mm256_cvtepi32_epi64(s32);
    const __m256i zero = _mm256_setzero_si256();
    const __m256i one = _mm256_set1_epi64x(1);
    const __m256i neg = _mm256_cmpgt_epi64(zero, s);
    const __m256i left = _mm256_sllv_epi64(a, _mm256_andnot_si256(neg, s));
    const __m128i n32 = _mm_min_epi32(_mm_sub_epi32(_mm_setzero_si128(), s32), _mm_set1_epi32(63));
    const __m256i n = _mm256_cvtepi32_epi64(n32);
    const __m256i half_m1 = _mm256_sub_epi64(_mm256_sllv_epi64(one, _mm256_sub_epi64(n, one)), one);
    const __m256i odd = _mm256_and_si256(_mm256_srlv_epi64(a, n), one);
    const __m256i right = _mm256_srlv_epi64(_mm256_add_epi64(_mm256_add_epi64(a, half_m1), odd), n);
    return _mm256_blendv_epi8(left, right, neg);
  }
  static __m256i square_terms(__m128i mant, __m128i sh) {
    const __m256i m64 = _mm256_cvtepu32_epi64(mant);
    return round_shift_u(_mm256_mul_epu32(m64, m64), sh);
  }
  static q zero_q() { return _mm256_setzero_si256(); }
  static q add_squares(q acc, i mant, i sh) {
    acc = _mm256_add_epi64(acc, square_terms(_mm256_castsi256_si128(mant), _mm256_castsi256_si128(sh)));
    return _mm256_add_epi64(acc, square_terms(_mm256_extracti128_si256(mant, 1), _mm256_extracti128_si256(sh, 1)));
  }
  static int64_t sum_q(q acc) {
    int64_t l[4];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(l), acc);
    return l[0] + l[1] + l[2] + l[3];
  }
  static uint32_t max_lane_u(i acc) {
    uint32_t l[LANES];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(l), acc);
    uint32_t mx = 0;
    for (int j = 0; j < LANES; ++j) mx = l[j] > mx ? l[j] : mx;
    return mx;
  }
};

}  // namespace

DETAUDIT_ELEM_KERNELS(avx2, v256)

}  // namespace detaudit::kernels::cpu

#else

namespace detaudit::kernels::cpu {
uint32_t elem_max_exp_field_avx2(const float* x, int64_t n) { return elem_max_exp_field_scalar(x, n); }
int64_t elem_sum_squares_avx2(const float* x, int64_t n, int32_t g) { return elem_sum_squares_scalar(x, n, g); }
void elem_scale_avx2(const float* x, const float* w, int64_t n, float r, float* out) { elem_scale_scalar(x, w, n, r, out); }
void elem_swiglu_avx2(const float* gate, const float* up, int64_t n, float* out) { elem_swiglu_scalar(gate, up, n, out); }
void elem_add_avx2(const float* a, const float* b, int64_t n, float* out) { elem_add_scalar(a, b, n, out); }
void elem_geglu_avx2(const float* gate, const float* up, int64_t n, float* out) { elem_geglu_scalar(gate, up, n, out); }
void elem_softcap_avx2(const float* x, int64_t n, float cap, float inv_cap, float* out) { elem_softcap_scalar(x, n, cap, inv_cap, out); }
void elem_swiglu_oai_avx2(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  elem_swiglu_oai_scalar(gate, up, n, alpha, limit, out);
}
void elem_exp_avx2(const float* x, int64_t n, float* out) { elem_exp_scalar(x, n, out); }
void elem_recip_avx2(const float* x, int64_t n, float* out) { elem_recip_scalar(x, n, out); }
void elem_silu_avx2(const float* x, int64_t n, float* out) { elem_silu_scalar(x, n, out); }
}  // namespace detaudit::kernels::cpu

#endif
