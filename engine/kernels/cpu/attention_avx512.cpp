// The AVX-512 (F, BW, DQ, VL, VNNI) variant of the three attention passes (attention_internal.h).
//
// Scores: eight positions at a time. For each query block, vpmaddwd of each position's K block
// with the query block gives 16 int32 pair sums (each < 2^31), widened to int64 and folded by a
// transposing add tree into one int64 lane per position; the lanes are rounded onto each
// position's grid with variable shifts (left exact, right half to even as
// (v + 2^(n-1) - 1 + ((v >> n) & 1)) >> n, n clamped to 63) and summed. fixed_to_f32 goes through
// double: the sum (< 2^52) and its power of two are exact there, and one conversion to float
// rounds half to even; results below 2^-126 are rebuilt as the reference's flushed value.
// Weights: exp_f32 on 16 lanes, the same correctly rounded mul/add/sub sequence (no FMA).
// Values: one value block at a time over every position, its 32 int64 sums held in four registers;
// each position adds W * v (vpmuldq) rounded with one shift count for the whole block.
//
// Everything below the pragma is static or a plain extern function, and no std:: template is
// instantiated there, so no AVX-512 code can leak into the rest of the program.
// GCC 12's AVX-512 intrinsics read a self-initialised undefined vector (_mm*_undefined_*),
// which -Wuninitialized reports at every use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_internal.h"
#include "numerics/exact.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")

namespace detaudit::kernels::cpu {

namespace {

constexpr int GROUP = 8;
constexpr int64_t CACHED_BLOCKS = 8;  // block exponents kept from the first pass (head_dim <= 256)
using numerics::EXP_ZERO;
constexpr int SHIFT_CONST = numerics::ACC_BITS - numerics::DOT_TERM_BITS;  // 18
constexpr int BLOCK = numerics::QBLOCK;

// v * 2^s rounded half to even, lane by lane (|v| < 2^62, s <= 62).
inline __m512i round_shift_v(__m512i v, __m512i s) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i one = _mm512_set1_epi64(1);
  const __mmask8 neg = _mm512_cmplt_epi64_mask(s, zero);
  const __m512i left = _mm512_sllv_epi64(v, _mm512_max_epi64(s, zero));
  if (neg == 0) return left;
  const __m512i n = _mm512_min_epi64(_mm512_sub_epi64(zero, s), _mm512_set1_epi64(63));
  const __m512i half_m1 = _mm512_sub_epi64(_mm512_sllv_epi64(one, _mm512_sub_epi64(n, one)), one);
  const __m512i odd = _mm512_and_si512(_mm512_srav_epi64(v, n), one);
  const __m512i right = _mm512_srav_epi64(_mm512_add_epi64(_mm512_add_epi64(v, half_m1), odd), n);
  return _mm512_mask_blend_epi64(neg, left, right);
}

// The 16 int32 lanes of p summed in adjacent pairs into 8 int64 lanes.
inline __m512i pair_sums_i64(__m512i p) {
  const __m512i hi = _mm512_srai_epi64(p, 32);
  const __m512i lo = _mm512_srai_epi64(_mm512_slli_epi64(p, 32), 32);
  return _mm512_add_epi64(lo, hi);
}

// Lane j of the result is the sum of the 8 lanes of s[j].
inline __m512i transpose_sum8(const __m512i* s) {
  __m512i x[4];
  for (int j = 0; j < 4; ++j) {
    x[j] = _mm512_add_epi64(_mm512_unpacklo_epi64(s[2 * j], s[2 * j + 1]),
                            _mm512_unpackhi_epi64(s[2 * j], s[2 * j + 1]));
  }
  const __m512i y0 = _mm512_add_epi64(_mm512_shuffle_i64x2(x[0], x[1], 0x88), _mm512_shuffle_i64x2(x[0], x[1], 0xDD));
  const __m512i y1 = _mm512_add_epi64(_mm512_shuffle_i64x2(x[2], x[3], 0x88), _mm512_shuffle_i64x2(x[2], x[3], 0xDD));
  return _mm512_add_epi64(_mm512_shuffle_i64x2(y0, y1, 0x88), _mm512_shuffle_i64x2(y0, y1, 0xDD));
}

// fixed_to_f32(v, g) for |v| < 2^52 and g in the double exponent range, 8 lanes.
inline __m256 fixed_to_f32_v(__m512i v, __m256i g) {
  const __m512d pow2 = _mm512_castsi512_pd(
      _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm256_add_epi32(g, _mm256_set1_epi32(1023))), 52));
  const __m512d x = _mm512_mul_pd(_mm512_cvtepi64_pd(v), pow2);
  const __m512d ax = _mm512_abs_pd(x);
  const __mmask8 tiny = _mm512_cmp_pd_mask(ax, _mm512_set1_pd(0x1p-126), _CMP_LT_OQ);
  const __mmask8 up = _mm512_cmp_pd_mask(ax, _mm512_set1_pd(0x1p-126 - 0x1p-151), _CMP_GE_OQ);
  const __m256i f = _mm256_castps_si256(_mm512_cvtpd_ps(x));
  const __m256i sign = _mm256_and_si256(f, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  const __m256i small = _mm256_mask_or_epi32(sign, up, sign, _mm256_set1_epi32(0x00800000));
  return _mm256_castsi256_ps(_mm256_mask_blend_epi32(tiny, f, small));
}

