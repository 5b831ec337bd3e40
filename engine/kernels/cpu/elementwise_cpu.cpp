// rms_norm_f32_cpu, swiglu_f32_cpu, add_f32_cpu (cpu.h): the kernels/ref element-wise ops bit for
// bit, with their portable scalar variants and the instruction-set dispatch.
//
// Goals: the scalar variants are the reference's sequence written with inline helpers (copies of
// numerics/elementwise.cpp's exp_f32, recip_f32 and silu_f32, step for step), so no element costs
// a call into another translation unit; RMS norm's sum of squares works on the float bits
// directly (elementwise_internal.h). Inputs the reference rejects (n < 1, eps not > 0, a
// non-finite x in RMS norm) go to the reference, which throws its own error before writing.
// Non-goals: RoPE (one multiply per element on a precomputed table; the reference is kept).
#include <bit>
#include <string>

#include "kernels/cpu/elementwise_internal.h"
#include "kernels/cpu/exact_inline.h"
#include "util/error.h"

namespace detaudit::kernels::cpu {

namespace {

constexpr uint32_t kSignBit = 0x80000000u;
constexpr uint32_t kExpMask = 0x7f800000u;
constexpr uint32_t kFracMask = 0x007fffffu;

inline float bits_f(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t f_bits(float f) { return std::bit_cast<uint32_t>(f); }

// 2^k for k in [-126, 127].
inline float pow2_s(int k) { return bits_f(static_cast<uint32_t>(k + 127) << 23); }

// numerics' scale_pow2: y * 2^k for y in [0.5, 2), below 2^-126 +0, past the range +inf.
inline float scale_pow2_s(float y, int k) {
  if (k > 127) return (y * pow2_s(127)) * pow2_s(k - 127);
  if (k < -126 || (k == -126 && y < 1.0f)) return 0.0f;
  return y * pow2_s(k);
}

inline void two_prod_s(float a, float b, float* hi, float* lo) {
  const float split = 4097.0f;
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

inline float exp_s(float x) {
  if (x != x) return x;
  if (x > 100.0f) return bits_f(kExpMask);
  if (x < -104.0f) return 0.0f;
  const float magic = 12582912.0f;
  const float kf = ((x * 1.44269504088896341f) + magic) - magic;
  const float r = (x - kf * 0.693359375f) - kf * -2.12194440e-4f;
  const float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = ((p * z) + r) + 1.0f;
  return scale_pow2_s(y, static_cast<int>(kf));
}

inline float recip_s(float x) {
  x = flush_fast(x);
  if (x != x) return x;
  const uint32_t b = f_bits(x);
  const uint32_t sign = b & kSignBit;
  const uint32_t ex = (b & kExpMask) >> 23;
  if (ex == 0) return bits_f(sign | kExpMask);
  if (ex == 255) return bits_f(sign);
  const float m = bits_f((b & kFracMask) | 0x3f800000u);
  float y = bits_f(0x7EF311C3u - f_bits(m));
  for (int i = 0; i < 4; ++i) y = y * (2.0f - m * y);
  float p, pl;
  two_prod_s(m, y, &p, &pl);
  const float e = (1.0f - p) - pl;
  const float r = scale_pow2_s(y + y * e, 127 - static_cast<int>(ex));
  return bits_f(f_bits(r) | sign);
}

// silu_f32; a NaN goes to numerics::silu_f32, whose product of two NaNs picks the payload.
inline float silu_s(float x) {
  if (x != x) return numerics::silu_f32(x);
  x = flush_fast(x);
  const float d = flush_fast(1.0f + exp_s(-x));
  return flush_fast(x * recip_s(d));
}

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
    const uint32_t f = (f_bits(x[i]) & kExpMask) >> 23;
    m = f > m ? f : m;
  }
  return m;
}

int64_t elem_sum_squares_scalar(const float* x, int64_t n, int32_t g) {
  int64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = f_bits(x[i]);
    const int32_t field = static_cast<int32_t>((b & kExpMask) >> 23);
    if (field == 0) continue;
    const uint64_t m = (b & kFracMask) | 0x00800000u;
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
    for (int64_t i = 0; i < n; ++i) out[i] = flush_fast(flush_fast(flush_fast(x[i]) * r) * flush_fast(w[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = flush_fast(flush_fast(x[i]) * r);
  }
}

void elem_swiglu_scalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = flush_fast(silu_s(gate[i]) * flush_fast(up[i]));
}

void elem_add_scalar(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = flush_fast(flush_fast(a[i]) + flush_fast(b[i]));
}

void elem_exp_scalar(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = exp_s(x[i]);
}

void elem_recip_scalar(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = recip_s(x[i]);
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
    const int32_t g = 2 * (static_cast<int32_t>(field) - 150) + 48 + numerics::ceil_log2(n) - 62;
    ss = numerics::fixed_to_f32(sum_squares(i, x, n, g), g);
  }
  const float inv_n = static_cast<float>(1.0 / static_cast<double>(n));
  const float mean = flush_fast(ss * inv_n);
  const float r = numerics::rsqrt_f32(flush_fast(mean + eps));
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
