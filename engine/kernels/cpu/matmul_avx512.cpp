// The AVX-512 (F, BW, DQ, VL, VNNI) variant of the exact matmul kernel and its panel decoders.
//
// Kernel: for each token and block, T = sum over the 16 element pairs of vpdpwssd(broadcast
// activation pair, 16 rows' code pairs): one 32-bit lane per row (narrow panels; wide panels keep
// the two half-blocks in separate lanes' sums). The epilogue widens to int64, multiplies by d_mant
// (vpmuldq), and rounds onto the row's grid with a variable shift: left shifts are exact, right
// shifts round half to even as (v + 2^(n-1) - 1 + ((v >> n) & 1)) >> n.
// Decoders: q8_0 and q4_K rows become 16 vectors of 32 int16 codes, transposed into the panel's
// pair-interleaved layout with a 16x16 32-bit transpose.
//
// Everything below the pragma is static or a plain extern function, and no std:: template is
// instantiated there, so no AVX-512 code can leak into the rest of the program.
// GCC 12's AVX-512 intrinsics read a self-initialised undefined vector (_mm512_undefined_*), which
// -Wuninitialized reports at every use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "gguf/dtype.h"
#include "kernels/cpu/matmul_internal.h"
#include "numerics/exact.h"

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#include "kernels/cpu/gemv_blocks.h"

namespace detaudit::kernels::cpu {

namespace {

constexpr int64_t TOKEN_GROUP = 4;

inline __m512i round_shift_v(__m512i v, __m512i s) {
  const __mmask8 neg = _mm512_cmplt_epi64_mask(s, _mm512_setzero_si512());
  const __m512i left = _mm512_sllv_epi64(v, _mm512_max_epi64(s, _mm512_setzero_si512()));
  if (neg == 0) return left;
  const __m512i n = _mm512_min_epi64(_mm512_sub_epi64(_mm512_setzero_si512(), s), _mm512_set1_epi64(63));
  const __m512i one = _mm512_set1_epi64(1);
  const __m512i half_m1 = _mm512_sub_epi64(_mm512_sllv_epi64(one, _mm512_sub_epi64(n, one)), one);
  const __m512i odd = _mm512_and_si512(_mm512_srav_epi64(v, n), one);
  const __m512i right = _mm512_srav_epi64(_mm512_add_epi64(_mm512_add_epi64(v, half_m1), odd), n);
  return _mm512_mask_blend_epi64(neg, left, right);
}

inline __m512i lo64(__m512i v) { return _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v)); }
inline __m512i hi64(__m512i v) { return _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1)); }

// The block products of one block b with tokens [t, t + NT): T[k] (narrow) or T[k], U[k] (wide:
// pairs 0..7 and 8..15).
template <int NT, bool WIDE>
inline void block_products(const int32_t* cb, const int16_t* const* a, __m512i* tsum, __m512i* usum) {
  #pragma GCC unroll 16
  for (int k = 0; k < NT; ++k) {
    tsum[k] = _mm512_setzero_si512();
    if (WIDE) usum[k] = _mm512_setzero_si512();
  }
  #pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    const __m512i wj = _mm512_load_si512(cb + j * PANEL_ROWS);
    #pragma GCC unroll 16
    for (int k = 0; k < NT; ++k) {
      const __m512i aj = _mm512_broadcastd_epi32(_mm_loadu_si32(a[k] + 2 * j));
      if (WIDE && j >= 8) usum[k] = _mm512_dpwssd_epi32(usum[k], aj, wj);
      else tsum[k] = _mm512_dpwssd_epi32(tsum[k], aj, wj);
    }
  }
}

template <int NT, bool WIDE, bool MIN>
void kernel_tokens(const panel& p, const act_view& x, int64_t t, int64_t t0, int64_t* acc) {
  const int64_t nb = p.n_blocks;
  const int64_t c = matmul_shift_const(nb);
  __m512i acc_lo[NT], acc_hi[NT];
  #pragma GCC unroll 16
  for (int k = 0; k < NT; ++k) {
    acc_lo[k] = _mm512_loadu_si512(acc + (t + k - t0) * PANEL_ROWS);
    acc_hi[k] = _mm512_loadu_si512(acc + (t + k - t0) * PANEL_ROWS + 8);
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int16_t* a[NT];
    int64_t sa[NT];
    bool any = false;
    #pragma GCC unroll 16
    for (int k = 0; k < NT; ++k) {
      const int32_t ea = x.exp[(t + k) * nb + b];
      a[k] = x.q + ((t + k) * nb + b) * numerics::QBLOCK;
      sa[k] = ea == numerics::EXP_ZERO ? -4096 : c + ea - x.max_exp[t + k];
      any = any || ea != numerics::EXP_ZERO;
    }
    if (!any) continue;
    __m512i tsum[NT], usum[NT];
    block_products<NT, WIDE>(p.codes + b * 16 * PANEL_ROWS, a, tsum, usum);
    const int64_t* mi = p.dm + b * PANEL_ROWS;
    const __m512i dm_lo = _mm512_load_si512(mi), dm_hi = _mm512_load_si512(mi + 8);
    const __m512i dsh_lo = _mm512_load_si512(p.dsh + b * PANEL_ROWS), dsh_hi = _mm512_load_si512(p.dsh + b * PANEL_ROWS + 8);
    #pragma GCC unroll 16
    for (int k = 0; k < NT; ++k) {
      __m512i v_lo = _mm512_mul_epi32(lo64(tsum[k]), dm_lo);
      __m512i v_hi = _mm512_mul_epi32(hi64(tsum[k]), dm_hi);
      if (WIDE) {
        v_lo = _mm512_add_epi64(v_lo, _mm512_mul_epi32(lo64(usum[k]), dm_lo));
        v_hi = _mm512_add_epi64(v_hi, _mm512_mul_epi32(hi64(usum[k]), dm_hi));
      }
      const __m512i s = _mm512_set1_epi64(sa[k]);
      acc_lo[k] = _mm512_add_epi64(acc_lo[k], round_shift_v(v_lo, _mm512_add_epi64(dsh_lo, s)));
      acc_hi[k] = _mm512_add_epi64(acc_hi[k], round_shift_v(v_hi, _mm512_add_epi64(dsh_hi, s)));
      if (MIN) {
        const int32_t* hs = x.half_sum + ((t + k) * nb + b) * 2;
        const __m512i h0 = _mm512_set1_epi64(hs[0]), h1 = _mm512_set1_epi64(hs[1]);
        const int64_t o = b * PANEL_ROWS;
        const __m512i m_lo = _mm512_add_epi64(_mm512_mul_epi32(_mm512_load_si512(p.mm0 + o), h0),
                                              _mm512_mul_epi32(_mm512_load_si512(p.mm1 + o), h1));
        const __m512i m_hi = _mm512_add_epi64(_mm512_mul_epi32(_mm512_load_si512(p.mm0 + o + 8), h0),
                                              _mm512_mul_epi32(_mm512_load_si512(p.mm1 + o + 8), h1));
        acc_lo[k] = _mm512_add_epi64(acc_lo[k], round_shift_v(m_lo, _mm512_add_epi64(_mm512_load_si512(p.msh + o), s)));
        acc_hi[k] = _mm512_add_epi64(acc_hi[k], round_shift_v(m_hi, _mm512_add_epi64(_mm512_load_si512(p.msh + o + 8), s)));
      }
    }
  }
  #pragma GCC unroll 16
  for (int k = 0; k < NT; ++k) {
    _mm512_storeu_si512(acc + (t + k - t0) * PANEL_ROWS, acc_lo[k]);
    _mm512_storeu_si512(acc + (t + k - t0) * PANEL_ROWS + 8, acc_hi[k]);
  }
}

