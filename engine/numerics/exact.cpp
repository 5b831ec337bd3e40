// Bit-level float helpers, the fixed-point conversions and activation quantization: the input
// checks the contract asks for, around the arithmetic of numerics/exact_inline.h (which the CUDA
// kernels run too). Everything here is integer arithmetic on the IEEE-754 binary32 bit pattern.
#include "numerics/exact.h"

#include "numerics/exact_inline.h"

#include <bit>
#include <stdexcept>
#include <string>

#include "util/error.h"

namespace detaudit::numerics {

namespace {

constexpr uint32_t EXP_MASK = 0x7f800000u;
constexpr uint32_t FRAC_MASK = 0x007fffffu;

void throw_non_finite(float x) {
  throw input_error(std::string("exact numerics: non-finite value ") + std::to_string(x) +
                    " (expected a finite float)");
}

}  // namespace

int ceil_log2(int64_t v) { return inl::ceil_log2(v); }

float flush(float x) { return inl::flush(x); }

bool is_subnormal(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  return (b & EXP_MASK) == 0 && (b & FRAC_MASK) != 0;
}

void f32_decompose(float x, int32_t* m, int* e) {
  if ((std::bit_cast<uint32_t>(x) & EXP_MASK) == EXP_MASK) throw_non_finite(x);
  inl::decompose(x, m, e);
}

int64_t round_shift(int64_t v, int shift) {
  if (v != 0 && shift >= 0 && (shift >= 63 || (v < 0 ? -v : v) > (INT64_MAX >> shift))) {
    throw std::logic_error("round_shift: result does not fit int64 (shift " + std::to_string(shift) + ")");
  }
  return inl::round_shift(v, shift);
}

float fixed_to_f32(int64_t v, int e) { return inl::fixed_to_f32(v, e); }

float pow2_f32(int k) {
  if (k < -126 || k > 127) throw std::logic_error("pow2_f32: exponent out of range");
  return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23);
}

int32_t quantize_block(const float* x, int n, int16_t* q) {
  for (int i = 0; i < n; ++i)
    if ((std::bit_cast<uint32_t>(x[i]) & EXP_MASK) == EXP_MASK) throw_non_finite(x[i]);
  return inl::quantize_block(x, n, q);
}

void quantize_act(const float* x, int64_t n, qvec& out) { quantize_act_by(x, n, out, quantize_block); }

void quantize_act_by(const float* x, int64_t n, qvec& out, int32_t (*block)(const float* x, int n, int16_t* q)) {
  if (n < 0) throw input_error("quantize_act: negative length " + std::to_string(n));
  const int64_t n_blocks = (n + QBLOCK - 1) / QBLOCK;
  out.n = n;
  out.q.assign(static_cast<size_t>(n_blocks * QBLOCK), 0);
  out.exp.assign(static_cast<size_t>(n_blocks), EXP_ZERO);
  out.max_exp = EXP_ZERO;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t len = n - b * QBLOCK < QBLOCK ? n - b * QBLOCK : QBLOCK;
    const int32_t e = block(x + b * QBLOCK, static_cast<int>(len), out.q.data() + b * QBLOCK);
    out.exp[static_cast<size_t>(b)] = e;
    if (e > out.max_exp) out.max_exp = e;
  }
}

}  // namespace detaudit::numerics
