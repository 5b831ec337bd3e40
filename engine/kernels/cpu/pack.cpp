// Weights repacked into 16-row tiles at load time (cpu.h, "weights repacked at load time for
// generation") and the driver of the generation kernels that read them (matmul_avx512.cpp, matmul_avx2_packed.cpp).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "kernels/cpu/matmul_internal.h"
#include "util/error.h"

namespace detaudit::kernels::cpu {

using numerics::EXP_ZERO;

namespace {

// Tile offsets (cpu.h): q4_K 2400 bytes, q5_K 2912 (the fifth bits at 2048, the rest as q4_K's
// 512 bytes later), q6_K 3392, q4_0 2432 (AVX2: 2336).
struct qk_offsets {
  int64_t tile, sc, mn, dm, mm, dsh, msh;
};
constexpr qk_offsets Q4K{2400, 2048, 2176, 2304, 2336, 2368, 2384};
constexpr qk_offsets Q5K{2912, 2560, 2688, 2816, 2848, 2880, 2896};
constexpr int64_t Q5K_FIFTH = 2048;
constexpr int64_t Q6K_TILE = 3392, Q6K_HI = 2048, Q6K_SC = 3072, Q6K_DM = 3328, Q6K_DSH = 3360;
constexpr int64_t Q40_TILE = 2432, Q40_DM = 2048, Q40_DSH = 2304;
constexpr int64_t Q40_AVX2_TILE = 2336, Q40_AVX2_D = 2048, Q40_AVX2_NB = 2304;

int8_t shift_of(int32_t mant, int32_t exp, int32_t bound) {
  return static_cast<int8_t>(mant == 0 || bound == EXP_ZERO ? 0 : exp - bound);
}

// The four-bit codes c(0..31) of block b of tile row r, as four-element runs: row r's two bytes
// of run k are c(4k) | c(4k + 2) << 4 and c(4k + 1) | c(4k + 3) << 4.
template <class Code>
void put_nibbles(uint8_t* tile, int b, int r, Code c) {
  for (int k = 0; k < 8; ++k) {
    uint8_t* at = tile + ((b * 8 + k) * 16 + r) * 2;
    at[0] = static_cast<uint8_t>(c(4 * k) | c(4 * k + 2) << 4);
    at[1] = static_cast<uint8_t>(c(4 * k + 1) | c(4 * k + 3) << 4);
  }
}

// Bit 4r + i of the 64-bit mask of run k of block b: bit of element 4k + i of row r.
template <class Bit>
void put_bits(uint8_t* masks, int b, int r, int stride, Bit bit) {
  for (int k = 0; k < 8; ++k) {
    uint64_t m;
    uint8_t* at = masks + (b * 8 + k) * stride;
    std::memcpy(&m, at, 8);
    for (int i = 0; i < 4; ++i) m |= static_cast<uint64_t>(bit(4 * k + i)) << (4 * r + i);
    std::memcpy(at, &m, 8);
  }
}

// The AVX2 layout of high bits (cpu.h): within each 32-byte vector of block b (vectors of `per`
// runs each, `bits` bits per element), byte 2r + e holds, for run k = per * v + m, the bits of
// element 4k + e at bit bits * 2m and of element 4k + 2 + e at bit bits * (2m + 1).
template <class Bits>
void put_bits_avx2(uint8_t* region, int b, int r, int per, int bits, Bits value) {
  for (int k = 0; k < 8; ++k) {
    uint8_t* vec = region + (b * (8 / per) + k / per) * 32;
    const int m = k % per;
    for (int e = 0; e < 2; ++e) {
      vec[2 * r + e] = static_cast<uint8_t>(vec[2 * r + e] | value(4 * k + e) << (bits * 2 * m));
      vec[2 * r + e] = static_cast<uint8_t>(vec[2 * r + e] | value(4 * k + 2 + e) << (bits * (2 * m + 1)));
    }
  }
}

// One q4_K (144 bytes: d, dmin, scales[12], qs[128]) or q5_K super-block (176 bytes: d, dmin,
// scales[12], qh[32], qs[128]) of tile row r; avx2: q5_K's fifth bits in the AVX2 layout.
void pack_qk_row(bool five, bool avx2, const uint8_t* sb, int32_t bound, int r, uint8_t* tile, int16_t* dm, int16_t* mm, int8_t* dsh,
                 int8_t* msh) {
  const qk_offsets& o = five ? Q5K : Q4K;
  int32_t d_mant = 0, d_exp = 0, m_mant = 0, m_exp = 0;
  fp16_field(sb, &d_mant, &d_exp);
  fp16_field(sb + 2, &m_mant, &m_exp);
  dm[r] = static_cast<int16_t>(d_mant);
  mm[r] = static_cast<int16_t>(-m_mant);  // wblock's m_mant of q4_K / q5_K is -dmin
  dsh[r] = shift_of(d_mant, d_exp, bound);
  msh[r] = shift_of(m_mant, m_exp, bound);
  const uint8_t* sc = sb + 4;
  const uint8_t* qh = sb + 16;
  const uint8_t* qs = sb + (five ? 48 : 16);
  for (int b = 0; b < 8; ++b) {
    int32_t scale, min;
    if (b < 4) {
      scale = sc[b] & 63;
      min = sc[b + 4] & 63;
    } else {
      scale = (sc[b + 4] & 15) | (sc[b - 4] >> 6) << 4;
      min = (sc[b + 4] >> 4) | (sc[b] >> 6) << 4;
    }
    tile[o.sc + b * 16 + r] = static_cast<uint8_t>(scale);
    tile[o.mn + b * 16 + r] = static_cast<uint8_t>(min);
    put_nibbles(tile, b, r, [qs, b](int l) { return (qs[32 * (b / 2) + l] >> (4 * (b % 2))) & 15; });
    auto fifth = [qh, b](int l) { return (qh[l] >> b) & 1; };
    if (five && avx2) put_bits_avx2(tile + Q5K_FIFTH, b, r, 4, 1, fifth);
    else if (five) put_bits(tile + Q5K_FIFTH, b, r, 8, fifth);
  }
}

// One q6_K super-block (210 bytes: ql[128], qh[64], scales[16], d) of tile row r; avx2: the high
// pairs in the AVX2 layout.
void pack_q6k_row(bool avx2, const uint8_t* sb, int32_t bound, int r, uint8_t* tile, int16_t* dm, int8_t* dsh) {
  int32_t d_mant = 0, d_exp = 0;
  fp16_field(sb + 208, &d_mant, &d_exp);
  dm[r] = static_cast<int16_t>(d_mant);
  dsh[r] = shift_of(d_mant, d_exp, bound);
  auto low = [sb](int e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    return (sb[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 15;
  };
  auto high = [sb](int e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    return (sb[128 + 32 * h + l] >> (2 * g)) & 3;
  };
  for (int b = 0; b < 8; ++b) {
    for (int half = 0; half < 2; ++half)
      tile[Q6K_SC + (b * 2 + half) * 16 + r] = sb[192 + 2 * b + half];
    put_nibbles(tile, b, r, [&low, b](int l) { return low(32 * b + l); });
    if (avx2) {
      put_bits_avx2(tile + Q6K_HI, b, r, 2, 2, [&high, b](int l) { return high(32 * b + l); });
      continue;
    }
    for (int plane = 0; plane < 2; ++plane)
      put_bits(tile + Q6K_HI + 8 * plane, b, r, 16, [&high, b, plane](int l) { return (high(32 * b + l) >> plane) & 1; });
  }
}

// Eight q4_0 blocks (18 bytes each: d, qs[16]; element l < 16 is the low nibble of qs[l], the
// others the high nibble of qs[l - 16]) of tile row r. avx2: each block's fp16 d as it stands and
// the row's -bound once (cpu.h), which the kernel turns into the same double d_mant * 2^dsh with
// two conversions and a product instead of widening and shifting two fields per block.
void pack_q40_row(bool avx2, const uint8_t* sb, int32_t bound, int r, uint8_t* tile) {
  if (avx2) tile[Q40_AVX2_NB + r] = static_cast<uint8_t>(static_cast<int8_t>(bound == EXP_ZERO ? 0 : -bound));
  for (int b = 0; b < 8; ++b) {
    const uint8_t* blk = sb + 18 * b;
    if (avx2) {
      std::memcpy(tile + Q40_AVX2_D + (b * 16 + r) * 2, blk, 2);
    } else {
      int32_t d_mant = 0, d_exp = 0;
      fp16_field(blk, &d_mant, &d_exp);
      const int16_t dm = static_cast<int16_t>(d_mant);
      std::memcpy(tile + Q40_DM + (b * 16 + r) * 2, &dm, 2);
      tile[Q40_DSH + b * 16 + r] = static_cast<uint8_t>(shift_of(d_mant, d_exp, bound));
    }
    put_nibbles(tile, b, r, [blk](int l) { return l < 16 ? blk[2 + l] & 15 : blk[2 + l - 16] >> 4; });
  }
}

bool scales_finite(gguf::dtype t, const uint8_t* sb) {
  int32_t m = 0, e = 0;
  if (t == gguf::DTYPE_Q6_K) return fp16_field(sb + 208, &m, &e);
  if (t == gguf::DTYPE_Q4_0) {
    for (int b = 0; b < 8; ++b)
      if (!fp16_field(sb + 18 * b, &m, &e)) return false;
    return true;
  }
  return fp16_field(sb, &m, &e) && fp16_field(sb + 2, &m, &e);
}

}  // namespace

bool row_pack_type(gguf::dtype t) {
  return t == gguf::DTYPE_Q4_0 || t == gguf::DTYPE_Q4_K || t == gguf::DTYPE_Q5_K || t == gguf::DTYPE_Q6_K;
}

bool row_pack_kernel(gguf::dtype t, isa i) {
  if (!row_pack_type(t) || !isa_supported(i)) return false;
  if (i == isa::avx512) return true;
  return i == isa::avx2;
}

int64_t row_pack_tile_bytes(gguf::dtype t, isa i) {
  if (t == gguf::DTYPE_Q4_K) return Q4K.tile;
  if (t == gguf::DTYPE_Q5_K) return Q5K.tile;
  if (t == gguf::DTYPE_Q6_K) return Q6K_TILE;
  if (t == gguf::DTYPE_Q4_0) return i == isa::avx2 ? Q40_AVX2_TILE : Q40_TILE;
  return 0;
}

row_pack::row_pack(row_pack&& o) noexcept
    : type(o.type), for_isa(o.for_isa), n_rows(o.n_rows), n_in(o.n_in), n_groups(o.n_groups), n_super(o.n_super), tile_bytes(o.tile_bytes),
      data(o.data) {
  o.data = nullptr;
}

row_pack& row_pack::operator=(row_pack&& o) noexcept {
  if (this != &o) {
    std::free(data);
    type = o.type;
    for_isa = o.for_isa;
    n_rows = o.n_rows;
    n_in = o.n_in;
    n_groups = o.n_groups;
    n_super = o.n_super;
    tile_bytes = o.tile_bytes;
    data = o.data;
    o.data = nullptr;
  }
  return *this;
}

row_pack::~row_pack() { std::free(data); }

void row_pack_init(gguf::dtype t, int64_t n_rows, int64_t n_in, isa i, row_pack& p) {
  if (!row_pack_type(t)) throw input_error(std::string("row_pack_init: no packed layout for ") + gguf::dtype_get(t).name);
  if (!row_pack_kernel(t, i)) throw input_error(std::string("row_pack_init: no packed kernel on ") + isa_name(i) + " (or it is not supported here)");
  if (n_rows < 1 || n_in < 256 || n_in % 256 != 0) {
    throw input_error("row_pack_init: a matrix of " + std::to_string(n_rows) + " rows of " + std::to_string(n_in) +
                      " (rows must be whole super-blocks of 256)");
  }
  std::free(p.data);
  p.data = nullptr;
  p.type = t;
  p.for_isa = i;
  p.n_rows = n_rows;
  p.n_in = n_in;
  p.n_groups = (n_rows + 15) / 16;
  p.n_super = n_in / 256;
  p.tile_bytes = row_pack_tile_bytes(t, i);
  const size_t bytes = static_cast<size_t>(p.bytes());
  p.data = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  if (!p.data) throw std::bad_alloc();
}

bool row_pack_groups(const uint8_t* w, const int32_t* row_bounds, int64_t g0, int64_t g1, row_pack& p) {
  // Bytes of 256 elements: one K-quant super-block, eight q4_0 blocks.
  const int64_t super_bytes = static_cast<int64_t>(gguf::dtype_get(p.type).type_size) * (256 / gguf::dtype_get(p.type).block_size);
  const uint64_t row_bytes = static_cast<uint64_t>(p.n_super * super_bytes);
  const bool q6 = p.type == gguf::DTYPE_Q6_K, five = p.type == gguf::DTYPE_Q5_K, q40 = p.type == gguf::DTYPE_Q4_0;
  const bool avx2 = p.for_isa == isa::avx2;
  const qk_offsets& o = five ? Q5K : Q4K;
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t s = 0; s < p.n_super; ++s) {
      uint8_t* tile = p.data + (g * p.n_super + s) * p.tile_bytes;
      std::memset(tile, 0, static_cast<size_t>(p.tile_bytes));
      int16_t dm[16] = {}, mm[16] = {};
      int8_t dsh[16] = {}, msh[16] = {};
      for (int r = 0; r < 16 && g * 16 + r < p.n_rows; ++r) {
        const int64_t row = g * 16 + r;
        const uint8_t* sb = w + static_cast<uint64_t>(row) * row_bytes + static_cast<uint64_t>(s * super_bytes);
        if (!scales_finite(p.type, sb)) return false;
        if (q40) pack_q40_row(avx2, sb, row_bounds[row], r, tile);
        else if (q6) pack_q6k_row(avx2, sb, row_bounds[row], r, tile, dm, dsh);
        else pack_qk_row(five, avx2, sb, row_bounds[row], r, tile, dm, mm, dsh, msh);
      }
      if (q40) {
        // per-block scales written by pack_q40_row
      } else if (q6) {
        std::memcpy(tile + Q6K_DM, dm, sizeof dm);
        std::memcpy(tile + Q6K_DSH, dsh, sizeof dsh);
      } else {
        std::memcpy(tile + o.dm, dm, sizeof dm);
        std::memcpy(tile + o.mm, mm, sizeof mm);
        std::memcpy(tile + o.dsh, dsh, sizeof dsh);
        std::memcpy(tile + o.msh, msh, sizeof msh);
      }
    }
  }
  return true;
}

void matmul_exact_cpu_packed(isa i, const act_pack& x, const row_pack& w, const int32_t* row_bounds, float* y,
                             int64_t row_begin, int64_t row_end) {
  if (!row_pack_kernel(w.type, i) || w.for_isa != i) {
    throw input_error(std::string("matmul_exact_cpu_packed: no packed ") + gguf::dtype_get(w.type).name + " kernel for " + isa_name(i) +
                      (isa_supported(i) ? "" : " (not supported here)") + " or a pack made for " + isa_name(w.for_isa));
  }
  if (x.n_tokens > GEMV_PACKED_MAX_TOKENS || x.n_in != w.n_in || row_begin % 16 != 0 || row_begin < 0 ||
      row_end > w.n_rows || row_begin > row_end) {
    throw input_error("matmul_exact_cpu_packed: " + std::to_string(x.n_tokens) + " tokens of " + std::to_string(x.n_in) +
                      ", rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) + ") of a packed matrix of " +
                      std::to_string(w.n_rows) + " x " + std::to_string(w.n_in));
  }
  const int64_t nb = x.n_blocks, n_tok = x.n_tokens;
  const int32_t c = matmul_shift_const(nb);
  // The activation side of every block's shift and the block sums come with the act_pack.
  const packed_act xa{x.bytes.data(), x.q.data(),     x.shift.data(),      x.half_sum.data(),     x.block_sum.data(), nb,
                      n_tok,          x.pairs.data(), x.scale.data(), x.sum_scaled.data(), x.lo_half.data()};
  int64_t acc[2 * GEMV_PACKED_MAX_TOKENS * 16];
  // Group g's sums (acc: token t's row r at t * 16 + r) to y.
  const bool whole_groups_fast = i != isa::scalar;
  const auto out = [&](int64_t g, const int64_t* a) {
    for (int64_t t = 0; t < n_tok; ++t) {
      if (whole_groups_fast && g * 16 >= row_begin && g * 16 + 16 <= row_end &&
          finish16_avx2(a + t * 16, x.max_exp[static_cast<size_t>(t)], row_bounds + g * 16, c, y + t * w.n_rows + g * 16))
        continue;
      for (int r = 0; r < 16; ++r) {
        const int64_t row = g * 16 + r;
        if (row < row_begin || row >= row_end) continue;
        const int32_t xmax = x.max_exp[static_cast<size_t>(t)], bound = row_bounds[row];
        y[t * w.n_rows + row] = xmax == EXP_ZERO || bound == EXP_ZERO ? 0.0f : fixed_to_f32_fast(a[t * 16 + r], xmax + bound - c);
      }
    }
  };
  // The sums a call can touch: n_tok tokens of one group, or one token of a pair of groups.
  const int64_t n_acc = 16 * std::max<int64_t>(2, n_tok);
  for (int64_t g = row_begin / 16; g * 16 < row_end; ++g) {
    std::fill(acc, acc + n_acc, 0);
    const uint8_t* tiles = w.data + g * w.n_super * w.tile_bytes;
    if (i == isa::avx2) {
      if ((g + 1) * 16 < row_end && gemv_packed_pair_avx2(w.type, tiles, w.n_super, xa, acc)) {
        out(g, acc);
        out(g + 1, acc + 16);
        ++g;
        continue;
      }
      if (w.type == gguf::DTYPE_Q4_0) gemv_q40_packed_avx2(tiles, w.n_super, xa, acc);
      else if (w.type == gguf::DTYPE_Q5_K) gemv_q5k_packed_avx2(tiles, w.n_super, xa, acc);
      else if (w.type == gguf::DTYPE_Q6_K) gemv_q6k_packed_avx2(tiles, w.n_super, xa, acc);
      else gemv_q4k_packed_avx2(tiles, w.n_super, xa, acc);
    } else if (w.type == gguf::DTYPE_Q6_K) gemv_q6k_packed_avx512(tiles, w.n_super, xa, acc);
    else if (w.type == gguf::DTYPE_Q4_0) gemv_q40_packed_avx512(tiles, w.n_super, xa, acc);
    else gemv_qk_packed_avx512(w.type == gguf::DTYPE_Q5_K, tiles, w.n_super, xa, acc);
    out(g, acc);
  }
}

}  // namespace detaudit::kernels::cpu