template <bool WIDE, bool MIN>
void kernel_all(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc) {
  int64_t t = t0;
  for (; t + TOKEN_GROUP <= t1; t += TOKEN_GROUP) kernel_tokens<TOKEN_GROUP, WIDE, MIN>(p, x, t, t0, acc);
  for (; t < t1; ++t) kernel_tokens<1, WIDE, MIN>(p, x, t, t0, acc);
}

// ---- decoders ----

// Transposes 16 rows of 16 32-bit lanes (r[i] lane j) into out[j * 16 + i].
void transpose16_store(const __m512i* r, int32_t* out) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // u[4q + c] holds, in each 128-bit lane L, elements j = 4L + c of rows 4q .. 4q + 3.
  for (int c = 0; c < 4; ++c) {
    const __m512i a01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);   // lanes 0,2 of u[c], u[4+c]
    const __m512i b01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);   // lanes 1,3
    const __m512i a23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
    const __m512i b23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
    // a01: [u_c L0, u_c L2, u_{4+c} L0, u_{4+c} L2]; a23 likewise for rows 8..15.
    const __m512i j0 = _mm512_shuffle_i32x4(a01, a23, 0x88);  // L0 of all four: element j = c
    const __m512i j2 = _mm512_shuffle_i32x4(a01, a23, 0xdd);  // L2: j = 8 + c
    const __m512i j1 = _mm512_shuffle_i32x4(b01, b23, 0x88);  // L1: j = 4 + c
    const __m512i j3 = _mm512_shuffle_i32x4(b01, b23, 0xdd);  // L3: j = 12 + c
    _mm512_store_si512(out + (c) * 16, j0);
    _mm512_store_si512(out + (4 + c) * 16, j1);
    _mm512_store_si512(out + (8 + c) * 16, j2);
    _mm512_store_si512(out + (12 + c) * 16, j3);
  }
}

struct fp16_parts {
  int64_t mant = 0;
  int32_t exp = numerics::EXP_ZERO;  // EXP_ZERO for a zero
};

inline fp16_parts fp16_read(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const int e = (h >> 10) & 31;
  const int32_t frac = h & 1023;
  fp16_parts f;
  const int32_t m = e == 0 ? frac : 1024 + frac;
  if (m == 0) return f;
  f.mant = (h & 0x8000) ? -m : m;
  f.exp = e == 0 ? -24 : e - 25;
  return f;
}

bool scale_finite(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return ((h >> 10) & 31) != 31;
}

// Loads the 16 rows' code vectors of block b from the row-major staging area and stores them
// transposed into the panel.
void transpose_block(const int16_t* stage, int64_t nb, int64_t b, panel& p) {
  __m512i r[16];
  #pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(stage + (i * nb + b) * 32);
  transpose16_store(r, p.codes + b * 16 * PANEL_ROWS);
}

// q8_0: 34-byte blocks, fp16 d then 32 int8. Each row is read front to back (one stream at a
// time, which the hardware prefetcher follows) into the staging area, then transposed.
bool decode_q8_0(const uint8_t* w, uint64_t row_bytes, int64_t row0, int n_rows, const int32_t* bounds,
                 int16_t* stage, panel& p) {
  const int64_t nb = p.n_blocks;
  #pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    int16_t* st = stage + i * nb * 32;
    if (i >= n_rows) {
      for (int64_t b = 0; b < nb; ++b) {
        _mm512_store_si512(st + b * 32, _mm512_setzero_si512());
        p.dm[b * 16 + i] = p.dsh[b * 16 + i] = 0;
      }
      continue;
    }
    const uint8_t* row = w + static_cast<uint64_t>(row0 + i) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + static_cast<uint64_t>(b) * 34;
      if (!scale_finite(blk)) return false;
      _mm512_store_si512(st + b * 32, _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2))));
      const fp16_parts d = fp16_read(blk);
      p.dm[b * 16 + i] = d.mant;
      p.dsh[b * 16 + i] = d.mant == 0 ? 0 : static_cast<int64_t>(d.exp) - bounds[i];
    }
  }
  for (int64_t b = 0; b < nb; ++b) transpose_block(stage, nb, b, p);
  p.has_min = false;
  p.wide = false;
  return true;
}