inline __m256 flush_v8(__m256 x) {
  const __m256i b = _mm256_castps_si256(x);
  const __mmask8 sub = _mm256_testn_epi32_mask(b, _mm256_set1_epi32(0x7f800000));
  return _mm256_castsi256_ps(
      _mm256_mask_and_epi32(b, sub, b, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u))));
}

inline __m512 flush_v16(__m512 x) {
  const __m512i b = _mm512_castps_si512(x);
  const __mmask16 sub = _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(
      _mm512_mask_and_epi32(b, sub, b, _mm512_set1_epi32(static_cast<int32_t>(0x80000000u))));
}

// Block b's K exponents of the group's positions (offsets: int32 elements from the first).
inline __m256i group_exps(const int32_t* e0, __m512i offsets, int64_t b) {
  return _mm512_i64gather_epi32(offsets, e0 + b, 4);
}

// Scores of positions t0 .. t0 + n - 1 (1 <= n <= 8); lanes past n repeat the last position.
void scores_group(const attn_query& q, const kv_head_view& k, int64_t t0, int n, int clog,
                  float scale, float* s) {
  const int16_t* kp[GROUP];
  int64_t off[GROUP];
  for (int j = 0; j < GROUP; ++j) {
    const int64_t dt = j < n ? j : n - 1;
    kp[j] = k.q + (t0 + dt) * k.q_stride;
    off[j] = dt * k.exp_stride;
  }
  const int32_t* e0 = k.exp + t0 * k.exp_stride;
  const __m512i offsets = _mm512_loadu_si512(off);
  __m256i ek = _mm256_set1_epi32(EXP_ZERO);
  __m256i cached[CACHED_BLOCKS];
  for (int64_t b = 0; b < q.n_blocks; ++b) {
    const __m256i eb = group_exps(e0, offsets, b);
    if (b < CACHED_BLOCKS) cached[b] = eb;
    ek = _mm256_max_epi32(ek, eb);
  }
  const __mmask8 empty = _mm256_cmpeq_epi32_mask(ek, _mm256_set1_epi32(EXP_ZERO));
  const __m256i g = _mm256_mask_blend_epi32(
      empty, _mm256_add_epi32(ek, _mm256_set1_epi32(q.max_exp - SHIFT_CONST + clog)), _mm256_setzero_si256());
  __m512i acc = _mm512_setzero_si512();
  for (int64_t b = 0; b < q.n_blocks; ++b) {
    if (q.exp[b] == EXP_ZERO) continue;
    const __m512i qb = _mm512_loadu_si512(q.q + b * BLOCK);
    __m512i p[GROUP];
    for (int j = 0; j < GROUP; ++j)
      p[j] = pair_sums_i64(_mm512_madd_epi16(_mm512_loadu_si512(kp[j] + b * BLOCK), qb));
    const __m512i t = transpose_sum8(p);
    const __m256i eb = b < CACHED_BLOCKS ? cached[b] : group_exps(e0, offsets, b);
    const __mmask8 live = _mm256_cmpneq_epi32_mask(eb, _mm256_set1_epi32(EXP_ZERO));
    const __m256i sh = _mm256_sub_epi32(_mm256_add_epi32(eb, _mm256_set1_epi32(q.exp[b])), g);
    acc = _mm512_mask_add_epi64(acc, live, acc, round_shift_v(t, _mm512_cvtepi32_epi64(sh)));
  }
  const __m256 r = flush_v8(_mm256_mul_ps(fixed_to_f32_v(acc, g), _mm256_set1_ps(scale)));
  _mm256_mask_storeu_ps(s + t0, static_cast<__mmask8>((1u << n) - 1u), r);
}

