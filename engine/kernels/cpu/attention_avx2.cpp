// The AVX2 variant of the three attention passes (numerics/exact_inline.h).
//
// Scores: per position and block, two vpmaddwd give 16 int32 pair sums (each < 2^31), widened to
// int64 and summed; the block sums are rounded onto the position's grid and the total converted
// with fixed_to_f32_fast (attention_internal.h). Weights: exp_f32 on 8 lanes, the same correctly
// rounded mul/add/sub sequence (no FMA). Values: one half value block at a time over every
// position, its 16 int64 sums held in four registers, each position adding W * v (vpmuldq)
// rounded with one shift count. AVX2 has no 64-bit arithmetic shift, so a right shift by n
// rounds u = v + 2^62 (non-negative; floor(u / 2^n) has the parity of floor(v / 2^n) for
// n <= 60) with logical shifts and subtracts 2^(62-n); n is clamped to 60, which gives 0 like any
// larger shift because |W v| < 2^45.
//
// Everything below the pragma is static or a plain extern function, and no std:: template is
// instantiated there, so no AVX2 code can leak into the rest of the program.
// GCC 12's AVX2 intrinsics read a self-initialised undefined vector (_mm*_undefined_*),
// which -Wuninitialized reports at every use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_internal.h"
#include "numerics/exact.h"

#if defined(__x86_64__)
#pragma GCC target("avx2")

namespace detaudit::kernels::cpu {

namespace {

using numerics::EXP_ZERO;
constexpr int SHIFT_CONST = numerics::ACC_BITS - numerics::DOT_TERM_BITS;  // 18
constexpr int BLOCK = numerics::QBLOCK;

inline __m256i widen_sum(__m256i p) {
  return _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(p)),
                          _mm256_cvtepi32_epi64(_mm256_extracti128_si256(p, 1)));
}

// sum_i a_i b_i over one block (|sum| < 2^35).
inline int64_t dot_block(const int16_t* a, const int16_t* b) {
  const __m256i* pa = reinterpret_cast<const __m256i*>(a);
  const __m256i* pb = reinterpret_cast<const __m256i*>(b);
  const __m256i p0 = _mm256_madd_epi16(_mm256_loadu_si256(pa), _mm256_loadu_si256(pb));
  const __m256i p1 = _mm256_madd_epi16(_mm256_loadu_si256(pa + 1), _mm256_loadu_si256(pb + 1));
  const __m256i s = _mm256_add_epi64(widen_sum(p0), widen_sum(p1));
  __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
  return _mm_cvtsi128_si64(h);
}

float score_one(const attn_query& q, const int16_t* kq, const int32_t* ke, int clog, float scale) {
  int32_t ek_max = EXP_ZERO;
  for (int64_t b = 0; b < q.n_blocks; ++b) ek_max = ke[b] > ek_max ? ke[b] : ek_max;
  if (ek_max == EXP_ZERO) return numerics::inl::flush(0.0f * scale);
  const int32_t g = q.max_exp + ek_max - SHIFT_CONST + clog;
  int64_t acc = 0;
  for (int64_t b = 0; b < q.n_blocks; ++b) {
    if (q.exp[b] == EXP_ZERO || ke[b] == EXP_ZERO) continue;
    acc += round_shift_fast(dot_block(q.q + b * BLOCK, kq + b * BLOCK), q.exp[b] + ke[b] - g);
  }
  return numerics::inl::flush(fixed_to_f32_fast(acc, g) * scale);
}

inline __m256 flush_v(__m256 x) {
  const __m256i b = _mm256_castps_si256(x);
  const __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
  const __m256i z = _mm256_and_si256(b, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(b, z, sub));
}

// exp_f32 for lanes x <= 0 (or -inf), the sequence of numerics::exp_f32 (elementwise.cpp).
inline __m256 exp_nonpos_v(__m256 x) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 kf = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), magic), magic);
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(kf, _mm256_set1_ps(0.693359375f))),
                                 _mm256_mul_ps(kf, _mm256_set1_ps(-2.12194440e-4f)));
  const __m256 z = _mm256_mul_ps(r, r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, z), r), _mm256_set1_ps(1.0f));
  const __m256i kk = _mm256_cvttps_epi32(kf);
  const __m256i small = _mm256_castps_si256(_mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OQ));
  const __m256i below = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), kk);
  const __m256i edge = _mm256_and_si256(_mm256_cmpeq_epi32(kk, _mm256_set1_epi32(-126)),
                                        _mm256_castps_si256(_mm256_cmp_ps(y, _mm256_set1_ps(1.0f), _CMP_LT_OQ)));
  const __m256 pw = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(kk, _mm256_set1_epi32(127)), 23));
  const __m256i zero = _mm256_or_si256(_mm256_or_si256(small, below), edge);
  return _mm256_andnot_ps(_mm256_castsi256_ps(zero), _mm256_mul_ps(y, pw));
}

// rne(w * 2^30) for w in [0, 1] (see weight_of_unit in attention_cpu.cpp).
inline __m256i weight_of_unit_v(__m256 w) {
  const __m256 live = _mm256_cmp_ps(w, _mm256_set1_ps(1.17549435e-38f), _CMP_GE_OQ);
  const __m256 big = _mm256_set1_ps(8388608.0f);
  const __m256 v = _mm256_mul_ps(w, _mm256_set1_ps(1073741824.0f));
  const __m256 frac = _mm256_cmp_ps(v, big, _CMP_LT_OQ);
  const __m256 r = _mm256_blendv_ps(v, _mm256_sub_ps(_mm256_add_ps(v, big), big), frac);
  return _mm256_and_si256(_mm256_cvttps_epi32(r), _mm256_castps_si256(live));
}