// q4_K: 144-byte super-blocks of 256: fp16 d, fp16 dmin, 12 bytes of 6-bit (scale, min) pairs,
// 128 bytes of nibbles (byte l of chunk c: low nibble = element 64c + l, high = 64c + 32 + l).
void q4k_scale_min(const uint8_t* s, int j, int32_t* sc, int32_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

bool decode_q4_k(const uint8_t* w, uint64_t row_bytes, int64_t row0, int n_rows, const int32_t* bounds,
                 int16_t* stage, panel& p) {
  const int64_t nb = p.n_blocks;
  bool has_min = false;
  #pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    int16_t* st = stage + i * nb * 32;
    if (i >= n_rows) {
      for (int64_t b = 0; b < nb; ++b) {
        _mm512_store_si512(st + b * 32, _mm512_setzero_si512());
        p.dm[b * 16 + i] = p.dsh[b * 16 + i] = p.mm0[b * 16 + i] = p.mm1[b * 16 + i] = p.msh[b * 16 + i] = 0;
      }
      continue;
    }
    const uint8_t* row = w + static_cast<uint64_t>(row0 + i) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const int sub = static_cast<int>(b % 8);
      const int64_t o = b * 16 + i;
      const uint8_t* sb = row + static_cast<uint64_t>(b / 8) * 144;
      if (!scale_finite(sb) || !scale_finite(sb + 2)) return false;
      int32_t sc, mn;
      q4k_scale_min(sb + 4, sub, &sc, &mn);
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 16 + 32 * (sub / 2)));
      const __m256i nib = (sub & 1) ? _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(15))
                                    : _mm256_and_si256(bytes, _mm256_set1_epi8(15));
      _mm512_store_si512(st + b * 32, _mm512_mullo_epi16(_mm512_cvtepu8_epi16(nib), _mm512_set1_epi16(static_cast<int16_t>(sc))));
      const fp16_parts d = fp16_read(sb), dmin = fp16_read(sb + 2);
      p.dm[o] = d.mant;
      p.dsh[o] = d.mant == 0 ? 0 : static_cast<int64_t>(d.exp) - bounds[i];
      p.mm0[o] = p.mm1[o] = -dmin.mant * mn;
      p.msh[o] = dmin.mant == 0 ? 0 : static_cast<int64_t>(dmin.exp) - bounds[i];
      if (dmin.mant != 0 && mn != 0) has_min = true;
    }
  }
  for (int64_t b = 0; b < nb; ++b) transpose_block(stage, nb, b, p);
  p.has_min = has_min;
  p.wide = false;
  return true;
}


// ---- the few-token path ----

// Sums of the 16 int32 lanes of each of p[0..7], as 8 int32 lanes in order.
inline __m256i reduce8(const __m512i* p) {
  __m512i a[4], e[2];
  #pragma GCC unroll 16
  for (int k = 0; k < 4; ++k)
    a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * k], p[2 * k + 1]), _mm512_unpackhi_epi32(p[2 * k], p[2 * k + 1]));
  #pragma GCC unroll 16
  for (int k = 0; k < 2; ++k)
    e[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_epi64(a[2 * k], a[2 * k + 1]));
  // e[0] lane L = (p0, p1, p2, p3) partial sums of 128-bit lane L; e[1] likewise for p4..p7.
  const __m512i g = _mm512_add_epi32(_mm512_shuffle_i32x4(e[0], e[1], 0x44), _mm512_shuffle_i32x4(e[0], e[1], 0xee));
  const __m512i h = _mm512_add_epi32(g, _mm512_shuffle_i32x4(g, g, 0xb1));
  return _mm512_castsi512_si256(_mm512_shuffle_i32x4(h, h, 0x08));
}

// fp16 scales h (8 lanes, low 16 bits) as int64 mantissas and exponent offsets from bound; zero
// scales give mant 0, offset 0. Non-finite ones set *bad.
inline void fp16_split8(__m256i h, int32_t bound, __m512i* mant, __m512i* off, bool* bad) {
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(h, 10), _mm256_set1_epi32(31));
  const __m256i frac = _mm256_and_si256(h, _mm256_set1_epi32(1023));
  const __mmask8 sub = _mm256_cmpeq_epi32_mask(e, _mm256_setzero_si256());
  __m256i m = _mm256_mask_or_epi32(_mm256_or_si256(frac, _mm256_set1_epi32(1024)), sub, frac, _mm256_setzero_si256());
  const __mmask8 neg = _mm256_test_epi32_mask(h, _mm256_set1_epi32(0x8000));
  m = _mm256_mask_sub_epi32(m, neg, _mm256_setzero_si256(), m);
  const __mmask8 zero = _mm256_cmpeq_epi32_mask(m, _mm256_setzero_si256());
  const __m256i ex = _mm256_mask_mov_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(25)), sub, _mm256_set1_epi32(-24));
  const __m256i o = _mm256_maskz_sub_epi32(static_cast<__mmask8>(~zero), ex, _mm256_set1_epi32(bound));
  if (_mm256_cmpeq_epi32_mask(e, _mm256_set1_epi32(31))) *bad = true;
  *mant = _mm512_cvtepi32_epi64(m);
  *off = _mm512_cvtepi32_epi64(o);
}

// mxfp4's scales (gemv_blocks.h): mantissa 1 and exponent e - 128 - bound for e >= 0, nothing for
// -1 (past the row's end); e >= 253 may overflow a float: bad, and the panel path decides.
inline void e8m0_split8(__m256i e, int32_t bound, __m512i* mant, __m512i* off, bool* bad) {
  const __mmask8 live = _mm256_cmpge_epi32_mask(e, _mm256_setzero_si256());
  if (_mm256_cmpge_epi32_mask(e, _mm256_set1_epi32(253))) *bad = true;
  *mant = _mm512_cvtepi32_epi64(_mm256_maskz_mov_epi32(live, _mm256_set1_epi32(1)));
  *off = _mm512_cvtepi32_epi64(_mm256_maskz_sub_epi32(live, e, _mm256_set1_epi32(128 + bound)));
}

