// matmul_exact_cpu: the exact matmul on weight panels (matmul_internal.h), with the portable
// parts — activation packing, row bounds, the generic panel decoder, the scalar kernel and the
// driver that walks panels and token tiles.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "gguf/quants.h"
#include "gguf/weight_types.h"
#include "kernels/cpu/matmul_internal.h"
#include "numerics/wblock.h"
#include "util/error.h"

namespace detaudit::kernels::cpu {

using numerics::EXP_ZERO;
using numerics::QBLOCK;
using numerics::wblock;

namespace {

constexpr int64_t TOKEN_TILE = 64;  // tokens per accumulator tile

// The exponent of an fp16 scale as weight_decode_block records it; EXP_ZERO for a zero.
int32_t fp16_exp(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const int e = (h >> 10) & 31;
  if (e == 31) throw input_error("weight block: non-finite fp16 scale, expected a finite scale");
  if ((h & 0x7fff) == 0) return EXP_ZERO;
  return e == 0 ? -24 : e - 25;
}

}  // namespace

// numerics::quantize_block of a full block, the same integers without the per-element calls: for
// a normal x = m * 2^(E - 150) and block exponent Emax - 141, q = round-half-even(m / 2^n) with
// n = Emax - E + 9 >= 9, on the magnitude (rounding is symmetric), clamped to QMAX. Blocks with a
// non-finite element go to quantize_block, which reports it.
int32_t quantize_block_scalar(const float* x, int16_t* q) {
  uint32_t bits[QBLOCK];
  std::memcpy(bits, x, sizeof bits);
  uint32_t amax = 0;
  bool bad = false;
  for (int i = 0; i < QBLOCK; ++i) {
    const uint32_t a = bits[i] & 0x7fffffffu;
    bad = bad || a >= 0x7f800000u;
    amax = std::max(amax, a < 0x00800000u ? 0u : a);
  }
  if (bad) return numerics::quantize_block(x, QBLOCK, q);
  if (amax == 0) {
    std::memset(q, 0, QBLOCK * sizeof(int16_t));
    return EXP_ZERO;
  }
  const int32_t emax = static_cast<int32_t>(amax >> 23);
  for (int i = 0; i < QBLOCK; ++i) {
    const uint32_t a = bits[i] & 0x7fffffffu;
    const int32_t e = static_cast<int32_t>(a >> 23);
    const int32_t n = std::min(emax - e + 9, 40);
    const uint64_t m = e == 0 ? 0 : (a & 0x007fffffu) | 0x00800000u;
    uint64_t v = (m + (uint64_t(1) << (n - 1)) - 1 + ((m >> n) & 1)) >> n;
    v = std::min<uint64_t>(v, numerics::QMAX);
    q[i] = static_cast<int16_t>((bits[i] & 0x80000000u) ? -static_cast<int32_t>(v) : static_cast<int32_t>(v));
  }
  return emax - 127 - 14;
}

namespace {

// A full block through quantize_block_avx2 where the CPU has AVX2 (the same integers), else
// quantize_block_scalar.
int32_t quantize_block_fast(const float* x, int16_t* q) {
  static const bool avx2 = isa_supported(isa::avx2);
  return avx2 ? quantize_block_avx2(x, q) : quantize_block_scalar(x, q);
}

int64_t shifted(int32_t e, int32_t bound) { return e == EXP_ZERO ? 0 : static_cast<int64_t>(e) - bound; }

// 2^s as a double; 0 below the normal range, where every term the kernels scale by it rounds to 0.
double pow2_or_zero(int64_t s) { return s < -1022 ? 0.0 : std::ldexp(1.0, static_cast<int>(std::min<int64_t>(s, 1023))); }

// 2^s for -1022 <= s <= 1023 from its bits (the panels' row shifts: d_exp - bound, within
// [-300, 0]).
double pow2_bits(int64_t s) {
  const uint64_t bits = static_cast<uint64_t>(s + 1023) << 52;
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

}  // namespace

int32_t quantize_block_cpu(const float* x, int n, int16_t* q) {
  return n == QBLOCK ? quantize_block_fast(x, q) : numerics::quantize_block(x, n, q);
}

// Every integer block type numerics computes with; F32/F16/BF16 weights take the reference kernel.
// MXFP4's panels come from panel_decode_generic (weight_decode_block); its few-token rows have a
// decoder of their own (gemv_blocks.h's mxfp4_blocks, E8M0 scales as exponents).
bool matmul_fast_type(gguf::dtype t) {
  const gguf::weight_type* w = gguf::weight_type_of(t);
  return w && !w->float_rows;
}

int32_t matmul_shift_const(int64_t n_blocks) {
  return numerics::ACC_BITS - numerics::DOT_TERM_BITS - numerics::ceil_log2(2 * n_blocks);
}

void weight_row_bounds(gguf::dtype t, const uint8_t* w, int64_t n_in, int64_t row_begin,
                       int64_t row_end, int32_t* out) {
  const uint64_t row_bytes = gguf::dtype_row_bytes(t, n_in);
  if (!matmul_fast_type(t)) {
    std::vector<wblock> blocks(static_cast<size_t>((n_in + QBLOCK - 1) / QBLOCK));
    for (int64_t r = row_begin; r < row_end; ++r) {
      weight_decode_row(t, w + static_cast<uint64_t>(r) * row_bytes, n_in, blocks.data());
      out[r - row_begin] = numerics::wblock_exp_bound(blocks.data(), static_cast<int64_t>(blocks.size()));
    }
    return;
  }
  const gguf::dtype_traits& tr = gguf::dtype_get(t);
  if (t == gguf::DTYPE_MXFP4) {  // every block's d_mant is 1: the bound is the largest e, less 128
    for (int64_t r = row_begin; r < row_end; ++r) {
      const uint8_t* row = w + static_cast<uint64_t>(r) * row_bytes;
      int32_t e = EXP_ZERO;
      for (int64_t b = 0; b < n_in / tr.block_size; ++b) e = std::max<int32_t>(e, static_cast<int32_t>(row[b * tr.type_size]) - 128);
      out[r - row_begin] = e;
    }
    return;
  }
  const gguf::weight_type& f = *gguf::weight_type_of(t);  // the block's fp16 scales (weight_types.h)
  const int64_t n_super = n_in / tr.block_size;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w + static_cast<uint64_t>(r) * row_bytes;
    int32_t e = EXP_ZERO;
    for (int64_t s = 0; s < n_super; ++s) {
      const uint8_t* blk = row + static_cast<uint64_t>(s) * tr.type_size;
      for (int k = 0; k < f.n_scales; ++k) e = std::max(e, fp16_exp(blk + f.scale_offset[k]));
    }
    out[r - row_begin] = e;
  }
}

// The few-token kernels (gemv_avx2, gemv_avx512) read q_eo and bytes, built only up to
// GEMV_PACKED_MAX_TOKENS tokens.
static_assert(GEMV_MAX_TOKENS <= GEMV_PACKED_MAX_TOKENS);

void act_pack_init(int64_t n_tokens, int64_t n_in, act_pack& p) {
  if (n_in % QBLOCK != 0) {
    throw input_error("act_pack_init: row length " + std::to_string(n_in) + " is not a multiple of 32");
  }
  const int64_t nb = n_in / QBLOCK;
  p.n_tokens = n_tokens;
  p.n_in = n_in;
  p.n_blocks = nb;
  p.q.resize(static_cast<size_t>(n_tokens * n_in));
  p.max_exp.resize(static_cast<size_t>(n_tokens));
  p.exp.resize(static_cast<size_t>(n_tokens * nb));
  p.half_sum.resize(static_cast<size_t>(n_tokens * nb * 2));
  p.block_sum.resize(static_cast<size_t>(n_tokens * nb));
  p.shift.resize(static_cast<size_t>(n_tokens * nb));
  p.scale.resize(static_cast<size_t>(n_tokens * nb));
  p.half_scaled.resize(static_cast<size_t>(n_tokens * nb * 2));
  p.sum_scaled.resize(static_cast<size_t>(n_tokens * nb));
  p.abs_scaled.resize(static_cast<size_t>(n_tokens * nb));
  p.magic_div.resize(static_cast<size_t>(n_tokens * nb));
  const bool few = n_tokens <= GEMV_PACKED_MAX_TOKENS;
  p.bytes.resize(few ? static_cast<size_t>(n_tokens * nb * 16) : 0);
  p.q_eo.resize(few ? static_cast<size_t>(n_tokens * n_in) : 0);
  p.pairs.resize(few ? static_cast<size_t>(n_tokens * nb * 32) : 0);
  p.lo_half.resize(few ? static_cast<size_t>(n_tokens * nb * 2) : 0);
}

void act_pack_rows(const float* x, int64_t t0, int64_t t1, act_pack& p) {
  const int64_t nb = p.n_blocks, n_in = p.n_in;
  for (int64_t t = t0; t < t1; ++t) {
    int32_t mx = EXP_ZERO;
    for (int64_t b = 0; b < nb; ++b) {
      int16_t* q = p.q.data() + t * n_in + b * QBLOCK;
      const int32_t e = quantize_block_fast(x + t * n_in + b * QBLOCK, q);
      p.exp[static_cast<size_t>(t * nb + b)] = e;
      mx = std::max(mx, e);
      int32_t s0 = 0, s1 = 0;
      for (int i = 0; i < 16; ++i) s0 += q[i];
      for (int i = 16; i < QBLOCK; ++i) s1 += q[i];
      p.half_sum[static_cast<size_t>((t * nb + b) * 2)] = s0;
      p.half_sum[static_cast<size_t>((t * nb + b) * 2 + 1)] = s1;
      p.block_sum[static_cast<size_t>(t * nb + b)] = s0 + s1;
      int32_t sa = 0;  // sum |q|, below 2^21: scaled into abs_scaled below
      for (int i = 0; i < QBLOCK; ++i) sa += q[i] < 0 ? -q[i] : q[i];
      p.abs_scaled[static_cast<size_t>(t * nb + b)] = sa;
      if (!p.q_eo.empty()) {
        int16_t* eo = p.q_eo.data() + t * n_in + b * QBLOCK;
        for (int i = 0; i < 16; ++i) {
          eo[i] = q[2 * i];
          eo[16 + i] = q[2 * i + 1];
        }
      }
      if (!p.bytes.empty()) {
        uint32_t* out = p.bytes.data() + (t * nb + b) * 16;
        for (int k = 0; k < 8; ++k) {
          uint32_t lo = 0, hi = 0;
          for (int i = 0; i < 4; ++i) {
            const int32_t v = q[4 * k + i];
            lo |= static_cast<uint32_t>(v & 255) << (8 * i);
            hi |= static_cast<uint32_t>((v >> 8) & 255) << (8 * i);
          }
          out[2 * k] = lo;
          out[2 * k + 1] = hi;
          uint32_t* pr = p.pairs.data() + (t * nb + b) * 32 + 4 * k;
          pr[0] = (lo & 0xffffu) * 0x10001u;
          pr[1] = (lo >> 16) * 0x10001u;
          pr[2] = (hi & 0xffffu) * 0x10001u;
          pr[3] = (hi >> 16) * 0x10001u;
        }
        int32_t l0 = 0, l1 = 0;
        for (int i = 0; i < 16; ++i) l0 += q[i] & 255;
        for (int i = 16; i < QBLOCK; ++i) l1 += q[i] & 255;
        p.lo_half[static_cast<size_t>((t * nb + b) * 2)] = l0;
        p.lo_half[static_cast<size_t>((t * nb + b) * 2 + 1)] = l1;
      }
    }
    p.max_exp[static_cast<size_t>(t)] = mx;
    const int64_t c = matmul_shift_const(nb);
    for (int64_t b = 0; b < nb; ++b) {
      const size_t i = static_cast<size_t>(t * nb + b);
      p.shift[i] = c + p.exp[i] - mx;
      const double f = p.exp[i] == EXP_ZERO ? 0.0 : pow2_or_zero(p.shift[i] - 51);
      p.scale[i] = f;
      p.half_scaled[2 * i] = f * p.half_sum[2 * i];
      p.half_scaled[2 * i + 1] = f * p.half_sum[2 * i + 1];
      p.sum_scaled[i] = f * p.block_sum[i];
      const double sa = p.abs_scaled[i];  // the exact integer sum |q| from the loop above
      p.abs_scaled[i] = f != 0.0 ? f * sa : sa == 0.0 ? 0.0 : HUGE_VAL;
      p.magic_div[i] = f != 0.0 ? ROUND_MAGIC / f : ROUND_MAGIC;
    }
  }
}

void act_pack_build(const float* x, int64_t n_tokens, int64_t n_in, act_pack& p) {
  act_pack_init(n_tokens, n_in, p);
  act_pack_rows(x, 0, n_tokens, p);
}

// ---- panels ----

panel_buffer::~panel_buffer() {
  std::free(codes);
  std::free(meta);
  std::free(stage);
}

panel panel_buffer::view(int64_t n_blocks) {
  if (n_blocks > capacity) {
    std::free(codes);
    std::free(meta);
    std::free(stage);
    const size_t code_bytes = static_cast<size_t>(n_blocks) * 16 * PANEL_ROWS * sizeof(int32_t);
    // aligned_alloc wants a multiple of the alignment (AddressSanitizer refuses anything else):
    // the bounds' n_blocks doubles make the metadata's size one only when n_blocks % 8 == 0.
    const size_t meta_bytes = (static_cast<size_t>(n_blocks) * (8 * PANEL_ROWS + 1) * sizeof(int64_t) + 63) / 64 * 64;
    codes = static_cast<int32_t*>(std::aligned_alloc(64, code_bytes));
    meta = static_cast<int64_t*>(std::aligned_alloc(64, meta_bytes));
    stage = static_cast<int16_t*>(std::aligned_alloc(64, code_bytes));
    if (!codes || !meta || !stage) throw std::bad_alloc();
    capacity = n_blocks;
  }
  panel p;
  p.n_blocks = n_blocks;
  p.codes = codes;
  const int64_t m = n_blocks * PANEL_ROWS;
  p.dm = meta;
  p.dsh = meta + m;
  p.mm0 = meta + 2 * m;
  p.mm1 = meta + 3 * m;
  p.msh = meta + 4 * m;
  p.wd = reinterpret_cast<double*>(meta + 5 * m);
  p.wm0 = reinterpret_cast<double*>(meta + 6 * m);
  p.wm1 = reinterpret_cast<double*>(meta + 7 * m);
  p.bound = reinterpret_cast<double*>(meta + 8 * m);
  p.stage = stage;
  return p;
}

void panel_decode_generic(gguf::dtype t, const uint8_t* w, uint64_t row_bytes, int64_t row0,
                          int n_rows, const int32_t* bounds, panel& p) {
  const int64_t nb = p.n_blocks;
  p.n_rows = n_rows;
  p.has_min = false;
  p.wide = false;
  std::memset(p.codes, 0, static_cast<size_t>(nb) * 16 * PANEL_ROWS * sizeof(int32_t));
  std::memset(p.dm, 0, static_cast<size_t>(nb) * 5 * PANEL_ROWS * sizeof(int64_t));
  wblock blk;
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + static_cast<uint64_t>(row0 + r) * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      numerics::weight_decode_block(t, row, b, blk);
      const int64_t i = b * PANEL_ROWS + r;
      for (int j = 0; j < 16; ++j) {
        const int32_t c0 = blk.scale[j / 8] * blk.q[2 * j], c1 = blk.scale[j / 8] * blk.q[2 * j + 1];
        if (std::abs(c0) > NARROW_CODE_MAX || std::abs(c1) > NARROW_CODE_MAX) p.wide = true;
        p.codes[(b * 16 + j) * PANEL_ROWS + r] =
            static_cast<int32_t>(static_cast<uint16_t>(c0) | static_cast<uint32_t>(static_cast<uint16_t>(c1)) << 16);
      }
      p.dm[i] = blk.d_mant;
      p.dsh[i] = blk.d_mant == 0 ? 0 : shifted(blk.d_exp, bounds[r]);
      p.mm0[i] = static_cast<int64_t>(blk.m_mant) * blk.mcoef[0];
      p.mm1[i] = static_cast<int64_t>(blk.m_mant) * blk.mcoef[1];
      p.msh[i] = blk.m_mant == 0 ? 0 : shifted(blk.m_exp, bounds[r]);
      if (blk.m_mant != 0 && (blk.mcoef[0] != 0 || blk.mcoef[1] != 0)) p.has_min = true;
    }
  }
}

