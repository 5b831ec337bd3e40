// rms_norm_f32_cpu, swiglu_f32_cpu, add_f32_cpu (cpu.h): the kernels/ref element-wise ops bit for
// bit, with their portable scalar variants and the instruction-set dispatch.
//
// Goals: the scalar variants are the reference's sequence on numerics' inline primitives
// (numerics/exact_inline.h: the same code numerics' exp_f32, recip_f32 and silu_f32 run), so no
// element costs a call into another translation unit; RMS norm's sum of squares works on the
// float bits directly (elementwise_internal.h). Inputs the reference rejects (n < 1, eps not > 0, a
// non-finite x in RMS norm) go to the reference, which throws its own error before writing.
// Non-goals: RoPE (one multiply per element on a precomputed table; the reference is kept).
#include <bit>
#include <string>

#include "kernels/cpu/elementwise_internal.h"
#include "numerics/exact_inline.h"
#include "util/error.h"

namespace detaudit::kernels::cpu {

namespace {

// silu_f32's bits. A NaN goes to the out-of-line numerics::silu_f32: a product of two NaNs keeps
// the payload of the operand the compiler puts first, which an inlined copy may order otherwise.
inline float silu_s(float x) { return x != x ? numerics::silu_f32(x) : numerics::inl::silu(x); }

// gelu_f32 / softcap_f32's bits, NaN through the out-of-line functions as silu_s.
inline float gelu_s(float x) { return x != x ? numerics::gelu_f32(x) : numerics::inl::gelu(x); }
inline float softcap_s(float x, float cap, float inv_cap) {
  return x != x ? numerics::softcap_f32(x, cap) : numerics::inl::softcap(x, cap, inv_cap);
}

using numerics::inl::EXP_MASK;
using numerics::inl::f_bits;
using numerics::inl::FRAC_MASK;

void check_supported(isa i, const char* what) {
  if (!isa_supported(i))
    throw input_error(std::string(what) + ": " + isa_name(i) + " is not supported here");
}

uint32_t max_exp_field(isa i, const float* x, int64_t n) {
  switch (i) {
    case isa::avx512: return elem_max_exp_field_avx512(x, n);
    case isa::avx2: return elem_max_exp_field_avx2(x, n);
    case isa::scalar: break;
  }
  return elem_max_exp_field_scalar(x, n);
}

int64_t sum_squares(isa i, const float* x, int64_t n, int32_t g) {
  switch (i) {
    case isa::avx512: return elem_sum_squares_avx512(x, n, g);
    case isa::avx2: return elem_sum_squares_avx2(x, n, g);
    case isa::scalar: break;
  }
  return elem_sum_squares_scalar(x, n, g);
}

void scale(isa i, const float* x, const float* w, int64_t n, float r, float* out) {
  switch (i) {
    case isa::avx512: elem_scale_avx512(x, w, n, r, out); return;
    case isa::avx2: elem_scale_avx2(x, w, n, r, out); return;
    case isa::scalar: break;
  }
  elem_scale_scalar(x, w, n, r, out);
}

using unary_fn = void (*)(const float*, int64_t, float*);

void unary_dispatch(isa i, const char* what, unary_fn s, unary_fn a2, unary_fn a512,
                    const float* x, int64_t n, float* out) {
  check_supported(i, what);
  switch (i) {
    case isa::avx512: a512(x, n, out); return;
    case isa::avx2: a2(x, n, out); return;
    case isa::scalar: break;
  }
  s(x, n, out);
}

}  // namespace

uint32_t elem_max_exp_field_scalar(const float* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t f = (f_bits(x[i]) & EXP_MASK) >> 23;
    m = f > m ? f : m;
  }
  return m;
}

int64_t elem_sum_squares_scalar(const float* x, int64_t n, int32_t g) {
  int64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = f_bits(x[i]);
    const int32_t field = static_cast<int32_t>((b & EXP_MASK) >> 23);
    if (field == 0) continue;
    const uint64_t m = (b & FRAC_MASK) | 0x00800000u;
    const uint64_t a = m * m;  // < 2^48
    const int32_t sh = 2 * (field - 150) - g;
    if (sh >= 0) {
      acc += static_cast<int64_t>(a << sh);
    } else {
      const int s = -sh > 63 ? 63 : -sh;
      acc += static_cast<int64_t>((a + ((uint64_t{1} << (s - 1)) - 1) + ((a >> s) & 1)) >> s);
    }
  }
  return acc;
}

void elem_scale_scalar(const float* x, const float* w, int64_t n, float r, float* out) {
  if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = numerics::inl::flush(numerics::inl::flush(numerics::inl::flush(x[i]) * r) * numerics::inl::flush(w[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = numerics::inl::flush(numerics::inl::flush(x[i]) * r);
  }
}

void elem_swiglu_scalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = numerics::inl::flush(silu_s(gate[i]) * numerics::inl::flush(up[i]));
}

void elem_add_scalar(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = numerics::inl::flush(numerics::inl::flush(a[i]) + numerics::inl::flush(b[i]));
}

void elem_geglu_scalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = numerics::inl::flush(gelu_s(gate[i]) * numerics::inl::flush(up[i]));
}