// Adds the rounded block terms v (8 blocks) at shifts c + (e_a - xmax) + off into acc.
inline __m512i add_terms(__m512i acc, __m512i v, const int32_t* ea, int64_t c_xmax, __m512i off) {
  const __m512i s = _mm512_add_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ea))),
                                                      _mm512_set1_epi64(c_xmax)), off);
  return _mm512_add_epi64(acc, round_shift_v(v, s));
}

// The block exponents of blocks [b0, b0 + 8) of one token (EXP_ZERO past n_blocks) as int64 plus
// c_xmax: the activation part of every shift.
inline __m512i act_shift8(const int32_t* ea, int64_t b0, int64_t nb, int64_t c_xmax) {
  const __mmask8 live = nb - b0 >= 8 ? static_cast<__mmask8>(0xff) : static_cast<__mmask8>((1u << (nb - b0)) - 1);
  const __m256i e = _mm256_mask_loadu_epi32(_mm256_set1_epi32(numerics::EXP_ZERO), live, ea + b0);
  return _mm512_add_epi64(_mm512_cvtepi32_epi64(e), _mm512_set1_epi64(c_xmax));
}

inline int32_t load_u16(const uint8_t* p) {
  uint16_t v;
  __builtin_memcpy(&v, p, 2);
  return v;
}

// The products of 8 q8_0 blocks (b0 .. b0 + 7, those below nb) of one row with the token's
// activation blocks, and their fp16 scales (0 past nb).
inline void q8_0_group(const uint8_t* g, const int16_t* a, int64_t b0, int64_t nb, __m512i* p, __m256i* h) {
  if (nb - b0 >= 8) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m512i codes = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + k * 34 + 2)));
      p[k] = _mm512_madd_epi16(codes, _mm512_loadu_si512(a + (b0 + k) * 32));
    }
    *h = _mm256_setr_epi32(load_u16(g), load_u16(g + 34), load_u16(g + 68), load_u16(g + 102), load_u16(g + 136),
                           load_u16(g + 170), load_u16(g + 204), load_u16(g + 238));
    return;
  }
  alignas(32) int32_t hv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int k = 0; k < 8; ++k) {
    p[k] = _mm512_setzero_si512();
    if (b0 + k >= nb) continue;
    hv[k] = load_u16(g + k * 34);
    const __m512i codes = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + k * 34 + 2)));
    p[k] = _mm512_madd_epi16(codes, _mm512_loadu_si512(a + (b0 + k) * 32));
  }
  *h = _mm256_load_si256(reinterpret_cast<const __m256i*>(hv));
}

// One q8_0 row against one token: groups of 8 blocks, one vector epilogue per group.
bool gemv_row_q8_0(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  const int16_t* a = x.q + t * nb * 32;
  const int64_t c_xmax = c - x.max_exp[t];
  __m512i acc = _mm512_setzero_si512();
  bool bad = false;
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    row_prefetch<8 * 34>(row + b0 * 34);
    __m512i p[8];
    __m256i h;
    q8_0_group(row + b0 * 34, a, b0, nb, p, &h);
    __m512i dm, off;
    fp16_split8(h, bound, &dm, &off, &bad);
    const __m512i v = _mm512_mul_epi32(_mm512_cvtepi32_epi64(reduce8(p)), dm);
    acc = _mm512_add_epi64(acc, round_shift_v(v, _mm512_add_epi64(act_shift8(x.exp + t * nb, b0, nb, c_xmax), off)));
  }
  *out += _mm512_reduce_add_epi64(acc);
  return !bad;
}

// The eight 6-bit (scale, min) pairs of a q4_K super-block's 12 scale bytes s, as int32 lanes.
inline void q4k_scales8(const uint8_t* s, __m256i* sc, __m256i* mn) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));  // 12 bytes used
  const __m256i a = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(raw, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0)));
  const __m256i b = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(raw, _mm_setr_epi8(4, 5, 6, 7, 8, 9, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0)));
  const __m256i hs = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(raw, _mm_setr_epi8(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0)));
  const __m256i hm = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(raw, _mm_setr_epi8(0, 0, 0, 0, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0)));
  const __m256i m63 = _mm256_set1_epi32(63), m15 = _mm256_set1_epi32(15);
  const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(a, m15), _mm256_slli_epi32(_mm256_srli_epi32(hs, 6), 4));
  const __m256i mn_hi = _mm256_or_si256(_mm256_srli_epi32(b, 4), _mm256_slli_epi32(_mm256_srli_epi32(hm, 6), 4));
  *sc = _mm256_blend_epi32(_mm256_and_si256(a, m63), sc_hi, 0xf0);
  *mn = _mm256_blend_epi32(_mm256_and_si256(b, m63), mn_hi, 0xf0);
}

// An fp16 scale as (mant, exp - bound) in int64 lanes; (0, 0) for zero. False when non-finite.
inline bool fp16_scalar(const uint8_t* p, int32_t bound, __m512i* mant, __m512i* off) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  const int e = (h >> 10) & 31;
  const int32_t frac = h & 1023;
  const int32_t m = e == 0 ? frac : 1024 + frac;
  *mant = _mm512_set1_epi64((h & 0x8000) ? -m : m);
  *off = _mm512_set1_epi64(m == 0 ? 0 : (e == 0 ? -24 : e - 25) - static_cast<int64_t>(bound));
  return e != 31;
}

