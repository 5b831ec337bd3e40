// The AVX2 packed generation kernels (cpu.h, pack.cpp): q4_0, q4_K, q5_K and q6_K weights
// repacked at load into 16-row tiles, read once per token batch.
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

// q4_0 tiles in the AVX2 layout (cpu.h; 2336 bytes: codes, fp16 d[8][16] at 2048, -bound[16] at
// 2304) for NT tokens: (T - 8 A) * d * 2^-bound times the activation's power of two, per block,
// where d * 2^-bound is d_mant * 2^dsh exactly (an fp16 value widened twice, times a power of two).
constexpr int64_t Q40_TILE = 2336, Q40_D = 2048, Q40_NB = 2304;

template <int NT, int NG>
bool q40_packed_tokens_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc_out) {
  static_assert(NG == 1 || NT == 1, "several groups at once for one token only");
  constexpr int64_t TILE = Q40_TILE, D = Q40_D, NB = Q40_NB;
  constexpr int NR = NG * NT;
  const int64_t gstride = n_super * TILE;
  dround r[NR];
#pragma GCC unroll 4
  for (int t = 0; t < NR; ++t) r[t].init();
  // 2^-bound of each row, the same in every tile of a group (read from its first).
  __m256d rowp[NG][4];
#pragma GCC unroll 4
  for (int g = 0; g < NG; ++g)
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) rowp[g][q] = rows4_pow2(tiles + g * gstride + NB + TILE_ROW0[q]);
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
        for (int q = 0; q < 4; ++q) {
          const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + D + 32 * b + 2 * TILE_ROW0[q]));
          dmd[q] = _mm256_mul_pd(_mm256_cvtps_pd(_mm_cvtph_ps(h)), rowp[g][q]);
        }
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
  const int64_t tile_bytes = kind == tile_kind::q4_0 ? Q40_TILE : kind == tile_kind::q4_k ? 2400 : kind == tile_kind::q5_k ? 2912 : 3392;
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
            int32_t dm = 0, de = 0;
            fp16_field(tile + Q40_D + 32 * b + 2 * row, &dm, &de);  // finite: the pack refuses others
            term = round_shift_fast((sum[0] + sum[1]) * dm, sa + (dm == 0 ? 0 : de + static_cast<int8_t>(tile[Q40_NB + row])));
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
  const int64_t tile_bytes = kind == tile_kind::q4_0 ? Q40_TILE : kind == tile_kind::q4_k ? 2400 : kind == tile_kind::q5_k ? 2912 : 3392;
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

// The tile kind of a packed type; false for the others.
bool tile_kind_of(gguf::dtype t, tile_kind* kind) {
  if (t == gguf::DTYPE_Q4_K) *kind = tile_kind::q4_k;
  else if (t == gguf::DTYPE_Q5_K) *kind = tile_kind::q5_k;
  else if (t == gguf::DTYPE_Q6_K) *kind = tile_kind::q6_k;
  else if (t == gguf::DTYPE_Q4_0) *kind = tile_kind::q4_0;
  else return false;
  return true;
}

}  // namespace

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
bool gemv_packed_scalar_avx2(gguf::dtype t, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  tile_kind kind{};
  if (!tile_kind_of(t, &kind)) return false;
  packed_tile_scalar(kind, tiles, n_super, x, acc);
  return true;
}
bool gemv_packed_pair_avx2(gguf::dtype t, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  tile_kind kind{};
  if (x.n_tok != 1 || !tile_kind_of(t, &kind)) return false;
  packed_avx2_pair(kind, tiles, n_super, x, acc);
  return true;
}

}  // namespace detaudit::kernels::cpu

#else

namespace detaudit::kernels::cpu {
void gemv_q4k_packed_avx2(const uint8_t*, int64_t, const packed_act&, int64_t*) {}
void gemv_q5k_packed_avx2(const uint8_t*, int64_t, const packed_act&, int64_t*) {}
void gemv_q6k_packed_avx2(const uint8_t*, int64_t, const packed_act&, int64_t*) {}
void gemv_q40_packed_avx2(const uint8_t*, int64_t, const packed_act&, int64_t*) {}
bool gemv_packed_scalar_avx2(gguf::dtype, const uint8_t*, int64_t, const packed_act&, int64_t*) { return false; }
bool gemv_packed_pair_avx2(gguf::dtype, const uint8_t*, int64_t, const packed_act&, int64_t*) { return false; }
}  // namespace detaudit::kernels::cpu

#endif
