// exp, log, 1/x, 1/sqrt(x) and silu in binary32: fixed sequences of correctly rounded float
// +, -, * (no FMA: -ffp-contract=off; CUDA -fmad=false; GLSL `precise`), integer operations on the
// bits, and no libm. A GPU kernel matches bit for bit by writing the same sequence.
//
// exp and log use Cody-Waite range reduction and the minimax polynomials of Cephes expf/logf
// (S. L. Moshier), evaluated by Horner with separate multiply and add.
#include <bit>
#include <cstdint>

#include "numerics/exact.h"

namespace detaudit::numerics {

namespace {

constexpr uint32_t kSignBit = 0x80000000u;
constexpr uint32_t kExpMask = 0x7f800000u;
constexpr uint32_t kFracMask = 0x007fffffu;

float bits_f(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t f_bits(float f) { return std::bit_cast<uint32_t>(f); }

// The nearest integer to t (ties to even) for |t| < 2^22: adding 1.5 * 2^23 leaves no fraction
// bits, so the rounded sum is the rounded t.
float round_even_small(float t) {
  const float magic = 12582912.0f;  // 1.5 * 2^23
  return (t + magic) - magic;
}

// Dekker's exact product without FMA: a * b == *hi + *lo exactly (a, b in [2^-10, 2^10]).
void two_prod(float a, float b, float* hi, float* lo) {
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

// y * 2^k as if the exponent were unbounded, then flushed: results below 2^-126 are +0, above
// the largest float +inf. y in [0.5, 2).
float scale_pow2(float y, int k) {
  if (k > 127) return (y * pow2_f32(127)) * pow2_f32(k - 127);
  if (k < -126 || (k == -126 && y < 1.0f)) return 0.0f;
  return y * pow2_f32(k);
}

// 1/m for m in [1, 2): a bit-trick seed, four Newton steps y*(2 - m*y), and one step with the
// exact residual 1 - m*y (two_prod), which makes the result correctly rounded or nearly so.
float recip_unit(float m) {
  float y = bits_f(0x7EF311C3u - f_bits(m));
  for (int i = 0; i < 4; ++i) y = y * (2.0f - m * y);
  float p, pl;
  two_prod(m, y, &p, &pl);
  const float e = (1.0f - p) - pl;
  return y + y * e;
}

// 1/sqrt(m) for m in [1, 4): a bit-trick seed, four Newton steps y*(1.5 - (h*y)*y) with
// h = m/2, and one step with the exact residual 1 - m*y*y: y + y*(e/2).
float rsqrt_unit(float m) {
  float y = bits_f(0x5F3759DFu - (f_bits(m) >> 1));
  const float h = 0.5f * m;
  for (int i = 0; i < 4; ++i) y = y * (1.5f - (h * y) * y);
  float s, sl, p, pl;
  two_prod(y, y, &s, &sl);
  two_prod(m, s, &p, &pl);
  const float e = ((1.0f - p) - pl) - m * sl;
  return y + y * (0.5f * e);
}

}  // namespace

float exp_f32(float x) {
  if (x != x) return x;
  if (x > 100.0f) return bits_f(kExpMask);
  if (x < -104.0f) return 0.0f;
  const float log2e = 1.44269504088896341f;
  const float c1 = 0.693359375f;       // ln 2 high part: 9 bits, so kf * c1 is exact
  const float c2 = -2.12194440e-4f;    // ln 2 - c1
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

float log_f32(float x) {
  x = flush(x);
  if (x != x) return x;
  const uint32_t b = f_bits(x);
  if ((b & ~kSignBit) == 0) return bits_f(kSignBit | kExpMask);  // log(+-0) = -inf
  if (b & kSignBit) return bits_f(0x7fc00000u);                   // NaN
  if ((b & kExpMask) == kExpMask) return x;                       // +inf
  // x = f * 2^e with f in [0.5, 1).
  int e = static_cast<int>((b & kExpMask) >> 23) - 126;
  float f = bits_f((b & kFracMask) | 0x3f000000u);
  if (f < 0.707106781186547524f) {
    e -= 1;
    f = (f + f) - 1.0f;
  } else {
    f = f - 1.0f;
  }
  const float ef = static_cast<float>(e);
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = (p * f) * z;
  y = y + ef * -2.12194440e-4f;
  y = y + -0.5f * z;
  float r = f + y;
  r = r + ef * 0.693359375f;
  return flush(r);
}

float recip_f32(float x) {
  x = flush(x);
  if (x != x) return x;
  const uint32_t b = f_bits(x);
  const uint32_t sign = b & kSignBit;
  const uint32_t ex = (b & kExpMask) >> 23;
  if (ex == 0) return bits_f(sign | kExpMask);  // 1/+-0
  if (ex == 255) return bits_f(sign);           // 1/+-inf
  const float m = bits_f((b & kFracMask) | 0x3f800000u);  // [1, 2)
  const float y = recip_unit(m);                          // (0.5, 1]
  const float r = scale_pow2(y, 127 - static_cast<int>(ex));
  return bits_f(f_bits(r) | sign);
}

float rsqrt_f32(float x) {
  x = flush(x);
  if (x != x) return x;
  const uint32_t b = f_bits(x);
  const uint32_t ex = (b & kExpMask) >> 23;
  if (ex == 0) return bits_f((b & kSignBit) | kExpMask);  // 1/sqrt(+-0) = +-inf
  if (b & kSignBit) return bits_f(0x7fc00000u);
  if (ex == 255) return 0.0f;
  int e = static_cast<int>(ex) - 127;
  float m = bits_f((b & kFracMask) | 0x3f800000u);  // [1, 2)
  if (e & 1) {
    m = m + m;  // [2, 4)
    e -= 1;
  }
  return rsqrt_unit(m) * pow2_f32(-e / 2);  // -e/2 in [-63, 63]: exact, normal
}

float silu_f32(float x) {
  x = flush(x);
  const float d = flush(1.0f + exp_f32(-x));
  return flush(x * recip_f32(d));
}

}  // namespace detaudit::numerics