// One q4_K row against one token: one super-block (8 blocks) per group.
bool gemv_row_q4_k(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
  const int16_t* a = x.q + t * nb * 32;
  const int64_t c_xmax = c - x.max_exp[t];
  __m512i acc = _mm512_setzero_si512();
  bool ok = true;
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
    const uint8_t* sb = row + (b0 / 8) * 144;
    row_prefetch<144>(sb);
    __m512i p[8];
    #pragma GCC unroll 16
    for (int ch = 0; ch < 4; ++ch) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 16 + 32 * ch));
      const __m512i lo = _mm512_cvtepu8_epi16(_mm256_and_si256(bytes, low4));
      const __m512i hi = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4));
      p[2 * ch] = _mm512_madd_epi16(lo, _mm512_loadu_si512(a + (b0 + 2 * ch) * 32));
      p[2 * ch + 1] = _mm512_madd_epi16(hi, _mm512_loadu_si512(a + (b0 + 2 * ch + 1) * 32));
    }
    __m256i sc, mn;
    q4k_scales8(sb + 4, &sc, &mn);
    __m512i dm, doff, mm, moff;
    ok = fp16_scalar(sb, bound, &dm, &doff) && ok;
    ok = fp16_scalar(sb + 2, bound, &mm, &moff) && ok;
    const __m512i sa = act_shift8(x.exp + t * nb, b0, nb, c_xmax);
    const __m512i t1 = _mm512_mul_epi32(_mm512_cvtepi32_epi64(_mm256_mullo_epi32(reduce8(p), sc)), dm);
    acc = _mm512_add_epi64(acc, round_shift_v(t1, _mm512_add_epi64(sa, doff)));
    // Activation block sums A0 + A1 of the 8 blocks, from the interleaved half sums.
    const __m512i hs = _mm512_loadu_si512(x.half_sum + (t * nb + b0) * 2);
    const __m256i a_sum = _mm512_cvtepi64_epi32(_mm512_add_epi32(hs, _mm512_srli_epi64(hs, 32)));
    const __m512i t2 = _mm512_mul_epi32(_mm512_cvtepi32_epi64(_mm256_mullo_epi32(a_sum, mn)), _mm512_sub_epi64(_mm512_setzero_si512(), mm));
    acc = _mm512_add_epi64(acc, round_shift_v(t2, _mm512_add_epi64(sa, moff)));
  }
  *out += _mm512_reduce_add_epi64(acc);
  return ok;
}

inline __m256i load8(const int32_t* v) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)); }

// One row of any type with a decoder in gemv_blocks.h against one token: eight blocks per group,
// each block's 32 products in one vpmaddwd, one vector epilogue per group. With PER16 the two
// halves of each block keep separate sums (their sub-block scales differ). Every multiplication of
// the epilogue is a 32 x 32 -> 64-bit one: d_mant * scale and m_mant * mcoef fit 18 bits, the
// half-block sums 25 bits.
template <class D>
struct gemv_row_blocks {
  static bool run(const uint8_t* row, int64_t nb, const act_view& x, int64_t t, int32_t bound, int64_t c, int64_t* out) {
    const int16_t* a = x.q + t * nb * 32;
    const int64_t c_xmax = c - x.max_exp[t];
    __m512i acc = _mm512_setzero_si512();
    bool bad = false;
    alignas(64) int8_t buf[256];
    gemv_group g;
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
      row_prefetch<D::GROUP_BYTES>(row + (b0 / 8) * D::GROUP_BYTES);
      D::decode(row, b0, nb, buf, g);
      const int live = nb - b0 >= 8 ? 8 : static_cast<int>(nb - b0);
      __m512i p0[8], p1[8];
  #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        __m512i prod = _mm512_setzero_si512();
        if (k < live) {
          const __m512i codes = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.code[k])));
          prod = _mm512_madd_epi16(codes, _mm512_loadu_si512(a + (b0 + k) * 32));
        }
        if (D::PER16) {
          p0[k] = _mm512_maskz_mov_epi32(0x00ff, prod);
          p1[k] = _mm512_maskz_mov_epi32(0xff00, prod);
        } else {
          p0[k] = prod;
        }
      }
      __m512i dm, doff;
      if constexpr (gemv_e8m0<D>) e8m0_split8(load8(g.hd), bound, &dm, &doff, &bad);
      else fp16_split8(load8(g.hd), bound, &dm, &doff, &bad);
      const __m256i dm32 = _mm512_cvtepi64_epi32(dm);
      __m512i t1 = _mm512_mul_epi32(_mm512_cvtepi32_epi64(reduce8(p0)), _mm512_cvtepi32_epi64(_mm256_mullo_epi32(dm32, load8(g.s0))));
      if (D::PER16) {
        t1 = _mm512_add_epi64(t1, _mm512_mul_epi32(_mm512_cvtepi32_epi64(reduce8(p1)),
                                                   _mm512_cvtepi32_epi64(_mm256_mullo_epi32(dm32, load8(g.s1)))));
      }
      const __m512i sa = act_shift8(x.exp + t * nb, b0, nb, c_xmax);
      acc = _mm512_add_epi64(acc, round_shift_v(t1, _mm512_add_epi64(sa, doff)));
      if (D::HAS_MIN) {
        const __mmask16 hs_live = live == 8 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (2 * live)) - 1);
        const __m512i hs = _mm512_maskz_loadu_epi32(hs_live, x.half_sum + (t * nb + b0) * 2);
        const __m512i a0 = _mm512_srai_epi64(_mm512_slli_epi64(hs, 32), 32), a1 = _mm512_srai_epi64(hs, 32);
        __m512i mm, moff;
        fp16_split8(load8(g.hm), bound, &mm, &moff, &bad);
        const __m256i mm32 = _mm512_cvtepi64_epi32(mm);
        const __m512i t2 = _mm512_add_epi64(_mm512_mul_epi32(a0, _mm512_cvtepi32_epi64(_mm256_mullo_epi32(mm32, load8(g.m0)))),
                                            _mm512_mul_epi32(a1, _mm512_cvtepi32_epi64(_mm256_mullo_epi32(mm32, load8(g.m1)))));
        acc = _mm512_add_epi64(acc, round_shift_v(t2, _mm512_add_epi64(sa, moff)));
      }
    }
    *out += _mm512_reduce_add_epi64(acc);
    return !bad;
  }
};

