// The AVX-512 (F, BW, DQ, VL) variant of the element-wise kernels (elementwise_internal.h).
//
// Sixteen lanes at a time; a partial last vector is read and written with masks (masked-off
// lanes read as +0 and are never stored). exp_f32 and recip_f32 run numerics' sequence on every
// lane, then the special lanes take the scalar code's answer by blend: exp of NaN is the input,
// above 100 +inf, below -104 or scaled below 2^-126 +0; recip of a zero +-inf, of an inf or of a
// result below 2^-126 a zero of the input's sign, of NaN the input. The power-of-two scaling
// y * 2^k of exp is done as (y * 2^min(k, 127)) * 2^(k - min(k, 127)): for k <= 127 the second
// factor is 1 and changes no bit, above it is the scalar code's two-step product.
// RMS norm's squares: m^2 < 2^48 in 64-bit lanes (vpmuludq), shifted left exactly or right half
// to even as (a + 2^(s-1) - 1 + ((a >> s) & 1)) >> s with s clamped to 63 (a >= 0).
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

namespace detaudit::kernels::cpu {

namespace {

constexpr int64_t LANES = 16;

inline __m512i ibits(__m512 x) { return _mm512_castps_si512(x); }
inline __m512 fbits(__m512i b) { return _mm512_castsi512_ps(b); }
inline __m512i splat_u(uint32_t v) { return _mm512_set1_epi32(static_cast<int32_t>(v)); }
inline __m512 splat_f(float v) { return _mm512_set1_ps(v); }

// The lanes of a vector starting at i of an array of n.
inline __mmask16 lanes_at(int64_t i, int64_t n) {
  const int64_t left = n - i;
  return left >= LANES ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

inline __m512 flush_v(__m512 x) {
  const __m512i b = ibits(x);
  const __mmask16 sub = _mm512_testn_epi32_mask(b, splat_u(0x7f800000u));
  return fbits(_mm512_mask_and_epi32(b, sub, b, splat_u(0x80000000u)));
}

// 2^k for lanes with k in [-126, 127] (other lanes: meaningless bits).
inline __m512 pow2_v(__m512i k) {
  return fbits(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23));
}

// Lanes where y * 2^k falls below 2^-126 (scale_pow2's zero), y in [0.5, 2).
inline __mmask16 scale_underflows(__m512 y, __m512i k) {
  const __mmask16 below = _mm512_cmplt_epi32_mask(k, _mm512_set1_epi32(-126));
  const __mmask16 edge = _mm512_mask_cmp_ps_mask(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(-126)),
                                                 y, splat_f(1.0f), _CMP_LT_OQ);
  return below | edge;
}

inline __m512 exp_v(__m512 x) {
  const __m512 magic = splat_f(12582912.0f);
  const __m512 kf = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, splat_f(1.44269504088896341f)), magic), magic);
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(kf, splat_f(0.693359375f))),
                                 _mm512_mul_ps(kf, splat_f(-2.12194440e-4f)));
  const __m512 z = _mm512_mul_ps(r, r);
  __m512 p = splat_f(1.9875691500e-4f);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat_f(1.3981999507e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat_f(8.3334519073e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat_f(4.1665795894e-2f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat_f(1.6666665459e-1f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), splat_f(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, z), r), splat_f(1.0f));
  const __m512i k = _mm512_cvttps_epi32(kf);
  const __m512i k1 = _mm512_min_epi32(k, _mm512_set1_epi32(127));
  const __m512 v = _mm512_mul_ps(_mm512_mul_ps(y, pow2_v(k1)), pow2_v(_mm512_sub_epi32(k, k1)));
  const __mmask16 zero = _mm512_cmp_ps_mask(x, splat_f(-104.0f), _CMP_LT_OQ) | scale_underflows(y, k);
  __m512 out = _mm512_mask_mov_ps(v, zero, _mm512_setzero_ps());
  out = _mm512_mask_mov_ps(out, _mm512_cmp_ps_mask(x, splat_f(100.0f), _CMP_GT_OQ), fbits(splat_u(0x7f800000u)));
  return _mm512_mask_mov_ps(out, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

inline void two_prod_v(__m512 a, __m512 b, __m512* hi, __m512* lo) {
  const __m512 split = splat_f(4097.0f);
  const __m512 ca = _mm512_mul_ps(split, a);
  const __m512 ah = _mm512_sub_ps(ca, _mm512_sub_ps(ca, a));
  const __m512 al = _mm512_sub_ps(a, ah);
  const __m512 cb = _mm512_mul_ps(split, b);
  const __m512 bh = _mm512_sub_ps(cb, _mm512_sub_ps(cb, b));
  const __m512 bl = _mm512_sub_ps(b, bh);
  const __m512 p = _mm512_mul_ps(a, b);
  *hi = p;
  __m512 s = _mm512_add_ps(_mm512_sub_ps(_mm512_mul_ps(ah, bh), p), _mm512_mul_ps(ah, bl));
  s = _mm512_add_ps(s, _mm512_mul_ps(al, bh));
  *lo = _mm512_add_ps(s, _mm512_mul_ps(al, bl));
}

// 1/m for m in [1, 2) (numerics' recip_unit).
inline __m512 recip_unit_v(__m512 m) {
  __m512 y = fbits(_mm512_sub_epi32(splat_u(0x7EF311C3u), ibits(m)));
  const __m512 two = splat_f(2.0f);
  for (int i = 0; i < 4; ++i) y = _mm512_mul_ps(y, _mm512_sub_ps(two, _mm512_mul_ps(m, y)));
  __m512 p, pl;
  two_prod_v(m, y, &p, &pl);
  const __m512 e = _mm512_sub_ps(_mm512_sub_ps(splat_f(1.0f), p), pl);
  return _mm512_add_ps(y, _mm512_mul_ps(y, e));
}

inline __m512 recip_v(__m512 x) {
  const __m512 xf = flush_v(x);
  const __m512i b = ibits(xf);
  const __m512i sign = _mm512_and_si512(b, splat_u(0x80000000u));
  const __m512i ex = _mm512_srli_epi32(_mm512_and_si512(b, splat_u(0x7f800000u)), 23);
  const __m512 m = fbits(_mm512_or_si512(_mm512_and_si512(b, splat_u(0x007fffffu)), splat_u(0x3f800000u)));
  const __m512 y = recip_unit_v(m);
  const __m512i k = _mm512_sub_epi32(_mm512_set1_epi32(127), ex);
  const __m512 r = _mm512_maskz_mov_ps(static_cast<__mmask16>(~scale_underflows(y, k)), _mm512_mul_ps(y, pow2_v(k)));
  __m512i out = _mm512_or_si512(ibits(r), sign);
  const __mmask16 zero = _mm512_cmpeq_epi32_mask(ex, _mm512_setzero_si512());
  out = _mm512_mask_or_epi32(out, zero, sign, splat_u(0x7f800000u));
  return _mm512_mask_mov_ps(fbits(out), _mm512_cmp_ps_mask(xf, xf, _CMP_UNORD_Q), xf);
}

// v with the lanes set in `nan` replaced by f(src[j]): NaN lanes take the scalar function's
// answer (its payload), as the file comment says.
template <class F>
inline __m512 scalar_lanes(__m512 v, __mmask16 nan, const float* src, F f) {
  if (!nan) return v;
  float tmp[LANES];
  _mm512_storeu_ps(tmp, v);
  for (int j = 0; j < LANES; ++j)
    if ((nan >> j) & 1) tmp[j] = f(src[j]);
  return _mm512_loadu_ps(tmp);
}

// silu_f32 of the lanes; NaN lanes are replaced by numerics::silu_f32 of src (loaded lanes live).
inline __m512 silu_v(__m512 x, const float* src, __mmask16 live) {
  const __m512 xf = flush_v(x);
  const __m512 neg = fbits(_mm512_xor_si512(ibits(xf), splat_u(0x80000000u)));
  const __m512 d = flush_v(_mm512_add_ps(splat_f(1.0f), exp_v(neg)));
  const __m512 s = flush_v(_mm512_mul_ps(xf, recip_v(d)));
  const __mmask16 nan = _mm512_mask_cmp_ps_mask(live, x, x, _CMP_UNORD_Q);
  return scalar_lanes(s, nan, src, numerics::silu_f32);
}

// gelu_f32 of the lanes (numerics' sequence); NaN lanes as silu_v.
inline __m512 gelu_v(__m512 x, const float* src, __mmask16 live) {
  const __m512 xf = flush_v(x);
  const __m512 x2 = flush_v(_mm512_mul_ps(xf, xf));
  const __m512 inner = flush_v(_mm512_add_ps(splat_f(1.0f), flush_v(_mm512_mul_ps(splat_f(0.044715f), x2))));
  const __m512 z = flush_v(_mm512_mul_ps(flush_v(_mm512_mul_ps(splat_f(1.59576912160573071f), xf)), inner));
  const __m512 neg = fbits(_mm512_xor_si512(ibits(z), splat_u(0x80000000u)));
  const __m512 d = flush_v(_mm512_add_ps(splat_f(1.0f), exp_v(neg)));
  const __m512 s = flush_v(_mm512_mul_ps(xf, recip_v(d)));
  const __mmask16 nan = _mm512_mask_cmp_ps_mask(live, x, x, _CMP_UNORD_Q);
  return scalar_lanes(s, nan, src, numerics::gelu_f32);
}

// softcap_f32 of the lanes (numerics' sequence); NaN lanes as silu_v.
inline __m512 softcap_v(__m512 x, float cap, float inv_cap, const float* src, __mmask16 live) {
  const __m512 y = flush_v(_mm512_mul_ps(flush_v(x), splat_f(inv_cap)));
  const __m512i sign = _mm512_and_si512(ibits(y), splat_u(0x80000000u));
  const __m512 a = fbits(_mm512_andnot_si512(splat_u(0x80000000u), ibits(y)));
  const __m512 aa = _mm512_add_ps(a, a);
  const __m512 e = exp_v(fbits(_mm512_xor_si512(ibits(aa), splat_u(0x80000000u))));
  const __m512 d = flush_v(_mm512_add_ps(splat_f(1.0f), e));
  const __m512 t = flush_v(_mm512_sub_ps(splat_f(1.0f), flush_v(_mm512_mul_ps(flush_v(_mm512_add_ps(e, e)), recip_v(d)))));
  const __m512 r = fbits(_mm512_xor_si512(ibits(flush_v(_mm512_mul_ps(splat_f(cap), t))), sign));
  const __mmask16 nan = _mm512_mask_cmp_ps_mask(live, y, y, _CMP_UNORD_Q);
  return scalar_lanes(r, nan, src, [cap](float x) { return numerics::softcap_f32(x, cap); });
}

// a * 2^s for a in [0, 2^48), exact for s >= 0, half to even for s < 0 (64-bit lanes).
inline __m512i round_shift_u(__m512i a, __m256i s32) {
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

inline __m512i square_terms(__m256i m, __m256i sh) {
  const __m512i m64 = _mm512_cvtepu32_epi64(m);
  return round_shift_u(_mm512_mul_epu32(m64, m64), sh);
}

}  // namespace

uint32_t elem_max_exp_field_avx512(const float* x, int64_t n) {
  __m512i acc = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; i += LANES) {
    const __m512i b = _mm512_maskz_loadu_epi32(lanes_at(i, n), x + i);
    acc = _mm512_max_epu32(acc, _mm512_and_si512(b, splat_u(0x7f800000u)));
  }
  return _mm512_reduce_max_epu32(acc) >> 23;
}

int64_t elem_sum_squares_avx512(const float* x, int64_t n, int32_t g) {
  __m512i acc = _mm512_setzero_si512();
  const __m512i off = _mm512_set1_epi32(300 + g);
  for (int64_t i = 0; i < n; i += LANES) {
    const __m512i b = _mm512_maskz_loadu_epi32(lanes_at(i, n), x + i);
    const __m512i field = _mm512_srli_epi32(_mm512_and_si512(b, splat_u(0x7f800000u)), 23);
    const __mmask16 live = _mm512_test_epi32_mask(field, field);
    const __m512i m = _mm512_maskz_or_epi32(live, _mm512_and_si512(b, splat_u(0x007fffffu)), splat_u(0x00800000u));
    const __m512i sh = _mm512_sub_epi32(_mm512_add_epi32(field, field), off);
    acc = _mm512_add_epi64(acc, square_terms(_mm512_castsi512_si256(m), _mm512_castsi512_si256(sh)));
    acc = _mm512_add_epi64(acc, square_terms(_mm512_extracti64x4_epi64(m, 1), _mm512_extracti64x4_epi64(sh, 1)));
  }
  return _mm512_reduce_add_epi64(acc);
}

void elem_scale_avx512(const float* x, const float* w, int64_t n, float r, float* out) {
  const __m512 rv = splat_f(r);
  for (int64_t i = 0; i < n; i += LANES) {
    const __mmask16 live = lanes_at(i, n);
    __m512 v = flush_v(_mm512_mul_ps(flush_v(_mm512_maskz_loadu_ps(live, x + i)), rv));
    if (w) v = flush_v(_mm512_mul_ps(v, flush_v(_mm512_maskz_loadu_ps(live, w + i))));
    _mm512_mask_storeu_ps(out + i, live, v);
  }
}

void elem_swiglu_avx512(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __mmask16 live = lanes_at(i, n);
    const __m512 s = silu_v(_mm512_maskz_loadu_ps(live, gate + i), gate + i, live);
    const __m512 u = flush_v(_mm512_maskz_loadu_ps(live, up + i));
    _mm512_mask_storeu_ps(out + i, live, flush_v(_mm512_mul_ps(s, u)));
  }
}