// exp_f32 for lanes x <= 0 (or -inf), the sequence of numerics::exp_f32 (elementwise.cpp).
inline __m512 exp_nonpos_v(__m512 x) {
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 kf = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), magic), magic);
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(kf, _mm512_set1_ps(0.693359375f))),
                                 _mm512_mul_ps(kf, _mm512_set1_ps(-2.12194440e-4f)));
  const __m512 z = _mm512_mul_ps(r, r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, z), r), _mm512_set1_ps(1.0f));
  const __m512i kk = _mm512_cvttps_epi32(kf);
  const __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OQ);
  const __mmask16 below = _mm512_cmplt_epi32_mask(kk, _mm512_set1_epi32(-126));
  const __mmask16 edge = _mm512_mask_cmp_ps_mask(_mm512_cmpeq_epi32_mask(kk, _mm512_set1_epi32(-126)), y,
                                                 _mm512_set1_ps(1.0f), _CMP_LT_OQ);
  const __m512 pw = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(kk, _mm512_set1_epi32(127)), 23));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~(small | below | edge)), _mm512_mul_ps(y, pw));
}

// rne(w * 2^30) for w in [0, 1] (see weight_of_unit in attention_cpu.cpp).
inline __m512i weight_of_unit_v(__m512 w) {
  const __mmask16 live = _mm512_cmp_ps_mask(w, _mm512_set1_ps(1.17549435e-38f), _CMP_GE_OQ);
  const __m512 big = _mm512_set1_ps(8388608.0f);
  const __m512 v = _mm512_mul_ps(w, _mm512_set1_ps(1073741824.0f));
  const __mmask16 frac = _mm512_cmp_ps_mask(v, big, _CMP_LT_OQ);
  const __m512 r = _mm512_mask_sub_ps(v, frac, _mm512_add_ps(v, big), big);
  return _mm512_maskz_cvttps_epi32(live, r);
}

// The 8 products w * a[0..7] rounded by round_shift(., sh).
inline __m512i value_terms(const int16_t* a, __m512i w, int sh, __m128i cnt, __m512i half_m1) {
  const __m512i p = _mm512_mul_epi32(_mm512_cvtepi16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))), w);
  if (sh >= 0) return _mm512_sll_epi64(p, cnt);
  const __m512i odd = _mm512_and_si512(_mm512_sra_epi64(p, cnt), _mm512_set1_epi64(1));
  return _mm512_sra_epi64(_mm512_add_epi64(_mm512_add_epi64(p, half_m1), odd), cnt);
}