constexpr int64_t PREFETCH_TILES = 4;

// Run k of 16 rows (two bytes per row, cpu.h) -> 32-bit lanes of four byte codes: byte i of
// row r's lane is code 4k + i.
inline __m512i nibble_quads(const uint8_t* p) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_ternarylogic_epi32(v, _mm512_slli_epi32(v, 12), _mm512_set1_epi32(0x0f0f0f0f), 0xa8);  // (a | b) & c
}

// Adds add to each byte of codes whose bit is set in the 64-bit mask at p (bit 4r + i: byte i of
// row r's lane).
inline __m512i add_bits(__m512i codes, const uint8_t* p, int8_t add) {
  uint64_t m;
  __builtin_memcpy(&m, p, 8);
  return _mm512_mask_add_epi8(codes, _cvtu64_mask64(m), codes, _mm512_set1_epi8(add));
}

// Fetches the tile PREFETCH_TILES ahead, a fifth of 320 bytes per call (b = 0..7): the hardware
// prefetcher alone leaves DRAM bandwidth unused. The next group's tiles follow the last one; a
// prefetch past the end never faults.
inline void prefetch_ahead(const uint8_t* tile, int64_t tile_bytes, int b) {
  // An address, not a pointer into the buffer: it may lie past the end, where only the prefetch goes.
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(tile) + static_cast<uintptr_t>(PREFETCH_TILES * tile_bytes + b * (tile_bytes / 8));
#pragma GCC unroll 8
  for (int64_t l = 0; l < (tile_bytes / 8 + 63) / 64; ++l) _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
}

// Adds the 16 rows' sums of each token (lanes 0..7 in lo, 8..15 in hi) to acc_out[t * 16 + r].
template <int NT>
inline void add_rows(const __m512i* acc_lo, const __m512i* acc_hi, int64_t* acc_out) {
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    _mm512_storeu_si512(acc_out + t * 16, _mm512_add_epi64(_mm512_loadu_si512(acc_out + t * 16), acc_lo[t]));
    _mm512_storeu_si512(acc_out + t * 16 + 8, _mm512_add_epi64(_mm512_loadu_si512(acc_out + t * 16 + 8), acc_hi[t]));
  }
}

// The four low bytes (HI false) or high bytes of elements 4k .. 4k + 3 of token t's block blk,
// broadcast to every lane.
template <bool HI>
inline __m512i act_quad(const packed_act& x, int t, int64_t blk, int k) {
  return _mm512_set1_epi32(static_cast<int32_t>(x.bytes[(t * x.nb + blk) * 16 + 2 * k + (HI ? 1 : 0)]));
}

// Byte products of one run of four codes w (0..63, so both u8 and s8) and token t's activations
// a = 256 hi + lo: lo (u8) x w (s8) into pl, w (u8) x hi (s8) into ph; the block sum is
// 256 ph + pl, the same integer as the int16 products.
inline void quad_products(__m512i w, const packed_act& x, int t, int64_t blk, int k, __m512i& pl, __m512i& ph) {
  pl = _mm512_dpbusd_epi32(pl, act_quad<false>(x, t, blk, k), w);
  ph = _mm512_dpbusd_epi32(ph, w, act_quad<true>(x, t, blk, k));
}

// CH independent chains per token and product (runs k with k % CH == c), so that a vpdpbusd
// latency chain is 8 / CH long; fewer when more tokens share a run's codes.
template <int NT>
constexpr int chains() {
  return NT == 1 ? 4 : (NT == 2 ? 2 : 1);
}

// The block sums of NT tokens over the eight runs of block b: codes(k) gives run k's codes.
template <int NT, class Codes>
inline void block_sums(Codes codes, const packed_act& x, int64_t blk, __m512i* p) {
  constexpr int CH = chains<NT>();
  __m512i pl[NT][CH], ph[NT][CH];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
    for (int c = 0; c < CH; ++c) pl[t][c] = ph[t][c] = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    const __m512i w = codes(k);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) quad_products(w, x, t, blk, k, pl[t][k % CH], ph[t][k % CH]);
  }
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) {
    __m512i l = pl[t][0], h = ph[t][0];
#pragma GCC unroll 4
    for (int c = 1; c < CH; ++c) {
      l = _mm512_add_epi32(l, pl[t][c]);
      h = _mm512_add_epi32(h, ph[t][c]);
    }
    p[t] = _mm512_add_epi32(_mm512_slli_epi32(h, 8), l);
  }
}

