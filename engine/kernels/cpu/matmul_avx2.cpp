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
#pragma GCC target("avx2,fma,f16c")
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
constexpr double ROUND_MAGIC = 0x1.8000000000002p+1;  // 3 + 2^-50
constexpr uint64_t ROUND_MAGIC_BITS = 0x4008000000000002ull;
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

// A block's products for 16 rows and NT tokens (token k's activations at a + k * stride): sums[k][0..1]
// (rows 0-7, 8-15) over pairs 0..7 (all pairs in narrow panels), sums[k][2..3] over pairs 8..15 (wide
// panels only). Each weight vector is loaded once for all NT tokens.
template <bool WIDE, int NT>
inline void block_products_n(const int32_t* cb, const int16_t* a, int64_t stride, __m256i (*sums)[4]) {
  #pragma GCC unroll 16
  for (int k = 0; k < NT; ++k)
    for (int i = 0; i < 4; ++i) sums[k][i] = _mm256_setzero_si256();
  #pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(cb + j * PANEL_ROWS));
    const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(cb + j * PANEL_ROWS + 8));
    const int h = (WIDE && j >= 8) ? 2 : 0;
    #pragma GCC unroll 4
    for (int k = 0; k < NT; ++k) {
      int32_t pair;
      __builtin_memcpy(&pair, a + k * stride + 2 * j, 4);
      const __m256i aj = _mm256_set1_epi32(pair);
      sums[k][h] = _mm256_add_epi32(sums[k][h], _mm256_madd_epi16(aj, w0));
      sums[k][h + 1] = _mm256_add_epi32(sums[k][h + 1], _mm256_madd_epi16(aj, w1));
      // Keeps the running sums in registers: integer addition being associative, GCC otherwise
      // computes all the products first, spills them to the stack and adds them as a tree (about
      // a fifth of the kernel's time on Zen 3).
      __asm__("" : "+x"(sums[k][h]), "+x"(sums[k][h + 1]));
    }
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
    __m256i s1[1][4];
    block_products_n<WIDE, 1>(p.codes + b * 16 * PANEL_ROWS, x.q + (t * nb + b) * numerics::QBLOCK, 0, s1);
    const __m256i* sums = s1[0];
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

// The terms of one block for NT tokens (activation block i + k * stride of token k) through
// double (panel_scales' wd, wm0, wm1 and the act_pack's powers of two), as dround: each panel
// scale vector is loaded once for all tokens, one OR collects every term's pattern.
// MIN: 0 no offset term, 1 one per half block (wm0 * A0 + wm1 * A1: both products integers
// times the same power of two, their sum below 2^44, so the fused sum is exact), 2 one per block
// (panel::min_whole: wm0 * (A0 + A1), one fused multiply-add on act_pack::sum_scaled).
template <bool WIDE, int MIN, int NT>
inline void block_terms_n(const panel& p, const act_view& x, int64_t i, int64_t stride, int64_t o, const __m256i (*sums)[4],
                          __m256i (*acc)[4], __m256i& any) {
  const __m256d magic = _mm256_set1_pd(ROUND_MAGIC);
  __m256d v[NT][4];
  #pragma GCC unroll 4
  for (int k = 0; k < NT; ++k) {
    v[k][0] = lo_pd(sums[k][0]);
    v[k][1] = hi_pd(sums[k][0]);
    v[k][2] = lo_pd(sums[k][1]);
    v[k][3] = hi_pd(sums[k][1]);
    if (WIDE) {
      v[k][0] = _mm256_add_pd(v[k][0], lo_pd(sums[k][2]));
      v[k][1] = _mm256_add_pd(v[k][1], hi_pd(sums[k][2]));
      v[k][2] = _mm256_add_pd(v[k][2], lo_pd(sums[k][3]));
      v[k][3] = _mm256_add_pd(v[k][3], hi_pd(sums[k][3]));
    }
  }
  #pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m256d wd = _mm256_load_pd(p.wd + o + 4 * q);
    __m256d wm0, wm1;
    if (MIN) wm0 = _mm256_load_pd(p.wm0 + o + 4 * q);
    if (MIN == 1) wm1 = _mm256_load_pd(p.wm1 + o + 4 * q);
    #pragma GCC unroll 4
    for (int k = 0; k < NT; ++k) {
      const int64_t ik = i + k * stride;
      const __m256i b = _mm256_castpd_si256(_mm256_fmadd_pd(_mm256_mul_pd(v[k][q], wd), _mm256_set1_pd(x.scale[ik]), magic));
      acc[k][q] = _mm256_add_epi64(acc[k][q], b);
      any = _mm256_or_si256(any, b);
      if (MIN) {
        __m256d m;
        if (MIN == 1) m = _mm256_add_pd(_mm256_fmadd_pd(wm1, _mm256_set1_pd(x.half_scaled[2 * ik + 1]), _mm256_mul_pd(wm0, _mm256_set1_pd(x.half_scaled[2 * ik]))), magic);
        else m = _mm256_fmadd_pd(wm0, _mm256_set1_pd(x.sum_scaled[ik]), magic);
        const __m256i c = _mm256_castpd_si256(m);
        acc[k][q] = _mm256_add_epi64(acc[k][q], c);
        any = _mm256_or_si256(any, c);
      }
    }
  }
}

// True when some token's activation block i0 + k * nb (k < nt) is not all zero.
inline bool block_live(const act_view& x, int64_t i0, int64_t nb, int nt) {
  bool live = false;
  for (int k = 0; k < nt; ++k) live |= x.scale[i0 + k * nb] != 0.0;
  return live;
}

// Adds one token's 16 row sums (acc: their bit patterns after n terms each) to out.
inline void add_rows_out(const __m256i* acc, int64_t n, int64_t* out) {
  const __m256i off = _mm256_set1_epi64x(static_cast<int64_t>(static_cast<uint64_t>(n) * ROUND_MAGIC_BITS));
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4 * q), _mm256_add_epi64(load4(out + 4 * q), _mm256_sub_epi64(acc[q], off)));
}

// kernel_token with the epilogue through double, for tokens t .. t + NT - 1 (out: their 16 rows
// each). A block is skipped only when every token's activation block is zero; otherwise a token
// whose scale is 0 adds terms y * 0.0 + M = M, zeros, as it would have added nothing. False when
// any token's term reached 2^51 (out is then unchanged).
template <bool WIDE, int MIN, int NT, int NP = 1>
bool kernel_tokens_pd(const panel& p, const panel& p1, const act_view& x, int64_t t, int64_t* out, int64_t* out1);

template <bool WIDE, int MIN, int NT>
bool kernel_tokens_pd(const panel& p, const act_view& x, int64_t t, int64_t* out) {
  return kernel_tokens_pd<WIDE, MIN, NT, 1>(p, p, x, t, out, out);
}

// Tokens per pass over a panel: every weight vector loaded once for NT tokens (Zen 3, scratch
// harness, 16 rows x 2048, 64 tokens: q4_K 36 -> 31, q8_0 31.5 -> 27 tsc cycles per token and
// block against one token per pass). Four narrow tokens' sums take 8 of the 16 vector registers;
// a wide panel has twice the sums, so three tokens (12 registers; q6_K 31.3 -> 30.3 against two).
template <bool WIDE, int MIN>
void kernel_all(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc) {
  constexpr int NT = WIDE ? 3 : 4;
  int64_t t = t0;
  for (; t + NT <= t1; t += NT)
    if (!kernel_tokens_pd<WIDE, MIN, NT>(p, x, t, acc + (t - t0) * PANEL_ROWS))
      for (int64_t k = t; k < t + NT; ++k)
        if (!kernel_tokens_pd<WIDE, MIN, 1>(p, x, k, acc + (k - t0) * PANEL_ROWS)) kernel_token<WIDE, MIN != 0>(p, x, k, acc + (k - t0) * PANEL_ROWS);
  for (; t < t1; ++t)
    if (!kernel_tokens_pd<WIDE, MIN, 1>(p, x, t, acc + (t - t0) * PANEL_ROWS)) kernel_token<WIDE, MIN != 0>(p, x, t, acc + (t - t0) * PANEL_ROWS);
}

// ---- two narrow panels at once ----
// block_products_n for two narrow panels (codes cb0 and cb1: 32 rows) and NT tokens: panel 0's
// sums in sums[k], panel 1's in sums[NT + k]. Each activation pair is broadcast once for both
// panels: on Zen 3 a broadcast takes a vector pipe, as a product does (llvm-mca -mcpu=znver3).
template <int NT>
__attribute__((always_inline)) inline void block_products_2p(const int32_t* cb0, const int32_t* cb1, const int16_t* a, int64_t stride,
                                                             __m256i (*sums)[4]) {
  const int16_t* ak[NT];
#pragma GCC unroll 4
  for (int k = 0; k < NT; ++k) {
    ak[k] = a + k * stride;
    // One pointer per token: GCC otherwise keeps every pair's offset (k * stride + 2j) in a stack
    // slot and reloads it before each broadcast.
    __asm__("" : "+r"(ak[k]));
  }
#pragma GCC unroll 8
  for (int k = 0; k < 2 * NT; ++k) sums[k][0] = sums[k][1] = _mm256_setzero_si256();
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    __m256i wv[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      wv[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>((v < 2 ? cb0 : cb1) + j * PANEL_ROWS + 8 * (v % 2)));
      // In a register once for every token (GCC otherwise loads it again as each product's
      // memory operand, and the load pipes become the limit).
      __asm__("" : "+x"(wv[v]));
    }
#pragma GCC unroll 4
    for (int k = 0; k < NT; ++k) {
      int32_t pair;
      __builtin_memcpy(&pair, ak[k] + 2 * j, 4);
      const __m256i aj = _mm256_set1_epi32(pair);
#pragma GCC unroll 2
      for (int q = 0; q < 2; ++q) {
        __m256i* sk = sums[q * NT + k];
        sk[0] = _mm256_add_epi32(sk[0], _mm256_madd_epi16(aj, wv[2 * q]));
        sk[1] = _mm256_add_epi32(sk[1], _mm256_madd_epi16(aj, wv[2 * q + 1]));
        __asm__("" : "+x"(sk[0]), "+x"(sk[1]));  // running sums in registers (block_products_n)
      }
    }
  }
}