namespace {

inline int32_t code_pair(int32_t c0, int32_t c1) {
  return static_cast<int32_t>(static_cast<uint16_t>(c0) | static_cast<uint32_t>(static_cast<uint16_t>(c1)) << 16);
}

}  // namespace

// Straight-line decoders of q8_0, q4_0, q4_K, q5_K and q6_K panels for the instruction sets
// without their own (the same panel as panel_decode_generic, which goes through
// weight_decode_block block by block and took 40% of a q4_K prompt's time on AVX2, as much of a
// q6_K one, 20% of q4_0's and 26% of a Q5_K_M's). False on a non-finite scale: the generic
// decoder then reports it.
bool panel_decode_fast(gguf::dtype t, const uint8_t* w, uint64_t row_bytes, int64_t row0, int n_rows,
                       const int32_t* bounds, panel& p) {
  if (t != gguf::DTYPE_Q8_0 && t != gguf::DTYPE_Q4_0 && t != gguf::DTYPE_Q4_K && t != gguf::DTYPE_Q5_K &&
      t != gguf::DTYPE_Q6_K)
    return false;
  const int64_t nb = p.n_blocks;
  p.n_rows = n_rows;
  p.has_min = false;
  p.wide = false;
  if (n_rows < PANEL_ROWS) {
    std::memset(p.codes, 0, static_cast<size_t>(nb) * 16 * PANEL_ROWS * sizeof(int32_t));
    std::memset(p.dm, 0, static_cast<size_t>(nb) * 5 * PANEL_ROWS * sizeof(int64_t));
  }
  // The scale terms of block b of row r for the types without an offset term.
  auto plain_terms = [&](int64_t b, int r, int32_t dm, int64_t dsh) {
    const int64_t i = b * PANEL_ROWS + r;
    p.dm[i] = dm;
    p.dsh[i] = dsh;
    p.mm0[i] = p.mm1[i] = p.msh[i] = 0;
  };
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + static_cast<uint64_t>(row0 + r) * row_bytes;
    if (t == gguf::DTYPE_Q8_0 || t == gguf::DTYPE_Q4_0) {
      // q8_0: 34-byte blocks, fp16 d and 32 int8 codes. q4_0: 18-byte blocks, fp16 d and 16
      // bytes; element l < 16 the low nibble of byte l, the others the high nibble of byte
      // l - 16; code nibble - 8.
      const bool q40 = t == gguf::DTYPE_Q4_0;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * (q40 ? 18 : 34);
        int32_t dm, de;
        if (!fp16_field(blk, &dm, &de)) return false;
        int32_t* out = p.codes + b * 16 * PANEL_ROWS + r;
        if (q40) {
          const uint8_t* q = blk + 2;
          for (int j = 0; j < 8; ++j) out[j * PANEL_ROWS] = code_pair((q[2 * j] & 15) - 8, (q[2 * j + 1] & 15) - 8);
          for (int j = 8; j < 16; ++j) out[j * PANEL_ROWS] = code_pair((q[2 * j - 16] >> 4) - 8, (q[2 * j - 15] >> 4) - 8);
        } else {
          const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
          for (int j = 0; j < 16; ++j) out[j * PANEL_ROWS] = code_pair(q[2 * j], q[2 * j + 1]);
        }
        plain_terms(b, r, dm, dm == 0 ? 0 : static_cast<int64_t>(de) - bounds[r]);
      }
      continue;
    }
    if (t == gguf::DTYPE_Q6_K) {
      // 210-byte super-blocks: ql[128] low nibbles, qh[64] two high bits, 16 int8 scales (one per
      // 16 elements), fp16 d. Element e of a super-block: half h = e / 128, quarter g = e / 32 % 4,
      // l = e % 32; low nibble of ql[64h + 32(g & 1) + l] (the high one when g >= 2), high bits
      // (qh[32h + l] >> 2g) & 3; code (low | high << 4) - 32, times its 16 elements' scale.
      for (int64_t s = 0; s < nb / 8; ++s) {
        const uint8_t* sb = row + s * 210;
        int32_t dm, de;
        if (!fp16_field(sb + 208, &dm, &de)) return false;
        const int64_t dsh = dm == 0 ? 0 : static_cast<int64_t>(de) - bounds[r];
        for (int sub = 0; sub < 8; ++sub) {
          const int h = sub / 4, g = sub % 4;
          const uint8_t* ql = sb + 64 * h + 32 * (g & 1);
          const uint8_t* qh = sb + 128 + 32 * h;
          const int sl = 4 * (g >> 1), shh = 2 * g;
          const int32_t sc0 = static_cast<int8_t>(sb[192 + 2 * sub]), sc1 = static_cast<int8_t>(sb[192 + 2 * sub + 1]);
          int16_t c[32];
          for (int l = 0; l < 32; ++l) {
            const int32_t q = (((ql[l] >> sl) & 15) | ((qh[l] >> shh) & 3) << 4) - 32;
            c[l] = static_cast<int16_t>(q * (l < 16 ? sc0 : sc1));
          }
          int32_t big = 0;
          for (int l = 0; l < 32; ++l) big |= c[l] > NARROW_CODE_MAX || c[l] < -NARROW_CODE_MAX;
          if (big) p.wide = true;
          const int64_t b = s * 8 + sub;
          int32_t* out = p.codes + b * 16 * PANEL_ROWS + r;
          for (int j = 0; j < 16; ++j) out[j * PANEL_ROWS] = code_pair(c[2 * j], c[2 * j + 1]);
          plain_terms(b, r, dm, dsh);
        }
      }
      continue;
    }
    // q4_K (144 bytes) and q5_K (176: a bit plane of fifth bits at 16, the nibbles at 48): fp16 d
    // and dmin, twelve bytes of six-bit scales and mins; element 32 * sub + l the nibble of byte
    // 32 * (sub / 2) + l (high nibble for odd sub), q5_K's fifth bit bit sub of plane byte l.
    const bool five = t == gguf::DTYPE_Q5_K;
    for (int64_t s = 0; s < nb / 8; ++s) {
      const uint8_t* sb = row + s * (five ? 176 : 144);
      int32_t dm, de, mm, me;
      if (!fp16_field(sb, &dm, &de) || !fp16_field(sb + 2, &mm, &me)) return false;
      const uint8_t* sc6 = sb + 4;
      for (int sub = 0; sub < 8; ++sub) {
        const int32_t sc = sub < 4 ? sc6[sub] & 63 : (sc6[sub + 4] & 15) | (sc6[sub - 4] >> 6) << 4;
        const int32_t mn = sub < 4 ? sc6[sub + 4] & 63 : (sc6[sub + 4] >> 4) | (sc6[sub] >> 6) << 4;
        const uint8_t* qs = sb + (five ? 48 : 16) + 32 * (sub / 2);
        const int sh = 4 * (sub & 1);
        const int64_t b = s * 8 + sub;
        int32_t* out = p.codes + b * 16 * PANEL_ROWS + r;
        if (five) {
          const uint8_t* qh = sb + 16;
          for (int j = 0; j < 16; ++j)
            out[j * PANEL_ROWS] = code_pair((((qs[2 * j] >> sh) & 15) | ((qh[2 * j] >> sub) & 1) << 4) * sc,
                                            (((qs[2 * j + 1] >> sh) & 15) | ((qh[2 * j + 1] >> sub) & 1) << 4) * sc);
        } else {
          for (int j = 0; j < 16; ++j) out[j * PANEL_ROWS] = code_pair(((qs[2 * j] >> sh) & 15) * sc, ((qs[2 * j + 1] >> sh) & 15) * sc);
        }
        const int64_t i = b * PANEL_ROWS + r;
        p.dm[i] = dm;
        p.dsh[i] = dm == 0 ? 0 : static_cast<int64_t>(de) - bounds[r];
        p.mm0[i] = p.mm1[i] = -static_cast<int64_t>(mm) * mn;  // wblock's offset scale of q4_K is -dmin
        p.msh[i] = mm == 0 ? 0 : static_cast<int64_t>(me) - bounds[r];
        if (mm != 0 && mn != 0) p.has_min = true;
      }
    }
  }
  return true;
}