// The packed q4_K (FIVE false) and q5_K kernels for NT tokens. q5_K's fifth bits are added to the
// codes (16 each) before the products.
template <int NT, bool FIVE>
void qk_packed_tokens(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc_out) {
  // Tile offsets (cpu.h): codes, [fifth bits,] scales, mins, d, dmin, their shifts.
  constexpr int64_t TILE = FIVE ? 2912 : 2400, SC = FIVE ? 2560 : 2048, MN = SC + 128, DM = MN + 128, MM = DM + 32,
                    DSH = MM + 32, MSH = DSH + 16;
  __m512i acc_lo[NT], acc_hi[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc_lo[t] = acc_hi[t] = _mm512_setzero_si512();
  for (int64_t s = 0; s < n_super; ++s) {
    const uint8_t* tile = tiles + s * TILE;
    const __m512i dm = _mm512_cvtepi16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(tile + DM)));
    const __m512i mm = _mm512_cvtepi16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(tile + MM)));
    const __m512i dsh_lo = _mm512_cvtepi8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + DSH)));
    const __m512i dsh_hi = _mm512_cvtepi8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + DSH + 8)));
    const __m512i msh_lo = _mm512_cvtepi8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + MSH)));
    const __m512i msh_hi = _mm512_cvtepi8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + MSH + 8)));
    for (int b = 0; b < 8; ++b) {
      const int64_t blk = s * 8 + b;
      prefetch_ahead(tile, TILE, b);
      __m512i p[NT];
      block_sums<NT>(
          [tile, b](int k) {
            const __m512i w = nibble_quads(tile + (b * 8 + k) * 32);
            return FIVE ? add_bits(w, tile + 2048 + (b * 8 + k) * 8, 16) : w;
          },
          x, blk, p);
      const __m512i dsc = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(tile + SC + 16 * b))), dm);
      const __m512i mmn = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(tile + MN + 16 * b))), mm);
      const __m512i dsc_lo = lo64(dsc), dsc_hi = hi64(dsc), mmn_lo = lo64(mmn), mmn_hi = hi64(mmn);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m512i sa = _mm512_set1_epi64(x.shift[t * x.nb + blk]);
        const __m512i a = _mm512_set1_epi64(x.asum[t * x.nb + blk]);
        acc_lo[t] = _mm512_add_epi64(acc_lo[t], round_shift_v(_mm512_mul_epi32(lo64(p[t]), dsc_lo), _mm512_add_epi64(sa, dsh_lo)));
        acc_hi[t] = _mm512_add_epi64(acc_hi[t], round_shift_v(_mm512_mul_epi32(hi64(p[t]), dsc_hi), _mm512_add_epi64(sa, dsh_hi)));
        acc_lo[t] = _mm512_add_epi64(acc_lo[t], round_shift_v(_mm512_mul_epi32(a, mmn_lo), _mm512_add_epi64(sa, msh_lo)));
        acc_hi[t] = _mm512_add_epi64(acc_hi[t], round_shift_v(_mm512_mul_epi32(a, mmn_hi), _mm512_add_epi64(sa, msh_hi)));
      }
    }
  }
  add_rows<NT>(acc_lo, acc_hi, acc_out);
}

// The packed q6_K kernel for NT tokens: the two high bits are added to the low nibbles (16 and
// 32) before the products; the code is that less 32, so each half block's sum is the byte
// products' less 32 times the activation half sum. Runs 0..3 are the first half, 4..7 the second.
template <int NT>
void q6k_packed_tokens(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc_out) {
  __m512i acc_lo[NT], acc_hi[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc_lo[t] = acc_hi[t] = _mm512_setzero_si512();
  constexpr int CH = NT == 1 ? 2 : 1;  // chains per half, token and product
  for (int64_t s = 0; s < n_super; ++s) {
    const uint8_t* tile = tiles + s * 3392;
    const __m512i dm = _mm512_cvtepi16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(tile + 3328)));
    const __m512i dsh_lo = _mm512_cvtepi8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + 3360)));
    const __m512i dsh_hi = _mm512_cvtepi8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + 3368)));
    for (int b = 0; b < 8; ++b) {
      const int64_t blk = s * 8 + b;
      prefetch_ahead(tile, 3392, b);
      __m512i pl[NT][2][CH], ph[NT][2][CH];  // [token][half][chain]
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t)
#pragma GCC unroll 2
        for (int c = 0; c < CH; ++c) pl[t][0][c] = pl[t][1][c] = ph[t][0][c] = ph[t][1][c] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        __m512i w = nibble_quads(tile + (b * 8 + k) * 32);
        w = add_bits(w, tile + 2048 + (b * 8 + k) * 16, 16);
        w = add_bits(w, tile + 2048 + (b * 8 + k) * 16 + 8, 32);
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t) quad_products(w, x, t, blk, k, pl[t][k / 4][k % CH], ph[t][k / 4][k % CH]);
      }
      const __m512i f0 = _mm512_mullo_epi32(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(tile + 3072 + 32 * b))), dm);
      const __m512i f1 = _mm512_mullo_epi32(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(tile + 3072 + 32 * b + 16))), dm);
      const __m512i f0_lo = lo64(f0), f0_hi = hi64(f0), f1_lo = lo64(f1), f1_hi = hi64(f1);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        __m512i h[2];
#pragma GCC unroll 2
        for (int half = 0; half < 2; ++half) {
          __m512i l = pl[t][half][0], hh = ph[t][half][0];
#pragma GCC unroll 2
          for (int c = 1; c < CH; ++c) {
            l = _mm512_add_epi32(l, pl[t][half][c]);
            hh = _mm512_add_epi32(hh, ph[t][half][c]);
          }
          const int32_t hs = x.half_sum[(t * x.nb + blk) * 2 + half];
          h[half] = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(hh, 8), l), _mm512_set1_epi32(32 * hs));
        }
        const __m512i sa = _mm512_set1_epi64(x.shift[t * x.nb + blk]);
        const __m512i t_lo = _mm512_add_epi64(_mm512_mul_epi32(lo64(h[0]), f0_lo), _mm512_mul_epi32(lo64(h[1]), f1_lo));
        const __m512i t_hi = _mm512_add_epi64(_mm512_mul_epi32(hi64(h[0]), f0_hi), _mm512_mul_epi32(hi64(h[1]), f1_hi));
        acc_lo[t] = _mm512_add_epi64(acc_lo[t], round_shift_v(t_lo, _mm512_add_epi64(sa, dsh_lo)));
        acc_hi[t] = _mm512_add_epi64(acc_hi[t], round_shift_v(t_hi, _mm512_add_epi64(sa, dsh_hi)));
      }
    }
  }
  add_rows<NT>(acc_lo, acc_hi, acc_out);
}