// The rounding constants of one right shift by n (1 <= n <= 60) of u = v + 2^62.
struct shift_consts {
  __m128i cnt;
  __m256i half_m1;
  __m256i unoffset;
};

// The 4 products w * a[0..3] rounded by round_shift(., sh); sc is unused when sh >= 0.
inline __m256i value_terms(const int16_t* a, __m256i w, int sh, const shift_consts& sc) {
  const __m128i a4 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a));
  const __m256i p = _mm256_mul_epi32(_mm256_cvtepi16_epi64(a4), w);
  if (sh >= 0) return _mm256_sll_epi64(p, sc.cnt);
  const __m256i u = _mm256_add_epi64(p, _mm256_set1_epi64x(int64_t{1} << 62));
  const __m256i odd = _mm256_and_si256(_mm256_srl_epi64(u, sc.cnt), _mm256_set1_epi64x(1));
  return _mm256_sub_epi64(_mm256_srl_epi64(_mm256_add_epi64(_mm256_add_epi64(u, sc.half_m1), odd), sc.cnt),
                          sc.unoffset);
}

// acc[0 .. 15] += round_shift(w[t] * v_t[e0 + i], ev_tb - gb) over the positions (e0 = b * 32
// or b * 32 + 16), the four accumulators held in registers.
void value_half_all(const int32_t* w, const kv_head_view& v, int64_t n_kv, int64_t b, int64_t e0,
                    int32_t gb, int64_t* acc) {
  __m256i* out = reinterpret_cast<__m256i*>(acc);
  __m256i s0 = _mm256_loadu_si256(out), s1 = _mm256_loadu_si256(out + 1);
  __m256i s2 = _mm256_loadu_si256(out + 2), s3 = _mm256_loadu_si256(out + 3);
  const int16_t* a = v.q + e0;
  const int32_t* ev = v.exp + b;
  for (int64_t t = 0; t < n_kv; ++t, a += v.q_stride, ev += v.exp_stride) {
    if (w[t] == 0 || *ev == EXP_ZERO) continue;
    const int sh = *ev - gb;
    const int n = sh >= 0 ? sh : (-sh > 60 ? 60 : -sh);
    shift_consts sc;
    sc.cnt = _mm_cvtsi32_si128(n);
    sc.half_m1 = _mm256_set1_epi64x(sh >= 0 ? 0 : (int64_t{1} << (n - 1)) - 1);
    sc.unoffset = _mm256_set1_epi64x(int64_t{1} << (62 - n));
    const __m256i wv = _mm256_set1_epi64x(w[t]);
    s0 = _mm256_add_epi64(s0, value_terms(a, wv, sh, sc));
    s1 = _mm256_add_epi64(s1, value_terms(a + 4, wv, sh, sc));
    s2 = _mm256_add_epi64(s2, value_terms(a + 8, wv, sh, sc));
    s3 = _mm256_add_epi64(s3, value_terms(a + 12, wv, sh, sc));
  }
  _mm256_storeu_si256(out, s0);
  _mm256_storeu_si256(out + 1, s1);
  _mm256_storeu_si256(out + 2, s2);
  _mm256_storeu_si256(out + 3, s3);
}

}  // namespace

void attention_scores_avx2(const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                           float* s) {
  const int clog = numerics::ceil_log2(2 * q.n_blocks);
  for (int64_t t = 0; t < n_kv; ++t)
    s[t] = score_one(q, k.q + t * k.q_stride, k.exp + t * k.exp_stride, clog, scale);
}

int64_t attention_weights_avx2(const float* s, int64_t n_kv, float m, int32_t* w) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256i sum = _mm256_setzero_si256();
  int64_t t = 0;
  for (; t + 8 <= n_kv; t += 8) {
    const __m256 x = flush_v(_mm256_sub_ps(_mm256_loadu_ps(s + t), mv));
    const __m256i wi = weight_of_unit_v(exp_nonpos_v(x));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + t), wi);
    sum = _mm256_add_epi64(sum, widen_sum(wi));
  }
  __m128i h = _mm_add_epi64(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  h = _mm_add_epi64(h, _mm_unpackhi_epi64(h, h));
  return _mm_cvtsi128_si64(h) + attention_weights_scalar(s + t, n_kv - t, m, w + t);
}

void attention_values_avx2(const int32_t* w, const kv_head_view& v, int64_t n_kv,
                           const int32_t* gv, int64_t n_blocks, int64_t* acc) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    value_half_all(w, v, n_kv, b, b * BLOCK, gv[b], acc + b * BLOCK);
    value_half_all(w, v, n_kv, b, b * BLOCK + 16, gv[b], acc + b * BLOCK + 16);
  }
}

}  // namespace detaudit::kernels::cpu

#else

#include "kernels/cpu/attention_internal.h"

namespace detaudit::kernels::cpu {
void attention_scores_avx2(const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                           float* s) {
  attention_scores_scalar(q, k, n_kv, scale, s);
}
int64_t attention_weights_avx2(const float* s, int64_t n_kv, float m, int32_t* w) {
  return attention_weights_scalar(s, n_kv, m, w);
}
void attention_values_avx2(const int32_t* w, const kv_head_view& v, int64_t n_kv,
                           const int32_t* gv, int64_t n_blocks, int64_t* acc) {
  attention_values_scalar(w, v, n_kv, gv, n_blocks, acc);
}
}  // namespace detaudit::kernels::cpu

#endif