// kernel_tokens_pd over NP panels: NP = 2 reads two narrow panels of the same offset kind (p and
// p1, their sums added to out and out1) through block_products_2p.
template <bool WIDE, int MIN, int NT, int NP>
bool kernel_tokens_pd(const panel& p, const panel& p1, const act_view& x, int64_t t, int64_t* out, int64_t* out1) {
  static_assert(NP == 1 || (NP == 2 && !WIDE), "two panels at once: narrow ones");
  const int64_t nb = p.n_blocks;
  __m256i acc[NP * NT][4];
  for (int k = 0; k < NP * NT; ++k)
    for (int q = 0; q < 4; ++q) acc[k][q] = _mm256_setzero_si256();
  __m256i any = _mm256_set1_epi64x(static_cast<int64_t>(ROUND_MAGIC_BITS));
  int64_t n = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i0 = t * nb + b;
    if (!block_live(x, i0, nb, NT)) continue;
    __m256i sums[NP * NT][4];
    const int16_t* a = x.q + i0 * numerics::QBLOCK;
    if constexpr (NP == 1) block_products_n<WIDE, NT>(p.codes + b * 16 * PANEL_ROWS, a, nb * numerics::QBLOCK, sums);
    else block_products_2p<NT>(p.codes + b * 16 * PANEL_ROWS, p1.codes + b * 16 * PANEL_ROWS, a, nb * numerics::QBLOCK, sums);
    block_terms_n<WIDE, MIN, NT>(p, x, i0, nb, b * PANEL_ROWS, sums, acc, any);
    if constexpr (NP == 2) block_terms_n<WIDE, MIN, NT>(p1, x, i0, nb, b * PANEL_ROWS, sums + NT, acc + NT, any);
    n += MIN ? 2 : 1;
  }
  if (!round_ok(any)) return false;
  for (int k = 0; k < NP * NT; ++k) add_rows_out(acc[k], n, (k < NT ? out : out1) + (k % NT) * PANEL_ROWS);
  return true;
}

// One token of one panel the single-panel way (kernel_all's fallback chain).
template <bool WIDE, int MIN>
void kernel_one(const panel& p, const act_view& x, int64_t t, int64_t* out) {
  if (!kernel_tokens_pd<WIDE, MIN, 1>(p, x, t, out)) kernel_token<WIDE, MIN != 0>(p, x, t, out);
}

// Tokens [t0, t1) of two narrow panels, two tokens per pass (four sums per token in eight of the
// 16 registers); a pass whose terms left the binade is redone panel by panel.
template <int MIN>
void kernel_all_2p(const panel& p0, const panel& p1, const act_view& x, int64_t t0, int64_t t1, int64_t* acc0, int64_t* acc1) {
  constexpr int NT = 2;
  int64_t t = t0;
  for (; t < t1; t += NT) {
    const int64_t m = std::min<int64_t>(NT, t1 - t);
    int64_t* o0 = acc0 + (t - t0) * PANEL_ROWS;
    int64_t* o1 = acc1 + (t - t0) * PANEL_ROWS;
    if (m == NT ? kernel_tokens_pd<false, MIN, NT, 2>(p0, p1, x, t, o0, o1) : kernel_tokens_pd<false, MIN, 1, 2>(p0, p1, x, t, o0, o1)) continue;
    for (int64_t k = 0; k < m; ++k) {
      kernel_one<false, MIN>(p0, x, t + k, o0 + k * PANEL_ROWS);
      kernel_one<false, MIN>(p1, x, t + k, o1 + k * PANEL_ROWS);
    }
  }
}

// ---- the few-token path: q8_0, q4_0, q4_K, q5_K and q6_K hand-fused, the other integer types through gemv_blocks.h ----

// Sums of lanes 0..3 of each of p[0..7] as the 8 lanes of *lo, of lanes 4..7 as those of *hi.
inline void reduce8_halves(const __m256i* p, __m256i* lo, __m256i* hi) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  // a: 128-bit lane L holds the lane-L halves' sums of p0..p3; b likewise for p4..p7.
  *lo = _mm256_permute2x128_si256(a, b, 0x20);
  *hi = _mm256_permute2x128_si256(a, b, 0x31);
}

// Sums of the 8 int32 lanes of each of p[0..7], as 8 lanes in order.
inline __m256i reduce8(const __m256i* p) {
  __m256i lo, hi;
  reduce8_halves(p, &lo, &hi);
  return _mm256_add_epi32(lo, hi);
}

// ---- codes against activations in even/odd order (act_pack::q_eo) ----
// A 16-bit lane of a block's packed codes holds two neighbouring elements, one per byte (or per
// nibble pair); masks and shifts within the lane give the even elements' codes in one vector and
// the odd elements' in another, which pair with the block's activations stored evens first. This
// replaces the byte-to-word widening (two shuffle uops per 16 codes on Zen 3, the bottleneck of
// the row kernels) with single-uop lane operations.

inline __m256i ld16(const int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Signed bytes: the low byte of each 16-bit lane (even elements) and the high byte (odd).
inline __m256i even_s8(__m256i w) { return _mm256_srai_epi16(_mm256_slli_epi16(w, 8), 8); }
inline __m256i odd_s8(__m256i w) { return _mm256_srai_epi16(w, 8); }

// A block's products: even and odd codes with its 32 activations ae in q_eo order. Lanes 0..3
// hold elements 0..15 (the first half-block), lanes 4..7 elements 16..31.
inline __m256i eo_products(__m256i even, __m256i odd, const int16_t* ae) {
  return _mm256_add_epi32(_mm256_madd_epi16(even, ld16(ae)), _mm256_madd_epi16(odd, ld16(ae + 16)));
}

// The fused row kernels take GROUPS groups of eight blocks per iteration and compute every group's
// products before any group's epilogue. A group's block sums come at the end of a long dependent
// chain (products, the hadd tree, conversions, rounding); with one group per iteration the ~140
// vector uops of the next group sit behind that chain and too little is in flight (Zen 3, q4_K:
// 16.4 against 17.9 ns per super-block with rows in L2, 17.3 against 18.8 from DRAM). Rows stay one
// sequential stream: pairing two rows instead measured as fast in L2 and far slower from DRAM (two
// streams per thread).
constexpr int GROUPS = 2;

// v shifted left by s bits (right by -s when s < 0) in each 16-bit lane.
inline __m256i shift16(__m256i v, int s) { return s >= 0 ? _mm256_slli_epi16(v, s) : _mm256_srli_epi16(v, -s); }

// One q8_0 row against one token, 8 blocks per epilogue; false for a non-finite scale.
bool gemv_row_q8_0_int(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
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

// The eight block sums of a q4_K super-block sb (144 bytes) with its 256 activations ae (q_eo
// order); FIVE: a q5_K super-block (176 bytes: d, dmin, scales[12], qh[32], qs[128]), bit j of
// qh[l] the fifth bit (16) of element l of block j. Byte l of the 32 code bytes of blocks 2ch and
// 2ch + 1 holds element l of block 2ch (low nibble) and of block 2ch + 1 (high nibble), so
// 16-bit lane i holds, from bit 0: element 2i of block 2ch, 2i of 2ch + 1, 2i + 1 of 2ch, 2i + 1
// of 2ch + 1.
template <bool FIVE = false>
inline void q4k_products(const uint8_t* sb, const int16_t* ae, __m256i* p) {
  const __m256i low4 = _mm256_set1_epi16(15), bit4 = _mm256_set1_epi16(16);
  const uint8_t* qs = sb + (FIVE ? 48 : 16);
  __m256i qh = _mm256_setzero_si256();
  if (FIVE) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 16));
#pragma GCC unroll 4
  for (int ch = 0; ch < 4; ++ch) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * ch));
    __m256i e0 = _mm256_and_si256(w, low4), e1 = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
    __m256i o0 = _mm256_and_si256(_mm256_srli_epi16(w, 8), low4), o1 = _mm256_srli_epi16(w, 12);
    if (FIVE) {
      // Bit j of an even element's byte is bit j of the lane, of an odd element's bit 8 + j;
      // each moves to bit 4.
      const int j0 = 2 * ch, j1 = 2 * ch + 1;
      e0 = _mm256_or_si256(e0, _mm256_and_si256(shift16(qh, 4 - j0), bit4));
      e1 = _mm256_or_si256(e1, _mm256_and_si256(shift16(qh, 4 - j1), bit4));
      o0 = _mm256_or_si256(o0, _mm256_and_si256(_mm256_srli_epi16(qh, j0 + 4), bit4));
      o1 = _mm256_or_si256(o1, _mm256_and_si256(_mm256_srli_epi16(qh, j1 + 4), bit4));
    }
    p[2 * ch] = eo_products(e0, o0, ae + 64 * ch);
    p[2 * ch + 1] = eo_products(e1, o1, ae + 64 * ch + 32);
  }
}

