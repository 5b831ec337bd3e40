// The AVX2 variant of the element-wise kernels (elementwise_internal.h).
//
// Eight lanes at a time; a partial last vector is read and written with vmaskmovps (masked-off
// lanes read as +0 and are never stored). The arithmetic and the blends of the special lanes are
// those of elementwise_avx512.cpp with compare results as all-ones lanes instead of mask
// registers: exp of NaN is the input, above 100 +inf, below -104 or scaled below 2^-126 +0; recip
// of a zero +-inf, of an inf or of a result below 2^-126 a zero of the input's sign, of NaN the
// input; silu of NaN is numerics::silu_f32 itself. RMS norm's squares use 64-bit lanes
// (vpmuludq, vpsllvq, vpsrlvq): a left shift is exact, a right shift by s (clamped to 63) rounds
// half to even as (a + 2^(s-1) - 1 + ((a >> s) & 1)) >> s, a >= 0.
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

namespace detaudit::kernels::cpu {

namespace {

constexpr int64_t LANES = 8;

inline __m256i ibits(__m256 x) { return _mm256_castps_si256(x); }
inline __m256 fbits(__m256i b) { return _mm256_castsi256_ps(b); }
inline __m256i splat_u(uint32_t v) { return _mm256_set1_epi32(static_cast<int32_t>(v)); }
inline __m256 splat_f(float v) { return _mm256_set1_ps(v); }

// All-ones in the lanes of a vector starting at i of an array of n.
inline __m256i lanes_at(int64_t i, int64_t n) {
  const int64_t left = n - i;
  const int32_t k = left >= LANES ? static_cast<int32_t>(LANES) : static_cast<int32_t>(left);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline __m256 load(const float* p, __m256i live) { return _mm256_maskload_ps(p, live); }
inline void store(float* p, __m256i live, __m256 v) { _mm256_maskstore_ps(p, live, v); }

inline __m256 flush_v(__m256 x) {
  const __m256i b = ibits(x);
  const __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(b, splat_u(0x7f800000u)), _mm256_setzero_si256());
  return fbits(_mm256_andnot_si256(_mm256_and_si256(sub, splat_u(0x7fffffffu)), b));
}

inline __m256 pow2_v(__m256i k) {
  return fbits(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

// All-ones where y * 2^k falls below 2^-126 (scale_pow2's zero), y in [0.5, 2).
inline __m256 scale_underflows(__m256 y, __m256i k) {
  const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), k);
  const __m256i at = _mm256_cmpeq_epi32(k, _mm256_set1_epi32(-126));
  const __m256 edge = _mm256_and_ps(fbits(at), _mm256_cmp_ps(y, splat_f(1.0f), _CMP_LT_OQ));
  return _mm256_or_ps(fbits(below), edge);
}

inline __m256 exp_v(__m256 x) {
  const __m256 magic = splat_f(12582912.0f);
  const __m256 kf = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, splat_f(1.44269504088896341f)), magic), magic);
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(kf, splat_f(0.693359375f))),
                                 _mm256_mul_ps(kf, splat_f(-2.12194440e-4f)));
  const __m256 z = _mm256_mul_ps(r, r);
  __m256 p = splat_f(1.9875691500e-4f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), splat_f(1.3981999507e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), splat_f(8.3334519073e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), splat_f(4.1665795894e-2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), splat_f(1.6666665459e-1f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), splat_f(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, z), r), splat_f(1.0f));
  const __m256i k = _mm256_cvttps_epi32(kf);
  const __m256i k1 = _mm256_min_epi32(k, _mm256_set1_epi32(127));
  const __m256 v = _mm256_mul_ps(_mm256_mul_ps(y, pow2_v(k1)), pow2_v(_mm256_sub_epi32(k, k1)));
  const __m256 zero = _mm256_or_ps(_mm256_cmp_ps(x, splat_f(-104.0f), _CMP_LT_OQ), scale_underflows(y, k));
  __m256 out = _mm256_andnot_ps(zero, v);
  out = _mm256_blendv_ps(out, fbits(splat_u(0x7f800000u)), _mm256_cmp_ps(x, splat_f(100.0f), _CMP_GT_OQ));
  return _mm256_blendv_ps(out, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

inline void two_prod_v(__m256 a, __m256 b, __m256* hi, __m256* lo) {
  const __m256 split = splat_f(4097.0f);
  const __m256 ca = _mm256_mul_ps(split, a);
  const __m256 ah = _mm256_sub_ps(ca, _mm256_sub_ps(ca, a));
  const __m256 al = _mm256_sub_ps(a, ah);
  const __m256 cb = _mm256_mul_ps(split, b);
  const __m256 bh = _mm256_sub_ps(cb, _mm256_sub_ps(cb, b));
  const __m256 bl = _mm256_sub_ps(b, bh);
  const __m256 p = _mm256_mul_ps(a, b);
  *hi = p;
  __m256 s = _mm256_add_ps(_mm256_sub_ps(_mm256_mul_ps(ah, bh), p), _mm256_mul_ps(ah, bl));
  s = _mm256_add_ps(s, _mm256_mul_ps(al, bh));
  *lo = _mm256_add_ps(s, _mm256_mul_ps(al, bl));
}

inline __m256 recip_unit_v(__m256 m) {
  __m256 y = fbits(_mm256_sub_epi32(splat_u(0x7EF311C3u), ibits(m)));
  const __m256 two = splat_f(2.0f);
  for (int i = 0; i < 4; ++i) y = _mm256_mul_ps(y, _mm256_sub_ps(two, _mm256_mul_ps(m, y)));
  __m256 p, pl;
  two_prod_v(m, y, &p, &pl);
  const __m256 e = _mm256_sub_ps(_mm256_sub_ps(splat_f(1.0f), p), pl);
  return _mm256_add_ps(y, _mm256_mul_ps(y, e));
}

inline __m256 recip_v(__m256 x) {
  const __m256 xf = flush_v(x);
  const __m256i b = ibits(xf);
  const __m256i sign = _mm256_and_si256(b, splat_u(0x80000000u));
  const __m256i ex = _mm256_srli_epi32(_mm256_and_si256(b, splat_u(0x7f800000u)), 23);
  const __m256 m = fbits(_mm256_or_si256(_mm256_and_si256(b, splat_u(0x007fffffu)), splat_u(0x3f800000u)));
  const __m256 y = recip_unit_v(m);
  const __m256i k = _mm256_sub_epi32(_mm256_set1_epi32(127), ex);
  const __m256 r = _mm256_andnot_ps(scale_underflows(y, k), _mm256_mul_ps(y, pow2_v(k)));
  __m256i out = _mm256_or_si256(ibits(r), sign);
  const __m256i zero = _mm256_cmpeq_epi32(ex, _mm256_setzero_si256());
  out = _mm256_blendv_epi8(out, _mm256_or_si256(sign, splat_u(0x7f800000u)), zero);
  return _mm256_blendv_ps(fbits(out), xf, _mm256_cmp_ps(xf, xf, _CMP_UNORD_Q));
}

// v with the lanes set in `nan` (a movemask) replaced by f(src[j]): NaN lanes take the scalar
// function's answer (its payload), as the file comment says.
template <class F>
inline __m256 scalar_lanes(__m256 v, int nan, const float* src, F f) {
  if (!nan) return v;
  float tmp[LANES];
  _mm256_storeu_ps(tmp, v);
  for (int j = 0; j < LANES; ++j)
    if ((nan >> j) & 1) tmp[j] = f(src[j]);
  return _mm256_loadu_ps(tmp);
}

// silu_f32 of the lanes; NaN lanes are replaced by numerics::silu_f32 of src (live lanes only).
inline __m256 silu_v(__m256 x, const float* src, __m256i live) {
  const __m256 xf = flush_v(x);
  const __m256 neg = fbits(_mm256_xor_si256(ibits(xf), splat_u(0x80000000u)));
  const __m256 d = flush_v(_mm256_add_ps(splat_f(1.0f), exp_v(neg)));
  const __m256 s = flush_v(_mm256_mul_ps(xf, recip_v(d)));
  const int nan = _mm256_movemask_ps(_mm256_and_ps(fbits(live), _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  return scalar_lanes(s, nan, src, numerics::silu_f32);
}

// gelu_f32 of the lanes (numerics' sequence); NaN lanes as silu_v.
inline __m256 gelu_v(__m256 x, const float* src, __m256i live) {
  const __m256 xf = flush_v(x);
  const __m256 x2 = flush_v(_mm256_mul_ps(xf, xf));
  const __m256 inner = flush_v(_mm256_add_ps(splat_f(1.0f), flush_v(_mm256_mul_ps(splat_f(0.044715f), x2))));
  const __m256 z = flush_v(_mm256_mul_ps(flush_v(_mm256_mul_ps(splat_f(1.59576912160573071f), xf)), inner));
  const __m256 neg = fbits(_mm256_xor_si256(ibits(z), splat_u(0x80000000u)));
  const __m256 d = flush_v(_mm256_add_ps(splat_f(1.0f), exp_v(neg)));
  const __m256 s = flush_v(_mm256_mul_ps(xf, recip_v(d)));
  const int nan = _mm256_movemask_ps(_mm256_and_ps(fbits(live), _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  return scalar_lanes(s, nan, src, numerics::gelu_f32);
}

// softcap_f32 of the lanes (numerics' sequence); NaN lanes as silu_v.
inline __m256 softcap_v(__m256 x, float cap, float inv_cap, const float* src, __m256i live) {
  const __m256 y = flush_v(_mm256_mul_ps(flush_v(x), splat_f(inv_cap)));
  const __m256i sign = _mm256_and_si256(ibits(y), splat_u(0x80000000u));
  const __m256 a = fbits(_mm256_andnot_si256(splat_u(0x80000000u), ibits(y)));
  const __m256 aa = _mm256_add_ps(a, a);
  const __m256 e = exp_v(fbits(_mm256_xor_si256(ibits(aa), splat_u(0x80000000u))));
  const __m256 d = flush_v(_mm256_add_ps(splat_f(1.0f), e));
  const __m256 t = flush_v(_mm256_sub_ps(splat_f(1.0f), flush_v(_mm256_mul_ps(flush_v(_mm256_add_ps(e, e)), recip_v(d)))));
  const __m256 r = fbits(_mm256_xor_si256(ibits(flush_v(_mm256_mul_ps(splat_f(cap), t))), sign));
  const int nan = _mm256_movemask_ps(_mm256_and_ps(fbits(live), _mm256_cmp_ps(y, y, _CMP_UNORD_Q)));
  return scalar_lanes(r, nan, src, [cap](float x) { return numerics::softcap_f32(x, cap); });
}

// a * 2^s for a in [0, 2^48), exact for s >= 0, half to even for s < 0 (4 lanes of 64 bits).
inline __m256i round_shift_u(__m256i a, __m128i s32) {
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

inline __m256i square_terms(__m128i m, __m128i sh) {
  const __m256i m64 = _mm256_cvtepu32_epi64(m);
  return round_shift_u(_mm256_mul_epu32(m64, m64), sh);
}

}  // namespace

uint32_t elem_max_exp_field_avx2(const float* x, int64_t n) {
  __m256i acc = _mm256_setzero_si256();
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i b = ibits(load(x + i, lanes_at(i, n)));
    acc = _mm256_max_epu32(acc, _mm256_and_si256(b, splat_u(0x7f800000u)));
  }
  uint32_t lanes[LANES];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), acc);
  uint32_t m = 0;
  for (int j = 0; j < LANES; ++j) m = lanes[j] > m ? lanes[j] : m;
  return m >> 23;
}

int64_t elem_sum_squares_avx2(const float* x, int64_t n, int32_t g) {
  __m256i acc = _mm256_setzero_si256();
  const __m256i off = _mm256_set1_epi32(300 + g);
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i b = ibits(load(x + i, lanes_at(i, n)));
    const __m256i field = _mm256_srli_epi32(_mm256_and_si256(b, splat_u(0x7f800000u)), 23);
    const __m256i dead = _mm256_cmpeq_epi32(field, _mm256_setzero_si256());
    const __m256i m = _mm256_andnot_si256(dead, _mm256_or_si256(_mm256_and_si256(b, splat_u(0x007fffffu)), splat_u(0x00800000u)));
    const __m256i sh = _mm256_sub_epi32(_mm256_add_epi32(field, field), off);
    acc = _mm256_add_epi64(acc, square_terms(_mm256_castsi256_si128(m), _mm256_castsi256_si128(sh)));
    acc = _mm256_add_epi64(acc, square_terms(_mm256_extracti128_si256(m, 1), _mm256_extracti128_si256(sh, 1)));
  }
  int64_t lanes[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), acc);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

void elem_scale_avx2(const float* x, const float* w, int64_t n, float r, float* out) {
  const __m256 rv = splat_f(r);
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i live = lanes_at(i, n);
    __m256 v = flush_v(_mm256_mul_ps(flush_v(load(x + i, live)), rv));
    if (w) v = flush_v(_mm256_mul_ps(v, flush_v(load(w + i, live))));
    store(out + i, live, v);
  }
}