void panel_scales(panel& p) {
  const int64_t n = p.n_blocks * PANEL_ROWS;
  p.min_whole = true;
  for (int64_t i = 0; i < n; ++i) {
    if (p.mm0[i] != p.mm1[i]) p.min_whole = false;
    p.wd[i] = p.dm[i] == 0 ? 0.0 : static_cast<double>(p.dm[i]) * pow2_bits(p.dsh[i]);
    const double f = pow2_bits(p.msh[i]);
    p.wm0[i] = static_cast<double>(p.mm0[i]) * f;
    p.wm1[i] = static_cast<double>(p.mm1[i]) * f;
  }
  for (int64_t b = 0; b < p.n_blocks; ++b) {
    // The block's largest |code| (16 pairs of 16 rows, two int16 codes per int32) and largest
    // |wd| need not come from one row: their product still bounds every row's.
    const int32_t* cb = p.codes + b * 16 * PANEL_ROWS;
    int16_t hi = 0, lo = 0;
    for (int j = 0; j < 16 * PANEL_ROWS; j += 16) {  // as int16 lanes (max and min vectorise)
      int16_t h[32];
      std::memcpy(h, cb + j, sizeof h);
      for (int i = 0; i < 32; ++i) {
        hi = std::max(hi, h[i]);
        lo = std::min(lo, h[i]);
      }
    }
    const int32_t cmax = std::max<int32_t>(hi, -static_cast<int32_t>(lo));
    double wd = 0.0, wm = 0.0;
    for (int r = 0; r < PANEL_ROWS; ++r) {
      const int64_t i = b * PANEL_ROWS + r;
      wd = std::max(wd, std::fabs(p.wd[i]));
      wm = std::max(wm, std::max(std::fabs(p.wm0[i]), std::fabs(p.wm1[i])));
    }
    p.bound[b] = std::max(cmax * wd, wm);
  }
}