// One q4_K row against one token: one 144-byte super-block (8 blocks) per group.
bool gemv_row_q4_k_int(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  const int16_t* a = x.q_eo + t * nb * 32;
  const int64_t c_xmax = c - x.max_exp[t];
  __m256i acc = _mm256_setzero_si256();
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    const uint8_t* sb = row + (b0 / 8) * 144;
    uint16_t hd, hm;
    __builtin_memcpy(&hd, sb, 2);
    __builtin_memcpy(&hm, sb + 2, 2);
    int64_t dm, doff, mm, moff;
    if (!fp16_parts(hd, bound, &dm, &doff) || !fp16_parts(hm, bound, &mm, &moff)) return false;
    __m256i p[8];
    q4k_products(sb, a + b0 * 32, p);
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

// The products of a decoded group's live blocks with their activations a (32 per block): each
// half-block's 16 in one vpmaddwd, p1 added into p0 unless PER16; zeros past live.
template <bool PER16>
inline void group_products(const gemv_group& g, const int16_t* a, int live, __m256i* p0, __m256i* p1) {
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    p0[k] = p1[k] = _mm256_setzero_si256();
    if (k >= live) continue;
    const int16_t* ak = a + k * 32;
    const __m256i c0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.code[k])));
    const __m256i c1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g.code[k] + 16)));
    p0[k] = _mm256_madd_epi16(c0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ak)));
    p1[k] = _mm256_madd_epi16(c1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ak + 16)));
    if (!PER16) p0[k] = _mm256_add_epi32(p0[k], p1[k]);
  }
}

// One row of any type with a decoder in gemv_blocks.h against one token: eight blocks per group,
// each half-block's 16 products in one vpmaddwd (their sums kept apart when the halves' scales
// differ, PER16), the epilogue four int64 lanes at a time with 32 x 32 -> 64-bit products only
// (d_mant * scale and m_mant * mcoef fit 18 bits, half-block sums 25 bits).
template <class D>
struct gemv_row_blocks_int {
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
      group_products<D::PER16>(g, a + b0 * 32, live, p0, p1);
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

// The activations' powers of two of blocks [b0, b0 + 8) of token t (zeros past the row's end),
// copied into tail (room for 8) at the end of a row.
inline const double* scales8(const double* s, int64_t b0, int64_t nb, double* tail) {
  if (nb - b0 >= 8) return s + b0;
  for (int k = 0; k < 8; ++k) tail[k] = b0 + k < nb ? s[b0 + k] : 0.0;
  return tail;
}

// The eight 6-bit scales and mins of a q4_K super-block (its 12 scale bytes s, read as 16: the
// super-block goes on) as int32 lanes. Bytes 0..3 hold scales 0..3 (low 6 bits), 4..7 mins 0..3,
// 8..11 the low nibbles of scales 4..7 (low) and mins 4..7 (high), whose top two bits are the top
// bits of bytes 0..3 (scales) and 4..7 (mins). One shuffle lines the low parts up as scales 0..7
// then mins 0..7, another the bytes with the top bits; shifts and masks within bytes finish it.
inline void q4k_scales8(const uint8_t* s, __m256i* sc, __m256i* mn) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i lo = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
  // Mins 4..7 take the high nibbles of bytes 8..11 (dword 3 shifted); 16-bit shifts carry bits
  // across bytes, which the masks drop.
  const __m128i low = _mm_and_si128(_mm_blend_epi32(lo, _mm_srli_epi16(lo, 4), 8), _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(top, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  const __m128i all = _mm_or_si128(low, high);
  *sc = _mm256_cvtepu8_epi32(all);
  *mn = _mm256_cvtepu8_epi32(_mm_srli_si128(all, 8));
}

// Eight fp16 fields (low 16 bits of each int32 lane of h) times 2^-bound as doubles, exact (an
// fp16 value times a power of two: wblock's mant * 2^(exp - bound)); false when one is not finite.
inline bool fp16x8_scaled(__m128i h16, __m256d rb, __m256d* lo, __m256d* hi) {
  const __m128i e = _mm_and_si128(h16, _mm_set1_epi16(0x7c00));
  if (!_mm_testz_si128(_mm_cmpeq_epi16(e, _mm_set1_epi16(0x7c00)), _mm_set1_epi16(-1))) return false;
  const __m256 f = _mm256_cvtph_ps(h16);
  *lo = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(f)), rb);
  *hi = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)), rb);
  return true;
}

// q8_0 (34-byte blocks: fp16 d, 32 int8 codes; Q40 false) and q4_0 rows (18-byte blocks: fp16 d,
// 16 bytes of nibbles, element l < 16 the low nibble of byte l, the others the high nibble of byte
// l - 16; codes u - 8, so each block sum is the nibbles' products less 8 times the activation block
// sum, an int32) against one token: gemv_row_q8_0_int / the q4_0 block decoder's row with the
// epilogue through double, x = T * d * 2^-bound * 2^(C + e_a - max), eight blocks to an epilogue,
// two such groups per iteration (GROUPS).
template <bool Q40>
bool gemv_row_d16(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  constexpr int64_t BLOCK = Q40 ? 18 : 34;
  const int16_t* a = x.q_eo + t * nb * 32;
  const double* sa = x.scale + t * nb;
  const int32_t* hs = x.half_sum + t * nb * 2;
  const __m256d rb = _mm256_set1_pd(bound == numerics::EXP_ZERO ? 0.0 : pow2(-static_cast<int64_t>(bound)));
  // q4_0: 16-bit lane i (of 8) of a block's bytes holds, from bit 0, elements 2i, 2i + 16, 2i + 1,
  // 2i + 17; the bytes in both 128-bit halves, each 32-bit lane shifted by its own count.
  const __m256i even_shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), odd_shift = _mm256_setr_epi32(8, 8, 8, 8, 12, 12, 12, 12);
  const __m256i low4 = _mm256_set1_epi32(0x000f000f);
  dround r;
  r.init();
  int64_t n = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += 8 * GROUPS) {
    const int live = nb - b0 > 8 ? GROUPS : 1;  // groups of eight blocks this iteration
    row_prefetch<8 * GROUPS * BLOCK>(row + b0 * BLOCK);
    __m256i sums[GROUPS];
    __m128i h16[GROUPS];
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      __m256i p[8];
      // The blocks' fp16 d, four to a 64-bit word, assembled in general registers (one insert
      // per block would cost two vector uops each). Blocks with a zero activation block are
      // multiplied like the others: their terms are zeros times 0.0.
      uint64_t hw[2] = {0, 0};
      const int64_t nk = nb - b0 - 8 * g;  // blocks left in the row
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const int64_t b = b0 + 8 * g + k;
        p[k] = _mm256_setzero_si256();
        if (k >= nk) continue;
        const uint8_t* blk = row + b * BLOCK;
        uint16_t h;
        __builtin_memcpy(&h, blk, 2);
        hw[k / 4] |= static_cast<uint64_t>(h) << (16 * (k % 4));
        __m256i even, odd;
        if (Q40) {
          const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
          even = _mm256_and_si256(_mm256_srlv_epi32(bytes, even_shift), low4);
          odd = _mm256_and_si256(_mm256_srlv_epi32(bytes, odd_shift), low4);
        } else {
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
          even = even_s8(w);
          odd = odd_s8(w);
        }
        p[k] = eo_products(even, odd, a + b * 32);
      }
      h16[g] = _mm_set_epi64x(static_cast<int64_t>(hw[1]), static_cast<int64_t>(hw[0]));
      sums[g] = reduce8(p);
    }
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      const int64_t bg = b0 + 8 * g;
      __m256d d_lo, d_hi;
      if (!fp16x8_scaled(h16[g], rb, &d_lo, &d_hi)) return false;
      __m256i v = sums[g];
      if (Q40) {
        // Block sums of the activations: pairs of half sums added, back in block order.
        alignas(32) int32_t tail_hs[16];
        const int32_t* h8 = hs + bg * 2;
        if (nb - bg < 8) {
          for (int i = 0; i < 16; ++i) tail_hs[i] = bg * 2 + i < nb * 2 ? h8[i] : 0;
          h8 = tail_hs;
        }
        const __m256i asum = _mm256_permute4x64_epi64(
            _mm256_hadd_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h8)), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h8 + 8))),
            0xd8);
        v = _mm256_sub_epi32(v, _mm256_slli_epi32(asum, 3));
      }
      alignas(32) double tail[8];
      const double* s8 = scales8(sa, bg, nb, tail);
      r.fma(0, _mm256_mul_pd(lo_pd(v), d_lo), _mm256_loadu_pd(s8));
      r.fma(1, _mm256_mul_pd(hi_pd(v), d_hi), _mm256_loadu_pd(s8 + 4));
      ++n;
    }
  }
  // q4_0 cannot reach this by the bounds (a term is below 8 * 32 * 32767 * 2047 * 2^17 < 2^51); the
  // kernel stands on its own rather than on that arithmetic.
  if (!r.ok()) return Q40 ? gemv_row_blocks_int<q4_0_blocks>::run(row, nb, x, t, bound, c, out) : gemv_row_q8_0_int(row, nb, x, t, bound, c, out);
  *out += r.total(2, n);
  return true;
}

