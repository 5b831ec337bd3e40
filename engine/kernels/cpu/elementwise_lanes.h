// The element-wise kernels of elementwise_internal.h written once over a lane type: the AVX2
// variant instantiates them with 8 lanes (elementwise_avx2.cpp), the AVX-512 variant with 16
// (elementwise_avx512.cpp). Each of those files defines its lane type V, with the primitives
// below, and includes this header after its target pragma, so the code here is compiled for that
// instruction set; everything is in an anonymous namespace, so no instantiation is shared between
// the two or leaks into the rest of the program.
//
// Each kernel runs numerics' sequence (numerics/exact_inline.h, the scalar variants of
// elementwise_cpu.cpp) lane by lane: the same correctly rounded f32 +, -, * (no FMA), the same
// integer operations on the bits and the same flushes; then the special lanes take the scalar
// code's answer by a select: exp of NaN is the input, above 100 +inf, below -104 or scaled below
// 2^-126 +0; recip of a zero +-inf, of an inf or of a result below 2^-126 a zero of the input's
// sign, of NaN the input. The power-of-two scaling y * 2^k of exp is (y * 2^min(k, 127)) *
// 2^(k - min(k, 127)): for k <= 127 the second factor is 1 and changes no bit, above it is the
// scalar code's two-step product. Lanes whose input is NaN call the scalar numerics function
// itself (its NaN payload is the compiler's choice of operand order). A partial last vector is
// read with masked-off lanes as +0 and written only in its live lanes.
//
// The lane type V provides, as static inline functions (f: float lanes, i: int32 lanes, m: a
// lane mask, q: the int64 accumulator of RMS norm's squares):
//   LANES; lanes_at(i, n); load(p, m); store(p, m, f); loadu(p); storeu(p, f);
//   splat(float) -> f; splat_i(uint32_t) -> i; ibits(f) -> i; fbits(i) -> f;
//   add sub mul min max (f); add_i sub_i and_i or_i xor_i min_i max_u (i); andnot_i(a, b) = ~a & b;
//   shl(i, k) shr(i, k) (logical, k an immediate after inlining); cvtt(f) -> i (truncating);
//   lt(f, f) gt(f, f) nan(f) lt_i(i, i) eq_i(i, i) -> m; m_or m_and; select(m, f, f) and
//   select_i(m, i, i) (the first operand where m is set); bits(m) -> unsigned (lane j in bit j);
//   zero_q(); add_squares(q, m_i, sh_i) -> q; sum_q(q) -> int64_t; max_lane_u(i) -> uint32_t.
// add_squares adds, per lane, round_shift(m * m, sh) (m < 2^24, so m * m < 2^48; a left shift
// exact, a right shift by s clamped to 63 half to even as (a + 2^(s-1) - 1 + ((a >> s) & 1)) >> s).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "kernels/cpu/elementwise_internal.h"
#include "numerics/exact.h"

