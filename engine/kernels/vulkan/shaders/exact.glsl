// The exact numerics in GLSL: the bit-level helpers of numerics/exact.cpp and the element-wise
// functions of numerics/elementwise.cpp, written as the same fixed sequences of operations
// (docs/precision-contract.md sections 2, 3 and 5) so that every shader gives the C++ bits.
//
// Every shader includes this file first, right after `#version 450`: it enables 64-bit integers
// and declares the RTE rounding mode for 32-bit floats (SPV_KHR_float_controls), which the device
// must support (device.cpp refuses exact mode otherwise).
//
// Rules followed here, and required of any shader code doing exact float arithmetic:
// - every float operation's result lands in a `precise` variable (SPIR-V NoContraction: no FMA,
//   no reassociation), in the written order;
// - every inexact constant is given by its bit pattern (uintBitsToFloat), the binary32 value the
//   C++ literal rounds to;
// - NaN tests and sign handling are done on the bits (`x != x` may be folded away);
// - no exp/log/sqrt/inversesqrt/division/fma/ldexp builtins;
// - 64-bit shifts by 64 or more are undefined in SPIR-V: every shift here is guarded;
// - the sign of an int64 is read with is_neg64(), never with `v < 0l`: Mesa lavapipe (22.3,
//   LLVM 15) folds a comparison of a sign-extended int32 (`int64_t(i) < c`, `>> 63`) with a
//   constant to a wrong result (measured: int64_t(-11) < 0l is false), and such values reach
//   round_shift and fixed_to_f32 from int16/int32 products.
// Non-goals: non-finite inputs where the C++ throws (f32_decompose, quantize): the host checks
// its inputs before dispatching; log_f32 (not used on a device).
#ifndef DETAUDIT_EXACT_GLSL
#define DETAUDIT_EXACT_GLSL

#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

// OpExecutionMode RoundingModeRTE (4462) for 32-bit floats, capability RoundingModeRTE (4467).
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4467], 4462, 32);

// QBLOCK, EXP_ZERO, QMAX, the grids' bit widths and the weight type ids: numerics/contract.h and
// gguf/dtype.h, written into the build's contract.glsl.
#include "contract.glsl"

const uint F32_SIGN = 0x80000000u;
const uint F32_ABS = 0x7fffffffu;
const uint F32_EXP = 0x7f800000u;
const uint F32_FRAC = 0x007fffffu;

// ---- bit-level helpers (numerics/exact.cpp) ----

// A subnormal becomes a zero of the same sign; others are returned unchanged.
float flush_f(float x) {
  const uint b = floatBitsToUint(x);
  if ((b & F32_EXP) == 0u) return uintBitsToFloat(b & F32_SIGN);
  return x;
}

bool is_nan_f(float x) { return (floatBitsToUint(x) & F32_ABS) > F32_EXP; }

// The contract's NaN from finite inputs (precision contract, section 1, rule 4): x86's 0xffc00000
// whatever the device's own default NaN.
float canon_nan_f(float x) { return is_nan_f(x) ? uintBitsToFloat(0xffc00000u) : x; }

// v < 0, from the high 32-bit word (see the note above on int64 comparisons).
bool is_neg64(int64_t v) { return unpackInt2x32(v).y < 0; }

// The index of the highest set bit of a (a != 0), -1 for a == 0.
int msb_u64(uint64_t a) {
  const uint hi = uint(a >> 32);
  if (hi != 0u) return findMSB(hi) + 32;
  return findMSB(uint(a));
}

// x = m * 2^e, sign on m: normal |m| = 2^23 + F, e = E - 150; subnormal |m| = F, e = -149;
// zero m = 0, e = 0. (Non-finite x: |m| = 2^23 + F, e = 105; the host rejects such inputs.)
void f32_decompose(float x, out int m, out int e) {
  const uint b = floatBitsToUint(x);
  const uint ex = (b & F32_EXP) >> 23;
  const uint frac = b & F32_FRAC;
  int mag;
  if (ex == 0u) {
    mag = int(frac);
    e = frac != 0u ? -149 : 0;
  } else {
    mag = int(frac | 0x00800000u);
    e = int(ex) - 150;
  }
  m = (b & F32_SIGN) != 0u ? -mag : mag;
}