// acc[0 .. 31] += round_shift(w[t] * v_t[b * 32 + i], ev_tb - gb) over the positions, the four
// accumulators held in registers.
void value_block_all(const int32_t* w, const kv_head_view& v, int64_t n_kv, int64_t b, int32_t gb,
                     int64_t* acc) {
  __m512i s0 = _mm512_loadu_si512(acc), s1 = _mm512_loadu_si512(acc + 8);
  __m512i s2 = _mm512_loadu_si512(acc + 16), s3 = _mm512_loadu_si512(acc + 24);
  const int16_t* a = v.q + b * BLOCK;
  const int32_t* ev = v.exp + b;
  for (int64_t t = 0; t < n_kv; ++t, a += v.q_stride, ev += v.exp_stride) {
    if (w[t] == 0 || *ev == EXP_ZERO) continue;
    const int sh = *ev - gb;
    const int n = sh >= 0 ? sh : (-sh > 63 ? 63 : -sh);
    const __m128i cnt = _mm_cvtsi32_si128(n);
    const __m512i half_m1 = _mm512_set1_epi64(sh >= 0 ? 0 : (int64_t{1} << (n - 1)) - 1);
    const __m512i wv = _mm512_set1_epi64(w[t]);
    s0 = _mm512_add_epi64(s0, value_terms(a, wv, sh, cnt, half_m1));
    s1 = _mm512_add_epi64(s1, value_terms(a + 8, wv, sh, cnt, half_m1));
    s2 = _mm512_add_epi64(s2, value_terms(a + 16, wv, sh, cnt, half_m1));
    s3 = _mm512_add_epi64(s3, value_terms(a + 24, wv, sh, cnt, half_m1));
  }
  _mm512_storeu_si512(acc, s0);
  _mm512_storeu_si512(acc + 8, s1);
  _mm512_storeu_si512(acc + 16, s2);
  _mm512_storeu_si512(acc + 24, s3);
}

}  // namespace

void attention_scores_avx512(const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                             float* s) {
  const int clog = numerics::ceil_log2(2 * q.n_blocks);
  for (int64_t t0 = 0; t0 < n_kv; t0 += GROUP) {
    const int n = n_kv - t0 < GROUP ? static_cast<int>(n_kv - t0) : GROUP;
    scores_group(q, k, t0, n, clog, scale, s);
  }
}

int64_t attention_weights_avx512(const float* s, int64_t n_kv, float m, int32_t* w) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512i sum = _mm512_setzero_si512();
  for (int64_t t = 0; t < n_kv; t += 16) {
    const __mmask16 live = n_kv - t >= 16 ? static_cast<__mmask16>(0xffff)
                                          : static_cast<__mmask16>((1u << (n_kv - t)) - 1u);
    const __m512 x = flush_v16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, s + t), mv));
    const __m512i wi = _mm512_maskz_mov_epi32(live, weight_of_unit_v(exp_nonpos_v(x)));
    _mm512_mask_storeu_epi32(w + t, live, wi);
    sum = _mm512_add_epi64(sum, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(wi)));
    sum = _mm512_add_epi64(sum, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(wi, 1)));
  }
  return _mm512_reduce_add_epi64(sum);
}

void attention_values_avx512(const int32_t* w, const kv_head_view& v, int64_t n_kv,
                             const int32_t* gv, int64_t n_blocks, int64_t* acc) {
  for (int64_t b = 0; b < n_blocks; ++b) value_block_all(w, v, n_kv, b, gv[b], acc + b * BLOCK);
}

}  // namespace detaudit::kernels::cpu

#else

#include "kernels/cpu/attention_internal.h"

namespace detaudit::kernels::cpu {
void attention_scores_avx512(const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                             float* s) {
  attention_scores_scalar(q, k, n_kv, scale, s);
}
int64_t attention_weights_avx512(const float* s, int64_t n_kv, float m, int32_t* w) {
  return attention_weights_scalar(s, n_kv, m, w);
}
void attention_values_avx512(const int32_t* w, const kv_head_view& v, int64_t n_kv,
                             const int32_t* gv, int64_t n_blocks, int64_t* acc) {
  attention_values_scalar(w, v, n_kv, gv, n_blocks, acc);
}
}  // namespace detaudit::kernels::cpu

#endif
