// Scalar forms of numerics' exact primitives, inline, for the CPU kernels' hot loops and their
// portable variants. Each gives its numerics twin's bits on the inputs the kernels pass
// (tests/unit/test_kernels_cpu_matmul.cpp compares them); included before any target pragma, so
// they compile for the baseline instruction set.
#pragma once

#include <cstdint>
#include <cstring>

namespace detaudit::kernels::cpu {

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

// numerics::flush: a subnormal becomes a zero of its sign.
inline float flush_fast(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  if ((b & 0x7f800000u) == 0) b &= 0x80000000u;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

}  // namespace detaudit::kernels::cpu