void elem_softcap_scalar(const float* x, int64_t n, float cap, float inv_cap, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = softcap_s(x[i], cap, inv_cap);
}

void elem_swiglu_oai_scalar(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = gate[i] != gate[i] || up[i] != up[i] ? numerics::swiglu_oai_f32(gate[i], up[i], alpha, limit)
                                                   : numerics::inl::swiglu_oai(gate[i], up[i], alpha, limit);
}

void elem_exp_scalar(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = numerics::inl::exp(x[i]);
}

void elem_recip_scalar(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = numerics::inl::recip(x[i]);
}

void elem_silu_scalar(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_s(x[i]);
}

void exp_f32_array_cpu(isa i, const float* x, int64_t n, float* out) {
  unary_dispatch(i, "exp_f32_array_cpu", elem_exp_scalar, elem_exp_avx2, elem_exp_avx512, x, n, out);
}

void recip_f32_array_cpu(isa i, const float* x, int64_t n, float* out) {
  unary_dispatch(i, "recip_f32_array_cpu", elem_recip_scalar, elem_recip_avx2, elem_recip_avx512, x,
                 n, out);
}

void silu_f32_array_cpu(isa i, const float* x, int64_t n, float* out) {
  unary_dispatch(i, "silu_f32_array_cpu", elem_silu_scalar, elem_silu_avx2, elem_silu_avx512, x, n,
                 out);
}

void rms_norm_f32_cpu(isa i, const float* x, const float* w, int64_t n, float eps, float* out) {
  if (n < 1 || !(eps > 0.0f)) {
    rms_norm_f32_ref(x, w, n, eps, out);
    return;
  }
  check_supported(i, "rms_norm_f32_cpu");
  const uint32_t field = max_exp_field(i, x, n);
  if (field == 255) {
    rms_norm_f32_ref(x, w, n, eps, out);
    return;
  }
  float ss = 0.0f;
  if (field != 0) {
    const int32_t g = 2 * (static_cast<int32_t>(field) - 150) + numerics::SQUARE_BITS + numerics::ceil_log2(n) - numerics::ACC_BITS;
    ss = numerics::fixed_to_f32(sum_squares(i, x, n, g), g);
  }
  const float inv_n = static_cast<float>(1.0 / static_cast<double>(n));
  const float mean = numerics::inl::flush(ss * inv_n);
  const float r = numerics::rsqrt_f32(numerics::inl::flush(mean + eps));
  scale(i, x, w, n, r, out);
}

void swiglu_f32_cpu(isa i, const float* gate, const float* up, int64_t n, float* out) {
  check_supported(i, "swiglu_f32_cpu");
  switch (i) {
    case isa::avx512: elem_swiglu_avx512(gate, up, n, out); return;
    case isa::avx2: elem_swiglu_avx2(gate, up, n, out); return;
    case isa::scalar: break;
  }
  elem_swiglu_scalar(gate, up, n, out);
}

void geglu_f32_cpu(isa i, const float* gate, const float* up, int64_t n, float* out) {
  check_supported(i, "geglu_f32_cpu");
  switch (i) {
    case isa::avx512: elem_geglu_avx512(gate, up, n, out); return;
    case isa::avx2: elem_geglu_avx2(gate, up, n, out); return;
    case isa::scalar: break;
  }
  elem_geglu_scalar(gate, up, n, out);
}

void swiglu_oai_f32_cpu(isa i, const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  check_supported(i, "swiglu_oai_f32_cpu");
  switch (i) {
    case isa::avx512: elem_swiglu_oai_avx512(gate, up, n, alpha, limit, out); return;
    case isa::avx2: elem_swiglu_oai_avx2(gate, up, n, alpha, limit, out); return;
    case isa::scalar: break;
  }
  elem_swiglu_oai_scalar(gate, up, n, alpha, limit, out);
}

void scale_f32_cpu(isa i, const float* x, int64_t n, float s, float* out) {
  check_supported(i, "scale_f32_cpu");
  scale(i, x, nullptr, n, numerics::inl::flush(s), out);
}

void softcap_f32_cpu(isa i, const float* x, int64_t n, float cap, float* out) {
  if (!numerics::softcap_cap_ok(cap)) {
    softcap_f32_ref(x, n, cap, out);  // its error
    return;
  }
  check_supported(i, "softcap_f32_cpu");
  const float inv_cap = numerics::inl::recip(cap);
  switch (i) {
    case isa::avx512: elem_softcap_avx512(x, n, cap, inv_cap, out); return;
    case isa::avx2: elem_softcap_avx2(x, n, cap, inv_cap, out); return;
    case isa::scalar: break;
  }
  elem_softcap_scalar(x, n, cap, inv_cap, out);
}

void add_f32_cpu(isa i, const float* a, const float* b, int64_t n, float* out) {
  check_supported(i, "add_f32_cpu");
  switch (i) {
    case isa::avx512: elem_add_avx512(a, b, n, out); return;
    case isa::avx2: elem_add_avx2(a, b, n, out); return;
    case isa::scalar: break;
  }
  elem_add_scalar(a, b, n, out);
}

}  // namespace detaudit::kernels::cpu