// One q6_K row (210-byte super-blocks: ql[128], qh[64], 16 int8 scales, fp16 d) against one token,
// fused: codes q - 32 from the low nibbles and two high bits, each half-block's 16 products in one
// vpmaddwd, the sixteen scales as two vectors (even and odd half-blocks), the epilogue through
// double: (T0 * s0 + T1 * s1) * d * 2^-bound * 2^(C + e_a - max). Each T * s is an int32 product:
// |T| <= 16 * 32 * 32767 < 2^24 and |s| <= 128, so |T * s| < 2^31; the two become doubles and their
// sum (below 2^32) and its product with d (11 significant bits) are exact. Two super-blocks per
// iteration (GROUPS).
bool gemv_row_q6_k(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  const int16_t* a = x.q_eo + t * nb * 32;
  const double* sa = x.scale + t * nb;
  const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  dround r;
  r.init();
  int64_t n = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += 8 * GROUPS) {
    const int live = nb - b0 > 8 ? GROUPS : 1;
    row_prefetch<GROUPS * 210>(row + (b0 / 8) * 210);
    __m256i v0[GROUPS], v1[GROUPS];  // half-block sums: first halves, second halves
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      const uint8_t* sb = row + (b0 / 8 + g) * 210;
      __m256i p[8];  // lanes 0..3: first half-block, 4..7: second
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const __m256i code = q6k_codes(sb, s);
        p[s] = eo_products(even_s8(code), odd_s8(code), a + (b0 + 8 * g + s) * 32);
      }
      reduce8_halves(p, &v0[g], &v1[g]);
    }
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      const uint8_t* sb = row + (b0 / 8 + g) * 210;
      const int64_t bg = b0 + 8 * g;
      uint16_t hd;
      __builtin_memcpy(&hd, sb + 208, 2);
      if (((hd >> 10) & 31) == 31) return false;
      const __m128i sc = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 192)), even_odd);
      const __m256i s0 = _mm256_cvtepi8_epi32(sc), s1 = _mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8));
      const __m256d d = _mm256_set1_pd(fp16_scaled(hd, bound));
      const __m256i w0 = _mm256_mullo_epi32(v0[g], s0), w1 = _mm256_mullo_epi32(v1[g], s1);
      const __m256d t_lo = _mm256_mul_pd(_mm256_add_pd(lo_pd(w0), lo_pd(w1)), d);
      const __m256d t_hi = _mm256_mul_pd(_mm256_add_pd(hi_pd(w0), hi_pd(w1)), d);
      r.fma(0, t_lo, _mm256_loadu_pd(sa + bg));
      r.fma(1, t_hi, _mm256_loadu_pd(sa + bg + 4));
      ++n;
    }
  }
  if (!r.ok()) return gemv_row_blocks_int<q6_k_blocks>::run(row, nb, x, t, bound, c, out);
  *out += r.total(2, n);
  return true;
}

// One q4_K row (FIVE: q5_K) against one token, the fused gemv_row_q4_k_int with the epilogue
// through double: T * scale * d * 2^-bound * 2^(C + e_a - max) and min * A * (-dmin) * 2^-bound *
// 2^(C + e_a - max) (A * 2^(...) is act_pack::sum_scaled); q5_K's integer fallback is the block
// decoder's. Two super-blocks per iteration, both products before either epilogue (GROUPS). The
// four term vectors go to one sum (the row's total adds every lane anyway): with four sums live
// the loop spilled them to the stack (Zen 3: 38.8 -> 36.2 cycles per super-block in L2).
template <bool FIVE>
bool gemv_row_qk(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  constexpr int64_t SB = FIVE ? 176 : 144;
  const int16_t* a = x.q_eo + t * nb * 32;
  const double* sa = x.scale + t * nb;
  const double* ss = x.sum_scaled + t * nb;
  const double pb = bound == numerics::EXP_ZERO ? 0.0 : pow2(-static_cast<int64_t>(bound));
  const __m128d rb = _mm_setr_pd(pb, -pb);
  dround r;
  r.init();
  int64_t n = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += 8 * GROUPS) {
    const int live = nb - b0 > 8 ? GROUPS : 1;  // super-blocks this iteration
    row_prefetch<GROUPS * SB>(row + (b0 / 8) * SB);
    __m256i v[GROUPS];
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      __m256i p[8];
      q4k_products<FIVE>(row + (b0 / 8 + g) * SB, a + (b0 + 8 * g) * 32, p);
      v[g] = reduce8(p);
    }
#pragma GCC unroll 2
    for (int g = 0; g < GROUPS; ++g) {
      if (g >= live) break;
      const uint8_t* sb = row + (b0 / 8 + g) * SB;
      const int64_t bg = b0 + 8 * g;
      uint32_t hdm;  // d, dmin
      __builtin_memcpy(&hdm, sb, 4);
      if ((hdm & 0x7c00u) == 0x7c00u || (hdm & 0x7c000000u) == 0x7c000000u) return false;
      __m256i scv, mv;
      q4k_scales8(sb + 4, &scv, &mv);
      // d * 2^-bound and -dmin * 2^-bound, exact: an fp16 value widens exactly (F16C), times a power of two.
      const __m256d dm = _mm256_castpd128_pd256(_mm_mul_pd(_mm_cvtps_pd(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(hdm)))), rb));
      const __m256d d = _mm256_permute4x64_pd(dm, 0x00), m = _mm256_permute4x64_pd(dm, 0x55);
      const __m256i sv = _mm256_mullo_epi32(v[g], scv);
      r.fma(0, _mm256_mul_pd(lo_pd(sv), d), _mm256_loadu_pd(sa + bg));
      r.fma(0, _mm256_mul_pd(hi_pd(sv), d), _mm256_loadu_pd(sa + bg + 4));
      r.fma(0, _mm256_mul_pd(lo_pd(mv), m), _mm256_loadu_pd(ss + bg));
      r.fma(0, _mm256_mul_pd(hi_pd(mv), m), _mm256_loadu_pd(ss + bg + 4));
      ++n;
    }
  }
  if (!r.ok()) return FIVE ? gemv_row_blocks_int<q5_k_blocks>::run(row, nb, x, t, bound, c, out) : gemv_row_q4_k_int(row, nb, x, t, bound, c, out);
  *out += r.total(1, 4 * n);
  return true;
}

// gemv_row_blocks_int with the epilogue through double: the block's scale (and offset scale)
// times 2^-bound as one double per block, times the sub-block scales (or min coefficients), times
// the activation's power of two. PER16: both halves' products are integers times the same power of
// two, their sum below 2^44, so the fused sum is exact.
template <class D>
struct gemv_row_blocks {
  static bool run(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
    const int16_t* a = x.q + t * nb * 32;
    const double* sa = x.scale + t * nb;
    const double* hsc = x.half_scaled + t * nb * 2;
    dround r;
    r.init();
    int64_t n = 0;
    alignas(32) int8_t buf[256];
    gemv_group g;
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
      row_prefetch<D::GROUP_BYTES>(row + (b0 / 8) * D::GROUP_BYTES);
      D::decode(row, b0, nb, buf, g);
      const int live = nb - b0 >= 8 ? 8 : static_cast<int>(nb - b0);
      __m256i p0[8], p1[8];
      group_products<D::PER16>(g, a + b0 * 32, live, p0, p1);
      // Per block: f0, f1 = d * 2^-bound * scale (halves), g0, g1 = m * 2^-bound * mcoef (halves),
      // each an integer below 2^18 times a power of two; the activation's side comes after.
      double f0[8], f1[8], g0[8] = {}, g1[8] = {}, h0[8] = {}, h1[8] = {}, s8[8];
  #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        double dv;
        if constexpr (gemv_e8m0<D>) {  // mxfp4: mantissa 1, exponent e - 128; 253.. may overflow: the panel path decides
          if (g.hd[k] >= 253) return false;
          dv = g.hd[k] < 0 ? 0.0 : pow2(static_cast<int64_t>(g.hd[k]) - 128 - bound);
        } else {
          if (((g.hd[k] >> 10) & 31) == 31) return false;
          dv = fp16_scaled(static_cast<uint16_t>(g.hd[k]), bound);
        }
        f0[k] = dv * g.s0[k];
        f1[k] = dv * g.s1[k];
        s8[k] = k < live ? sa[b0 + k] : 0.0;
        if (D::HAS_MIN) {
          if (((g.hm[k] >> 10) & 31) == 31) return false;
          const double mv = fp16_scaled(static_cast<uint16_t>(g.hm[k]), bound);
          g0[k] = mv * g.m0[k];
          g1[k] = mv * g.m1[k];
          h0[k] = k < live ? hsc[(b0 + k) * 2] : 0.0;
          h1[k] = k < live ? hsc[(b0 + k) * 2 + 1] : 0.0;
        }
      }
      // The per-block doubles go into vectors from registers: loaded from the arrays just written
      // element by element, each vector would wait for its four stores (no store forwarding).
      const __m256i v0 = reduce8(p0);
      __m256d t_lo = _mm256_mul_pd(lo_pd(v0), v4(f0)), t_hi = _mm256_mul_pd(hi_pd(v0), v4(f0 + 4));
      if (D::PER16) {
        const __m256i v1 = reduce8(p1);
        t_lo = _mm256_fmadd_pd(lo_pd(v1), v4(f1), t_lo);
        t_hi = _mm256_fmadd_pd(hi_pd(v1), v4(f1 + 4), t_hi);
      }
      r.fma(0, t_lo, v4(s8));
      r.fma(1, t_hi, v4(s8 + 4));
      if (D::HAS_MIN) {
        r.add(2, _mm256_fmadd_pd(v4(g1), v4(h1), _mm256_mul_pd(v4(g0), v4(h0))));
        r.add(3, _mm256_fmadd_pd(v4(g1 + 4), v4(h1 + 4), _mm256_mul_pd(v4(g0 + 4), v4(h0 + 4))));
      }
      ++n;
    }
    if (!r.ok()) return gemv_row_blocks_int<D>::run(row, nb, x, t, bound, c, out);
    *out += r.total(D::HAS_MIN ? 4 : 2, n);
    return true;
  }
};

