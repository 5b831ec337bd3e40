// The exact arithmetic every backend runs, written once for host and device: numerics' own
// definitions of flush, exp, 1/x, 1/sqrt(x), silu, gelu, swiglu_oai, softcap, the fixed-point
// conversions and activation quantization (numerics/exact.cpp and elementwise.cpp call these and
// add only input checks), and the kernels' fast forms of round_shift and fixed_to_f32 for the
// inputs their grids guarantee (tests compare them with the general functions).
//
// Goals: one source for the contract's arithmetic. The CPU kernels' scalar paths, numerics and the
// CUDA kernels (nvcc compiles this header as device code: kernels/cuda/exact_device.h includes it)
// run the same lines, so no hand copy can drift from docs/precision-contract.md. The Vulkan
// shaders are GLSL and necessarily a second text; their constants come from contract.h.
// Non-goals: input validation (callers check for non-finite input where numerics throws; nothing
// here throws), vector forms (kernels/cpu writes the same sequences lane-wise).
//
// Every float operation goes through fmul / fadd / fsub: on the device these are __fmul_rn /
// __fadd_rn / __fsub_rn, never contracted into an FMA whatever the flags; on the host they are the
// plain operators (the project builds with -ffp-contract=off). The rest is integer arithmetic on
// the bits. C++17, so that nvcc compiles it; included before any target pragma, so it compiles
// for the baseline ISA.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "numerics/contract.h"

#if defined(__CUDACC__)
#define DETAUDIT_HD __host__ __device__ __forceinline__
#else
#define DETAUDIT_HD inline
#endif

namespace detaudit::numerics::inl {

constexpr uint32_t SIGN_BIT = 0x80000000u;
constexpr uint32_t ABS_MASK = 0x7fffffffu;
constexpr uint32_t EXP_MASK = 0x7f800000u;
constexpr uint32_t FRAC_MASK = 0x007fffffu;

// ---- bit-level helpers, each with its device intrinsic ----

DETAUDIT_HD float bits_f(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
#endif
}

DETAUDIT_HD uint32_t f_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
#endif
}

// Leading zeros of a nonzero 64-bit value.
DETAUDIT_HD int clz64(uint64_t a) {
#ifdef __CUDA_ARCH__
  return __clzll(static_cast<long long>(a));
#else
  return __builtin_clzll(a);
#endif
}

DETAUDIT_HD float fmul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

DETAUDIT_HD float fadd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

DETAUDIT_HD float fsub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// ---- integer helpers ----

// numerics::ceil_log2: the smallest c >= 0 with 2^c >= v.
DETAUDIT_HD int ceil_log2(int64_t v) {
  if (v <= 1) return 0;
  return 64 - clz64(static_cast<uint64_t>(v - 1));
}

// a / 2^s rounded half to even, for s >= 1 and a <= 2^63.
DETAUDIT_HD uint64_t rne_shift_right(uint64_t a, int s) {
  if (s >= 64) return 0;  // a / 2^64 <= 1/2, and a tie rounds to the even 0
  const uint64_t q = a >> s;
  const uint64_t r = a & ((uint64_t(1) << s) - 1);
  const uint64_t half = uint64_t(1) << (s - 1);
  return (r > half || (r == half && (q & 1))) ? q + 1 : q;
}

// numerics::round_shift for a result that fits int64 (numerics checks that before calling).
DETAUDIT_HD int64_t round_shift(int64_t v, int shift) {
  if (v == 0) return 0;
  if (shift >= 0) return static_cast<int64_t>(static_cast<uint64_t>(v) << shift);
  const bool neg = v < 0;
  const uint64_t a = neg ? uint64_t(0) - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const uint64_t r = rne_shift_right(a, -shift);
  return neg ? -static_cast<int64_t>(r) : static_cast<int64_t>(r);
}

// ---- float helpers ----