// a / 2^s rounded half to even, s >= 1.
// Branchless (a < 2^63): adding 2^(s-1) - 1 plus the quotient's low bit carries exactly when the
// remainder is above half, or at half with an odd quotient. Written without 64-bit comparisons:
// lavapipe (Mesa 22.3) was seen to round a tie with an even quotient up through the compare form,
// depending on the surrounding code.
uint64_t rne_shift_right_u64(uint64_t a, int s) {
  if (s >= 64) return 0ul;
  return (a + ((1ul << (s - 1)) - 1ul) + ((a >> s) & 1ul)) >> s;
}

// v * 2^s rounded half to even on |v| (sign restored); s <= -64 gives 0. For s > 0 the result
// must fit (the callers' grids guarantee it); s >= 64 gives 0 where the C++ throws.
int64_t round_shift(int64_t v, int s) {
  if (v == 0l) return 0l;
  if (s >= 0) {
    if (s >= 64) return 0l;
    return v << s;
  }
  const bool neg = is_neg64(v);
  const uint64_t a = neg ? 0ul - uint64_t(v) : uint64_t(v);
  const uint64_t r = rne_shift_right_u64(a, -s);
  return neg ? -int64_t(r) : int64_t(r);
}

// The float nearest v * 2^e: |v| rounded to 24 bits (half to even) with an unbounded exponent,
// then below 2^-126 a signed zero (+0 for v == 0), 2^128 or more +-inf. Bit assembly only.
float fixed_to_f32(int64_t v, int e) {
  if (v == 0l) return 0.0;
  const bool neg = is_neg64(v);
  uint64_t a = neg ? 0ul - uint64_t(v) : uint64_t(v);
  const int bits = msb_u64(a) + 1;
  int ex = e;
  if (bits > 24) {
    a = rne_shift_right_u64(a, bits - 24);
    ex += bits - 24;
    if (a == (1ul << 24)) {
      a >>= 1;
      ex += 1;
    }
  } else {
    a <<= (24 - bits);
    ex -= 24 - bits;
  }
  const int biased = ex + 150;
  const uint sign = neg ? F32_SIGN : 0u;
  if (biased < 1) return uintBitsToFloat(sign);
  if (biased > 254) return uintBitsToFloat(sign | F32_EXP);
  return uintBitsToFloat(sign | (uint(biased) << 23) | (uint(a) & F32_FRAC));
}

// The smallest c >= 0 with 2^c >= n; 0 for n <= 1.
int clog2(int64_t n) {
  const uvec2 w = unpackUint2x32(uint64_t(n));
  if (is_neg64(n) || (w.y == 0u && w.x <= 1u)) return 0;
  return msb_u64(uint64_t(n) - 1ul) + 1;
}

// 2^k, k in [-126, 127], from the exponent bits.
float pow2_f32(int k) { return uintBitsToFloat(uint(k + 127) << 23); }

// ---- activation blocks (numerics::quantize_block) ----

// The block exponent for amax_bits = the largest |x| bits of the block with zeros and subnormals
// read as 0: floor(log2(amax)) - 14, EXP_ZERO when amax_bits == 0.
int block_exp_from_amax_bits(uint amax_bits) {
  if (amax_bits == 0u) return EXP_ZERO;
  return int(amax_bits >> 23) - 127 - 14;
}

// The |x| bits that enter a block's amax: 0 for zeros and subnormals.
uint amax_bits_of(float x) {
  const uint a = floatBitsToUint(x) & F32_ABS;
  return a < 0x00800000u ? 0u : a;
}

// One element of a block with exponent block_exp: clamp(round_shift(m, e - block_exp), +-QMAX).
// For a block exponent from block_exp_from_amax_bits the shift is at most -9 (e <= block_exp - 9),
// so the rounding is done on the 32-bit magnitude.
int quantize_elem(float x, int block_exp) {
  int m;
  int e;
  f32_decompose(flush_f(x), m, e);
  if (m == 0) return 0;
  const int s = block_exp - e;
  if (s <= 0) {
    const int64_t v = round_shift(int64_t(m), -s);
    if (is_neg64(v - int64_t(-QMAX))) return -QMAX;
    if (is_neg64(int64_t(QMAX) - v)) return QMAX;
    return int(v);
  }
  const uint mag = uint(abs(m));
  uint q = 0u;
  if (s < 32) {
    q = mag >> s;
    const uint r = mag & ((1u << s) - 1u);
    const uint half_ = 1u << (s - 1);
    if (r > half_ || (r == half_ && (q & 1u) != 0u)) q += 1u;
  }
  q = min(q, uint(QMAX));
  return m < 0 ? -int(q) : int(q);
}

