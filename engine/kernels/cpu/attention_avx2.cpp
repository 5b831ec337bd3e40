// The AVX2 variant of the three attention passes (numerics/exact_inline.h).
//
// Scores: four positions at a time, one lane each. The query is split into bytes, q = 256 hi + lo
// (lo unsigned), so that a block's vpmaddwd pair sums with K stay far inside int32 (|K lo| pairs
// below 2^24, |K hi| below 2^23, 16 of them below 2^28): the two halves of a block and then the
// eight lanes of each position add in int32 (unpack and add, four positions at once), and
// T = 256 H + L is exact as a double (|T| < 2^35). A term is T * 2^sh (sh = e_q + e_k - G, at
// most 17), exact; adding and removing 1.5 * 2^52 rounds it half to even: on a right shift
// |T 2^sh| < 2^34, and on a left shift it is an integer (an even one from 2^35 on, where the sum's
// spacing is 2 past 2^53), which both steps keep exactly. The position's sum of terms is below
// 2^52 (attention_internal.h), so the double sum is the int64 sum, and fixed_to_f32_fast is one
// conversion to float plus exponent arithmetic on four lanes. Positions past the last four, and
// heads of more than MAX_SCORE_BLOCKS blocks, go through score_one. Weights: exp_f32 on 8 lanes,
// the same correctly rounded mul/add/sub sequence (no FMA). Values: per chunk of 64 positions and
// block, the V block widened to int64 lanes once for every query head of the group
// (attention_exact_cpu_heads calls attention_values_heads_avx2); each head then adds its terms
// over the chunk with the block's 32 int64 sums in eight registers, each position adding W * v
// (vpmuldq) rounded with one shift count. AVX2 has no 64-bit arithmetic shift, so a right shift
// by n rounds u = v + 2^62 (non-negative; floor(u / 2^n) has the parity of floor(v / 2^n) for
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

constexpr int64_t MAX_SCORE_BLOCKS = 16;  // head_dim <= 512 (the query's bytes stay in registers and L1)

// Lane j: the sum of the eight int32 lanes of the j-th argument (each sum below 2^31).
inline __m128i sum8x4(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
  const __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
  const __m256i x = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
  return _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
}