// ---- the scalar kernel ----

void panel_kernel_scalar(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc) {
  const int64_t nb = p.n_blocks;
  const int32_t c = matmul_shift_const(nb);
  for (int64_t t = t0; t < t1; ++t) {
    int64_t* a_out = acc + (t - t0) * PANEL_ROWS;
    const int32_t xmax = x.max_exp[t];
    for (int64_t b = 0; b < nb; ++b) {
      const int32_t ea = x.exp[t * nb + b];
      if (ea == EXP_ZERO) continue;
      const int16_t* a = x.q + (t * nb + b) * QBLOCK;
      const int64_t sa = static_cast<int64_t>(c) + ea - xmax;
      const int32_t* hs = x.half_sum + (t * nb + b) * 2;
      const int32_t* cb = p.codes + b * 16 * PANEL_ROWS;
      for (int r = 0; r < PANEL_ROWS; ++r) {
        int64_t sum = 0;
        for (int j = 0; j < 16; ++j) {
          const int32_t pair = cb[j * PANEL_ROWS + r];
          sum += static_cast<int64_t>(static_cast<int16_t>(pair & 0xffff)) * a[2 * j] +
                 static_cast<int64_t>(static_cast<int16_t>(static_cast<uint32_t>(pair) >> 16)) * a[2 * j + 1];
        }
        const int64_t i = b * PANEL_ROWS + r;
        a_out[r] += round_shift_fast(p.dm[i] * sum, sa + p.dsh[i]);
        if (p.has_min) a_out[r] += round_shift_fast(p.mm0[i] * hs[0] + p.mm1[i] * hs[1], sa + p.msh[i]);
      }
    }
  }
}