namespace detaudit::kernels::cpu {

namespace {  // NOLINT: one copy per instruction set, by design (see the file comment)

namespace lanes {

constexpr uint32_t SIGN = 0x80000000u;
constexpr uint32_t EXP = 0x7f800000u;
constexpr uint32_t FRAC = 0x007fffffu;

template <class V>
inline typename V::f flush(typename V::f x) {
  const typename V::i b = V::ibits(x);
  const typename V::m sub = V::eq_i(V::and_i(b, V::splat_i(EXP)), V::splat_i(0));
  return V::fbits(V::select_i(sub, V::and_i(b, V::splat_i(SIGN)), b));
}

template <class V>
inline typename V::f neg(typename V::f x) { return V::fbits(V::xor_i(V::ibits(x), V::splat_i(SIGN))); }

// 2^k for lanes with k in [-126, 127] (other lanes: meaningless bits).
template <class V>
inline typename V::f pow2(typename V::i k) { return V::fbits(V::shl(V::add_i(k, V::splat_i(127)), 23)); }

// Lanes where y * 2^k falls below 2^-126 (scale_pow2's zero), y in [0.5, 2).
template <class V>
inline typename V::m scale_underflows(typename V::f y, typename V::i k) {
  const typename V::i lim = V::splat_i(static_cast<uint32_t>(-126));
  return V::m_or(V::lt_i(k, lim), V::m_and(V::eq_i(k, lim), V::lt(y, V::splat(1.0f))));
}

template <class V>
inline typename V::f exp(typename V::f x) {
  using f = typename V::f;
  const f magic = V::splat(12582912.0f);
  const f kf = V::sub(V::add(V::mul(x, V::splat(1.44269504088896341f)), magic), magic);
  const f r = V::sub(V::sub(x, V::mul(kf, V::splat(0.693359375f))), V::mul(kf, V::splat(-2.12194440e-4f)));
  const f z = V::mul(r, r);
  f p = V::splat(1.9875691500e-4f);
  p = V::add(V::mul(p, r), V::splat(1.3981999507e-3f));
  p = V::add(V::mul(p, r), V::splat(8.3334519073e-3f));
  p = V::add(V::mul(p, r), V::splat(4.1665795894e-2f));
  p = V::add(V::mul(p, r), V::splat(1.6666665459e-1f));
  p = V::add(V::mul(p, r), V::splat(5.0000001201e-1f));
  const f y = V::add(V::add(V::mul(p, z), r), V::splat(1.0f));
  const typename V::i k = V::cvtt(kf);
  const typename V::i k1 = V::min_i(k, V::splat_i(127));
  const f v = V::mul(V::mul(y, pow2<V>(k1)), pow2<V>(V::sub_i(k, k1)));
  const typename V::m zero = V::m_or(V::lt(x, V::splat(-104.0f)), scale_underflows<V>(y, k));
  f out = V::select(zero, V::splat(0.0f), v);
  out = V::select(V::gt(x, V::splat(100.0f)), V::fbits(V::splat_i(EXP)), out);
  return V::select(V::nan(x), x, out);
}

template <class V>
inline void two_prod(typename V::f a, typename V::f b, typename V::f* hi, typename V::f* lo) {
  using f = typename V::f;
  const f split = V::splat(4097.0f);
  const f ca = V::mul(split, a);
  const f ah = V::sub(ca, V::sub(ca, a));
  const f al = V::sub(a, ah);
  const f cb = V::mul(split, b);
  const f bh = V::sub(cb, V::sub(cb, b));
  const f bl = V::sub(b, bh);
  const f p = V::mul(a, b);
  *hi = p;
  f s = V::add(V::sub(V::mul(ah, bh), p), V::mul(ah, bl));
  s = V::add(s, V::mul(al, bh));
  *lo = V::add(s, V::mul(al, bl));
}

// 1/m for m in [1, 2) (numerics' recip_unit).
template <class V>
inline typename V::f recip_unit(typename V::f m) {
  using f = typename V::f;
  f y = V::fbits(V::sub_i(V::splat_i(0x7EF311C3u), V::ibits(m)));
  const f two = V::splat(2.0f);
  for (int i = 0; i < 4; ++i) y = V::mul(y, V::sub(two, V::mul(m, y)));
  f p, pl;
  two_prod<V>(m, y, &p, &pl);
  const f e = V::sub(V::sub(V::splat(1.0f), p), pl);
  return V::add(y, V::mul(y, e));
}

template <class V>
inline typename V::f recip(typename V::f x) {
  using f = typename V::f;
  using i = typename V::i;
  const f xf = flush<V>(x);
  const i b = V::ibits(xf);
  const i sign = V::and_i(b, V::splat_i(SIGN));
  const i ex = V::shr(V::and_i(b, V::splat_i(EXP)), 23);
  const f m = V::fbits(V::or_i(V::and_i(b, V::splat_i(FRAC)), V::splat_i(0x3f800000u)));
  const f y = recip_unit<V>(m);
  const i k = V::sub_i(V::splat_i(127), ex);
  const f r = V::select(scale_underflows<V>(y, k), V::splat(0.0f), V::mul(y, pow2<V>(k)));
  i out = V::or_i(V::ibits(r), sign);
  out = V::select_i(V::eq_i(ex, V::splat_i(0)), V::or_i(sign, V::splat_i(EXP)), out);
  return V::select(V::nan(xf), xf, V::fbits(out));
}

// The live lanes of x that are NaN, as bits (lane j in bit j).
template <class V>
inline unsigned nan_bits(typename V::f x, typename V::m live) { return V::bits(V::m_and(live, V::nan(x))); }

// v with the lanes set in `nan` replaced by f(src[j]): NaN lanes take the scalar function's
// answer (its payload), as the file comment says.
template <class V, class F>
inline typename V::f scalar_lanes(typename V::f v, unsigned nan, const float* src, F fn) {
  if (!nan) return v;
  float tmp[V::LANES];
  V::storeu(tmp, v);
  for (int j = 0; j < V::LANES; ++j)
    if ((nan >> j) & 1u) tmp[j] = fn(src[j]);
  return V::loadu(tmp);
}

// flush(x * recip(flush(1 + exp(-z)))): silu's and gelu's shared tail (z = x for silu).
template <class V>
inline typename V::f times_sigmoid(typename V::f xf, typename V::f z) {
  const typename V::f d = flush<V>(V::add(V::splat(1.0f), exp<V>(neg<V>(z))));
  return flush<V>(V::mul(xf, recip<V>(d)));
}

// silu_f32 of the lanes; NaN lanes are numerics::silu_f32 of src (live lanes only).
template <class V>
inline typename V::f silu(typename V::f x, const float* src, typename V::m live) {
  const typename V::f xf = flush<V>(x);
  return scalar_lanes<V>(times_sigmoid<V>(xf, xf), nan_bits<V>(x, live), src, numerics::silu_f32);
}

// gelu_f32 of the lanes (numerics' sequence); NaN lanes as silu.
template <class V>
inline typename V::f gelu(typename V::f x, const float* src, typename V::m live) {
  using f = typename V::f;
  const f xf = flush<V>(x);
  const f x2 = flush<V>(V::mul(xf, xf));
  const f inner = flush<V>(V::add(V::splat(1.0f), flush<V>(V::mul(V::splat(0.044715f), x2))));
  const f z = flush<V>(V::mul(flush<V>(V::mul(V::splat(1.59576912160573071f), xf)), inner));
  return scalar_lanes<V>(times_sigmoid<V>(xf, z), nan_bits<V>(x, live), src, numerics::gelu_f32);
}

// softcap_f32 of the lanes (numerics' sequence); NaN lanes as silu.
template <class V>
inline typename V::f softcap(typename V::f x, float cap, float inv_cap, const float* src, typename V::m live) {
  using f = typename V::f;
  const f y = flush<V>(V::mul(flush<V>(x), V::splat(inv_cap)));
  const typename V::i sign = V::and_i(V::ibits(y), V::splat_i(SIGN));
  const f a = V::fbits(V::andnot_i(V::splat_i(SIGN), V::ibits(y)));
  const f e = exp<V>(neg<V>(V::add(a, a)));
  const f d = flush<V>(V::add(V::splat(1.0f), e));
  const f t = flush<V>(V::sub(V::splat(1.0f), flush<V>(V::mul(flush<V>(V::add(e, e)), recip<V>(d)))));
  const f r = V::fbits(V::xor_i(V::ibits(flush<V>(V::mul(V::splat(cap), t))), sign));
  return scalar_lanes<V>(r, nan_bits<V>(y, live), src, [cap](float v) { return numerics::softcap_f32(v, cap); });
}

// ---- the kernels of elementwise_internal.h ----

template <class V>
uint32_t max_exp_field(const float* x, int64_t n) {
  typename V::i acc = V::splat_i(0);
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::i b = V::ibits(V::load(x + j, V::lanes_at(j, n)));
    acc = V::max_u(acc, V::and_i(b, V::splat_i(EXP)));
  }
  return V::max_lane_u(acc) >> 23;
}

template <class V>
int64_t sum_squares(const float* x, int64_t n, int32_t g) {
  using i = typename V::i;
  typename V::q acc = V::zero_q();
  const i off = V::splat_i(static_cast<uint32_t>(300 + g));
  for (int64_t j = 0; j < n; j += V::LANES) {
    const i b = V::ibits(V::load(x + j, V::lanes_at(j, n)));
    const i field = V::shr(V::and_i(b, V::splat_i(EXP)), 23);
    const typename V::m dead = V::eq_i(field, V::splat_i(0));
    const i m = V::select_i(dead, V::splat_i(0), V::or_i(V::and_i(b, V::splat_i(FRAC)), V::splat_i(0x00800000u)));
    acc = V::add_squares(acc, m, V::sub_i(V::add_i(field, field), off));
  }
  return V::sum_q(acc);
}

template <class V>
void scale(const float* x, const float* w, int64_t n, float r, float* out) {
  const typename V::f rv = V::splat(r);
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::m live = V::lanes_at(j, n);
    typename V::f v = flush<V>(V::mul(flush<V>(V::load(x + j, live)), rv));
    if (w) v = flush<V>(V::mul(v, flush<V>(V::load(w + j, live))));
    V::store(out + j, live, v);
  }
}

template <class V>
void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::m live = V::lanes_at(j, n);
    const typename V::f s = silu<V>(V::load(gate + j, live), gate + j, live);
    V::store(out + j, live, flush<V>(V::mul(s, flush<V>(V::load(up + j, live)))));
  }
}

