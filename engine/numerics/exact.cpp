// Bit-level float helpers, the fixed-point conversions and activation quantization.
// Everything here is integer arithmetic on the IEEE-754 binary32 bit pattern.
#include "numerics/exact.h"

#include "numerics/exact_inline.h"

#include <bit>
#include <stdexcept>
#include <string>

#include "util/error.h"

namespace detaudit::numerics {

namespace {

constexpr uint32_t SIGN_BIT = 0x80000000u;
constexpr uint32_t ABS_MASK = 0x7fffffffu;
constexpr uint32_t EXP_MASK = 0x7f800000u;
constexpr uint32_t FRAC_MASK = 0x007fffffu;

// a / 2^s rounded half to even, for s >= 1 and a <= 2^63.
uint64_t rne_shift_right(uint64_t a, int s) {
  if (s >= 64) return 0;  // a / 2^64 <= 1/2, and a tie rounds to the even 0
  const uint64_t q = a >> s;
  const uint64_t r = a & ((uint64_t(1) << s) - 1);
  const uint64_t half = uint64_t(1) << (s - 1);
  return (r > half || (r == half && (q & 1))) ? q + 1 : q;
}

void throw_non_finite(float x) {
  throw input_error(std::string("exact numerics: non-finite value ") + std::to_string(x) +
                    " (expected a finite float)");
}

}  // namespace

int ceil_log2(int64_t v) {
  if (v <= 1) return 0;
  return 64 - std::countl_zero(static_cast<uint64_t>(v - 1));
}

float flush(float x) { return inl::flush(x); }

bool is_subnormal(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  return (b & EXP_MASK) == 0 && (b & FRAC_MASK) != 0;
}

void f32_decompose(float x, int32_t* m, int* e) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const uint32_t ex = (b & EXP_MASK) >> 23;
  const uint32_t frac = b & FRAC_MASK;
  if (ex == 255) throw_non_finite(x);
  int32_t mag;
  if (ex == 0) {
    mag = static_cast<int32_t>(frac);
    *e = frac ? -149 : 0;
  } else {
    mag = static_cast<int32_t>(frac | 0x00800000u);
    *e = static_cast<int>(ex) - 150;
  }
  *m = (b & SIGN_BIT) ? -mag : mag;
}

int64_t round_shift(int64_t v, int shift) {
  if (v == 0) return 0;
  if (shift >= 0) {
    if (shift >= 63 || (v < 0 ? -v : v) > (INT64_MAX >> shift)) {
      throw std::logic_error("round_shift: result does not fit int64 (shift " +
                             std::to_string(shift) + ")");
    }
    return static_cast<int64_t>(static_cast<uint64_t>(v) << shift);
  }
  const bool neg = v < 0;
  const uint64_t a = neg ? uint64_t(0) - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const uint64_t r = rne_shift_right(a, -shift);
  return neg ? -static_cast<int64_t>(r) : static_cast<int64_t>(r);
}

float fixed_to_f32(int64_t v, int e) {
  if (v == 0) return 0.0f;
  const bool neg = v < 0;
  uint64_t a = neg ? uint64_t(0) - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const int bits = 64 - std::countl_zero(a);
  int64_t ex = e;  // value = a * 2^ex
  if (bits > 24) {
    a = rne_shift_right(a, bits - 24);
    ex += bits - 24;
    if (a == (uint64_t(1) << 24)) {
      a >>= 1;
      ex += 1;
    }
  } else {
    a <<= (24 - bits);
    ex -= (24 - bits);
  }
  // a in [2^23, 2^24): value = 1.f * 2^(ex + 23), biased exponent ex + 150.
  const int64_t biased = ex + 150;
  const uint32_t sign = neg ? SIGN_BIT : 0u;
  if (biased < 1) return std::bit_cast<float>(sign);
  if (biased > 254) return std::bit_cast<float>(sign | EXP_MASK);
  const uint32_t b = sign | static_cast<uint32_t>(biased) << 23 | (static_cast<uint32_t>(a) & FRAC_MASK);
  return std::bit_cast<float>(b);
}

float pow2_f32(int k) {
  if (k < -126 || k > 127) throw std::logic_error("pow2_f32: exponent out of range");
  return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23);
}

int32_t quantize_block(const float* x, int n, int16_t* q) {
  uint32_t amax = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(x[i]) & ABS_MASK;
    if (a >= EXP_MASK) throw_non_finite(x[i]);
    if (a < 0x00800000u) continue;  // zero or subnormal: read as zero
    if (a > amax) amax = a;
  }
  for (int i = 0; i < QBLOCK; ++i) q[i] = 0;
  if (amax == 0) return EXP_ZERO;
  // amax is normal: floor(log2(max |x|)) = E - 127.
  const int32_t bexp = static_cast<int32_t>(amax >> 23) - 127 - 14;
  for (int i = 0; i < n; ++i) {
    const float xi = flush(x[i]);
    int32_t m;
    int e;
    f32_decompose(xi, &m, &e);
    int64_t v = round_shift(m, e - bexp);
    if (v > QMAX) v = QMAX;
    if (v < -QMAX) v = -QMAX;
    q[i] = static_cast<int16_t>(v);
  }
  return bexp;
}

void quantize_act(const float* x, int64_t n, qvec& out) {
  if (n < 0) throw input_error("quantize_act: negative length " + std::to_string(n));
  const int64_t n_blocks = (n + QBLOCK - 1) / QBLOCK;
  out.n = n;
  out.q.assign(static_cast<size_t>(n_blocks * QBLOCK), 0);
  out.exp.assign(static_cast<size_t>(n_blocks), EXP_ZERO);
  out.max_exp = EXP_ZERO;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t len = n - b * QBLOCK < QBLOCK ? n - b * QBLOCK : QBLOCK;
    const int32_t e = quantize_block(x + b * QBLOCK, static_cast<int>(len), out.q.data() + b * QBLOCK);
    out.exp[static_cast<size_t>(b)] = e;
    if (e > out.max_exp) out.max_exp = e;
  }
}

}  // namespace detaudit::numerics