// ---- the packed generation kernels: 16-row tiles (cpu.h, pack.cpp) ----
// A run of four codes of 16 rows (32 bytes, row r's at 2r: c0 | c2 << 4, c1 | c3 << 4) gives, by a
// mask and a shift, one 16-bit lane per row holding the byte pair (c0, c1) and another (c2, c3).
// vpmaddubsw of such a vector with an activation byte pair broadcast to every lane
// (act_pack::pairs) is one row's two products per lane, summed: the low bytes (unsigned) against
// the codes, the codes (unsigned, at most 15) against the high bytes (signed), and the block sum
// is low + 256 high, the integer of the int16 products. The lanes stay int16 over two runs (low:
// at most 4 x 255 x 15 x 2 = 30600; high: at most 4 x 128 x 15 x 2 = 15360), then one
// vpunpck{l,h}wd pair interleaves low and high and vpmaddwd by (1, 256) widens both into int32
// rows: sums s0 (rows 0-3 and 8-11) and s1 (rows 4-7 and 12-15). Without VNNI this keeps the
// product work near the row kernels' and drops their horizontal sums; the per-block epilogue runs
// 16 rows at once, through double as the row kernels' (dround). A group whose terms leave the
// rounding binade is redone by the scalar tile kernel below (integer rounding, any magnitude).
// For one token two neighbouring groups go together (NG = 2), each activation pair broadcast
// once for both: on Zen 3 a broadcast takes a vector pipe, as a product does.

constexpr int64_t PACK_PREFETCH_TILES = 4;

// Fetches the tile PACK_PREFETCH_TILES ahead, an eighth per block b (0..7); past the end only the
// prefetch goes, which never faults. Always inlined, as pack_prefetch_groups: GCC 12 takes a
// function that only prefetches for one without side effects and drops its calls when it is not
// inlined early (measured: no prefetch left in the kernels, generation 40% slower).
__attribute__((always_inline)) inline void pack_prefetch(const uint8_t* tile, int64_t tile_bytes, int b) {
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(tile) + static_cast<uintptr_t>(PACK_PREFETCH_TILES * tile_bytes + b * (tile_bytes / 8));
#pragma GCC unroll 8
  for (int64_t l = 0; l < (tile_bytes / 8 + 63) / 64; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
}

// pack_prefetch for NG groups read together (group g's tiles at tiles + g * gstride), at tile sb:
// PACK_PREFETCH_TILES ahead in each group, or, past a group's end, in the same group of the next NG
// (the next call's).
template <int NG>
__attribute__((always_inline)) inline void pack_prefetch_groups(const uint8_t* tiles, int64_t gstride, int64_t n_super, int64_t sb, int64_t tile_bytes, int b) {
#pragma GCC unroll 4
  for (int g = 0; g < NG; ++g) {
    const int64_t ahead = sb + PACK_PREFETCH_TILES;
    pack_prefetch(tiles + g * gstride + (sb + (ahead >= n_super && NG > 1 ? n_super * (NG - 1) : 0)) * tile_bytes, tile_bytes, b);
  }
}

// Double vector q of a tile's rows: q = 0 rows 0-3 (lanes 0-3 of s0), 1 rows 8-11 (lanes 4-7 of
// s0), 2 rows 4-7 (s1), 3 rows 12-15.
constexpr int TILE_ROW0[4] = {0, 8, 4, 12};

inline __m256d rows4_i16(const uint8_t* p) {  // four int16 as doubles
  return _mm256_cvtepi32_pd(_mm_cvtepi16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256d rows4_pow2(const uint8_t* p) {  // 2^s of four int8 s (|s| far inside the double range)
  int32_t w;
  __builtin_memcpy(&w, p, 4);
  const __m256i e = _mm256_cvtepi32_epi64(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(w)));
  return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(e, _mm256_set1_epi64x(1023)), 52));
}
// 16 row bytes (u8) as the int32 lanes of s0 (*a) and s1 (*b).
inline void rows16_u8(const uint8_t* p, __m256i* a, __m256i* b) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i ma = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1, 8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1,
                                      -1, 11, -1, -1, -1);
  const __m256i mb = _mm256_setr_epi8(4, -1, -1, -1, 5, -1, -1, -1, 6, -1, -1, -1, 7, -1, -1, -1, 12, -1, -1, -1, 13, -1, -1, -1, 14, -1,
                                      -1, -1, 15, -1, -1, -1);
  *a = _mm256_shuffle_epi8(v, ma);
  *b = _mm256_shuffle_epi8(v, mb);
}

// 16 row bytes (s8) as the sign-extended int32 lanes of s0 (*a) and s1 (*b).
inline void rows16_s8(const uint8_t* p, __m256i* a, __m256i* b) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i ma = _mm256_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3, -1, -1, -1, 8, -1, -1, -1, 9, -1, -1, -1,
                                      10, -1, -1, -1, 11);
  const __m256i mb = _mm256_setr_epi8(-1, -1, -1, 4, -1, -1, -1, 5, -1, -1, -1, 6, -1, -1, -1, 7, -1, -1, -1, 12, -1, -1, -1, 13, -1, -1,
                                      -1, 14, -1, -1, -1, 15);
  *a = _mm256_srai_epi32(_mm256_shuffle_epi8(v, ma), 24);
  *b = _mm256_srai_epi32(_mm256_shuffle_epi8(v, mb), 24);
}

// The codes of run k of block b of a tile as two vectors of byte pairs (row r's 16-bit lane):
// *l holds elements 4k, 4k + 1, *h elements 4k + 2, 4k + 3. KIND 4: the nibbles (q4_0, q4_K); 5:
// plus bit 4 from the AVX2 fifth-bit vectors at 2048 (q5_K); 6: plus bits 4-5 from the AVX2
// high-pair vectors at 2048 (q6_K, codes 0..63 before the - 32).
template <int KIND>
inline void tile_codes(const uint8_t* tile, int b, int k, __m256i* l, __m256i* h) {
  const __m256i nib = _mm256_set1_epi8(0x0f);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + (b * 8 + k) * 32));
  *l = _mm256_and_si256(v, nib);
  *h = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
  if (KIND == 5) {
    const int m = k % 4;
    const __m256i f = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 2048 + (b * 2 + k / 4) * 32));
    const __m256i bit = _mm256_set1_epi8(0x10);
    *l = _mm256_or_si256(*l, _mm256_and_si256(shift16(f, 4 - 2 * m), bit));
    *h = _mm256_or_si256(*h, _mm256_and_si256(shift16(f, 3 - 2 * m), bit));
  } else if (KIND == 6) {
    const int m = k % 2;
    const __m256i f = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 2048 + (b * 4 + k / 2) * 32));
    const __m256i bits = _mm256_set1_epi8(0x30);
    *l = _mm256_or_si256(*l, _mm256_and_si256(shift16(f, 4 - 4 * m), bits));
    *h = _mm256_or_si256(*h, _mm256_and_si256(shift16(f, 2 - 4 * m), bits));
  }
}

// One run's products of one group and one token (codes l, h; the low-byte operands ls, hs, the
// codes less OFF; activation pairs p0..p3 broadcast), added into the int16 lanes lo, hi (set by
// the first run u == 0).
__attribute__((always_inline)) inline void run_products(__m256i l, __m256i h, __m256i ls, __m256i hs, __m256i p0, __m256i p1, __m256i p2,
                                                        __m256i p3, int u, __m256i* lo, __m256i* hi) {
  const __m256i pl = _mm256_add_epi16(_mm256_maddubs_epi16(p0, ls), _mm256_maddubs_epi16(p1, hs));
  const __m256i ph = _mm256_add_epi16(_mm256_maddubs_epi16(l, p2), _mm256_maddubs_epi16(h, p3));
  *lo = u == 0 ? pl : _mm256_add_epi16(*lo, pl);
  *hi = u == 0 ? ph : _mm256_add_epi16(*hi, ph);
}

// Widens the int16 lanes lo, hi (low + 256 high per row) into the int32 row sums s[0], s[1].
__attribute__((always_inline)) inline void widen_rows(__m256i lo, __m256i hi, __m256i* s) {
  const __m256i widen_k = _mm256_set1_epi32(0x01000001);
  s[0] = _mm256_add_epi32(s[0], _mm256_madd_epi16(_mm256_unpacklo_epi16(lo, hi), widen_k));
  s[1] = _mm256_add_epi32(s[1], _mm256_madd_epi16(_mm256_unpackhi_epi16(lo, hi), widen_k));
}