// numerics::flush: a subnormal becomes a zero of its sign.
DETAUDIT_HD float flush(float x) {
  const uint32_t b = f_bits(x);
  if ((b & EXP_MASK) == 0) return bits_f(b & SIGN_BIT);
  return x;
}

// 2^k for k in [-126, 127] (numerics::pow2_f32 without its range check).
DETAUDIT_HD float pow2(int k) { return bits_f(static_cast<uint32_t>(k + 127) << 23); }

// numerics::f32_decompose for a finite x: x = m * 2^e.
DETAUDIT_HD void decompose(float x, int32_t* m, int* e) {
  const uint32_t b = f_bits(x);
  const uint32_t ex = (b & EXP_MASK) >> 23;
  const uint32_t frac = b & FRAC_MASK;
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

// numerics::fixed_to_f32, integer operations only: v rounded to 24 significant bits (half to
// even) with an unbounded exponent; below 2^-126 a signed zero, from 2^128 +-inf.
DETAUDIT_HD float fixed_to_f32(int64_t v, int e) {
  if (v == 0) return 0.0f;
  const bool neg = v < 0;
  uint64_t a = neg ? uint64_t(0) - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const int bits = 64 - clz64(a);
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
  if (biased < 1) return bits_f(sign);
  if (biased > 254) return bits_f(sign | EXP_MASK);
  return bits_f(sign | static_cast<uint32_t>(biased) << 23 | (static_cast<uint32_t>(a) & FRAC_MASK));
}

// ---- element-wise functions ----

// y * 2^k as if the exponent were unbounded, then flushed: results below 2^-126 are +0, above
// the largest float +inf. y in [0.5, 2).
DETAUDIT_HD float scale_pow2(float y, int k) {
  if (k > 127) return fmul(fmul(y, pow2(127)), pow2(k - 127));
  if (k < -126 || (k == -126 && y < 1.0f)) return 0.0f;
  return fmul(y, pow2(k));
}

// The nearest integer to t (ties to even) for |t| < 2^22: adding 1.5 * 2^23 leaves no fraction
// bits, so the rounded sum is the rounded t.
DETAUDIT_HD float round_even_small(float t) {
  const float magic = 12582912.0f;  // 1.5 * 2^23
  return fsub(fadd(t, magic), magic);
}

// Dekker's exact product without FMA: a * b == *hi + *lo exactly (a, b in [2^-10, 2^10]).
DETAUDIT_HD void two_prod(float a, float b, float* hi, float* lo) {
  const float split = 4097.0f;  // 2^12 + 1 (Veltkamp)
  const float ca = fmul(split, a);
  const float ah = fsub(ca, fsub(ca, a));
  const float al = fsub(a, ah);
  const float cb = fmul(split, b);
  const float bh = fsub(cb, fsub(cb, b));
  const float bl = fsub(b, bh);
  const float p = fmul(a, b);
  *hi = p;
  *lo = fadd(fadd(fadd(fsub(fmul(ah, bh), p), fmul(ah, bl)), fmul(al, bh)), fmul(al, bl));
}

// 1/m for m in [1, 2): a bit-trick seed, four Newton steps y*(2 - m*y), and one step with the
// exact residual 1 - m*y (two_prod), which makes the result correctly rounded or nearly so.
DETAUDIT_HD float recip_unit(float m) {
  float y = bits_f(0x7EF311C3u - f_bits(m));
  for (int i = 0; i < 4; ++i) y = fmul(y, fsub(2.0f, fmul(m, y)));
  float p, pl;
  two_prod(m, y, &p, &pl);
  const float e = fsub(fsub(1.0f, p), pl);
  return fadd(y, fmul(y, e));
}

// 1/sqrt(m) for m in [1, 4): a bit-trick seed, four Newton steps y*(1.5 - (h*y)*y) with
// h = m/2, and one step with the exact residual 1 - m*y*y: y + y*(e/2).
DETAUDIT_HD float rsqrt_unit(float m) {
  float y = bits_f(0x5F3759DFu - (f_bits(m) >> 1));
  const float h = fmul(0.5f, m);
  for (int i = 0; i < 4; ++i) y = fmul(y, fsub(1.5f, fmul(fmul(h, y), y)));
  float s, sl, p, pl;
  two_prod(y, y, &s, &sl);
  two_prod(m, s, &p, &pl);
  const float e = fsub(fsub(fsub(1.0f, p), pl), fmul(m, sl));
  return fadd(y, fmul(y, fmul(0.5f, e)));
}

// numerics::exp_f32: Cody-Waite reduction and the Cephes expf polynomial (Horner, separate
// multiply and add).
DETAUDIT_HD float exp(float x) {
  if (x != x) return x;
  if (x > 100.0f) return bits_f(EXP_MASK);
  if (x < -104.0f) return 0.0f;
  const float log2e = 1.44269504088896341f;
  const float c1 = 0.693359375f;     // ln 2 high part: 9 bits, so kf * c1 is exact
  const float c2 = -2.12194440e-4f;  // ln 2 - c1
  const float kf = round_even_small(fmul(x, log2e));
  const float r = fsub(fsub(x, fmul(kf, c1)), fmul(kf, c2));
  const float z = fmul(r, r);
  float p = 1.9875691500e-4f;
  p = fadd(fmul(p, r), 1.3981999507e-3f);
  p = fadd(fmul(p, r), 8.3334519073e-3f);
  p = fadd(fmul(p, r), 4.1665795894e-2f);
  p = fadd(fmul(p, r), 1.6666665459e-1f);
  p = fadd(fmul(p, r), 5.0000001201e-1f);
  const float y = fadd(fadd(fmul(p, z), r), 1.0f);
  return scale_pow2(y, static_cast<int>(kf));
}

// numerics::recip_f32.
DETAUDIT_HD float recip(float x) {
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

// numerics::rsqrt_f32.
DETAUDIT_HD float rsqrt(float x) {
  x = flush(x);
  if (x != x) return x;
  const uint32_t b = f_bits(x);
  const uint32_t ex = (b & EXP_MASK) >> 23;
  if (ex == 0) return bits_f((b & SIGN_BIT) | EXP_MASK);  // 1/sqrt(+-0) = +-inf
  if (b & SIGN_BIT) return bits_f(0x7fc00000u);
  if (ex == 255) return 0.0f;
  int e = static_cast<int>(ex) - 127;
  float m = bits_f((b & FRAC_MASK) | 0x3f800000u);  // [1, 2)
  if (e & 1) {
    m = fadd(m, m);  // [2, 4)
    e -= 1;
  }
  return fmul(rsqrt_unit(m), pow2(-e / 2));  // -e/2 in [-63, 63]: exact, normal
}

// numerics::silu_f32: x / (1 + e^-x), each step flushed.
DETAUDIT_HD float silu(float x) {
  x = flush(x);
  const float d = flush(fadd(1.0f, exp(-x)));
  return flush(fmul(x, recip(d)));
}

// numerics::gelu_f32: GELU's tanh form as x * sigmoid(2u), u = sqrt(2/pi) x (1 + 0.044715 x^2),
// since 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u); each step flushed.
DETAUDIT_HD float gelu(float x) {
  x = flush(x);
  const float x2 = flush(fmul(x, x));
  const float inner = flush(fadd(1.0f, flush(fmul(0.044715f, x2))));
  const float z = flush(fmul(flush(fmul(1.59576912160573071f, x)), inner));  // 2 sqrt(2/pi)
  const float d = flush(fadd(1.0f, exp(-z)));
  return flush(fmul(x, recip(d)));
}

// numerics::swiglu_oai_f32: gpt-oss's clamped SwiGLU. x = min(gate, limit), y = clamp(up, -limit,
// limit), x * sigmoid(alpha x) * (y + 1), each step flushed; a NaN input stays NaN (the comparisons
// keep it).
DETAUDIT_HD float swiglu_oai(float gate, float up, float alpha, float limit) {
  float x = flush(gate);
  if (limit < x) x = limit;
  float y = flush(up);
  if (y < -limit) y = -limit;
  if (limit < y) y = limit;
  const float z = flush(fmul(alpha, x));
  const float d = flush(fadd(1.0f, exp(-z)));
  const float g = flush(fmul(x, recip(d)));
  return flush(fmul(g, flush(fadd(y, 1.0f))));
}

// numerics::softcap_f32: cap * tanh(x / cap), tanh(a) = 1 - 2 e / (1 + e) with e = e^-2|a| (no
// cancellation in the denominator; the sign applied last). inv_cap = recip(cap), hoisted by callers.
DETAUDIT_HD float softcap(float x, float cap, float inv_cap) {
  const float y = flush(fmul(flush(x), inv_cap));
  if (y != y) return y;
  const uint32_t sign = f_bits(y) & SIGN_BIT;
  const float a = bits_f(f_bits(y) & ~SIGN_BIT);
  const float e = exp(-fadd(a, a));
  const float d = flush(fadd(1.0f, e));
  const float t = flush(fsub(1.0f, flush(fmul(flush(fadd(e, e)), recip(d)))));
  return bits_f(f_bits(flush(fmul(cap, t))) ^ sign);
}

// ---- activation blocks ----

// numerics::quantize_block for n (0..QBLOCK) finite values: q gets QBLOCK entries (zero-padded);
// returns the block's exponent.
DETAUDIT_HD int32_t quantize_block(const float* x, int n, int16_t* q) {
  uint32_t amax = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t a = f_bits(x[i]) & ABS_MASK;
    if (a >= 0x00800000u && a > amax) amax = a;  // zero or subnormal: read as zero
  }
  for (int i = 0; i < QBLOCK; ++i) q[i] = 0;
  if (amax == 0) return EXP_ZERO;
  // amax is normal: floor(log2(max |x|)) = E - 127.
  const int32_t bexp = static_cast<int32_t>(amax >> 23) - 127 - 14;
  for (int i = 0; i < n; ++i) {
    int32_t m;
    int e;
    decompose(flush(x[i]), &m, &e);
    int64_t v = round_shift(m, e - bexp);
    if (v > QMAX) v = QMAX;
    if (v < -QMAX) v = -QMAX;
    q[i] = static_cast<int16_t>(v);
  }
  return bexp;
}

// ---- the kernels' fast forms ----

// numerics::round_shift(v, s) when the result fits int64 (the callers' grids guarantee it):
// v * 2^s, a right shift rounding half to even (on the signed value: floor division with the
// tie going to the even quotient, the same as rounding the magnitude); right shifts past 63 are
// clamped to 63, which gives 0 for |v| < 2^62.
DETAUDIT_HD int64_t round_shift_fast(int64_t v, int64_t s) {
  if (v == 0) return 0;
  if (s >= 0) return static_cast<int64_t>(static_cast<uint64_t>(v) << s);
  const int64_t n = s < -63 ? 63 : -s;
  return (v + ((int64_t{1} << (n - 1)) - 1) + ((v >> n) & 1)) >> n;
}

// numerics::fixed_to_f32(v, e): converting v to float is one rounding to 24 significant bits, half
// to even (the same rounding, carry into the exponent included); scaling by 2^e is then exact
// exponent arithmetic, with the reference's signed zero below 2^-126 and infinity from 2^128.
DETAUDIT_HD float fixed_to_f32_fast(int64_t v, int32_t e) {
  if (v == 0) return 0.0f;
  uint32_t b = f_bits(static_cast<float>(v));
  const int64_t biased = static_cast<int64_t>((b >> 23) & 255u) + e;
  const uint32_t sign = b & SIGN_BIT;
  if (biased < 1) b = sign;
  else if (biased > 254) b = sign | EXP_MASK;
  else b = sign | static_cast<uint32_t>(biased) << 23 | (b & FRAC_MASK);
  return bits_f(b);
}

}  // namespace detaudit::numerics::inl
