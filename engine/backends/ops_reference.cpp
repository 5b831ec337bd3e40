// --numerics reference: float64 throughout, scalar and plain. Weights are decoded to float (the
// exact values the file holds) and widened to double; activations, RMSNorm (with sqrt), RoPE
// (std::cos / std::sin), softmax attention and the KV cache are double. Only the logits are
// rounded, once, to f32. Slow: the ground truth fidelity is measured against.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/quants.h"
#include "backends/ops_storage.h"

namespace detaudit::backends {
namespace {

class ops_reference final : public ops_storage<double> {
 public:
  ops_reference(const model::model& m, thread_pool* pool) : ops_storage<double>(m, pool) {}

  // K then V, each (n_head_kv, head_dim) doubles.
  uint64_t kv_cell_bytes() const override { return 2 * sizeof(double) * static_cast<uint64_t>(kv_dim()); }

  void embed(const model::weight& w, model::act out) override {
    std::vector<float> buf(static_cast<size_t>(w.n_in));
    const writer o = write(out);
    for (int64_t t = 0; t < out.rows; ++t) {
      gguf::quants_dequantize_row(w.type, w.row(tok(t).token), buf.data(), w.n_in);
      for (int64_t i = 0; i < w.n_in; ++i) o.row(t)[i] = buf[i];
    }
  }

  void rms_norm(model::act x, const std::vector<float>& w, int64_t group, model::act out) override {
    const writer ow = write(out);
    for (int64_t t = 0; t < x.rows; ++t)
      for (int64_t g = 0; g < x.cols; g += group) {
        const double* a = row(x, t) + g;
        double* o = ow.row(t) + g;
        double ss = 0;
        for (int64_t i = 0; i < group; ++i) ss += a[i] * a[i];
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(group) + hp_.rms_eps);
        for (int64_t i = 0; i < group; ++i) o[i] = a[i] * scale * static_cast<double>(w[i]);
      }
  }

  void matmul(const model::weight& w, model::act x, model::act y) override {
    const writer o = write(y);
    parallel(n_threads(), [&](int64_t part) {
      int64_t r0, r1;
      split_range(w.n_out, n_threads(), part, 1, &r0, &r1);
      std::vector<float> wf(static_cast<size_t>(w.n_in));
      std::vector<double> wd(static_cast<size_t>(w.n_in));
      for (int64_t r = r0; r < r1; ++r) {
        gguf::quants_dequantize_row(w.type, w.row(r), wf.data(), w.n_in);
        for (int64_t i = 0; i < w.n_in; ++i) wd[i] = wf[i];
        for (int64_t t = 0; t < x.rows; ++t) {
          const double* a = row(x, t);
          double s = 0;
          for (int64_t i = 0; i < w.n_in; ++i) s += wd[i] * a[i];
          o.row(t)[r] = s;
        }
      }
    });
  }

  void add_bias(model::act x, const std::vector<float>& b) override {
    const writer o = write(x);
    for (int64_t t = 0; t < x.rows; ++t)
      for (int64_t i = 0; i < x.cols; ++i) o.row(t)[i] += b[i];
  }

