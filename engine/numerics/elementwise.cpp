// exp, log, 1/x, 1/sqrt(x) and silu in binary32: fixed sequences of correctly rounded float
// +, -, * (no FMA: -ffp-contract=off; CUDA -fmad=false; GLSL `precise`), integer operations on the
// bits, and no libm. A GPU kernel matches bit for bit by writing the same sequence.
//
// exp and log use Cody-Waite range reduction and the minimax polynomials of Cephes expf/logf
// (S. L. Moshier), evaluated by Horner with separate multiply and add.
#include <bit>
#include <cstdint>

#include "numerics/exact.h"
#include "numerics/exact_inline.h"

namespace detaudit::numerics {

namespace {

using inl::bits_f;
using inl::EXP_MASK;
using inl::f_bits;
using inl::FRAC_MASK;
using inl::scale_pow2;
using inl::SIGN_BIT;
using inl::two_prod;

}  // namespace

float exp_f32(float x) { return inl::exp(x); }

float log_f32(float x) {
  x = flush(x);
  if (x != x) return x;
  const uint32_t b = f_bits(x);
  if ((b & ~SIGN_BIT) == 0) return bits_f(SIGN_BIT | EXP_MASK);  // log(+-0) = -inf
  if (b & SIGN_BIT) return bits_f(0x7fc00000u);                   // NaN
  if ((b & EXP_MASK) == EXP_MASK) return x;                       // +inf
  // x = f * 2^e with f in [0.5, 1).
  int e = static_cast<int>((b & EXP_MASK) >> 23) - 126;
  float f = bits_f((b & FRAC_MASK) | 0x3f000000u);
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

float recip_f32(float x) { return inl::recip(x); }

float rsqrt_f32(float x) { return inl::rsqrt(x); }

float silu_f32(float x) { return inl::silu(x); }

float gelu_f32(float x) { return inl::gelu(x); }

float swiglu_oai_f32(float gate, float up, float alpha, float limit) { return inl::swiglu_oai(gate, up, alpha, limit); }

float softcap_f32(float x, float cap) { return inl::softcap(x, cap, inl::recip(cap)); }

bool softcap_cap_ok(float cap) {
  if (!(cap >= 1.17549435e-38f) || !(cap <= 3.40282347e38f)) return false;  // NaN, <= 0, subnormal, inf
  return inl::recip(cap) >= 1.17549435e-38f;
}

}  // namespace detaudit::numerics
