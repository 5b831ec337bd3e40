// The AVX2 variant of the exact matmul kernel (matmul_internal.h), prompt panels: vpmaddwd of a
// broadcast activation pair with 8 rows' code pairs per vector (two vectors per panel), int32 sums
// per block (per half-block in wide panels), then the int64 epilogue four lanes at a time; and the
// sums of 16 rows to floats (finish16). AVX2 has no 64-bit arithmetic right shift; it is built
// from the logical one on the one's complement (matmul_avx2_common.h). The few-token rows are in
// matmul_avx2_gemv.cpp, the packed generation tiles in matmul_avx2_packed.cpp.
//
// Everything below the pragma is static or a plain extern function (no std:: templates).
// GCC 12's AVX2 intrinsics read a self-initialised undefined vector (_mm256_undefined_*), which
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
#include "kernels/cpu/matmul_avx2_common.h"

namespace detaudit::kernels::cpu {

namespace {

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

// The 16 rows' block sums of NT tokens as doubles, four rows per vector (wide panels: the two
// half-block sums, each below 2^31, added: exact).
template <bool WIDE, int NT>
inline void block_sums_pd(const __m256i (*sums)[4], __m256d (*v)[4]) {
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
}

// The terms of one block for NT tokens (activation block i + k * stride of token k) through
// double (panel_scales' wd, wm0, wm1 and the act_pack's powers of two), as dround: each panel
// scale vector is loaded once for all tokens, one OR collects every term's pattern.
// MIN: 0 no offset term, 1 one per half block (wm0 * A0 + wm1 * A1: both products integers
// times the same power of two, their sum below 2^44, so the fused sum is exact), 2 one per block
// (panel::min_whole: wm0 * (A0 + A1), one fused multiply-add on act_pack::sum_scaled).
// BOUNDED (the bounded pass below; MIN 0 or 2): no OR, and the main term is one fused
// multiply-add on act_pack::magic_div.
template <bool WIDE, int MIN, int NT, bool BOUNDED = false>
inline void block_terms_n(const panel& p, const act_view& x, int64_t i, int64_t stride, int64_t o, const __m256i (*sums)[4],
                          __m256i (*acc)[4], __m256i& any) {
  static_assert(!BOUNDED || MIN != 1, "the bounded pass has one offset per block or none");
  const __m256d magic = _mm256_set1_pd(ROUND_MAGIC);
  __m256d v[NT][4];
  block_sums_pd<WIDE, NT>(sums, v);
  #pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m256d wd = _mm256_load_pd(p.wd + o + 4 * q);
    __m256d wm0, wm1;
    if (MIN) wm0 = _mm256_load_pd(p.wm0 + o + 4 * q);
    if (MIN == 1) wm1 = _mm256_load_pd(p.wm1 + o + 4 * q);
    #pragma GCC unroll 4
    for (int k = 0; k < NT; ++k) {
      const int64_t ik = i + k * stride;
      if constexpr (BOUNDED) {
        __m256i b = _mm256_castpd_si256(_mm256_fmadd_pd(v[k][q], wd, _mm256_set1_pd(x.magic_div[ik])));
        if (MIN) b = _mm256_add_epi64(b, _mm256_castpd_si256(_mm256_fmadd_pd(wm0, _mm256_set1_pd(x.sum_scaled[ik]), magic)));
        acc[k][q] = _mm256_add_epi64(acc[k][q], b);
        continue;
      }
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
      // Keeps the OR in a register, in order: GCC otherwise stores the terms and ORs them later
      // (llvm-mca -mcpu=znver3 on the two-panel loop: 163 -> 147 cycles per block).
      __asm__("" : "+x"(any));
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

// The bounded pass (below): kernel_tokens_pd without the per-term check, where a bound computed
// beforehand shows that no term can leave the binade; false (nothing done) when it does not.
template <bool WIDE, int MIN, int NT, int NP>
bool kernel_tokens_bounded(const panel& p, const panel& p1, const act_view& x, int64_t t, int64_t* out, int64_t* out1);

// Tokens per pass over a panel: every weight vector loaded once for NT tokens (Zen 3, scratch
// harness, 16 rows x 2048, 64 tokens: q4_K 36 -> 31, q8_0 31.5 -> 27 tsc cycles per token and
// block against one token per pass). Four narrow tokens' sums take 8 of the 16 vector registers;
// a wide panel has twice the sums, so three tokens (12 registers; q6_K 31.3 -> 30.3 against two).
template <bool WIDE, int MIN>
void kernel_all(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc) {
  constexpr int NT = WIDE ? 3 : 4;
  int64_t t = t0;
  for (; t + NT <= t1; t += NT) {
    if constexpr (MIN != 1) {
      int64_t* out = acc + (t - t0) * PANEL_ROWS;
      if (kernel_tokens_bounded<WIDE, MIN, NT, 1>(p, p, x, t, out, out)) continue;
    }
    if (!kernel_tokens_pd<WIDE, MIN, NT>(p, x, t, acc + (t - t0) * PANEL_ROWS))
      for (int64_t k = t; k < t + NT; ++k)
        if (!kernel_tokens_pd<WIDE, MIN, 1>(p, x, k, acc + (k - t0) * PANEL_ROWS)) kernel_token<WIDE, MIN != 0>(p, x, k, acc + (k - t0) * PANEL_ROWS);
  }
  for (; t < t1; ++t) {
    int64_t* out = acc + (t - t0) * PANEL_ROWS;
    if constexpr (MIN != 1) {
      if (kernel_tokens_bounded<WIDE, MIN, 1, 1>(p, p, x, t, out, out)) continue;
    }
    if (!kernel_tokens_pd<WIDE, MIN, 1>(p, x, t, out)) kernel_token<WIDE, MIN != 0>(p, x, t, out);
  }
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

// Block b's products with tokens t .. t + NT - 1 (activation block i0 = t * nb + b of the first)
// for one panel (NP = 1) or two narrow ones (NP = 2: p1's sums in sums[NT + k]).
template <bool WIDE, int NT, int NP>
__attribute__((always_inline)) inline void block_products_np(const panel& p, const panel& p1, const act_view& x, int64_t i0, int64_t b,
                                                             __m256i (*sums)[4]) {
  const int64_t nb = p.n_blocks;
  const int16_t* a = x.q + i0 * numerics::QBLOCK;
  if constexpr (NP == 1) block_products_n<WIDE, NT>(p.codes + b * 16 * PANEL_ROWS, a, nb * numerics::QBLOCK, sums);
  else block_products_2p<NT>(p.codes + b * 16 * PANEL_ROWS, p1.codes + b * 16 * PANEL_ROWS, a, nb * numerics::QBLOCK, sums);
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
    block_products_np<WIDE, NT, NP>(p, p1, x, i0, b, sums);
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

// ---- the bounded pass ----
// When every term of a pass is known beforehand to stay inside the rounding binade, the per-term
// check (the OR of patterns) is not needed, and the term's last product moves into the rounding
// constant: a double in [2, 4) scaled by 1 / scale (a power of two) lies in the binade whose unit
// is the block's grid, so fma(T, wd, M / scale) rounds T * wd onto that grid, half to even, and
// its pattern less that of M / scale is the same integer as the pattern of fma(T * wd, scale, M)
// less M's (both results are normal: act_pack::magic_div). The offset term keeps M. A term is
// at most panel::bound times act_pack::abs_scaled (|T| <= sum |a| * max |code|, |block sum| <=
// sum |a|), and the result stays in [2, 4) while |term * scale| < 1 - 2^-49; the check's product
// is rounded at most once, and it asks for less than 1 - 2^-20. A zero activation block adds
// its magic_div, M (the pack's choice for scale 0), exactly. A live block whose scale is 0 (a
// shift below -971, which quantize_act's exponents do not reach today) would have abs_scaled =
// +inf, and +inf or 0 x inf (NaN) fails the check.
constexpr double BOUND_LIMIT = 1.0 - 0x1p-20;

// True when every term of tokens t .. t + NT - 1 with panels p and p1 passes the bound.
template <int NT>
inline bool terms_bounded(const panel& p, const panel& p1, const act_view& x, int64_t t) {
  const int64_t nb = p.n_blocks;
  const __m256d lim = _mm256_set1_pd(BOUND_LIMIT);
  __m256d bad = _mm256_setzero_pd();
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const __m256d m = _mm256_max_pd(_mm256_loadu_pd(p.bound + b), _mm256_loadu_pd(p1.bound + b));
#pragma GCC unroll 4
    for (int k = 0; k < NT; ++k)  // not (product < limit): true for NaN too
      bad = _mm256_or_pd(bad, _mm256_cmp_pd(_mm256_mul_pd(m, _mm256_loadu_pd(x.abs_scaled + (t + k) * nb + b)), lim, _CMP_NLT_UQ));
  }
  bool fail = _mm256_movemask_pd(bad) != 0;
  for (; b < nb; ++b)
    for (int k = 0; k < NT; ++k) {
      const double m = p.bound[b] > p1.bound[b] ? p.bound[b] : p1.bound[b];
      fail |= !(m * x.abs_scaled[(t + k) * nb + b] < BOUND_LIMIT);
    }
  return !fail;
}

// kernel_tokens_pd<WIDE, MIN, NT, NP> as a bounded pass (NP = 1: p1 is p, out1 unused): the
// terms through block_terms_n<..., true>, each token's M / scale patterns summed to take off.
template <bool WIDE, int MIN, int NT, int NP>
bool kernel_tokens_bounded(const panel& p, const panel& p1, const act_view& x, int64_t t, int64_t* out, int64_t* out1) {
  static_assert(NP == 1 || (NP == 2 && !WIDE), "two panels at once: narrow ones");
  if (!terms_bounded<NT>(p, p1, x, t)) return false;
  const int64_t nb = p.n_blocks;
  __m256i acc[NP * NT][4];
  for (int k = 0; k < NP * NT; ++k)
    for (int q = 0; q < 4; ++q) acc[k][q] = _mm256_setzero_si256();
  __m256i unused = _mm256_setzero_si256();  // block_terms_n's OR, not taken in a bounded pass
  uint64_t off[NT] = {};  // the patterns of every M / scale added to token k's lanes
  uint64_t n = 0;         // offset terms per lane (M each)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i0 = t * nb + b;
    if (!block_live(x, i0, nb, NT)) continue;
    __m256i sums[NP * NT][4];
    block_products_np<WIDE, NT, NP>(p, p1, x, i0, b, sums);
    block_terms_n<WIDE, MIN, NT, true>(p, x, i0, nb, b * PANEL_ROWS, sums, acc, unused);
    if constexpr (NP == 2) block_terms_n<WIDE, MIN, NT, true>(p1, x, i0, nb, b * PANEL_ROWS, sums + NT, acc + NT, unused);
    for (int k = 0; k < NT; ++k) {
      uint64_t m;
      __builtin_memcpy(&m, x.magic_div + i0 + k * nb, 8);
      off[k] += m;
    }
    if (MIN) ++n;
  }
  for (int k = 0; k < NP * NT; ++k) {
    const __m256i o = _mm256_set1_epi64x(static_cast<int64_t>(off[k % NT] + n * ROUND_MAGIC_BITS));
    int64_t* dst = (k < NT ? out : out1) + (k % NT) * PANEL_ROWS;
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 4 * q), _mm256_add_epi64(load4(dst + 4 * q), _mm256_sub_epi64(acc[k][q], o)));
  }
  return true;
}

// Tokens [t0, t1) of two narrow panels, two tokens per pass (four sums per token in eight of the
// 16 registers), as a bounded pass where the bound holds; a pass whose terms left the binade is
// redone panel by panel.
template <int MIN>
void kernel_all_2p(const panel& p0, const panel& p1, const act_view& x, int64_t t0, int64_t t1, int64_t* acc0, int64_t* acc1) {
  constexpr int NT = 2;
  int64_t t = t0;
  for (; t < t1; t += NT) {
    const int64_t m = std::min<int64_t>(NT, t1 - t);
    int64_t* o0 = acc0 + (t - t0) * PANEL_ROWS;
    int64_t* o1 = acc1 + (t - t0) * PANEL_ROWS;
    if constexpr (MIN != 1) {
      if (m == NT ? kernel_tokens_bounded<false, MIN, NT, 2>(p0, p1, x, t, o0, o1) : kernel_tokens_bounded<false, MIN, 1, 2>(p0, p1, x, t, o0, o1)) continue;
    }
    if (m == NT ? kernel_tokens_pd<false, MIN, NT, 2>(p0, p1, x, t, o0, o1) : kernel_tokens_pd<false, MIN, 1, 2>(p0, p1, x, t, o0, o1)) continue;
    for (int64_t k = 0; k < m; ++k) {
      kernel_one<false, MIN>(p0, x, t + k, o0 + k * PANEL_ROWS);
      kernel_one<false, MIN>(p1, x, t + k, o1 + k * PANEL_ROWS);
    }
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

}  // namespace detaudit::kernels::cpu

#else

namespace detaudit::kernels::cpu {
bool finish16_avx2(const int64_t*, int32_t, const int32_t*, int32_t, float*) { return false; }
void panel_kernel_avx2(const panel&, const act_view&, int64_t, int64_t, int64_t*) {}
bool panel_kernel2_avx2(const panel&, const panel&, const act_view&, int64_t, int64_t, int64_t*, int64_t*) { return false; }
}  // namespace detaudit::kernels::cpu

#endif
