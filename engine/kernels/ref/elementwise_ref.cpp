// RMS norm, SwiGLU, residual add and RoPE (docs/precision-contract.md, "Element-wise ops").
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/ref/ref.h"
#include "util/error.h"

namespace detaudit::kernels {

using numerics::flush;

void rms_norm_f32_ref(const float* x, const float* w, int64_t n, float eps, float* out) {
  if (n < 1) throw input_error("rms_norm_f32_ref: empty vector");
  if (!(eps > 0.0f)) throw input_error("rms_norm_f32_ref: eps " + std::to_string(eps) + " is not > 0");
  // x_i = m_i * 2^e_i (|m_i| < 2^24), x_i^2 = m_i^2 * 2^(2 e_i) with m_i^2 < 2^48.
  std::vector<int32_t> m(static_cast<size_t>(n));
  std::vector<int> e(static_cast<size_t>(n));
  int maxe = numerics::EXP_ZERO;
  for (int64_t i = 0; i < n; ++i) {
    numerics::f32_decompose(flush(x[i]), &m[static_cast<size_t>(i)], &e[static_cast<size_t>(i)]);
    if (m[static_cast<size_t>(i)] != 0 && e[static_cast<size_t>(i)] > maxe) maxe = e[static_cast<size_t>(i)];
  }
  float ss = 0.0f;
  if (maxe != numerics::EXP_ZERO) {
    const int g = 2 * maxe + numerics::SQUARE_BITS + numerics::ceil_log2(n) - numerics::ACC_BITS;
    int64_t acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t mi = m[static_cast<size_t>(i)];
      if (mi != 0) acc += numerics::round_shift(mi * mi, 2 * e[static_cast<size_t>(i)] - g);
    }
    ss = numerics::fixed_to_f32(acc, g);
  }
  const float inv_n = static_cast<float>(1.0 / static_cast<double>(n));
  const float mean = flush(ss * inv_n);
  const float r = numerics::rsqrt_f32(flush(mean + eps));
  for (int64_t i = 0; i < n; ++i) {
    const float v = flush(flush(x[i]) * r);
    out[i] = w ? flush(v * flush(w[i])) : v;
  }
}

void swiglu_f32_ref(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = flush(numerics::silu_f32(gate[i]) * flush(up[i]));
}

void add_f32_ref(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = flush(flush(a[i]) + flush(b[i]));
}

void geglu_f32_ref(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = flush(numerics::gelu_f32(gate[i]) * flush(up[i]));
}

void scale_f32_ref(const float* x, int64_t n, float s, float* out) {
  s = flush(s);
  for (int64_t i = 0; i < n; ++i) out[i] = flush(flush(x[i]) * s);
}

void swiglu_oai_f32_ref(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = numerics::swiglu_oai_f32(gate[i], up[i], alpha, limit);
}

void softcap_f32_ref(const float* x, int64_t n, float cap, float* out) {
  if (!numerics::softcap_cap_ok(cap))
    throw input_error("softcap_f32_ref: cap " + std::to_string(cap) + " is not a positive normal float with a normal reciprocal");
  for (int64_t i = 0; i < n; ++i) out[i] = numerics::softcap_f32(x[i], cap);
}

void rope_table_row(int64_t pos, int64_t n_rot, double freq_base, double freq_scale,
                    const float* factors, float* out, double ext_factor, double corr_low,
                    double corr_high, double mscale) {
  if (n_rot < 2 || n_rot % 2 != 0) throw input_error("rope_table_row: n_rot " + std::to_string(n_rot) + " is not even and >= 2");
  if (!(freq_base > 0.0)) throw input_error("rope_table_row: freq_base must be > 0");
  const double log_base = numerics::log_f64(freq_base);
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double inv_freq = numerics::exp_f64(-(2.0 * static_cast<double>(i) / static_cast<double>(n_rot)) * log_base);
    double theta = static_cast<double>(pos) * freq_scale * inv_freq;
    if (factors) theta = theta / static_cast<double>(factors[i]);
    if (ext_factor != 0) {
      double extrap = static_cast<double>(pos) * inv_freq;
      if (factors) extrap = extrap / static_cast<double>(factors[i]);
      const double y = (static_cast<double>(i) - corr_low) / std::max(0.001, corr_high - corr_low);
      const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * ext_factor;
      theta = freq_scale * extrap * (1.0 - mix) + extrap * mix;
    }
    double s, c;
    numerics::sincos_f64(theta, &s, &c);
    if (mscale != 1.0) {
      s *= mscale;
      c *= mscale;
    }
    out[2 * i] = flush(static_cast<float>(c));
    out[2 * i + 1] = flush(static_cast<float>(s));
  }
}

void rope_f32_ref(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int64_t pos, bool neox,
                  const float* cos_sin_table_row) {
  (void)pos;  // the table row is that of pos; kept in the signature so backends can index tables
  if (n_rot < 0 || n_rot % 2 != 0 || n_rot > head_dim) {
    throw input_error("rope_f32_ref: n_rot " + std::to_string(n_rot) + " must be even and <= head_dim " +
                      std::to_string(head_dim));
  }
  const int64_t half = n_rot / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i0 = neox ? i : 2 * i;
      const int64_t i1 = neox ? i + half : 2 * i + 1;
      const float c = cos_sin_table_row[2 * i];
      const float s = cos_sin_table_row[2 * i + 1];
      const float x0 = flush(xh[i0]);
      const float x1 = flush(xh[i1]);
      xh[i0] = flush(flush(x0 * c) - flush(x1 * s));
      xh[i1] = flush(flush(x0 * s) + flush(x1 * c));
    }
  }
}

}  // namespace detaudit::kernels