// ---- the driver ----

void matmul_exact_cpu(isa i, const act_pack& x, gguf::dtype t, const uint8_t* w, int64_t n_out,
                      const int32_t* row_bounds, float* y, int64_t row_begin, int64_t row_end) {
  if (!matmul_fast_type(t)) {
    throw input_error(std::string("matmul_exact_cpu: no fast path for weight type ") + gguf::dtype_get(t).name);
  }
  if (row_begin < 0 || row_end > n_out || row_begin > row_end) {
    throw input_error("matmul_exact_cpu: row range [" + std::to_string(row_begin) + ", " +
                      std::to_string(row_end) + ") outside [0, " + std::to_string(n_out) + ")");
  }
  if (!isa_supported(i)) throw input_error(std::string("matmul_exact_cpu: ") + isa_name(i) + " is not supported here");
  const uint64_t row_bytes = gguf::dtype_row_bytes(t, x.n_in);
  const int64_t nb = x.n_blocks;
  const int32_t c = matmul_shift_const(nb);
  const act_view xv{nb, x.q.data(), x.exp.data(), x.max_exp.data(), x.half_sum.data(), x.scale.data(), x.half_scaled.data(),
                    x.sum_scaled.data(), x.abs_scaled.data(), x.magic_div.data(), x.q_eo.empty() ? nullptr : x.q_eo.data()};
  const int64_t n_rows_all = row_end - row_begin;
  // Converts the sum of (token, row) on its grid and stores it.
  auto finish = [&](int64_t tok, int64_t r, int64_t sum) {
    const int32_t xmax = x.max_exp[static_cast<size_t>(tok)], bound = row_bounds[r];
    y[tok * n_out + r] = xmax == EXP_ZERO || bound == EXP_ZERO ? 0.0f : fixed_to_f32_fast(sum, xmax + bound - c);
  };
  if (i != isa::scalar && x.n_tokens <= GEMV_MAX_TOKENS && n_rows_all > 0) {
    std::vector<int64_t> sums(static_cast<size_t>(x.n_tokens * n_rows_all), 0);
    const bool done = i == isa::avx512 ? gemv_avx512(t, xv, x.n_tokens, w, row_bytes, row_bounds, row_begin, row_end, sums.data())
                                       : gemv_avx2(t, xv, x.n_tokens, w, row_bytes, row_bounds, row_begin, row_end, sums.data());
    if (done) {
      for (int64_t tok = 0; tok < x.n_tokens; ++tok)
        for (int64_t r = row_begin; r < row_end; ++r) finish(tok, r, sums[static_cast<size_t>(tok * n_rows_all + r - row_begin)]);
      return;
    }
  }
  thread_local panel_buffer buf, buf2;
  std::vector<int64_t> acc(static_cast<size_t>(TOKEN_TILE * PANEL_ROWS)), acc2(acc.size());
  // AVX-512 decodes q8_0 and q4_K itself; q6_K (and every type on the other sets) from the
  // straight-line decoders, then the portable one.
  auto decode = [&](int64_t r0, int n_rows, panel& p) {
    const bool fast = (i == isa::avx512 && panel_decode_avx512(t, w, row_bytes, r0, n_rows, row_bounds + r0, p)) ||
                      panel_decode_fast(t, w, row_bytes, r0, n_rows, row_bounds + r0, p);
    if (!fast) panel_decode_generic(t, w, row_bytes, r0, n_rows, row_bounds + r0, p);
    if (i == isa::avx2) panel_scales(p);
  };
  auto finish_tile = [&](int64_t r0, int n_rows, int64_t tt, int64_t te, const std::vector<int64_t>& a) {
    for (int64_t tok = tt; tok < te; ++tok) {
      const int64_t* at = a.data() + (tok - tt) * PANEL_ROWS;
      if (n_rows == PANEL_ROWS && i != isa::scalar &&
          finish16_avx2(at, x.max_exp[static_cast<size_t>(tok)], row_bounds + r0, c, y + tok * n_out + r0))
        continue;
      for (int r = 0; r < n_rows; ++r) finish(tok, r0 + r, at[r]);
    }
  };
  auto one_panel = [&](const panel& p, int64_t r0, int n_rows) {
    for (int64_t tt = 0; tt < x.n_tokens; tt += TOKEN_TILE) {
      const int64_t te = std::min(x.n_tokens, tt + TOKEN_TILE);
      std::fill(acc.begin(), acc.end(), 0);
      if (i == isa::avx512) panel_kernel_avx512(p, xv, tt, te, acc.data());
      else if (i == isa::avx2) panel_kernel_avx2(p, xv, tt, te, acc.data());
      else panel_kernel_scalar(p, xv, tt, te, acc.data());
      finish_tile(r0, n_rows, tt, te, acc);
    }
  };
  for (int64_t r0 = row_begin; r0 < row_end;) {
    const int n_rows = static_cast<int>(std::min<int64_t>(PANEL_ROWS, row_end - r0));
    panel p = buf.view(nb);
    decode(r0, n_rows, p);
    const int64_t r1 = r0 + n_rows;
    if (i != isa::avx2 || r1 >= row_end) {
      one_panel(p, r0, n_rows);
      r0 = r1;
      continue;
    }
    // AVX2: two panels per pass where they pair (panel_kernel2_avx2), one by one otherwise.
    const int n_rows1 = static_cast<int>(std::min<int64_t>(PANEL_ROWS, row_end - r1));
    panel p1 = buf2.view(nb);
    decode(r1, n_rows1, p1);
    for (int64_t tt = 0; tt < x.n_tokens; tt += TOKEN_TILE) {
      const int64_t te = std::min(x.n_tokens, tt + TOKEN_TILE);
      std::fill(acc.begin(), acc.end(), 0);
      std::fill(acc2.begin(), acc2.end(), 0);
      if (!panel_kernel2_avx2(p, p1, xv, tt, te, acc.data(), acc2.data())) {
        panel_kernel_avx2(p, xv, tt, te, acc.data());
        panel_kernel_avx2(p1, xv, tt, te, acc2.data());
      }
      finish_tile(r0, n_rows, tt, te, acc);
      finish_tile(r1, n_rows1, tt, te, acc2);
    }
    r0 = r1 + n_rows1;
  }
}

}  // namespace detaudit::kernels::cpu
