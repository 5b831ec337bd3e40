// q4_K weights repacked into 16-row tiles (cpu.h, "q4_K repacked at load time") and the driver of
// the generation kernel that reads them (matmul_avx512.cpp, gemv_q4k_packed_avx512).
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

constexpr int64_t SUPER_BYTES = 144;  // one q4_K super-block: d, dmin, scales[12], qs[128]
constexpr int64_t TILE_CODES = 0, TILE_SC = 2048, TILE_MN = 2176, TILE_DM = 2304, TILE_MM = 2336, TILE_DSH = 2368,
                  TILE_MSH = 2384;

// An fp16 field as wblock records it: signed mantissa and exponent; false when not finite.
bool fp16_field(const uint8_t* p, int32_t* mant, int32_t* exp) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const int e = (h >> 10) & 31;
  if (e == 31) return false;
  const int32_t m = e == 0 ? (h & 1023) : 1024 + (h & 1023);
  *mant = (h & 0x8000) ? -m : m;
  *exp = e == 0 ? -24 : e - 25;
  return true;
}

// The nibble of element l (0..31) of block s (0..7) of a q4_K super-block's qs.
inline int nibble(const uint8_t* qs, int s, int l) { return (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15; }

}  // namespace

q4k_pack::q4k_pack(q4k_pack&& o) noexcept
    : n_rows(o.n_rows), n_in(o.n_in), n_groups(o.n_groups), n_super(o.n_super), data(o.data) {
  o.data = nullptr;
}

q4k_pack& q4k_pack::operator=(q4k_pack&& o) noexcept {
  if (this != &o) {
    std::free(data);
    n_rows = o.n_rows;
    n_in = o.n_in;
    n_groups = o.n_groups;
    n_super = o.n_super;
    data = o.data;
    o.data = nullptr;
  }
  return *this;
}

q4k_pack::~q4k_pack() { std::free(data); }

void q4k_pack_init(int64_t n_rows, int64_t n_in, q4k_pack& p) {
  if (n_rows < 1 || n_in < 256 || n_in % 256 != 0) {
    throw input_error("q4k_pack_init: a q4_K matrix of " + std::to_string(n_rows) + " rows of " + std::to_string(n_in) +
                      " (rows must be whole super-blocks of 256)");
  }
  std::free(p.data);
  p.data = nullptr;
  p.n_rows = n_rows;
  p.n_in = n_in;
  p.n_groups = (n_rows + 15) / 16;
  p.n_super = n_in / 256;
  const size_t bytes = static_cast<size_t>(p.bytes());
  p.data = static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
  if (!p.data) throw std::bad_alloc();
}

bool q4k_pack_groups(const uint8_t* w, const int32_t* row_bounds, int64_t g0, int64_t g1, q4k_pack& p) {
  const uint64_t row_bytes = static_cast<uint64_t>(p.n_super) * SUPER_BYTES;
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t s = 0; s < p.n_super; ++s) {
      uint8_t* tile = p.data + (g * p.n_super + s) * Q4K_TILE_BYTES;
      std::memset(tile, 0, Q4K_TILE_BYTES);
      int16_t dm[16] = {}, mm[16] = {};
      int8_t dsh[16] = {}, msh[16] = {};
      for (int r = 0; r < 16; ++r) {
        const int64_t row = g * 16 + r;
        if (row >= p.n_rows) break;
        const uint8_t* sb = w + static_cast<uint64_t>(row) * row_bytes + static_cast<uint64_t>(s) * SUPER_BYTES;
        int32_t d_mant, d_exp, m_mant, m_exp;
        if (!fp16_field(sb, &d_mant, &d_exp) || !fp16_field(sb + 2, &m_mant, &m_exp)) return false;
        const int32_t bound = row_bounds[row];
        dm[r] = static_cast<int16_t>(d_mant);
        mm[r] = static_cast<int16_t>(-m_mant);  // wblock's m_mant of q4_K is -dmin
        dsh[r] = static_cast<int8_t>(d_mant == 0 || bound == EXP_ZERO ? 0 : d_exp - bound);
        msh[r] = static_cast<int8_t>(m_mant == 0 || bound == EXP_ZERO ? 0 : m_exp - bound);
        const uint8_t* sc = sb + 4;
        const uint8_t* qs = sb + 16;
        for (int b = 0; b < 8; ++b) {
          int32_t scale, min;
          if (b < 4) {
            scale = sc[b] & 63;
            min = sc[b + 4] & 63;
          } else {
            scale = (sc[b + 4] & 15) | (sc[b - 4] >> 6) << 4;
            min = (sc[b + 4] >> 4) | (sc[b] >> 6) << 4;
          }
          tile[TILE_SC + b * 16 + r] = static_cast<uint8_t>(scale);
          tile[TILE_MN + b * 16 + r] = static_cast<uint8_t>(min);
          for (int j = 0; j < 16; ++j)
            tile[TILE_CODES + (b * 16 + j) * 16 + r] =
                static_cast<uint8_t>(nibble(qs, b, 2 * j) | nibble(qs, b, 2 * j + 1) << 4);
        }
      }
      std::memcpy(tile + TILE_DM, dm, sizeof dm);
      std::memcpy(tile + TILE_MM, mm, sizeof mm);
      std::memcpy(tile + TILE_DSH, dsh, sizeof dsh);
      std::memcpy(tile + TILE_MSH, msh, sizeof msh);
    }
  }
  return true;
}

