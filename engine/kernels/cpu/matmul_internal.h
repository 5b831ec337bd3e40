// The pieces of matmul_exact_cpu (cpu.h) shared by its instruction-set variants.
//
// A weight panel holds PANEL_ROWS rows of a matrix decoded for the kernels: every 32-element
// block as int16 codes with the sub-block scales multiplied in (code = scale[i / 16] * q[i], which
// leaves the block's integer sum scale[0] * S0 + scale[1] * S1 of docs/precision-contract.md
// unchanged), interleaved so that one 32-bit lane holds the element pair (2j, 2j+1) of one row:
//   codes[(b * 16 + j) * PANEL_ROWS + r] = code[r][b][2j] | code[r][b][2j + 1] << 16
// plus, per block and row, the integer terms the epilogue needs (all int64, lane r = row r):
//   dm = d_mant,  dsh = d_exp - bound[r] (0 when d_mant == 0)
//   mm0, mm1 = m_mant * mcoef[0], m_mant * mcoef[1],  msh = m_exp - bound[r] (0 when m_mant == 0)
// Rows past n_rows are zero. The kernels add, for every token t and block b whose activation block
// is not zero, round_shift(dm * T, s) + round_shift(mm0 * A0 + mm1 * A1, s2) into an int64
// accumulator per (token, row), with T = sum_i code_i * a_i, A0/A1 the activation half sums,
//   s  = C + (e_a - max_exp[t]) + dsh,  s2 = C + (e_a - max_exp[t]) + msh,
//   C  = ACC_BITS - DOT_TERM_BITS - ceil_log2(2 * n_blocks),
// which is exactly p - g of dot_block_fixed; the finish converts each sum with fixed_to_f32.
//
// |code| <= 4096 for every type (q6_K: |scale| <= 128 times |q| <= 32), so a sum of 16 products
// with int16 activations fits int32; a sum of 32 fits when max |code| <= 2047 ("narrow" panels),
// otherwise the kernels sum the two halves of the block separately ("wide" panels).
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu.h"
#include "numerics/exact_inline.h"