// Scores of positions t .. t + 3 (see the top of the file); qlo/qhi: the query's bytes, two
// vectors per block.
inline void scores4(const attn_query& q, const kv_head_view& k, int64_t t, int clog, float scale,
                    const __m256i* qlo, const __m256i* qhi, float* s) {
  const int16_t* kp[4];
  const int32_t* ep[4];
  for (int j = 0; j < 4; ++j) {
    kp[j] = k.q + (t + j) * k.q_stride;
    ep[j] = k.exp + (t + j) * k.exp_stride;
  }
  __m128i e[MAX_SCORE_BLOCKS];
  __m128i ek = _mm_set1_epi32(EXP_ZERO);
#pragma GCC unroll 2
  for (int64_t b = 0; b < q.n_blocks; ++b) {
    e[b] = _mm_setr_epi32(ep[0][b], ep[1][b], ep[2][b], ep[3][b]);
    ek = _mm_max_epi32(ek, e[b]);
  }
  // G of each position; an all-zero position adds no term and gives fixed_to_f32(0) = 0 below.
  const __m128i g = _mm_add_epi32(ek, _mm_set1_epi32(q.max_exp - SHIFT_CONST + clog));
  const __m256d magic = _mm256_set1_pd(0x1.8p+52);
  __m256d acc = _mm256_setzero_pd();
  for (int64_t b = 0; b < q.n_blocks; ++b) {
    if (q.exp[b] == EXP_ZERO) continue;
    __m256i lo[4], hi[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i k0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kp[j] + b * BLOCK));
      const __m256i k1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kp[j] + b * BLOCK + 16));
      lo[j] = _mm256_add_epi32(_mm256_madd_epi16(k0, qlo[2 * b]), _mm256_madd_epi16(k1, qlo[2 * b + 1]));
      hi[j] = _mm256_add_epi32(_mm256_madd_epi16(k0, qhi[2 * b]), _mm256_madd_epi16(k1, qhi[2 * b + 1]));
    }
    const __m256d tb = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(sum8x4(hi[0], hi[1], hi[2], hi[3])), _mm256_set1_pd(256.0)),
                                     _mm256_cvtepi32_pd(sum8x4(lo[0], lo[1], lo[2], lo[3])));
    // A zero K block adds nothing (as in score_one); shifts below -200 round to 0 like any other
    // past 2^-35 and keep 2^sh a normal double.
    const __m128i live = _mm_cmpgt_epi32(e[b], _mm_set1_epi32(EXP_ZERO));
    const __m128i sh = _mm_max_epi32(_mm_sub_epi32(_mm_add_epi32(e[b], _mm_set1_epi32(q.exp[b])), g), _mm_set1_epi32(-200));
    const __m256i sh64 = _mm256_cvtepi32_epi64(sh);
    const __m256d p2 = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(sh64, _mm256_set1_epi64x(1023)), 52));
    const __m256d x = _mm256_mul_pd(tb, p2);
    const __m256d r = _mm256_sub_pd(_mm256_add_pd(x, magic), magic);
    acc = _mm256_add_pd(acc, _mm256_and_pd(r, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(live))));
  }
  // fixed_to_f32_fast(acc, g) (acc is never -0: its terms are rounded sums), then flush(f * scale).
  const __m128i f = _mm_castps_si128(_mm256_cvtpd_ps(acc));
  const __m128i sign = _mm_and_si128(f, _mm_set1_epi32(static_cast<int32_t>(0x80000000u)));
  const __m128i biased = _mm_add_epi32(_mm_and_si128(_mm_srli_epi32(f, 23), _mm_set1_epi32(255)), g);
  const __m128i normal = _mm_or_si128(_mm_or_si128(sign, _mm_slli_epi32(biased, 23)), _mm_and_si128(f, _mm_set1_epi32(0x007fffff)));
  __m128i res = _mm_blendv_epi8(normal, sign, _mm_cmpgt_epi32(_mm_set1_epi32(1), biased));
  res = _mm_blendv_epi8(res, _mm_or_si128(sign, _mm_set1_epi32(0x7f800000)), _mm_cmpgt_epi32(biased, _mm_set1_epi32(254)));
  res = _mm_andnot_si128(_mm_cmpeq_epi32(f, _mm_setzero_si128()), res);
  const __m128i y = _mm_castps_si128(_mm_mul_ps(_mm_castsi128_ps(res), _mm_set1_ps(scale)));
  const __m128i subn = _mm_cmpeq_epi32(_mm_and_si128(y, _mm_set1_epi32(0x7f800000)), _mm_setzero_si128());
  _mm_storeu_si128(reinterpret_cast<__m128i*>(s),
                   _mm_blendv_epi8(y, _mm_and_si128(y, _mm_set1_epi32(static_cast<int32_t>(0x80000000u))), subn));
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

// ---- values ----
constexpr int64_t VALUE_CHUNK = 64;  // positions whose V block is widened at once (16 KiB)

// Block b of positions [0, n) of v widened to int64 lanes, vx[t * 32 + i] (blocks with exponent
// EXP_ZERO are skipped: value_block never reads them).
void widen_block(const kv_head_view& v, int64_t n, int64_t b, int64_t* vx) {
  for (int64_t t = 0; t < n; ++t) {
    if (v.exp[t * v.exp_stride + b] == EXP_ZERO) continue;
    const int16_t* a = v.q + t * v.q_stride + b * BLOCK;
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q)
      _mm256_store_si256(reinterpret_cast<__m256i*>(vx + t * BLOCK + 4 * q),
                         _mm256_cvtepi16_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + 4 * q))));
  }
}