void elem_swiglu_avx2(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i live = lanes_at(i, n);
    const __m256 s = silu_v(load(gate + i, live), gate + i, live);
    const __m256 u = flush_v(load(up + i, live));
    store(out + i, live, flush_v(_mm256_mul_ps(s, u)));
  }
}

void elem_geglu_avx2(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i live = lanes_at(i, n);
    const __m256 g = gelu_v(load(gate + i, live), gate + i, live);
    const __m256 u = flush_v(load(up + i, live));
    store(out + i, live, flush_v(_mm256_mul_ps(g, u)));
  }
}

void elem_swiglu_oai_avx2(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  const __m256 lim = splat_f(limit), nlim = splat_f(-limit), al = splat_f(alpha);
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i live = lanes_at(i, n);
    const __m256 g = load(gate + i, live), u = load(up + i, live);
    const __m256 x = _mm256_min_ps(flush_v(g), lim);
    const __m256 y = _mm256_max_ps(_mm256_min_ps(flush_v(u), lim), nlim);
    const __m256 z = flush_v(_mm256_mul_ps(al, x));
    const __m256 neg = fbits(_mm256_xor_si256(ibits(z), splat_u(0x80000000u)));
    const __m256 d = flush_v(_mm256_add_ps(splat_f(1.0f), exp_v(neg)));
    const __m256 s = flush_v(_mm256_mul_ps(x, recip_v(d)));
    __m256 r = flush_v(_mm256_mul_ps(s, flush_v(_mm256_add_ps(y, splat_f(1.0f)))));
    const int nan = _mm256_movemask_ps(
        _mm256_and_ps(fbits(live), _mm256_or_ps(_mm256_cmp_ps(g, g, _CMP_UNORD_Q), _mm256_cmp_ps(u, u, _CMP_UNORD_Q))));
    if (nan) {
      float tmp[LANES];
      _mm256_storeu_ps(tmp, r);
      for (int j = 0; j < LANES; ++j)
        if ((nan >> j) & 1) tmp[j] = numerics::swiglu_oai_f32(gate[i + j], up[i + j], alpha, limit);
      r = _mm256_loadu_ps(tmp);
    }
    store(out + i, live, r);
  }
}

void elem_softcap_avx2(const float* x, int64_t n, float cap, float inv_cap, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i live = lanes_at(i, n);
    store(out + i, live, softcap_v(load(x + i, live), cap, inv_cap, x + i, live));
  }
}

void elem_add_avx2(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i live = lanes_at(i, n);
    const __m256 va = flush_v(load(a + i, live));
    const __m256 vb = flush_v(load(b + i, live));
    store(out + i, live, flush_v(_mm256_add_ps(va, vb)));
  }
}

void elem_exp_avx2(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i live = lanes_at(i, n);
    store(out + i, live, exp_v(load(x + i, live)));
  }
}

void elem_recip_avx2(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i live = lanes_at(i, n);
    store(out + i, live, recip_v(load(x + i, live)));
  }
}

void elem_silu_avx2(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __m256i live = lanes_at(i, n);
    store(out + i, live, silu_v(load(x + i, live), x + i, live));
  }
}

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