namespace detaudit::kernels::cpu {

using numerics::inl::fixed_to_f32_fast;
using numerics::inl::round_shift_fast;

// An fp16 scale field as wblock records it: signed mantissa and exponent; false when not finite.
inline bool fp16_field(const uint8_t* p, int32_t* mant, int32_t* exp) {
  const uint16_t h = static_cast<uint16_t>(p[0] | p[1] << 8);
  const int e = (h >> 10) & 31;
  if (e == 31) return false;
  const int32_t m = e == 0 ? (h & 1023) : 1024 + (h & 1023);
  *mant = (h & 0x8000) ? -m : m;
  *exp = e == 0 ? -24 : e - 25;
  return true;
}

constexpr int PANEL_ROWS = 16;
constexpr int32_t NARROW_CODE_MAX = 2047;

struct panel {
  int64_t n_blocks = 0;
  int n_rows = 0;          // valid rows (1..16)
  bool has_min = false;    // some block has an offset term
  bool wide = false;       // some |code| > NARROW_CODE_MAX
  bool min_whole = false;  // mm0 == mm1 in every block (q4_K, q5_K: one offset per block); panel_scales
  int32_t* codes = nullptr;  // (n_blocks, 16 pairs, 16 rows)
  int64_t* dm = nullptr;     // (n_blocks, 16 rows)
  int64_t* dsh = nullptr;
  int64_t* mm0 = nullptr;
  int64_t* mm1 = nullptr;
  int64_t* msh = nullptr;
  // The same terms as doubles for the AVX2 kernel (panel_scales): dm * 2^dsh, mm0 * 2^msh,
  // mm1 * 2^msh (exact: at most 22 significant bits, shifts far inside the double range).
  double* wd = nullptr;
  double* wm0 = nullptr;
  double* wm1 = nullptr;
  // (n_blocks) panel_scales: per block, the larger of (largest |code|) x (largest |wd|) and the
  // largest |wm0|, |wm1| over its rows, so that a term's magnitude is at most bound times the
  // activation block's abs_scaled (the AVX2 kernels' bounded pass). An exact product: a 16-bit
  // code times a term of at most 22 significant bits.
  double* bound = nullptr;
  int16_t* stage = nullptr;  // (16 rows, n_blocks, 32) scratch for decoders (row-major codes)
};

// Storage for one panel of n_blocks blocks; reused across calls on one thread.
struct panel_buffer {
  int64_t capacity = 0;
  int32_t* codes = nullptr;
  int64_t* meta = nullptr;  // dm, dsh, mm0, mm1, msh, wd, wm0, wm1
  int16_t* stage = nullptr;
  panel_buffer() = default;
  panel_buffer(const panel_buffer&) = delete;
  panel_buffer& operator=(const panel_buffer&) = delete;
  ~panel_buffer();
  panel view(int64_t n_blocks);  // grows the storage when needed (64-byte aligned)
};

// The shift constant C of a dot product over n_blocks blocks.
int32_t matmul_shift_const(int64_t n_blocks);

// q8_0, q4_0, q4_K, q5_K and q6_K panels without SIMD (scalar and AVX2), the same panel as panel_decode_generic;
// false for another type or a non-finite scale (then use panel_decode_generic).
bool panel_decode_fast(gguf::dtype t, const uint8_t* w, uint64_t row_bytes, int64_t row0, int n_rows,
                       const int32_t* bounds, panel& p);

// Fills p's wd, wm0 and wm1 from its integer terms (after a decoder).
void panel_scales(panel& p);

// Decodes rows [row0, row0 + n_rows) of w (type t, n_blocks blocks per row) into p with the
// portable code (weight_decode_block). bounds: the rows' exponent bounds (indexed from row0).
void panel_decode_generic(gguf::dtype t, const uint8_t* w, uint64_t row_bytes, int64_t row0,
                          int n_rows, const int32_t* bounds, panel& p);

// The rounding constant of the AVX2 kernels' "rounding through double" (matmul_avx2_common.h):
// M = 3 + 2^-50 and its bit pattern. act_pack_rows derives act_pack::magic_div from it.
constexpr double ROUND_MAGIC = 0x1.8000000000002p+1;
constexpr uint64_t ROUND_MAGIC_BITS = 0x4008000000000002ull;

// An act_pack as plain pointers (what the SIMD files may touch: no std:: code there).
struct act_view {
  int64_t n_blocks = 0;
  const int16_t* q = nullptr;         // (n_tokens, n_blocks * 32)
  const int32_t* exp = nullptr;       // (n_tokens, n_blocks)
  const int32_t* max_exp = nullptr;   // (n_tokens)
  const int32_t* half_sum = nullptr;  // (n_tokens, n_blocks, 2)
  const double* scale = nullptr;       // (n_tokens, n_blocks) act_pack::scale
  const double* half_scaled = nullptr; // (n_tokens, n_blocks, 2)
  const double* sum_scaled = nullptr;  // (n_tokens, n_blocks)
  const double* abs_scaled = nullptr;  // (n_tokens, n_blocks) act_pack::abs_scaled
  const double* magic_div = nullptr;   // (n_tokens, n_blocks) act_pack::magic_div
  const int16_t* q_eo = nullptr;       // (n_tokens, n_blocks * 32) act_pack::q_eo; null when absent
};

// Accumulates the panel's products with tokens [t0, t1) of x into acc (t1 - t0, 16) int64,
// acc[(t - t0) * 16 + r]. One function per instruction set.
void panel_kernel_scalar(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc);
void panel_kernel_avx2(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc);
// panel_kernel_avx2 for two panels at once (acc0, acc1: each panel's sums as acc); false (nothing
// done) unless both are narrow with the same offset kind (has_min, min_whole; panel_scales run).
bool panel_kernel2_avx2(const panel& p0, const panel& p1, const act_view& x, int64_t t0, int64_t t1, int64_t* acc0, int64_t* acc1);
void panel_kernel_avx512(const panel& p, const act_view& x, int64_t t0, int64_t t1, int64_t* acc);

// The few-token path (generation): rows [r0, r1) of w straight from their blocks, no panel, for
// tokens [0, n_tokens) of x, into acc[t * (r1 - r0) + (r - r0)] (zeroed by the caller). Same
// block terms, rounded the same way, so the same sums as the panel kernels. Every integer type has
// one (hand-fused: q8_0 and q4_K on AVX-512, q8_0, q4_0, q4_K, q5_K and q6_K on AVX2; the others
// through the block decoders of gemv_blocks.h). False when t has none (f32/f16/bf16), a block has a
// non-finite scale (the caller then takes the panel path, which reports the error), or, on AVX2,
// x has no q_eo (the AVX2 rows read the activations in that order).
constexpr int64_t GEMV_MAX_TOKENS = 4;
bool gemv_avx512(gguf::dtype t, const act_view& x, int64_t n_tokens, const uint8_t* w,
                 uint64_t row_bytes, const int32_t* row_bounds, int64_t r0, int64_t r1, int64_t* acc);
bool gemv_avx2(gguf::dtype t, const act_view& x, int64_t n_tokens, const uint8_t* w,
               uint64_t row_bytes, const int32_t* row_bounds, int64_t r0, int64_t r1, int64_t* acc);

// The packed generation kernels (pack.cpp): one 16-row group, its n_super tiles, for tokens
// [0, n_tok) (at most 4) of the int16 activations q (n_tok, nb * 32); shift[t * nb + b] =
// C + e_a - max_exp of token t's block b, half_sum the act_pack's half sums, asum their sum. Add
// each row's rounded block terms into acc[t * 16 + r]. Without AVX-512 they do nothing (callers
// check the instruction set).
struct packed_act {
  const uint32_t* bytes;  // act_pack::bytes
  const int16_t* q;
  const int64_t* shift;
  const int32_t* half_sum;
  const int32_t* asum;
  int64_t nb;
  int64_t n_tok;
  const uint32_t* pairs;       // act_pack::pairs (the AVX2 kernels)
  const double* scale;         // act_pack::scale
  const double* sum_scaled;    // act_pack::sum_scaled
  const int32_t* lo_half;      // act_pack::lo_half
};
void gemv_qk_packed_avx512(bool five, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc);  // q4_K, q5_K
void gemv_q6k_packed_avx512(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc);
void gemv_q40_packed_avx512(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc);
// The AVX2 kernels of the same tiles (q5_K and q6_K: packed for AVX2, cpu.h), the same acc;
// without AVX2 they do nothing.
void gemv_q4k_packed_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc);
void gemv_q5k_packed_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc);
void gemv_q6k_packed_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc);
void gemv_q40_packed_avx2(const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc);
// Two neighbouring groups at once (the second's tiles at tiles + n_super tiles, its acc at acc +
// 16) for one token (x.n_tok 1) of q4_0, q4_K, q5_K or q6_K; false (nothing done) otherwise.
bool gemv_packed_pair_avx2(gguf::dtype t, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc);
// The scalar kernel over the same AVX2 tiles (integer rounding at any magnitude), which the
// vector kernels fall back on for a group whose terms leave the rounding binade; exposed so that
// the tests can check it where no input reaches it (q4_0). False (nothing done) for other types
// and without AVX2.
bool gemv_packed_scalar_avx2(gguf::dtype t, const uint8_t* tiles, int64_t n_super, const packed_act& x, int64_t* acc);

// numerics::quantize_block of one full block (QBLOCK finite or not values; a non-finite one
// throws its input_error), the same integers and exponent: in portable C++, and over AVX2 lanes
// (quantize_block_scalar's without AVX2). quantize_block_cpu and act_pack_build take the second
// where the CPU has AVX2.
int32_t quantize_block_scalar(const float* x, int16_t* q);
int32_t quantize_block_avx2(const float* x, int16_t* q);

// y[r] = fixed_to_f32_fast(a[r], xmax + bounds[r] - c) for the 16 rows r of one token, 0.0f where
// xmax or bounds[r] is EXP_ZERO (the drivers' last step), bit for bit; false (nothing done)
// without AVX2.
bool finish16_avx2(const int64_t* a, int32_t xmax, const int32_t* bounds, int32_t c, float* y);

// AVX-512 decoders of the common types (q8_0, q4_K); false when t has none (the caller then
// uses panel_decode_generic). Same result as panel_decode_generic, bit for bit.
bool panel_decode_avx512(gguf::dtype t, const uint8_t* w, uint64_t row_bytes, int64_t row0,
                         int n_rows, const int32_t* bounds, panel& p);

}  // namespace detaudit::kernels::cpu