  void rope(model::act x, int64_t n_head, const model::rope_params& rp) override {
    const int64_t hd = hp_.head_dim, n_rot = hp_.n_rot, half = n_rot / 2;
    const bool neox = model::arch_rope_kind(hp_.arch) == model::ROPE_NEOX;
    const writer o = write(x);
    for (int64_t t = 0; t < x.rows; ++t)
      for (int64_t i = 0; i < half; ++i) {
        double extrap = static_cast<double>(tok(t).pos) *
                        std::pow(rp.freq_base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
        if (!m_.rope_factors.empty()) extrap /= m_.rope_factors[i];
        double theta = rp.freq_scale * extrap;
        if (rp.ext_factor != 0) {  // YaRN
          const double y = (static_cast<double>(i) - rp.corr_low) / std::max(0.001, rp.corr_high - rp.corr_low);
          const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * rp.ext_factor;
          theta = theta * (1.0 - mix) + extrap * mix;
        }
        const double c = std::cos(theta) * rp.mscale, s = std::sin(theta) * rp.mscale;
        for (int64_t h = 0; h < n_head; ++h) {
          double* p = o.row(t) + h * hd;
          const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
          const double a = p[i0], b = p[i1];
          p[i0] = a * c - b * s;
          p[i1] = a * s + b * c;
        }
      }
  }

  void kv_store(int64_t layer, model::act k, model::act v) override {
    const size_t bytes = sizeof(double) * static_cast<size_t>(kv_dim());
    for (int64_t t = 0; t < k.rows; ++t) {
      uint8_t* cell = tok(t).cache->cell(layer, tok(t).pos);
      std::memcpy(cell, row(k, t), bytes);
      std::memcpy(cell + bytes, row(v, t), bytes);
    }
  }

  void attention(int64_t layer, model::act q, model::act out, const model::attn_params& p) override {
    const writer o = write(out);
    parallel(q.rows, [&](int64_t t) { attend_token(layer, t, q, o, p); });
  }

  void swiglu(model::act gate, model::act up, model::act out) override {
    double* o = write(out).data();
    for (int64_t i = 0; i < gate.rows * gate.cols; ++i) {
      const double g = data(gate)[i];
      o[i] = g / (1.0 + std::exp(-g)) * data(up)[i];
    }
  }

  void add(model::act a, model::act b, model::act out) override {
    double* o = write(out).data();
    for (int64_t i = 0; i < a.rows * a.cols; ++i) o[i] = data(a)[i] + data(b)[i];
  }

  void geglu(model::act gate, model::act up, model::act out) override {
    double* o = write(out).data();
    for (int64_t i = 0; i < gate.rows * gate.cols; ++i) {
      const double g = data(gate)[i];
      o[i] = 0.5 * g * (1.0 + std::tanh(0.79788456080286535588 * g * (1.0 + 0.044715 * g * g))) * data(up)[i];
    }
  }

  void swiglu_oai(model::act gate, model::act up, float alpha, float limit, model::act out) override {
    double* o = write(out).data();
    const double a = alpha, lim = limit;
    for (int64_t i = 0; i < gate.rows * gate.cols; ++i) {
      const double x = std::min(data(gate)[i], lim), y = std::clamp(data(up)[i], -lim, lim);
      o[i] = x / (1.0 + std::exp(-a * x)) * (y + 1.0);
    }
  }

  void scale(model::act x, float s, model::act out) override {
    double* o = write(out).data();
    for (int64_t i = 0; i < x.rows * x.cols; ++i) o[i] = data(x)[i] * static_cast<double>(s);
  }

  void softcap(model::act x, float cap, model::act out) override {
    double* o = write(out).data();
    for (int64_t i = 0; i < x.rows * x.cols; ++i) o[i] = cap * std::tanh(data(x)[i] / cap);
  }

  // Softmax and renormalisation in double; the experts ranked by their double logits (ties: lower
  // id). The weights are handed over as f32 (the interface's type), a relative 6e-8.
  void moe_route(model::act logits, int64_t n_used, bool norm, std::vector<int32_t>& ids, std::vector<float>& weights) override {
    const int64_t n_expert = logits.cols;
    ids.resize(static_cast<size_t>(logits.rows * n_used));
    weights.resize(ids.size());
    std::vector<int32_t> order(static_cast<size_t>(n_expert));
    for (int64_t t = 0; t < logits.rows; ++t) {
      const double* l = row(logits, t);
      const double mx = *std::max_element(l, l + n_expert);
      double all = 0, chosen = 0;
      for (int64_t i = 0; i < n_expert; ++i) all += std::exp(l[i] - mx);
      for (int64_t i = 0; i < n_expert; ++i) order[i] = static_cast<int32_t>(i);
      std::partial_sort(order.begin(), order.begin() + n_used, order.end(),
                        [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      for (int64_t j = 0; j < n_used; ++j) chosen += std::exp(l[order[j]] - mx);
      for (int64_t j = 0; j < n_used; ++j) {
        ids[t * n_used + j] = order[j];
        weights[t * n_used + j] = static_cast<float>(std::exp(l[order[j]] - mx) / (norm ? chosen : all));
      }
    }
  }

  void scale_rows(model::act x, const std::vector<float>& s, model::act out) override {
    const writer o = write(out);
    for (int64_t t = 0; t < x.rows; ++t)
      for (int64_t i = 0; i < x.cols; ++i) o.row(t)[i] = row(x, t)[i] * static_cast<double>(s[t]);
  }

 private:
  int64_t kv_dim() const { return hp_.n_head_kv * hp_.head_dim; }

  void attend_token(int64_t layer, int64_t t, model::act q, const writer& out, const model::attn_params& ap) {
    const int64_t hd = hp_.head_dim, p0 = model::attn_first(tok(t).pos, ap.window), n_kv = tok(t).pos + 1 - p0,
                  group = hp_.n_head / hp_.n_head_kv;
    const double scale = ap.kq_scale;
    std::vector<double> w(static_cast<size_t>(n_kv));
    for (int64_t h = 0; h < hp_.n_head; ++h) {
      const double* qh = row(q, t) + h * hd;
      const int64_t off = (h / group) * hd;
      double mx = -INFINITY;
      for (int64_t p = 0; p < n_kv; ++p) {
        const double* kp = reinterpret_cast<const double*>(tok(t).cache->cell(layer, p0 + p)) + off;
        double s = 0;
        for (int64_t i = 0; i < hd; ++i) s += qh[i] * kp[i];
        w[p] = s * scale;
        if (ap.softcap > 0) w[p] = ap.softcap * std::tanh(w[p] / ap.softcap);
        mx = std::max(mx, w[p]);
      }
      if (ap.sinks) mx = std::max(mx, static_cast<double>(ap.sinks[h]));
      double sum = ap.sinks ? std::exp(static_cast<double>(ap.sinks[h]) - mx) : 0.0;
      for (int64_t p = 0; p < n_kv; ++p) sum += (w[p] = std::exp(w[p] - mx));
      double* o = out.row(t) + h * hd;
      std::fill(o, o + hd, 0.0);
      for (int64_t p = 0; p < n_kv; ++p) {
        const double* vp = reinterpret_cast<const double*>(tok(t).cache->cell(layer, p0 + p)) + kv_dim() + off;
        for (int64_t i = 0; i < hd; ++i) o[i] += w[p] * vp[i];
      }
      for (int64_t i = 0; i < hd; ++i) o[i] /= sum;
    }
  }
};

}  // namespace

std::unique_ptr<model::ops> ops_reference_create(const model::model& m, thread_pool* pool) {
  return std::make_unique<ops_reference>(m, pool);
}

}  // namespace detaudit::backends
