// The AVX-512 (F, BW, DQ, VL) variant of the element-wise kernels (elementwise_internal.h):
// elementwise_lanes.h's kernels over sixteen lanes. Masks are mask registers; a partial last
// vector is read and written with them. RMS norm's squares use 64-bit lanes (vpmuludq, vpsllvq,
// vpsrlvq), eight at a time.
//
// Everything below the pragma is static or a plain extern function, and no std:: template is
// instantiated there, so no AVX-512 code can leak into the rest of the program.
// GCC 12's AVX-512 intrinsics read a self-initialised undefined vector (_mm*_undefined_*),
// which -Wuninitialized reports at every use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/elementwise_internal.h"
#include "numerics/exact.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl")

#include "kernels/cpu/elementwise_lanes.h"

namespace detaudit::kernels::cpu {

namespace {

// The lane type of elementwise_lanes.h: sixteen float / int32 lanes.
struct v512 {
  using f = __m512;
  using i = __m512i;
  using m = __mmask16;
  using q = __m512i;  // eight int64 lanes
  static constexpr int LANES = 16;

  static m lanes_at(int64_t at, int64_t n) {
    const int64_t left = n - at;
    return left >= LANES ? static_cast<m>(0xffff) : static_cast<m>((1u << left) - 1u);
  }
  static f load(const float* p, m live) { return _mm512_maskz_loadu_ps(live, p); }
  static void store(float* p, m live, f v) { _mm512_mask_storeu_ps(p, live, v); }
  static f loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, f v) { _mm512_storeu_ps(p, v); }

  static f splat(float v) { return _mm512_set1_ps(v); }
  static i splat_i(uint32_t v) { return _mm512_set1_epi32(static_cast<int32_t>(v)); }
  static i ibits(f x) { return _mm512_castps_si512(x); }
  static f fbits(i b) { return _mm512_castsi512_ps(b); }

  static f add(f a, f b) { return _mm512_add_ps(a, b); }
  static f sub(f a, f b) { return _mm512_sub_ps(a, b); }
  static f mul(f a, f b) { return _mm512_mul_ps(a, b); }
  static f min(f a, f b) { return _mm512_min_ps(a, b); }
  static f max(f a, f b) { return _mm512_max_ps(a, b); }
  static i add_i(i a, i b) { return _mm512_add_epi32(a, b); }
  static i sub_i(i a, i b) { return _mm512_sub_epi32(a, b); }
  static i and_i(i a, i b) { return _mm512_and_si512(a, b); }
  static i or_i(i a, i b) { return _mm512_or_si512(a, b); }
  static i xor_i(i a, i b) { return _mm512_xor_si512(a, b); }
  static i andnot_i(i a, i b) { return _mm512_andnot_si512(a, b); }
  static i min_i(i a, i b) { return _mm512_min_epi32(a, b); }
  static i max_u(i a, i b) { return _mm512_max_epu32(a, b); }
  static i shl(i a, int k) { return _mm512_slli_epi32(a, static_cast<unsigned>(k)); }
  static i shr(i a, int k) { return _mm512_srli_epi32(a, static_cast<unsigned>(k)); }
  static i cvtt(f x) { return _mm512_cvttps_epi32(x); }

  static m lt(f a, f b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static m gt(f a, f b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static m nan(f x) { return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q); }
  static m lt_i(i a, i b) { return _mm512_cmplt_epi32_mask(a, b); }
  static m eq_i(i a, i b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static m m_or(m a, m b) { return static_cast<m>(a | b); }
  static m m_and(m a, m b) { return static_cast<m>(a & b); }
  static f select(m s, f a, f b) { return _mm512_mask_mov_ps(b, s, a); }
  static i select_i(m s, i a, i b) { return _mm512_mask_mov_epi32(b, s, a); }
  static unsigned bits(m s) { return s; }

  // round_shift(a, s) for a in [0, 2^48) in eight 64-bit lanes, s as eight int32.
  static __m512i round_shift_u(__m512i a, __m256i s32) {
    const __m512i s = _mm512_cvtepi32_epi64(s32);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i one = _mm512_set1_epi64(1);
    const __mmask8 neg = _mm512_cmplt_epi64_mask(s, zero);
    const __m512i left = _mm512_sllv_epi64(a, _mm512_max_epi64(s, zero));
    const __m512i n = _mm512_min_epi64(_mm512_sub_epi64(zero, s), _mm512_set1_epi64(63));
    const __m512i half_m1 = _mm512_sub_epi64(_mm512_sllv_epi64(one, _mm512_sub_epi64(n, one)), one);
    const __m512i odd = _mm512_and_si512(_mm512_srlv_epi64(a, n), one);
    const __m512i right = _mm512_srlv_epi64(_mm512_add_epi64(_mm512_add_epi64(a, half_m1), odd), n);
    return _mm512_mask_blend_epi64(neg, left, right);
  }
  static __m512i square_terms(__m256i mant, __m256i sh) {
    const __m512i m64 = _mm512_cvtepu32_epi64(mant);
    return round_shift_u(_mm512_mul_epu32(m64, m64), sh);
  }
  static q zero_q() { return _mm512_setzero_si512(); }
  static q add_squares(q acc, i mant, i sh) {
    acc = _mm512_add_epi64(acc, square_terms(_mm512_castsi512_si256(mant), _mm512_castsi512_si256(sh)));
    return _mm512_add_epi64(acc, square_terms(_mm512_extracti64x4_epi64(mant, 1), _mm512_extracti64x4_epi64(sh, 1)));
  }
  static int64_t sum_q(q acc) { return _mm512_reduce_add_epi64(acc); }
  static uint32_t max_lane_u(i acc) { return _mm512_reduce_max_epu32(acc); }
};

}  // namespace

DETAUDIT_ELEM_KERNELS(avx512, v512)

}  // namespace detaudit::kernels::cpu

#else

namespace detaudit::kernels::cpu {
uint32_t elem_max_exp_field_avx512(const float* x, int64_t n) { return elem_max_exp_field_scalar(x, n); }
int64_t elem_sum_squares_avx512(const float* x, int64_t n, int32_t g) { return elem_sum_squares_scalar(x, n, g); }
void elem_scale_avx512(const float* x, const float* w, int64_t n, float r, float* out) { elem_scale_scalar(x, w, n, r, out); }
void elem_swiglu_avx512(const float* gate, const float* up, int64_t n, float* out) { elem_swiglu_scalar(gate, up, n, out); }
void elem_add_avx512(const float* a, const float* b, int64_t n, float* out) { elem_add_scalar(a, b, n, out); }
void elem_geglu_avx512(const float* gate, const float* up, int64_t n, float* out) { elem_geglu_scalar(gate, up, n, out); }
void elem_softcap_avx512(const float* x, int64_t n, float cap, float inv_cap, float* out) { elem_softcap_scalar(x, n, cap, inv_cap, out); }
void elem_swiglu_oai_avx512(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  elem_swiglu_oai_scalar(gate, up, n, alpha, limit, out);
}
void elem_exp_avx512(const float* x, int64_t n, float* out) { elem_exp_scalar(x, n, out); }
void elem_recip_avx512(const float* x, int64_t n, float* out) { elem_recip_scalar(x, n, out); }
void elem_silu_avx512(const float* x, int64_t n, float* out) { elem_silu_scalar(x, n, out); }
}  // namespace detaudit::kernels::cpu

#endif