template <class V>
void geglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::m live = V::lanes_at(j, n);
    const typename V::f g = gelu<V>(V::load(gate + j, live), gate + j, live);
    V::store(out + j, live, flush<V>(V::mul(g, flush<V>(V::load(up + j, live)))));
  }
}

template <class V>
void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  using f = typename V::f;
  const f lim = V::splat(limit), nlim = V::splat(-limit), al = V::splat(alpha);
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::m live = V::lanes_at(j, n);
    const f g = V::load(gate + j, live), u = V::load(up + j, live);
    const f x = V::min(flush<V>(g), lim);
    const f y = V::max(V::min(flush<V>(u), lim), nlim);
    const f s = times_sigmoid<V>(x, flush<V>(V::mul(al, x)));
    f r = flush<V>(V::mul(s, flush<V>(V::add(y, V::splat(1.0f)))));
    const unsigned nan = nan_bits<V>(g, live) | nan_bits<V>(u, live);
    if (nan) {
      float tmp[V::LANES];
      V::storeu(tmp, r);
      for (int k = 0; k < V::LANES; ++k)
        if ((nan >> k) & 1u) tmp[k] = numerics::swiglu_oai_f32(gate[j + k], up[j + k], alpha, limit);
      r = V::loadu(tmp);
    }
    V::store(out + j, live, r);
  }
}