// ---- element-wise functions (numerics/elementwise.cpp) ----

// The nearest integer to t (ties to even) for |t| < 2^22.
float round_even_small_f32(float t) {
  precise float r = (t + 12582912.0) - 12582912.0;  // 1.5 * 2^23, exact
  return r;
}

// Dekker's exact product without FMA: a * b == hi + lo exactly.
void two_prod_f32(float a, float b, out float hi, out float lo) {
  precise float ca = 4097.0 * a;
  precise float ah = ca - (ca - a);
  precise float al = a - ah;
  precise float cb = 4097.0 * b;
  precise float bh = cb - (cb - b);
  precise float bl = b - bh;
  precise float p = a * b;
  precise float l = (((ah * bh - p) + ah * bl) + al * bh) + al * bl;
  hi = p;
  lo = l;
}

// y * 2^k as if the exponent were unbounded, then flushed (below 2^-126: +0; overflow: +inf).
// y in [0.5, 2).
float scale_pow2_f32(float y, int k) {
  precise float r;
  if (k > 127) {
    r = (y * pow2_f32(127)) * pow2_f32(k - 127);
  } else if (k < -126 || (k == -126 && y < 1.0)) {
    r = 0.0;
  } else {
    r = y * pow2_f32(k);
  }
  return r;
}

// e^x: Cody-Waite reduction and the Cephes expf polynomial.
float exp_f32(float x) {
  if (is_nan_f(x)) return x;
  if (x > 100.0) return uintBitsToFloat(F32_EXP);
  if (x < -104.0) return 0.0;
  const float log2e = uintBitsToFloat(0x3FB8AA3Bu);  // 1.44269504088896341f
  const float c1 = uintBitsToFloat(0x3F318000u);     // 0.693359375f
  const float c2 = uintBitsToFloat(0xB95E8083u);     // -2.12194440e-4f
  precise float t = x * log2e;
  precise float kf = round_even_small_f32(t);
  precise float r = (x - kf * c1) - kf * c2;
  precise float z = r * r;
  precise float p = uintBitsToFloat(0x39506967u);    // 1.9875691500e-4f
  p = p * r + uintBitsToFloat(0x3AB743CEu);          // 1.3981999507e-3f
  p = p * r + uintBitsToFloat(0x3C088908u);          // 8.3334519073e-3f
  p = p * r + uintBitsToFloat(0x3D2AA9C1u);          // 4.1665795894e-2f
  p = p * r + uintBitsToFloat(0x3E2AAAAAu);          // 1.6666665459e-1f
  p = p * r + uintBitsToFloat(0x3F000000u);          // 5.0000001201e-1f
  precise float y = ((p * z) + r) + 1.0;
  return scale_pow2_f32(y, int(kf));
}

// 1/m for m in [1, 2): seed, four Newton steps, one step with the exact residual.
float recip_unit_f32(float m) {
  precise float y = uintBitsToFloat(0x7EF311C3u - floatBitsToUint(m));
  for (int i = 0; i < 4; ++i) y = y * (2.0 - m * y);
  float p;
  float pl;
  two_prod_f32(m, y, p, pl);
  precise float e = (1.0 - p) - pl;
  precise float r = y + y * e;
  return r;
}

// 1/sqrt(m) for m in [1, 4): seed, four Newton steps, one step with the exact residual.
float rsqrt_unit_f32(float m) {
  precise float y = uintBitsToFloat(0x5F3759DFu - (floatBitsToUint(m) >> 1));
  precise float h = 0.5 * m;
  for (int i = 0; i < 4; ++i) y = y * (1.5 - (h * y) * y);
  float s;
  float sl;
  float p;
  float pl;
  two_prod_f32(y, y, s, sl);
  two_prod_f32(m, s, p, pl);
  precise float e = ((1.0 - p) - pl) - m * sl;
  precise float r = y + y * (0.5 * e);
  return r;
}

