// Integer decoding of ggml weight blocks, 32 elements at a time, and the per-block dot terms.
//
// The decode itself is numerics/wblock_inline.h's (shared with the CUDA kernels); this file adds
// what it leaves to its callers: the type check, finite fp16 scales and finite float weights, and
// mxfp4 scale bytes that would make an element overflow a float.
#include "numerics/wblock.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "gguf/quants.h"
#include "gguf/weight_types.h"
#include "util/error.h"

namespace detaudit::numerics {

namespace {

using gguf::dtype;

// Throws input_error when a fp16 scale of the block holding slice b is inf or NaN. Where a
// block keeps them is gguf/weight_types.h's; its size is gguf's type_size.
void check_scales(dtype t, const uint8_t* row, int64_t b) {
  const gguf::weight_type& w = *gguf::weight_type_of(t);
  const gguf::dtype_traits& tr = gguf::dtype_get(t);
  const uint8_t* block = row + (b * QBLOCK / tr.block_size) * static_cast<int64_t>(tr.type_size);
  for (int k = 0; k < w.n_scales; ++k) {
    const uint32_t h = inl::load_u16(block + w.scale_offset[k]);
    if (((h >> 10) & 31) != 31) continue;
    char hex[8];
    std::snprintf(hex, sizeof hex, "%04x", static_cast<unsigned>(h));
    throw input_error(std::string("weight block: non-finite fp16 ") + w.scale_name[k] + " (bits 0x" + hex +
                      "), expected a finite scale");
  }
}

// Throws input_error (numerics::quantize_block's) when a weight of an F32/F16/BF16 slice is inf
// or NaN: all-ones exponent bits, read without converting (the decode converts once).
void check_float_weights(dtype t, const uint8_t* row, int64_t b, int n_valid) {
  for (int i = 0; i < n_valid; ++i) {
    const int64_t e = b * QBLOCK + i;
    bool bad;
    if (t == gguf::DTYPE_F32) bad = (inl::load_u32(row + 4 * e) & 0x7f800000u) == 0x7f800000u;
    else if (t == gguf::DTYPE_F16) bad = (inl::load_u16(row + 2 * e) & 0x7c00u) == 0x7c00u;
    else bad = (inl::load_u16(row + 2 * e) & 0x7f80u) == 0x7f80u;
    if (!bad) continue;
    float x;
    if (t == gguf::DTYPE_F32) {
      std::memcpy(&x, row + 4 * e, 4);
    } else {
      const uint16_t h = static_cast<uint16_t>(inl::load_u16(row + 2 * e));
      x = t == gguf::DTYPE_F16 ? gguf::fp16_to_f32(h) : gguf::bf16_to_f32(h);
    }
    int16_t scratch[QBLOCK];
    quantize_block(&x, 1, scratch);  // throws the contract's message for a non-finite value
  }
}

}  // namespace

const char* mxfp4_block_problem(uint8_t e, int max_code) {
  if (e == 255) return "is NaN in the OCP MX format (expected a finite scale)";
  // max_code * 2^(e - 128) >= 2^128 (exact in double): not a finite float, ggml's decode gives inf
  if (std::ldexp(static_cast<double>(max_code), static_cast<int>(e) - 128) >= 0x1p128)
    return "makes an element overflow a float (expected values below 2^128)";
  return nullptr;
}

namespace {

// gguf's table and the device-friendly arithmetic agree on every code.
constexpr bool mxfp4_table_agrees() {
  for (int c = 0; c < 16; ++c)
    if (inl::mxfp4_doubled(c) != gguf::MXFP4_DOUBLED[c]) return false;
  return true;
}
static_assert(mxfp4_table_agrees());

// mxfp4's only check: its scale byte (inl::decode_mxfp4 decodes it).
void check_mxfp4(const uint8_t* row, int64_t b, const wblock& w) {
  int amax = 0;
  for (int j = 0; j < QBLOCK; ++j) amax = std::max(amax, std::abs(static_cast<int>(w.q[j])));
  const uint8_t e = row[b * 17];
  if (const char* why = mxfp4_block_problem(e, amax))
    throw input_error("weight block: mxfp4 scale byte " + std::to_string(e) + " " + why);
}

}  // namespace

bool weight_type_supported(gguf::dtype t) { return gguf::weight_type_of(t) != nullptr; }

void weight_check_type(gguf::dtype t) {
  if (weight_type_supported(t)) return;
  const gguf::dtype_traits* tr = gguf::dtype_find(t);
  throw input_error(std::string("exact numerics: weight type ") + (tr ? tr->name : "unknown") + " (id " +
                    std::to_string(static_cast<uint32_t>(t)) + ") is not supported; expected " +
                    gguf::weight_type_names(", ", false, " or "));
}

void weight_decode_block(gguf::dtype t, const uint8_t* row, int64_t block32_index, wblock& out,
                         int n_valid) {
  weight_check_type(t);
  if (n_valid < 1 || n_valid > QBLOCK) {
    throw std::logic_error("weight_decode_block: n_valid " + std::to_string(n_valid) + " not in 1..32");
  }
  if (t == gguf::DTYPE_MXFP4) {
    inl::decode_block(static_cast<int32_t>(t), row, block32_index, QBLOCK, out);
    check_mxfp4(row, block32_index, out);
    for (int i = n_valid; i < QBLOCK; ++i) out.q[i] = 0;
  } else {
    if (gguf::weight_type_of(t)->float_rows) {
      check_float_weights(t, row, block32_index, n_valid);
    } else {
      check_scales(t, row, block32_index);
    }
    inl::decode_block(static_cast<int32_t>(t), row, block32_index, n_valid, out);
  }
  if (n_valid < QBLOCK && out.m_mant != 0) {
    throw std::logic_error("weight_decode_block: a partial block of an affine type");
  }
}

double wblock_value(const wblock& w, int i) {
  const int h = i / 16;
  const double d = static_cast<double>(w.d_mant) * static_cast<double>(w.scale[h]) *
                   static_cast<double>(w.q[i]);
  const double m = static_cast<double>(w.m_mant) * static_cast<double>(w.mcoef[h]);
  // ldexp without libm: multiply by exact powers of two built from the bits.
  auto pow2 = [](int k) { return std::bit_cast<double>(static_cast<uint64_t>(k + 1023) << 52); };
  return d * pow2(w.d_exp) + m * pow2(w.m_exp);
}

dot_terms dot_block_terms(const int16_t* a, int32_t e_a, const wblock& w) {
  int64_t qa[2] = {0, 0};
  int64_t sa[2] = {0, 0};
  for (int i = 0; i < QBLOCK; ++i) {
    qa[i / 16] += static_cast<int64_t>(w.q[i]) * a[i];
    sa[i / 16] += a[i];
  }
  // Computed in 128 bits so that the guard also catches a hand-made block that would overflow.
  const __int128 t1 = static_cast<__int128>(w.d_mant) *
                      (static_cast<__int128>(w.scale[0]) * qa[0] + static_cast<__int128>(w.scale[1]) * qa[1]);
  const __int128 t2 = static_cast<__int128>(w.m_mant) *
                      (static_cast<__int128>(w.mcoef[0]) * sa[0] + static_cast<__int128>(w.mcoef[1]) * sa[1]);
  const __int128 bound = static_cast<__int128>(1) << DOT_TERM_BITS;
  if (t1 >= bound || t1 <= -bound || t2 >= bound || t2 <= -bound) {
    throw std::logic_error("dot_block_terms: a block term reached 2^44 (a malformed wblock)");
  }
  dot_terms t;
  t.t1 = static_cast<int64_t>(t1);
  t.t2 = static_cast<int64_t>(t2);
  t.p1 = e_a + w.d_exp;
  t.p2 = e_a + w.m_exp;
  return t;
}

int32_t wblock_exp_bound(const wblock* w, int64_t n_blocks) {
  int32_t e = EXP_ZERO;
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (w[b].d_mant != 0 && w[b].d_exp > e) e = w[b].d_exp;
    if (w[b].m_mant != 0 && w[b].m_exp > e) e = w[b].m_exp;
  }
  return e;
}

int32_t dot_grid(int32_t x_max_exp, int32_t w_exp_bound, int64_t n_blocks) {
  return inl::dot_grid(x_max_exp, w_exp_bound, n_blocks);
}

int64_t dot_block_fixed(const int16_t* a, int32_t e_a, const wblock& w, int32_t g) {
  if (e_a == EXP_ZERO) return 0;
  const dot_terms t = dot_block_terms(a, e_a, w);
  return round_shift(t.t1, t.p1 - g) + round_shift(t.t2, t.p2 - g);
}

}  // namespace detaudit::numerics