// The byte products of one block of a tile with NT tokens' activations (token t's block pairs at
// pairs + t * tstride), as int32 row sums s[t][half][0] (rows 0-3, 8-11) and [1] (rows 4-7,
// 12-15): half 0 runs 0..3 and half 1 runs 4..7 when HALVES, else every run in half 0. The low
// bytes multiply c - OFF (signed) and the high bytes c (unsigned), so each sum is
// sum (c - OFF) lo + 256 sum c hi; the caller adds OFF times the low bytes' sum (act_pack::lo_half).
// The int16 lanes take PER runs before widening: |pair| <= 2 x 255 x max|c - OFF| per low product
// and 2 x 128 x max c per high one, 2 x PER products each (q4: OFF 0, 4 x 7650 and 4 x 3840; q5:
// OFF 16, 4 x 8160 and 4 x 7936; q6: OFF 32, PER 1, 2 x 16320 and 2 x 16128; all below 32768).
template <int NT, int KIND, int OFF, int PER, bool HALVES>
__attribute__((always_inline)) inline void tile_block_sums(const uint8_t* tile, int b, const uint32_t* pairs, int64_t tstride, __m256i (*s)[2][2]) {
  const __m256i off = _mm256_set1_epi8(OFF);
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) s[t][0][0] = s[t][0][1] = s[t][1][0] = s[t][1][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int j = 0; j < 8 / PER; ++j) {
    __m256i lo[NT], hi[NT];
#pragma GCC unroll 2
    for (int u = 0; u < PER; ++u) {
      const int k = PER * j + u;
      __m256i l, h;
      tile_codes<KIND>(tile, b, k, &l, &h);
      const __m256i ls = OFF ? _mm256_sub_epi8(l, off) : l, hs = OFF ? _mm256_sub_epi8(h, off) : h;
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const uint32_t* pr = pairs + t * tstride + 4 * k;
        run_products(l, h, ls, hs, _mm256_set1_epi32(static_cast<int32_t>(pr[0])), _mm256_set1_epi32(static_cast<int32_t>(pr[1])),
                     _mm256_set1_epi32(static_cast<int32_t>(pr[2])), _mm256_set1_epi32(static_cast<int32_t>(pr[3])), u, &lo[t], &hi[t]);
      }
    }
    const int half = HALVES && j * PER >= 4 ? 1 : 0;
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) widen_rows(lo[t], hi[t], s[t][half]);
  }
}

// tile_block_sums for one token and NG groups of 16 rows at once (group g's tile at tile + g *
// gstride, its sums in s[g]): each activation pair is broadcast once for every group (on Zen 3 a
// broadcast takes a vector pipe, as a product does).
template <int NG, int KIND, int OFF, int PER, bool HALVES>
__attribute__((always_inline)) inline void tile_block_sums_groups(const uint8_t* tile, int64_t gstride, int b, const uint32_t* pairs, __m256i (*s)[2][2]) {
  const __m256i off = _mm256_set1_epi8(OFF);
#pragma GCC unroll 4
  for (int g = 0; g < NG; ++g) s[g][0][0] = s[g][0][1] = s[g][1][0] = s[g][1][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int j = 0; j < 8 / PER; ++j) {
    __m256i lo[NG], hi[NG];
#pragma GCC unroll 2
    for (int u = 0; u < PER; ++u) {
      const int k = PER * j + u;
      const uint32_t* pr = pairs + 4 * k;
      const __m256i p0 = _mm256_set1_epi32(static_cast<int32_t>(pr[0])), p1 = _mm256_set1_epi32(static_cast<int32_t>(pr[1])),
                    p2 = _mm256_set1_epi32(static_cast<int32_t>(pr[2])), p3 = _mm256_set1_epi32(static_cast<int32_t>(pr[3]));
#pragma GCC unroll 4
      for (int g = 0; g < NG; ++g) {
        __m256i l, h;
        tile_codes<KIND>(tile + g * gstride, b, k, &l, &h);
        const __m256i ls = OFF ? _mm256_sub_epi8(l, off) : l, hs = OFF ? _mm256_sub_epi8(h, off) : h;
        run_products(l, h, ls, hs, p0, p1, p2, p3, u, &lo[g], &hi[g]);
        // One run at a time: GCC otherwise loads and multiplies several runs ahead and spills
        // (llvm-mca -mcpu=znver3 on the q4_K loop: 115 -> 107 cycles per two blocks).
        __asm__("" : "+x"(lo[g]), "+x"(hi[g]));
      }
    }
    const int half = HALVES && j * PER >= 4 ? 1 : 0;
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g) widen_rows(lo[g], hi[g], s[g][half]);
  }
}

// The four double vectors (TILE_ROW0 order) of int32 sums s0, s1.
inline void rows_pd(__m256i s0, __m256i s1, __m256d* v) {
  v[0] = lo_pd(s0);
  v[1] = hi_pd(s0);
  v[2] = lo_pd(s1);
  v[3] = hi_pd(s1);
}

// Adds each token's 16 row sums (r[t]: its patterns after n terms per lane) to acc_out[t * 16 + row].
template <int NT>
inline void tile_rows_out(const dround* r, int64_t n, int64_t* acc_out) {
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      int64_t* o = acc_out + t * 16 + TILE_ROW0[q];
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_add_epi64(load4(o), r[t].value(q, n)));
    }
}

template <int NT>
inline bool all_ok(const dround* r) {
  bool ok = true;
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) ok = ok && r[t].ok();
  return ok;
}

// q4_K tiles (2400 bytes: codes, scales at 2048, mins at 2176, d_mant at 2304, m_mant at 2336,
// their shifts at 2368 and 2384; FIVE: q5_K, 2912 bytes, the fifth bits at 2048 and the rest 512
// later) for NT tokens: T * scale * d_mant * 2^dsh and min * A * m_mant * 2^msh, each times the
// activation's power of two (act_pack::scale, ::sum_scaled carries A). |T * scale| < 32 x 31 x
// 32767 x 63 < 2^31. False when a term left the rounding binade (acc_out untouched).
template <int NT, int NG, bool FIVE>
bool qk_packed_tokens_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc_out) {
  static_assert(NG == 1 || NT == 1, "several groups at once for one token only");
  constexpr int64_t TILE = FIVE ? 2912 : 2400, SC = FIVE ? 2560 : 2048, MN = SC + 128, DM = MN + 128, MM = DM + 32, DSH = MM + 32,
                    MSH = DSH + 16;
  constexpr int NR = NG * NT;  // (group, token) pairs, group-major
  constexpr int OFF = FIVE ? 16 : 0;
  const int64_t gstride = n_super * TILE;
  dround r[NR];
#pragma GCC unroll 4
  for (int t = 0; t < NR; ++t) r[t].init();
  for (int64_t sb = 0; sb < n_super; ++sb) {
    __m256d dmd[NG][4], mmd[NG][4];
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g)
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        const uint8_t* tile = tiles + g * gstride + sb * TILE;
        dmd[g][q] = _mm256_mul_pd(rows4_i16(tile + DM + 2 * TILE_ROW0[q]), rows4_pow2(tile + DSH + TILE_ROW0[q]));
        mmd[g][q] = _mm256_mul_pd(rows4_i16(tile + MM + 2 * TILE_ROW0[q]), rows4_pow2(tile + MSH + TILE_ROW0[q]));
      }
    for (int b = 0; b < 8; ++b) {
      const int64_t blk = sb * 8 + b;
      __m256i s[NR][2][2];
      pack_prefetch_groups<NG>(tiles, gstride, n_super, sb, TILE, b);
      if (NG == 1) tile_block_sums<NT, FIVE ? 5 : 4, OFF, 2, false>(tiles + sb * TILE, b, x.pairs + blk * 32, x.nb * 32, s);
      else tile_block_sums_groups<NG, FIVE ? 5 : 4, OFF, 2, false>(tiles + sb * TILE, gstride, b, x.pairs + blk * 32, s);
#pragma GCC unroll 4
      for (int g = 0; g < NG; ++g) {
        const uint8_t* tile = tiles + g * gstride + sb * TILE;
        __m256i sc0, sc1, mn0, mn1;
        rows16_u8(tile + SC + 16 * b, &sc0, &sc1);
        rows16_u8(tile + MN + 16 * b, &mn0, &mn1);
        __m256d mnd[4];
        rows_pd(mn0, mn1, mnd);
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) mnd[q] = _mm256_mul_pd(mnd[q], mmd[g][q]);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const int64_t i = t * x.nb + blk;
          __m256i s0 = s[g * NT + t][0][0], s1 = s[g * NT + t][0][1];
          if (OFF) {
            const __m256i lo = _mm256_set1_epi32(OFF * (x.lo_half[2 * i] + x.lo_half[2 * i + 1]));
            s0 = _mm256_add_epi32(s0, lo);
            s1 = _mm256_add_epi32(s1, lo);
          }
          __m256d v[4];
          rows_pd(_mm256_mullo_epi32(s0, sc0), _mm256_mullo_epi32(s1, sc1), v);
          const __m256d sa = _mm256_set1_pd(x.scale[i]), ss = _mm256_set1_pd(x.sum_scaled[i]);
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) {
            r[g * NT + t].fma(q, _mm256_mul_pd(v[q], dmd[g][q]), sa);
            r[g * NT + t].fma(q, mnd[q], ss);
          }
        }
      }
    }
  }
  if (!all_ok<NR>(r)) return false;
  tile_rows_out<NR>(r, 2 * 8 * n_super, acc_out);
  return true;
}