// 1/x; 1/+-0 = +-inf, 1/+-inf = +-0, NaN stays NaN.
float recip_f32(float x) {
  x = flush_f(x);
  if (is_nan_f(x)) return x;
  const uint b = floatBitsToUint(x);
  const uint sign = b & F32_SIGN;
  const uint ex = (b & F32_EXP) >> 23;
  if (ex == 0u) return uintBitsToFloat(sign | F32_EXP);
  if (ex == 255u) return uintBitsToFloat(sign);
  const float m = uintBitsToFloat((b & F32_FRAC) | 0x3f800000u);
  const float y = recip_unit_f32(m);
  const float r = scale_pow2_f32(y, 127 - int(ex));
  return uintBitsToFloat(floatBitsToUint(r) | sign);
}

// 1/sqrt(x); +-0 gives +-inf, x < 0 NaN, +inf +0.
float rsqrt_f32(float x) {
  x = flush_f(x);
  if (is_nan_f(x)) return x;
  const uint b = floatBitsToUint(x);
  const uint ex = (b & F32_EXP) >> 23;
  if (ex == 0u) return uintBitsToFloat((b & F32_SIGN) | F32_EXP);
  if ((b & F32_SIGN) != 0u) return uintBitsToFloat(0x7fc00000u);
  if (ex == 255u) return 0.0;
  int e = int(ex) - 127;
  precise float m = uintBitsToFloat((b & F32_FRAC) | 0x3f800000u);
  if ((e & 1) != 0) {
    m = m + m;
    e -= 1;
  }
  precise float r = rsqrt_unit_f32(m) * pow2_f32(-e / 2);
  return r;
}

// flush(x * recip_f32(flush(1 + exp_f32(-x)))).
float silu_f32(float x) {
  x = flush_f(x);
  precise float d = 1.0 + exp_f32(-x);
  precise float r = x * recip_f32(flush_f(d));
  return flush_f(r);
}

// numerics::gelu_f32: x * sigmoid(2u), u = sqrt(2/pi) x (1 + 0.044715 x^2), each step flushed.
float gelu_f32(float x) {
  x = flush_f(x);
  precise float x2 = x * x;
  precise float t = uintBitsToFloat(0x3D372713u) * flush_f(x2);   // 0.044715f
  precise float inner = 1.0 + flush_f(t);
  precise float u = uintBitsToFloat(0x3FCC422Au) * x;             // 1.59576912160573071f: 2 sqrt(2/pi)
  precise float z = flush_f(u) * flush_f(inner);
  precise float d = 1.0 + exp_f32(-flush_f(z));
  precise float r = x * recip_f32(flush_f(d));
  return flush_f(r);
}

// numerics::swiglu_oai_f32: x = min(gate, limit), y = clamp(up, -limit, limit), x * sigmoid(alpha x)
// * (y + 1), each step flushed.
float swiglu_oai_f32(float gate, float up, float alpha, float limit) {
  float x = flush_f(gate);
  if (limit < x) x = limit;
  float y = flush_f(up);
  if (y < -limit) y = -limit;
  if (limit < y) y = limit;
  precise float z = alpha * x;
  precise float d = 1.0 + exp_f32(-flush_f(z));
  precise float g = x * recip_f32(flush_f(d));
  precise float y1 = y + 1.0;
  precise float r = flush_f(g) * flush_f(y1);
  return flush_f(r);
}

// numerics::softcap_f32 with inv_cap = recip_f32(cap) from the host: cap * tanh(x / cap),
// tanh(a) = 1 - 2 e / (1 + e), e = e^-2|a|, the sign applied last.
float softcap_f32(float x, float cap, float inv_cap) {
  precise float y0 = flush_f(x) * inv_cap;
  const float y = flush_f(y0);
  if (is_nan_f(y)) return y;
  const uint sign = floatBitsToUint(y) & F32_SIGN;
  const float a = uintBitsToFloat(floatBitsToUint(y) & F32_ABS);
  precise float a2 = a + a;
  const float e = exp_f32(-a2);
  precise float d = 1.0 + e;
  precise float e2 = e + e;
  precise float q = flush_f(e2) * recip_f32(flush_f(d));
  precise float t = 1.0 - flush_f(q);
  precise float r = cap * flush_f(t);
  return uintBitsToFloat(floatBitsToUint(flush_f(r)) ^ sign);
}

#endif