// The packed q4_0 kernel for NT tokens: eight blocks per tile, each with its own fp16 d; code =
// u - 8, so the block sum is the nibbles' less 8 times the activation block sum.
template <int NT>
void q40_packed_tokens(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc_out) {
  __m512i acc_lo[NT], acc_hi[NT];
#pragma GCC unroll 4
  for (int t = 0; t < NT; ++t) acc_lo[t] = acc_hi[t] = _mm512_setzero_si512();
  for (int64_t s = 0; s < n_super; ++s) {
    const uint8_t* tile = tiles + s * 2432;
    for (int b = 0; b < 8; ++b) {
      const int64_t blk = s * 8 + b;
      prefetch_ahead(tile, 2432, b);
      __m512i p[NT];
      block_sums<NT>([tile, b](int k) { return nibble_quads(tile + (b * 8 + k) * 32); }, x, blk, p);
      const __m512i dm = _mm512_cvtepi16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(tile + 2048 + 32 * b)));
      const __m512i dm_lo = lo64(dm), dm_hi = hi64(dm);
      const __m512i dsh_lo = _mm512_cvtepi8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + 2304 + 16 * b)));
      const __m512i dsh_hi = _mm512_cvtepi8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile + 2304 + 16 * b + 8)));
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const __m512i pt = _mm512_sub_epi32(p[t], _mm512_set1_epi32(8 * x.asum[t * x.nb + blk]));
        const __m512i sa = _mm512_set1_epi64(x.shift[t * x.nb + blk]);
        acc_lo[t] = _mm512_add_epi64(acc_lo[t], round_shift_v(_mm512_mul_epi32(lo64(pt), dm_lo), _mm512_add_epi64(sa, dsh_lo)));
        acc_hi[t] = _mm512_add_epi64(acc_hi[t], round_shift_v(_mm512_mul_epi32(hi64(pt), dm_hi), _mm512_add_epi64(sa, dsh_hi)));
      }
    }
  }
  add_rows<NT>(acc_lo, acc_hi, acc_out);
}

}  // namespace

void gemv_q40_packed_avx512(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  switch (x.n_tok) {
    case 1: q40_packed_tokens<1>(tiles, n_super, x, acc); break;
    case 2: q40_packed_tokens<2>(tiles, n_super, x, acc); break;
    case 3: q40_packed_tokens<3>(tiles, n_super, x, acc); break;
    case 4: q40_packed_tokens<4>(tiles, n_super, x, acc); break;
    default: break;
  }
}

void gemv_qk_packed_avx512(bool five, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  switch (x.n_tok * 2 + (five ? 1 : 0)) {
    case 2: qk_packed_tokens<1, false>(tiles, n_super, x, acc); break;
    case 3: qk_packed_tokens<1, true>(tiles, n_super, x, acc); break;
    case 4: qk_packed_tokens<2, false>(tiles, n_super, x, acc); break;
    case 5: qk_packed_tokens<2, true>(tiles, n_super, x, acc); break;
    case 6: qk_packed_tokens<3, false>(tiles, n_super, x, acc); break;
    case 7: qk_packed_tokens<3, true>(tiles, n_super, x, acc); break;
    case 8: qk_packed_tokens<4, false>(tiles, n_super, x, acc); break;
    case 9: qk_packed_tokens<4, true>(tiles, n_super, x, acc); break;
    default: break;
  }
}

void gemv_q6k_packed_avx512(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc) {
  switch (x.n_tok) {
    case 1: q6k_packed_tokens<1>(tiles, n_super, x, acc); break;
    case 2: q6k_packed_tokens<2>(tiles, n_super, x, acc); break;
    case 3: q6k_packed_tokens<3>(tiles, n_super, x, acc); break;
    case 4: q6k_packed_tokens<4>(tiles, n_super, x, acc); break;
    default: break;
  }
}

void panel_kernel_avx512(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc) {
  if (p.wide) {
    if (p.has_min) kernel_all<true, true>(p, x, t0, t1, acc);
    else kernel_all<true, false>(p, x, t0, t1, acc);
  } else {
    if (p.has_min) kernel_all<false, true>(p, x, t0, t1, acc);
    else kernel_all<false, false>(p, x, t0, t1, acc);
  }
}

bool gemv_avx512(gguf::dtype t, const act_view& x, int64_t n_tokens, const uint8_t* w,
                 uint64_t row_bytes, const int32_t* row_bounds, int64_t r0, int64_t r1, int64_t* acc) {
  gemv_row_fn fn = gemv_blocks_row<gemv_row_blocks>(t);
  if (t == gguf::DTYPE_Q8_0) fn = gemv_row_q8_0;
  if (t == gguf::DTYPE_Q4_K) fn = gemv_row_q4_k;
  return fn != nullptr && gemv_rows(fn, x, n_tokens, w, row_bytes, row_bounds, r0, r1, acc);
}

bool panel_decode_avx512(gguf::dtype t, const uint8_t* w, uint64_t row_bytes, int64_t row0,
                         int n_rows, const int32_t* bounds, panel& p) {
  p.n_rows = n_rows;
  if (t == gguf::DTYPE_Q8_0) return decode_q8_0(w, row_bytes, row0, n_rows, bounds, p.stage, p);
  if (t == gguf::DTYPE_Q4_K) return decode_q4_k(w, row_bytes, row0, n_rows, bounds, p.stage, p);
  return false;
}

}  // namespace detaudit::kernels::cpu

#else

namespace detaudit::kernels::cpu {
void gemv_qk_packed_avx512(bool, const uint8_t*, const int64_t, const packed_act&, int64_t*) {}
void gemv_q6k_packed_avx512(const uint8_t*, const int64_t, const packed_act&, int64_t*) {}
void gemv_q40_packed_avx512(const uint8_t*, const int64_t, const packed_act&, int64_t*) {}
void panel_kernel_avx512(const panel&, const act_view&, int64_t, int64_t, int64_t*) {}
bool panel_decode_avx512(gguf::dtype, const uint8_t*, uint64_t, int64_t, int, const int32_t*, panel&) { return false; }
bool gemv_avx512(gguf::dtype, const act_view&, int64_t, const uint8_t*, uint64_t, const int32_t*, int64_t, int64_t, int64_t*) {
  return false;
}
}  // namespace detaudit::kernels::cpu

#endif