void elem_geglu_avx512(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __mmask16 live = lanes_at(i, n);
    const __m512 g = gelu_v(_mm512_maskz_loadu_ps(live, gate + i), gate + i, live);
    const __m512 u = flush_v(_mm512_maskz_loadu_ps(live, up + i));
    _mm512_mask_storeu_ps(out + i, live, flush_v(_mm512_mul_ps(g, u)));
  }
}

void elem_swiglu_oai_avx512(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  const __m512 lim = splat_f(limit), nlim = splat_f(-limit), al = splat_f(alpha);
  for (int64_t i = 0; i < n; i += LANES) {
    const __mmask16 live = lanes_at(i, n);
    const __m512 g = _mm512_maskz_loadu_ps(live, gate + i), u = _mm512_maskz_loadu_ps(live, up + i);
    const __m512 x = _mm512_min_ps(flush_v(g), lim);
    const __m512 y = _mm512_max_ps(_mm512_min_ps(flush_v(u), lim), nlim);
    const __m512 z = flush_v(_mm512_mul_ps(al, x));
    const __m512 neg = fbits(_mm512_xor_si512(ibits(z), splat_u(0x80000000u)));
    const __m512 d = flush_v(_mm512_add_ps(splat_f(1.0f), exp_v(neg)));
    const __m512 s = flush_v(_mm512_mul_ps(x, recip_v(d)));
    __m512 r = flush_v(_mm512_mul_ps(s, flush_v(_mm512_add_ps(y, splat_f(1.0f)))));
    const __mmask16 nan = _mm512_mask_cmp_ps_mask(live, g, g, _CMP_UNORD_Q) | _mm512_mask_cmp_ps_mask(live, u, u, _CMP_UNORD_Q);
    if (nan) {
      float tmp[LANES];
      _mm512_storeu_ps(tmp, r);
      for (int j = 0; j < LANES; ++j)
        if ((nan >> j) & 1) tmp[j] = numerics::swiglu_oai_f32(gate[i + j], up[i + j], alpha, limit);
      r = _mm512_loadu_ps(tmp);
    }
    _mm512_mask_storeu_ps(out + i, live, r);
  }
}