// q6_K tiles (3392 bytes: low nibbles, the AVX2 high pairs at 2048, scales[8][2][16] (s8) at 3072,
// d_mant at 3328, shifts at 3360) for NT tokens: each half block's code sum U = sum (c - 32) a =
// sum (c - 32) lo + 256 sum c hi - 32 (A - lo_half) (A its activation sum), then (U0 * s0 + U1 * s1)
// * d_mant * 2^dsh times the activation's power of two: |U * s| < 16 x 32 x 32767 x 128 = 2^31,
// the two as doubles and their sum (below 2^32) exact.
template <int NT, int NG>
bool q6k_packed_tokens_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc_out) {
  static_assert(NG == 1 || NT == 1, "several groups at once for one token only");
  constexpr int64_t TILE = 3392, SC = 3072, DM = 3328, DSH = 3360;
  constexpr int NR = NG * NT;
  const int64_t gstride = n_super * TILE;
  dround r[NR];
#pragma GCC unroll 4
  for (int t = 0; t < NR; ++t) r[t].init();
  for (int64_t sb = 0; sb < n_super; ++sb) {
    __m256d dmd[NG][4];
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g)
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        const uint8_t* tile = tiles + g * gstride + sb * TILE;
        dmd[g][q] = _mm256_mul_pd(rows4_i16(tile + DM + 2 * TILE_ROW0[q]), rows4_pow2(tile + DSH + TILE_ROW0[q]));
      }
    for (int b = 0; b < 8; ++b) {
      const int64_t blk = sb * 8 + b;
      __m256i s[NR][2][2];
      pack_prefetch_groups<NG>(tiles, gstride, n_super, sb, TILE, b);
      if (NG == 1) tile_block_sums<NT, 6, 32, 1, true>(tiles + sb * TILE, b, x.pairs + blk * 32, x.nb * 32, s);
      else tile_block_sums_groups<NG, 6, 32, 1, true>(tiles + sb * TILE, gstride, b, x.pairs + blk * 32, s);
#pragma GCC unroll 4
      for (int g = 0; g < NG; ++g) {
        const uint8_t* tile = tiles + g * gstride + sb * TILE;
        __m256i sc[2][2];
        rows16_s8(tile + SC + 32 * b, &sc[0][0], &sc[0][1]);
        rows16_s8(tile + SC + 32 * b + 16, &sc[1][0], &sc[1][1]);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const int64_t i = t * x.nb + blk;
          __m256d v[4], w[4];
#pragma GCC unroll 2
          for (int h = 0; h < 2; ++h) {
            const __m256i adj = _mm256_set1_epi32(32 * (x.half_sum[2 * i + h] - x.lo_half[2 * i + h]));
            rows_pd(_mm256_mullo_epi32(_mm256_sub_epi32(s[g * NT + t][h][0], adj), sc[h][0]),
                    _mm256_mullo_epi32(_mm256_sub_epi32(s[g * NT + t][h][1], adj), sc[h][1]), h == 0 ? v : w);
          }
          const __m256d sa = _mm256_set1_pd(x.scale[i]);
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) r[g * NT + t].fma(q, _mm256_mul_pd(_mm256_add_pd(v[q], w[q]), dmd[g][q]), sa);
        }
      }
    }
  }
  if (!all_ok<NR>(r)) return false;
  tile_rows_out<NR>(r, 8 * n_super, acc_out);
  return true;
}

// q4_0 tiles (2432 bytes: codes, d_mant[8][16] at 2048, shifts[8][16] at 2304) for NT tokens:
// (T - 8 A) * d_mant * 2^dsh times the activation's power of two, per block.
template <int NT, int NG>
bool q40_packed_tokens_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc_out) {
  static_assert(NG == 1 || NT == 1, "several groups at once for one token only");
  constexpr int64_t TILE = 2432, DM = 2048, DSH = 2304;
  constexpr int NR = NG * NT;
  const int64_t gstride = n_super * TILE;
  dround r[NR];
#pragma GCC unroll 4
  for (int t = 0; t < NR; ++t) r[t].init();
  for (int64_t sb = 0; sb < n_super; ++sb) {
    for (int b = 0; b < 8; ++b) {
      const int64_t blk = sb * 8 + b;
      __m256i s[NR][2][2];
      pack_prefetch_groups<NG>(tiles, gstride, n_super, sb, TILE, b);
      if (NG == 1) tile_block_sums<NT, 4, 0, 2, false>(tiles + sb * TILE, b, x.pairs + blk * 32, x.nb * 32, s);
      else tile_block_sums_groups<NG, 4, 0, 2, false>(tiles + sb * TILE, gstride, b, x.pairs + blk * 32, s);
#pragma GCC unroll 4
      for (int g = 0; g < NG; ++g) {
        const uint8_t* tile = tiles + g * gstride + sb * TILE;
        __m256d dmd[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)
          dmd[q] = _mm256_mul_pd(rows4_i16(tile + DM + 32 * b + 2 * TILE_ROW0[q]), rows4_pow2(tile + DSH + 16 * b + TILE_ROW0[q]));
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) {
          const __m256i a8 = _mm256_set1_epi32(8 * x.asum[t * x.nb + blk]);
          __m256d v[4];
          rows_pd(_mm256_sub_epi32(s[g * NT + t][0][0], a8), _mm256_sub_epi32(s[g * NT + t][0][1], a8), v);
          const __m256d sa = _mm256_set1_pd(x.scale[t * x.nb + blk]);
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) r[g * NT + t].fma(q, _mm256_mul_pd(v[q], dmd[q]), sa);
        }
      }
    }
  }
  if (!all_ok<NR>(r)) return false;
  tile_rows_out<NR>(r, 8 * n_super, acc_out);
  return true;
}

enum class tile_kind { q4_0, q4_k, q5_k, q6_k };

// The scalar tile kernel, the fallback of a group whose terms left the binade: every code read
// back from the AVX2 tile, the block terms rounded with the contract's integer round_shift.
void packed_tile_scalar(tile_kind kind, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc_out) {
  const int64_t tile_bytes = kind == tile_kind::q4_0 ? 2432 : kind == tile_kind::q4_k ? 2400 : kind == tile_kind::q5_k ? 2912 : 3392;
  const int64_t qk = kind == tile_kind::q5_k ? 512 : 0;  // q5_K's scales and shifts lie 512 bytes after q4_K's
  for (int64_t sb = 0; sb < n_super; ++sb) {
    const uint8_t* tile = tiles + sb * tile_bytes;
    for (int b = 0; b < 8; ++b) {
      const int64_t blk = sb * 8 + b;
      for (int row = 0; row < 16; ++row) {
        // Code of element 4k + i (kind's offset included) of this row.
        auto code = [&](int k, int i) -> int64_t {
          const int e = i & 1, part = i >> 1;
          const uint8_t byte = tile[(b * 8 + k) * 32 + 2 * row + e];
          int64_t c = part == 0 ? byte & 15 : byte >> 4;
          if (kind == tile_kind::q4_0) c -= 8;
          if (kind == tile_kind::q5_k) c += 16 * ((tile[2048 + (b * 2 + k / 4) * 32 + 2 * row + e] >> (2 * (k % 4) + part)) & 1);
          if (kind == tile_kind::q6_k) c += 16 * ((tile[2048 + (b * 4 + k / 2) * 32 + 2 * row + e] >> (4 * (k % 2) + 2 * part)) & 3) - 32;
          return c;
        };
        for (int64_t t = 0; t < x.n_tok; ++t) {
          const int16_t* a = x.q + (t * x.nb + blk) * 32;
          int64_t sum[2] = {0, 0};  // per half block
          for (int k = 0; k < 8; ++k)
            for (int i = 0; i < 4; ++i) sum[k / 4] += code(k, i) * a[4 * k + i];
          const int64_t sa = x.shift[t * x.nb + blk];
          int64_t term = 0;
          if (kind == tile_kind::q4_0) {
            int16_t dm;
            __builtin_memcpy(&dm, tile + 2048 + 32 * b + 2 * row, 2);
            term = round_shift_fast((sum[0] + sum[1]) * dm, sa + static_cast<int8_t>(tile[2304 + 16 * b + row]));
          } else if (kind == tile_kind::q6_k) {
            int16_t dm;
            __builtin_memcpy(&dm, tile + 3328 + 2 * row, 2);
            const int64_t s0 = static_cast<int8_t>(tile[3072 + 32 * b + row]), s1 = static_cast<int8_t>(tile[3072 + 32 * b + 16 + row]);
            term = round_shift_fast((sum[0] * s0 + sum[1] * s1) * dm, sa + static_cast<int8_t>(tile[3360 + row]));
          } else {
            int16_t dm, mm;
            __builtin_memcpy(&dm, tile + qk + 2304 + 2 * row, 2);
            __builtin_memcpy(&mm, tile + qk + 2336 + 2 * row, 2);
            const int64_t sc = tile[qk + 2048 + 16 * b + row], mn = tile[qk + 2176 + 16 * b + row];
            term = round_shift_fast((sum[0] + sum[1]) * sc * dm, sa + static_cast<int8_t>(tile[qk + 2368 + row])) +
                   round_shift_fast(static_cast<int64_t>(x.asum[t * x.nb + blk]) * mn * mm, sa + static_cast<int8_t>(tile[qk + 2384 + row]));
          }
          acc_out[t * 16 + row] += term;
        }
      }
    }
  }
}

template <int NT>
void packed_avx2(tile_kind kind, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  bool ok = false;
  switch (kind) {
    case tile_kind::q4_0: ok = q40_packed_tokens_avx2<NT, 1>(tiles, n_super, x, acc); break;
    case tile_kind::q4_k: ok = qk_packed_tokens_avx2<NT, 1, false>(tiles, n_super, x, acc); break;
    case tile_kind::q5_k: ok = qk_packed_tokens_avx2<NT, 1, true>(tiles, n_super, x, acc); break;
    case tile_kind::q6_k: ok = q6k_packed_tokens_avx2<NT, 1>(tiles, n_super, x, acc); break;
  }
  if (!ok) packed_tile_scalar(kind, tiles, n_super, x, acc);
}