// acc[0 .. 31] += round_shift(w[t] * v_t[i], ev[t * es] - gb) over positions [0, n) of one
// block (vx: widen_block), the eight accumulators held in registers. A left shift is vpmuldq and
// a shift per four elements; a right shift rounds u = p + 2^62 with logical shifts.
void value_block(const int32_t* w, const int32_t* ev, int64_t es, int64_t n, int32_t gb, const int64_t* vx, int64_t* acc) {
  __m256i s[8];
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) s[q] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + 4 * q));
  for (int64_t t = 0; t < n; ++t) {
    if (w[t] == 0 || ev[t * es] == EXP_ZERO) continue;
    const int sh = ev[t * es] - gb;
    const __m256i wv = _mm256_set1_epi64x(w[t]);
    const __m256i* x = reinterpret_cast<const __m256i*>(vx + t * BLOCK);
    if (sh >= 0) {
      const __m128i cnt = _mm_cvtsi32_si128(sh);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) s[q] = _mm256_add_epi64(s[q], _mm256_sll_epi64(_mm256_mul_epi32(_mm256_load_si256(x + q), wv), cnt));
    } else {
      const int nsh = -sh > 60 ? 60 : -sh;
      const __m128i cnt = _mm_cvtsi32_si128(nsh);
      const __m256i half_m1 = _mm256_set1_epi64x((int64_t{1} << (nsh - 1)) - 1);
      const __m256i unoffset = _mm256_set1_epi64x(int64_t{1} << (62 - nsh));
      const __m256i off = _mm256_set1_epi64x(int64_t{1} << 62), one = _mm256_set1_epi64x(1);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        const __m256i u = _mm256_add_epi64(_mm256_mul_epi32(_mm256_load_si256(x + q), wv), off);
        const __m256i odd = _mm256_and_si256(_mm256_srl_epi64(u, cnt), one);
        s[q] = _mm256_add_epi64(s[q], _mm256_sub_epi64(_mm256_srl_epi64(_mm256_add_epi64(_mm256_add_epi64(u, half_m1), odd), cnt), unoffset));
      }
    }
  }
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + 4 * q), s[q]);
}

}  // namespace

void attention_scores_avx2(const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                           float* s) {
  const int clog = numerics::ceil_log2(2 * q.n_blocks);
  int64_t t = 0;
  if (q.n_blocks <= MAX_SCORE_BLOCKS) {
    __m256i qlo[2 * MAX_SCORE_BLOCKS], qhi[2 * MAX_SCORE_BLOCKS];
    for (int64_t i = 0; i < 2 * q.n_blocks; ++i) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.q + 16 * i));
      qlo[i] = _mm256_and_si256(v, _mm256_set1_epi16(255));
      qhi[i] = _mm256_srai_epi16(v, 8);
    }
    for (; t + 4 <= n_kv; t += 4) scores4(q, k, t, clog, scale, qlo, qhi, s + t);
  }
  for (; t < n_kv; ++t) s[t] = score_one(q, k.q + t * k.q_stride, k.exp + t * k.exp_stride, clog, scale);
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

void attention_values_heads_avx2(const int32_t* w, int64_t w_stride, int64_t n_heads, const char* skip,
                                 const kv_head_view& v, int64_t n_kv, const int32_t* gv, int64_t n_blocks, int64_t* acc) {
  alignas(32) int64_t vx[VALUE_CHUNK * BLOCK];
  for (int64_t t0 = 0; t0 < n_kv; t0 += VALUE_CHUNK) {
    const int64_t n = n_kv - t0 < VALUE_CHUNK ? n_kv - t0 : VALUE_CHUNK;
    const kv_head_view vc{v.q + t0 * v.q_stride, v.exp + t0 * v.exp_stride, v.q_stride, v.exp_stride};
    for (int64_t b = 0; b < n_blocks; ++b) {
      if (gv[b] == EXP_ZERO) continue;  // every position's block b is zero
      widen_block(vc, n, b, vx);
      for (int64_t h = 0; h < n_heads; ++h)
        if (!skip || !skip[h]) value_block(w + h * w_stride + t0, vc.exp + b, v.exp_stride, n, gv[b], vx, acc + (h * n_blocks + b) * BLOCK);
    }
  }
}

void attention_values_avx2(const int32_t* w, const kv_head_view& v, int64_t n_kv,
                           const int32_t* gv, int64_t n_blocks, int64_t* acc) {
  attention_values_heads_avx2(w, 0, 1, nullptr, v, n_kv, gv, n_blocks, acc);
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
void attention_values_heads_avx2(const int32_t* w, int64_t w_stride, int64_t n_heads, const char* skip,
                                 const kv_head_view& v, int64_t n_kv, const int32_t* gv, int64_t n_blocks, int64_t* acc) {
  for (int64_t h = 0; h < n_heads; ++h)
    if (!skip || !skip[h]) attention_values_scalar(w + h * w_stride, v, n_kv, gv, n_blocks, acc + h * n_blocks * numerics::QBLOCK);
}
}  // namespace detaudit::kernels::cpu

#endif
