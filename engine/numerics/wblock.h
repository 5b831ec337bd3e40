// Weight blocks in integer form, and the exact dot product of one activation block with one.
//
// Goals: every weight type the exact engine computes (gguf/weight_types.h) decodes, 32 elements
// at a time, into one integer form, so that a single kernel (and a single precision proof)
// serves them all:
//
//   w[i] = d_mant * 2^d_exp * scale[i / 16] * q[i]  +  m_mant * 2^m_exp * mcoef[i / 16]
//
// For the quantized types this is exactly ggml's dequantized value (before ggml rounds it to
// float). F32/F16/BF16 weights are converted like activations (quantize_block): int16 q,
// d_mant = 1, d_exp = the block exponent, scale = 1, no offset term.
// Non-goals: IQ types, ternary types, Q8_1/Q8_K (not weight types in the models we run).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "gguf/dtype.h"
#include "numerics/exact.h"
#include "numerics/wblock_inline.h"

namespace detaudit::numerics {

// struct wblock (the codes q, scale[2], d_mant, d_exp, mcoef[2], m_mant, m_exp) is defined in
// numerics/wblock_inline.h, which host and device code share.

// True for the types weight_decode_block accepts: those of gguf/weight_types.h.
bool weight_type_supported(gguf::dtype t);
// Throws input_error naming t when it is not supported.
void weight_check_type(gguf::dtype t);

// Decodes the 32-element slice block32_index of a row of type t (row points at the row's first
// byte; K-quant super-blocks of 256 hold 8 slices). n_valid (1..32) is how many elements of the
// slice are in the row; the others are decoded as q = 0 (a partial last block of an F32/F16/BF16
// row of length not a multiple of 32; the block is then read only up to n_valid).
// fp16 d / dmin / m decode exactly: normal mant = 1024 + frac, exp = E - 25; subnormal
// mant = frac, exp = -24; zero mant = 0.
// Throws input_error for an unsupported type (naming it), a non-finite fp16 scale, or a
// non-finite F32/F16/BF16 weight.
void weight_decode_block(gguf::dtype t, const uint8_t* row, int64_t block32_index, wblock& out,
                         int n_valid = QBLOCK);

// Why an mxfp4 block of scale byte e whose largest code value (doubled E2M1, 0..12) is max_code
// is not a block of finite weights: e = 255 is NaN in the OCP MX format, and a value of 2^128 or
// more overflows a float (ggml decodes it to inf). nullptr when the block is fine.
const char* mxfp4_block_problem(uint8_t e, int max_code);

// The exact value of element i of a decoded block, in double (exact for every supported type:
// at most 11 + 8 + 16 significant bits per product). For tests and the reference numerics.
double wblock_value(const wblock& w, int i);

// ---- the exact dot product (docs/precision-contract.md, "matmul") ----

// DOT_TERM_BITS (every block term T satisfies |T| < 2^44, proved per type) and ACC_BITS (the
// int64 accumulator's sum stays below 2^62): contract.h.

// The two integer terms of activation block (a, e_a) against weight block w:
//   t1 = d_mant * (scale[0] * sum_{i<16} q_i a_i + scale[1] * sum_{i>=16} q_i a_i)  at 2^p1
//   t2 = m_mant * (mcoef[0] * sum_{i<16} a_i + mcoef[1] * sum_{i>=16} a_i)          at 2^p2
// with p1 = e_a + d_exp, p2 = e_a + m_exp. Throws std::logic_error if |t| >= 2^44 (impossible for
// decoded blocks; a guard for hand-made ones).
struct dot_terms {
  int64_t t1 = 0;
  int64_t t2 = 0;
  int32_t p1 = 0;
  int32_t p2 = 0;
};
dot_terms dot_block_terms(const int16_t* a, int32_t e_a, const wblock& w);

// The largest exponent among the row's nonzero scale terms: max over blocks of d_exp (where
// d_mant != 0) and m_exp (where m_mant != 0). EXP_ZERO when there is none (the row is zero).
int32_t wblock_exp_bound(const wblock* w, int64_t n_blocks);

// The accumulator grid of a dot product: x_max_exp + w_exp_bound + 44 + ceil_log2(n_terms) - 62,
// with n_terms = 2 * n_blocks. Any sum of the rounded terms then stays below 2^62.
int32_t dot_grid(int32_t x_max_exp, int32_t w_exp_bound, int64_t n_blocks);

// One block's contribution on grid g: round_shift(t1, p1 - g) + round_shift(t2, p2 - g).
// An all-zero activation block (e_a == EXP_ZERO) contributes 0.
int64_t dot_block_fixed(const int16_t* a, int32_t e_a, const wblock& w, int32_t g);

}  // namespace detaudit::numerics