void elem_softcap_avx512(const float* x, int64_t n, float cap, float inv_cap, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __mmask16 live = lanes_at(i, n);
    _mm512_mask_storeu_ps(out + i, live, softcap_v(_mm512_maskz_loadu_ps(live, x + i), cap, inv_cap, x + i, live));
  }
}

void elem_add_avx512(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __mmask16 live = lanes_at(i, n);
    const __m512 va = flush_v(_mm512_maskz_loadu_ps(live, a + i));
    const __m512 vb = flush_v(_mm512_maskz_loadu_ps(live, b + i));
    _mm512_mask_storeu_ps(out + i, live, flush_v(_mm512_add_ps(va, vb)));
  }
}

void elem_exp_avx512(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __mmask16 live = lanes_at(i, n);
    _mm512_mask_storeu_ps(out + i, live, exp_v(_mm512_maskz_loadu_ps(live, x + i)));
  }
}

void elem_recip_avx512(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __mmask16 live = lanes_at(i, n);
    _mm512_mask_storeu_ps(out + i, live, recip_v(_mm512_maskz_loadu_ps(live, x + i)));
  }
}

void elem_silu_avx512(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += LANES) {
    const __mmask16 live = lanes_at(i, n);
    _mm512_mask_storeu_ps(out + i, live, silu_v(_mm512_maskz_loadu_ps(live, x + i), x + i, live));
  }
}

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