template <class V>
void softcap_rows(const float* x, int64_t n, float cap, float inv_cap, float* out) {
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::m live = V::lanes_at(j, n);
    V::store(out + j, live, softcap<V>(V::load(x + j, live), cap, inv_cap, x + j, live));
  }
}

template <class V>
void add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::m live = V::lanes_at(j, n);
    V::store(out + j, live, flush<V>(V::add(flush<V>(V::load(a + j, live)), flush<V>(V::load(b + j, live)))));
  }
}

template <class V>
void exp_rows(const float* x, int64_t n, float* out) {
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::m live = V::lanes_at(j, n);
    V::store(out + j, live, exp<V>(V::load(x + j, live)));
  }
}

template <class V>
void recip_rows(const float* x, int64_t n, float* out) {
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::m live = V::lanes_at(j, n);
    V::store(out + j, live, recip<V>(V::load(x + j, live)));
  }
}

template <class V>
void silu_rows(const float* x, int64_t n, float* out) {
  for (int64_t j = 0; j < n; j += V::LANES) {
    const typename V::m live = V::lanes_at(j, n);
    V::store(out + j, live, silu<V>(V::load(x + j, live), x + j, live));
  }
}

}  // namespace lanes

}  // namespace

}  // namespace detaudit::kernels::cpu

// Defines the extern kernels of elementwise_internal.h for one instruction set: elem_<name>_ISA
// as lanes::<kernel><V>. Used once by each variant's file, inside namespace detaudit::kernels::cpu.
#define DETAUDIT_ELEM_KERNELS(ISA, V)                                                                 \
  uint32_t elem_max_exp_field_##ISA(const float* x, int64_t n) { return lanes::max_exp_field<V>(x, n); } \
  int64_t elem_sum_squares_##ISA(const float* x, int64_t n, int32_t g) {                              \
    return lanes::sum_squares<V>(x, n, g);                                                            \
  }                                                                                                   \
  void elem_scale_##ISA(const float* x, const float* w, int64_t n, float r, float* out) {             \
    lanes::scale<V>(x, w, n, r, out);                                                                 \
  }                                                                                                   \
  void elem_swiglu_##ISA(const float* gate, const float* up, int64_t n, float* out) {                 \
    lanes::swiglu<V>(gate, up, n, out);                                                               \
  }                                                                                                   \
  void elem_geglu_##ISA(const float* gate, const float* up, int64_t n, float* out) {                  \
    lanes::geglu<V>(gate, up, n, out);                                                                \
  }                                                                                                   \
  void elem_swiglu_oai_##ISA(const float* gate, const float* up, int64_t n, float alpha, float limit, \
                             float* out) {                                                            \
    lanes::swiglu_oai<V>(gate, up, n, alpha, limit, out);                                             \
  }                                                                                                   \
  void elem_softcap_##ISA(const float* x, int64_t n, float cap, float inv_cap, float* out) {          \
    lanes::softcap_rows<V>(x, n, cap, inv_cap, out);                                                  \
  }                                                                                                   \
  void elem_add_##ISA(const float* a, const float* b, int64_t n, float* out) { lanes::add<V>(a, b, n, out); } \
  void elem_exp_##ISA(const float* x, int64_t n, float* out) { lanes::exp_rows<V>(x, n, out); }       \
  void elem_recip_##ISA(const float* x, int64_t n, float* out) { lanes::recip_rows<V>(x, n, out); }   \
  void elem_silu_##ISA(const float* x, int64_t n, float* out) { lanes::silu_rows<V>(x, n, out); }