// Two neighbouring groups (tiles, tiles + n_super tiles) for one token; a group whose terms left
// the binade is redone alone (packed_avx2).
void packed_avx2_pair(tile_kind kind, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  bool ok = false;
  if (kind == tile_kind::q4_k) ok = qk_packed_tokens_avx2<1, 2, false>(tiles, n_super, x, acc);
  else if (kind == tile_kind::q5_k) ok = qk_packed_tokens_avx2<1, 2, true>(tiles, n_super, x, acc);
  else if (kind == tile_kind::q6_k) ok = q6k_packed_tokens_avx2<1, 2>(tiles, n_super, x, acc);
  else ok = q40_packed_tokens_avx2<1, 2>(tiles, n_super, x, acc);
  if (ok) return;
  const int64_t tile_bytes = kind == tile_kind::q4_0 ? 2432 : kind == tile_kind::q4_k ? 2400 : kind == tile_kind::q5_k ? 2912 : 3392;
  for (int g = 0; g < 2; ++g) packed_avx2<1>(kind, tiles + g * n_super * tile_bytes, n_super, x, acc + 16 * g);
}

void packed_avx2_any(tile_kind kind, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  switch (x.n_tok) {
    case 1: packed_avx2<1>(kind, tiles, n_super, x, acc); break;
    case 2: packed_avx2<2>(kind, tiles, n_super, x, acc); break;
    case 3: packed_avx2<3>(kind, tiles, n_super, x, acc); break;
    case 4: packed_avx2<4>(kind, tiles, n_super, x, acc); break;
    default: break;
  }
}

}  // namespace

bool panel_kernel2_avx2(const panel& p0, const panel& p1, const act_view& x, int64_t t0, int64_t t1, int64_t* acc0, int64_t* acc1) {
  if (p0.wide || p1.wide || p0.has_min != p1.has_min || p0.min_whole != p1.min_whole) return false;
  const int min = !p0.has_min ? 0 : p0.min_whole ? 2 : 1;
  if (min == 2) kernel_all_2p<2>(p0, p1, x, t0, t1, acc0, acc1);
  else if (min == 1) kernel_all_2p<1>(p0, p1, x, t0, t1, acc0, acc1);
  else kernel_all_2p<0>(p0, p1, x, t0, t1, acc0, acc1);
  return true;
}

void panel_kernel_avx2(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc) {
  const int min = !p.has_min ? 0 : p.min_whole ? 2 : 1;
  if (p.wide) {
    if (min == 2) kernel_all<true, 2>(p, x, t0, t1, acc);
    else if (min == 1) kernel_all<true, 1>(p, x, t0, t1, acc);
    else kernel_all<true, 0>(p, x, t0, t1, acc);
  } else {
    if (min == 2) kernel_all<false, 2>(p, x, t0, t1, acc);
    else if (min == 1) kernel_all<false, 1>(p, x, t0, t1, acc);
    else kernel_all<false, 0>(p, x, t0, t1, acc);
  }
}

void gemv_q4k_packed_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  packed_avx2_any(tile_kind::q4_k, tiles, n_super, x, acc);
}
void gemv_q5k_packed_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  packed_avx2_any(tile_kind::q5_k, tiles, n_super, x, acc);
}
void gemv_q6k_packed_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  packed_avx2_any(tile_kind::q6_k, tiles, n_super, x, acc);
}
void gemv_q40_packed_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  packed_avx2_any(tile_kind::q4_0, tiles, n_super, x, acc);
}
bool gemv_packed_pair_avx2(gguf::dtype t, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  if (x.n_tok != 1) return false;
  if (t == gguf::DTYPE_Q4_K) packed_avx2_pair(tile_kind::q4_k, tiles, n_super, x, acc);
  else if (t == gguf::DTYPE_Q5_K) packed_avx2_pair(tile_kind::q5_k, tiles, n_super, x, acc);
  else if (t == gguf::DTYPE_Q6_K) packed_avx2_pair(tile_kind::q6_k, tiles, n_super, x, acc);
  else if (t == gguf::DTYPE_Q4_0) packed_avx2_pair(tile_kind::q4_0, tiles, n_super, x, acc);
  else return false;
  return true;
}

// ---- the sums to floats ----
// fixed_to_f32_fast (numerics/exact_inline.h) four int64 lanes at a time. AVX2 converts no int64
// to float, so |v| becomes a double exactly: below 2^52 by the 2^52 bit trick, at or above it
// shifted right by 12 with the bits shifted out ORed into the lowest kept bit (sticky: more than
// 26 significant bits remain, and rounding to 24 needs only to know whether anything below the
// rounding point is set), then times 2^12. The sign goes on the double, and one conversion to
// float rounds half to even as the scalar conversion of v does.
inline __m128 i64_to_f32(__m256i v) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i sign = _mm256_cmpgt_epi64(zero, v);
  const __m256i a = _mm256_sub_epi64(_mm256_xor_si256(v, sign), sign);  // |v|; INT64_MIN: 2^63 as unsigned
  const __m256i big = _mm256_xor_si256(_mm256_cmpeq_epi64(_mm256_srli_epi64(a, 52), zero), _mm256_set1_epi64x(-1));
  const __m256i sticky =
      _mm256_andnot_si256(_mm256_cmpeq_epi64(_mm256_and_si256(a, _mm256_set1_epi64x(0xfff)), zero), _mm256_set1_epi64x(1));
  const __m256i m = _mm256_blendv_epi8(a, _mm256_or_si256(_mm256_srli_epi64(a, 12), sticky), big);  // below 2^52
  const __m256i two52 = _mm256_set1_epi64x(0x4330000000000000);
  __m256d d = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(m, two52)), _mm256_castsi256_pd(two52));
  d = _mm256_mul_pd(d, _mm256_blendv_pd(_mm256_set1_pd(1.0), _mm256_set1_pd(4096.0), _mm256_castsi256_pd(big)));
  d = _mm256_xor_pd(d, _mm256_castsi256_pd(_mm256_and_si256(sign, _mm256_set1_epi64x(static_cast<int64_t>(0x8000000000000000ull)))));
  return _mm256_cvtpd_ps(d);
}

bool finish16_avx2(const int64_t* a, int32_t xmax, const int32_t* bounds, int32_t c, float* y) {
  const __m256i ez = _mm256_set1_epi32(numerics::EXP_ZERO);
  const __m256i exp_mask = _mm256_set1_epi32(255), sign_bit = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256 f = _mm256_set_m128(i64_to_f32(load4(a + 8 * h + 4)), i64_to_f32(load4(a + 8 * h)));
    const __m256i b = _mm256_castps_si256(f);
    const __m256i bound = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bounds + 8 * h));
    const __m256i e = _mm256_add_epi32(bound, _mm256_set1_epi32(xmax - c));
    const __m256i biased = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(b, 23), exp_mask), e);
    const __m256i sign = _mm256_and_si256(b, sign_bit);
    const __m256i under = _mm256_cmpgt_epi32(_mm256_set1_epi32(1), biased);
    const __m256i over = _mm256_cmpgt_epi32(biased, _mm256_set1_epi32(254));
    __m256i r = _mm256_or_si256(sign, _mm256_or_si256(_mm256_slli_epi32(biased, 23), _mm256_and_si256(b, _mm256_set1_epi32(0x007fffff))));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(sign, _mm256_set1_epi32(0x7f800000)), over);
    r = _mm256_blendv_epi8(r, sign, under);
    // v == 0 (the only sum whose float is 0), a zero row or a zero token: +0.
    const __m256i zero = _mm256_or_si256(_mm256_cmpeq_epi32(b, _mm256_setzero_si256()),
                                         _mm256_or_si256(_mm256_cmpeq_epi32(bound, ez), _mm256_set1_epi32(xmax == numerics::EXP_ZERO ? -1 : 0)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + 8 * h), _mm256_andnot_si256(zero, r));
  }
  return true;
}

bool gemv_avx2(gguf::dtype t, const act_view& x, int64_t n_tokens, const uint8_t* w,
               uint64_t row_bytes, const int32_t* row_bounds, int64_t r0, int64_t r1, int64_t* acc) {
  if (x.q_eo == nullptr) return false;
  gemv_row_fn fn = gemv_blocks_row<gemv_row_blocks>(t);
  if (t == gguf::DTYPE_Q8_0) fn = gemv_row_d16<false>;
  if (t == gguf::DTYPE_Q4_0) fn = gemv_row_d16<true>;
  if (t == gguf::DTYPE_Q4_K) fn = gemv_row_qk<false>;
  if (t == gguf::DTYPE_Q5_K) fn = gemv_row_qk<true>;
  if (t == gguf::DTYPE_Q6_K) fn = gemv_row_q6_k;
  return fn != nullptr && gemv_rows(fn, x, n_tokens, w, row_bytes, row_bounds, r0, r1, acc);
}

}  // namespace detaudit::kernels::cpu

#else

namespace detaudit::kernels::cpu {
void gemv_q4k_packed_avx2(const uint8_t*, int64_t, const packed_act&, int64_t*) {}
void gemv_q5k_packed_avx2(const uint8_t*, int64_t, const packed_act&, int64_t*) {}
void gemv_q6k_packed_avx2(const uint8_t*, int64_t, const packed_act&, int64_t*) {}
void gemv_q40_packed_avx2(const uint8_t*, int64_t, const packed_act&, int64_t*) {}
bool gemv_packed_pair_avx2(gguf::dtype, const uint8_t*, int64_t, const packed_act&, int64_t*) { return false; }
bool finish16_avx2(const int64_t*, int32_t, const int32_t*, int32_t, float*) { return false; }
void panel_kernel_avx2(const panel&, const act_view&, int64_t, int64_t, int64_t*) {}
bool panel_kernel2_avx2(const panel&, const panel&, const act_view&, int64_t, int64_t, int64_t*, int64_t*) { return false; }
bool gemv_avx2(gguf::dtype, const act_view&, int64_t, const uint8_t*, uint64_t, const int32_t*, int64_t, int64_t, int64_t*) {
  return false;
}
}  // namespace detaudit::kernels::cpu

#endif