void matmul_exact_cpu_q4k_packed(isa i, const act_pack& x, const q4k_pack& w, const int32_t* row_bounds, float* y,
                                 int64_t row_begin, int64_t row_end) {
  if (i != isa::avx512 || !isa_supported(i)) throw input_error("matmul_exact_cpu_q4k_packed: needs avx512");
  if (x.n_tokens > GEMV_PACKED_MAX_TOKENS || x.n_in != w.n_in || row_begin % 16 != 0 || row_begin < 0 ||
      row_end > w.n_rows || row_begin > row_end) {
    throw input_error("matmul_exact_cpu_q4k_packed: " + std::to_string(x.n_tokens) + " tokens of " + std::to_string(x.n_in) +
                      ", rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) + ") of a packed matrix of " +
                      std::to_string(w.n_rows) + " x " + std::to_string(w.n_in));
  }
  const int64_t nb = x.n_blocks, n_tok = x.n_tokens;
  const int32_t c = matmul_shift_const(nb);
  // The activation side of every block's shift (c + e_a - max_exp) and its block sums, per token.
  std::vector<int64_t> shift(static_cast<size_t>(n_tok * nb));
  std::vector<int32_t> asum(static_cast<size_t>(n_tok * nb));
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t b = 0; b < nb; ++b) {
      shift[static_cast<size_t>(t * nb + b)] = static_cast<int64_t>(c) + x.exp[static_cast<size_t>(t * nb + b)] - x.max_exp[static_cast<size_t>(t)];
      asum[static_cast<size_t>(t * nb + b)] = x.half_sum[static_cast<size_t>((t * nb + b) * 2)] + x.half_sum[static_cast<size_t>((t * nb + b) * 2 + 1)];
    }
  int64_t acc[GEMV_PACKED_MAX_TOKENS * 16];
  for (int64_t g = row_begin / 16; g * 16 < row_end; ++g) {
    std::fill(acc, acc + GEMV_PACKED_MAX_TOKENS * 16, 0);
    gemv_q4k_packed_avx512(w.data + g * w.n_super * Q4K_TILE_BYTES, w.n_super, x.q.data(), shift.data(), asum.data(), nb, n_tok, acc);
    for (int64_t t = 0; t < n_tok; ++t)
      for (int r = 0; r < 16; ++r) {
        const int64_t row = g * 16 + r;
        if (row < row_begin || row >= row_end) continue;
        const int32_t xmax = x.max_exp[static_cast<size_t>(t)], bound = row_bounds[row];
        y[t * w.n_rows + row] = xmax == EXP_ZERO || bound == EXP_ZERO ? 0.0f : fixed_to_f32_fast(acc[t * 16 + r], xmax + bound - c);
      }
  }
}

}  // namespace detaudit::kernels::cpu
