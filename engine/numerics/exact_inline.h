// The exact primitives a hot loop needs inline: numerics' own definitions of flush, exp, 1/x and
// silu (numerics/exact.cpp and elementwise.cpp call these; there is no second copy), and the
// kernels' fast forms of round_shift and fixed_to_f32 for the inputs their grids guarantee (tests
// compare them with the general functions).
//
// Goals: the CPU kernels' scalar paths are numerics itself, so no element costs a call into
// another translation unit and no hand copy can drift from the contract.
// Non-goals: vector forms (kernels/cpu writes the same sequences lane-wise).
//
// Every operation is a correctly rounded float +, -, * (no FMA: -ffp-contract=off) or integer
// arithmetic on the bits. Included before any target pragma, so it compiles for the baseline ISA.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace detaudit::numerics::inl {

constexpr uint32_t SIGN_BIT = 0x80000000u;
constexpr uint32_t EXP_MASK = 0x7f800000u;
constexpr uint32_t FRAC_MASK = 0x007fffffu;

inline float bits_f(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t f_bits(float f) { return std::bit_cast<uint32_t>(f); }

// numerics::flush: a subnormal becomes a zero of its sign.
inline float flush(float x) {
  const uint32_t b = f_bits(x);
  if ((b & EXP_MASK) == 0) return bits_f(b & SIGN_BIT);
  return x;
}

// 2^k for k in [-126, 127] (numerics::pow2_f32 without its range check).
inline float pow2(int k) { return bits_f(static_cast<uint32_t>(k + 127) << 23); }

// y * 2^k as if the exponent were unbounded, then flushed: results below 2^-126 are +0, above
// the largest float +inf. y in [0.5, 2).
inline float scale_pow2(float y, int k) {
  if (k > 127) return (y * pow2(127)) * pow2(k - 127);
  if (k < -126 || (k == -126 && y < 1.0f)) return 0.0f;
  return y * pow2(k);
}

// The nearest integer to t (ties to even) for |t| < 2^22: adding 1.5 * 2^23 leaves no fraction
// bits, so the rounded sum is the rounded t.
inline float round_even_small(float t) {
  const float magic = 12582912.0f;  // 1.5 * 2^23
  return (t + magic) - magic;
}

// Dekker's exact product without FMA: a * b == *hi + *lo exactly (a, b in [2^-10, 2^10]).
inline void two_prod(float a, float b, float* hi, float* lo) {
  const float split = 4097.0f;  // 2^12 + 1 (Veltkamp)
  const float ca = split * a;
  const float ah = ca - (ca - a);
  const float al = a - ah;
  const float cb = split * b;
  const float bh = cb - (cb - b);
  const float bl = b - bh;
  const float p = a * b;
  *hi = p;
  *lo = (((ah * bh - p) + ah * bl) + al * bh) + al * bl;
}

// 1/m for m in [1, 2): a bit-trick seed, four Newton steps y*(2 - m*y), and one step with the
// exact residual 1 - m*y (two_prod), which makes the result correctly rounded or nearly so.
inline float recip_unit(float m) {
  float y = bits_f(0x7EF311C3u - f_bits(m));
  for (int i = 0; i < 4; ++i) y = y * (2.0f - m * y);
  float p, pl;
  two_prod(m, y, &p, &pl);
  const float e = (1.0f - p) - pl;
  return y + y * e;
}

// numerics::exp_f32: Cody-Waite reduction and the Cephes expf polynomial (Horner, separate
// multiply and add).
inline float exp(float x) {
  if (x != x) return x;
  if (x > 100.0f) return bits_f(EXP_MASK);
  if (x < -104.0f) return 0.0f;
  const float log2e = 1.44269504088896341f;
  const float c1 = 0.693359375f;     // ln 2 high part: 9 bits, so kf * c1 is exact
  const float c2 = -2.12194440e-4f;  // ln 2 - c1
  const float kf = round_even_small(x * log2e);
  const float r = (x - kf * c1) - kf * c2;
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = ((p * z) + r) + 1.0f;
  return scale_pow2(y, static_cast<int>(kf));
}

// numerics::recip_f32.
inline float recip(float x) {
  x = flush(x);
  if (x != x) return x;
  const uint32_t b = f_bits(x);
  const uint32_t sign = b & SIGN_BIT;
  const uint32_t ex = (b & EXP_MASK) >> 23;
  if (ex == 0) return bits_f(sign | EXP_MASK);  // 1/+-0
  if (ex == 255) return bits_f(sign);           // 1/+-inf
  const float m = bits_f((b & FRAC_MASK) | 0x3f800000u);  // [1, 2)
  const float y = recip_unit(m);                          // (0.5, 1]
  const float r = scale_pow2(y, 127 - static_cast<int>(ex));
  return bits_f(f_bits(r) | sign);
}

// numerics::silu_f32: x / (1 + e^-x), each step flushed.
inline float silu(float x) {
  x = flush(x);
  const float d = flush(1.0f + exp(-x));
  return flush(x * recip(d));
}

// numerics::gelu_f32: GELU's tanh form as x * sigmoid(2u), u = sqrt(2/pi) x (1 + 0.044715 x^2),
// since 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u); each step flushed.
inline float gelu(float x) {
  x = flush(x);
  const float x2 = flush(x * x);
  const float inner = flush(1.0f + flush(0.044715f * x2));
  const float z = flush(flush(1.59576912160573071f * x) * inner);  // 2 sqrt(2/pi)
  const float d = flush(1.0f + exp(-z));
  return flush(x * recip(d));
}

// numerics::swiglu_oai_f32: gpt-oss's clamped SwiGLU. x = min(gate, limit), y = clamp(up, -limit,
// limit), x * sigmoid(alpha x) * (y + 1), each step flushed; a NaN input stays NaN (the comparisons
// keep it).
inline float swiglu_oai(float gate, float up, float alpha, float limit) {
  float x = flush(gate);
  if (limit < x) x = limit;
  float y = flush(up);
  if (y < -limit) y = -limit;
  if (limit < y) y = limit;
  const float z = flush(alpha * x);
  const float d = flush(1.0f + exp(-z));
  const float g = flush(x * recip(d));
  return flush(g * flush(y + 1.0f));
}

// numerics::softcap_f32: cap * tanh(x / cap), tanh(a) = 1 - 2 e / (1 + e) with e = e^-2|a| (no
// cancellation in the denominator; the sign applied last). inv_cap = recip(cap), hoisted by callers.
inline float softcap(float x, float cap, float inv_cap) {
  const float y = flush(flush(x) * inv_cap);
  if (y != y) return y;
  const uint32_t sign = f_bits(y) & SIGN_BIT;
  const float a = bits_f(f_bits(y) & ~SIGN_BIT);
  const float e = exp(-(a + a));
  const float d = flush(1.0f + e);
  const float t = flush(1.0f - flush(flush(e + e) * recip(d)));
  return bits_f(f_bits(flush(cap * t)) ^ sign);
}

// numerics::round_shift(v, s) when the result fits int64 (the callers' grids guarantee it):
// v * 2^s, a right shift rounding half to even (on the signed value: floor division with the
// tie going to the even quotient, the same as rounding the magnitude); right shifts past 63 are
// clamped to 63, which gives 0 for |v| < 2^62.
inline int64_t round_shift_fast(int64_t v, int64_t s) {
  if (v == 0) return 0;
  if (s >= 0) return static_cast<int64_t>(static_cast<uint64_t>(v) << s);
  const int64_t n = s < -63 ? 63 : -s;
  return (v + ((int64_t{1} << (n - 1)) - 1) + ((v >> n) & 1)) >> n;
}

// numerics::fixed_to_f32(v, e): converting v to float is one rounding to 24 significant bits, half
// to even (the same rounding, carry into the exponent included); scaling by 2^e is then exact
// exponent arithmetic, with the reference's signed zero below 2^-126 and infinity from 2^128.
inline float fixed_to_f32_fast(int64_t v, int32_t e) {
  if (v == 0) return 0.0f;
  const float f = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  const int64_t biased = static_cast<int64_t>((b >> 23) & 255u) + e;
  const uint32_t sign = b & 0x80000000u;
  if (biased < 1) b = sign;
  else if (biased > 254) b = sign | 0x7f800000u;
  else b = sign | static_cast<uint32_t>(biased) << 23 | (b & 0x007fffffu);
  float r;
  std::memcpy(&r, &b, sizeof r);
  return r;
}


}  // namespace detaudit::numerics::inl
