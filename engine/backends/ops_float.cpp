// --numerics float: what an ordinary engine computes, with llama.cpp's (b4748, CPU) rounding
// points, so that its results move with batch shape and thread count for real reasons:
//
//   matmul, < 32 tokens   activations converted to the weight type's dot type (quantized weights:
//                         8-bit blocks, Q8_0 (d = amax/127 rounded to fp16) or Q8_K for K-quants
//                         (256-blocks, f32 d); F16 / BF16 weights: activations rounded to f16 /
//                         bf16; F32: unchanged); per 32-block dot accumulated in f32 in block
//                         order; K split into one contiguous chunk per thread, the per-thread f32
//                         partials added in thread order.
//   matmul, >= 32 tokens  weights dequantized to f32, f32 GEMM whose K loop runs in tiles of 64
//                         summed separately and then added (threads split output rows).
//   KV cache              f16; q and the softmax weights rounded to f16 for the two attention
//                         products (ggml mul_mat's src1 conversion), f32 accumulation, expf
//                         softmax with a double sum (ggml_vec_soft_max_f32).
//   RMSNorm               ggml_compute_forward_rms_norm_f32: double sum of f32 squares, f32
//                         mean, 1.0f / sqrtf.  RoPE: ggml_rope_cache_init (theta *= theta_scale
//                         in f32, cosf / sinf).  SiLU: x / (1 + expf(-x)).
//   expert routing        ggml_soft_max then top-k and renormalisation in f32 (moe_route below).
// libm is allowed here (and in reference mode) only.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/quants.h"
#include "backends/ops_storage.h"

namespace detaudit::backends {
namespace {

constexpr int64_t GEMM_MIN_TOKENS = 32;  // llama.cpp's switch to the batched kernel
constexpr int64_t GEMM_TILE = 64;        // K tile of the GEMM path

const float* fp16_table() {
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    for (uint32_t i = 0; i < 65536; ++i) v[i] = gguf::fp16_to_f32(static_cast<uint16_t>(i));
    return v;
  }();
  return t.data();
}

float round_fp16(float x) { return fp16_table()[gguf::f32_to_fp16(x)]; }

// An activation row in the weight type's dot form: x[i] ~= v[i] * d[i / block].
struct dot_act {
  int64_t block = 32;
  std::vector<float> v;
  std::vector<float> d;
};

void to_q8(const float* x, int64_t n, int64_t block, bool q8_k_style, dot_act& out) {
  out.block = block;
  out.v.assign(static_cast<size_t>(n), 0.0f);
  out.d.assign(static_cast<size_t>(n / block), 0.0f);
  for (int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    float amax = 0, vmax = 0;
    for (int64_t i = 0; i < block; ++i)
      if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), vmax = xb[i];
    if (amax == 0) continue;
    if (q8_k_style) {  // quantize_row_q8_K_ref
      const float iscale = -127.0f / vmax;
      for (int64_t i = 0; i < block; ++i) out.v[b * block + i] = std::min(127.0f, std::nearbyint(iscale * xb[i]));
      out.d[b] = 1.0f / iscale;
    } else {  // quantize_row_q8_0_ref
      const float d = amax / 127.0f, id = 1.0f / d;
      for (int64_t i = 0; i < block; ++i) out.v[b * block + i] = std::round(xb[i] * id);
      out.d[b] = round_fp16(d);
    }
  }
}

void to_dot_act(gguf::dtype t, const float* x, int64_t n, dot_act& out) {
  switch (t) {
    case gguf::DTYPE_F32: case gguf::DTYPE_F16: case gguf::DTYPE_BF16:
      out.block = n;
      out.v.assign(x, x + n);
      out.d.assign(1, 1.0f);
      for (float& v : out.v)
        v = t == gguf::DTYPE_F16 ? round_fp16(v) : t == gguf::DTYPE_BF16 ? gguf::bf16_to_f32(gguf::f32_to_bf16(v)) : v;
      return;
    default: {  // llama.cpp's q8_K activations for the K-quants' 256-element blocks, else q8_0's
      const bool k = gguf::dtype_get(t).block_size == 256;
      return to_q8(x, n, k ? 256 : 32, k, out);
    }
  }
}

class ops_float final : public ops_storage<float> {
 public:
  ops_float(const model::model& m, thread_pool* pool) : ops_storage<float>(m, pool) {}

  // K then V, each (n_head_kv, head_dim) f16.
  uint64_t kv_cell_bytes() const override { return 2 * sizeof(uint16_t) * static_cast<uint64_t>(kv_dim()); }

  void embed(const model::weight& w, model::act out) override {
    const writer o = write(out);
    for (int64_t t = 0; t < out.rows; ++t) gguf::quants_dequantize_row(w.type, w.row(tok(t).token), o.row(t), w.n_in);
  }

  void rms_norm(model::act x, const std::vector<float>& w, int64_t group, model::act out) override {
    const writer ow = write(out);
    for (int64_t t = 0; t < x.rows; ++t)
      for (int64_t g = 0; g < x.cols; g += group) {
        const float* a = row(x, t) + g;
        float* o = ow.row(t) + g;
        double sum = 0;
        for (int64_t i = 0; i < group; ++i) sum += static_cast<double>(a[i] * a[i]);
        const float mean = static_cast<float>(sum / static_cast<double>(group));
        const float scale = 1.0f / std::sqrt(mean + static_cast<float>(hp_.rms_eps));
        for (int64_t i = 0; i < group; ++i) o[i] = (a[i] * scale) * w[i];
      }
  }

  void matmul(const model::weight& w, model::act x, model::act y) override {
    if (x.rows < GEMM_MIN_TOKENS) matmul_vec(w, x, y);
    else matmul_gemm(w, x, y);
  }

  void add_bias(model::act x, const std::vector<float>& b) override {
    const writer o = write(x);
    for (int64_t t = 0; t < x.rows; ++t)
      for (int64_t i = 0; i < x.cols; ++i) o.row(t)[i] += b[i];
  }

  void rope(model::act x, int64_t n_head, const model::rope_params& p) override;

  void kv_store(int64_t layer, model::act k, model::act v) override {
    const int64_t n = kv_dim();
    for (int64_t t = 0; t < k.rows; ++t) {
      uint16_t* cell = reinterpret_cast<uint16_t*>(tok(t).cache->cell(layer, tok(t).pos));
      for (int64_t i = 0; i < n; ++i) cell[i] = gguf::f32_to_fp16(row(k, t)[i]);
      for (int64_t i = 0; i < n; ++i) cell[n + i] = gguf::f32_to_fp16(row(v, t)[i]);
    }
  }

  void attention(int64_t layer, model::act q, model::act out, const model::attn_params& p) override {
    const writer o = write(out);
    parallel(q.rows, [&](int64_t t) { attend_token(layer, t, q, o, p); });
  }

  void swiglu(model::act gate, model::act up, model::act out) override {
    float* o = write(out).data();
    for (int64_t i = 0; i < gate.rows * gate.cols; ++i) {
      const float g = data(gate)[i];
      o[i] = (g / (1.0f + std::exp(-g))) * data(up)[i];
    }
  }

  void add(model::act a, model::act b, model::act out) override {
    float* o = write(out).data();
    for (int64_t i = 0; i < a.rows * a.cols; ++i) o[i] = data(a)[i] + data(b)[i];
  }

  // ggml_vec_geglu_f32 (CPU): 0 at or below -10, the gate itself from 10, else GELU's tanh form
  // of the gate rounded to f16, looked up (the table holds f16 results), times up.
  void geglu(model::act gate, model::act up, model::act out) override {
    float* o = write(out).data();
    for (int64_t i = 0; i < gate.rows * gate.cols; ++i) {
      const float g = data(gate)[i], u = data(up)[i];
      if (g <= -10.0f) o[i] = 0.0f;
      else if (g >= 10.0f) o[i] = g * u;
      else {
        const float x = round_fp16(g);
        o[i] = round_fp16(0.5f * x * (1.0f + std::tanh(0.79788456080286535588f * x * (1.0f + 0.044715f * x * x)))) * u;
      }
    }
  }

  // ggml_swiglu_oai (CPU): x / (1 + expf(alpha * -x)) * (y + 1) on the clamped inputs.
  void swiglu_oai(model::act gate, model::act up, float alpha, float limit, model::act out) override {
    float* o = write(out).data();
    for (int64_t i = 0; i < gate.rows * gate.cols; ++i) {
      const float x = std::min(data(gate)[i], limit), y = std::clamp(data(up)[i], -limit, limit);
      o[i] = x / (1.0f + std::exp(alpha * (-x))) * (y + 1.0f);
    }
  }

  void scale(model::act x, float s, model::act out) override {
    float* o = write(out).data();
    for (int64_t i = 0; i < x.rows * x.cols; ++i) o[i] = data(x)[i] * s;
  }

  // ggml_scale by 1/cap, ggml_tanh, ggml_scale by cap.
  void softcap(model::act x, float cap, model::act out) override {
    const float inv = 1.0f / cap;
    float* o = write(out).data();
    for (int64_t i = 0; i < x.rows * x.cols; ++i) o[i] = std::tanh(data(x)[i] * inv) * cap;
  }

  void moe_route(model::act logits, int64_t n_used, bool norm, std::vector<int32_t>& ids, std::vector<float>& weights) override;

  // ggml_mul of the expert outputs by their weights.
  void scale_rows(model::act x, const std::vector<float>& s, model::act out) override {
    const writer o = write(out);
    for (int64_t t = 0; t < x.rows; ++t)
      for (int64_t i = 0; i < x.cols; ++i) o.row(t)[i] = row(x, t)[i] * s[t];
  }

 private:
  int64_t kv_dim() const { return hp_.n_head_kv * hp_.head_dim; }
  void matmul_vec(const model::weight& w, model::act x, model::act y);
  void matmul_gemm(const model::weight& w, model::act x, model::act y);
  void attend_token(int64_t layer, int64_t t, model::act q, const writer& out, const model::attn_params& p);
};

// Each thread takes one contiguous K chunk (whole blocks) of every row; partials are added in
// thread order.
void ops_float::matmul_vec(const model::weight& w, model::act x, model::act y) {
  std::vector<dot_act> xs(static_cast<size_t>(x.rows));
  for (int64_t t = 0; t < x.rows; ++t) to_dot_act(w.type, row(x, t), x.cols, xs[t]);
  const gguf::dtype_traits& tr = gguf::dtype_get(w.type);
  const int64_t align = std::max<int64_t>(tr.block_size, xs[0].block == w.n_in ? 32 : xs[0].block);
  const int64_t n_parts = std::min<int64_t>(n_threads(), (w.n_in + align - 1) / align);
  std::vector<std::vector<float>> partial(static_cast<size_t>(n_parts));
  parallel(n_parts, [&](int64_t part) {
    int64_t k0, k1;
    split_range(w.n_in, n_parts, part, align, &k0, &k1);
    std::vector<float>& acc = partial[part];
    acc.assign(static_cast<size_t>(x.rows * w.n_out), 0.0f);
    std::vector<float> wf(static_cast<size_t>(k1 - k0));
    for (int64_t r = 0; r < w.n_out; ++r) {
      const uint8_t* src = w.row(r) + static_cast<uint64_t>(k0 / tr.block_size) * tr.type_size;
      gguf::quants_dequantize_row(w.type, src, wf.data(), k1 - k0);
      for (int64_t t = 0; t < x.rows; ++t) {
        const dot_act& a = xs[t];
        float sum = 0;
        for (int64_t b0 = k0; b0 < k1; b0 += 32) {
          float s = 0;
          for (int64_t i = b0; i < std::min(b0 + 32, k1); ++i) s += wf[i - k0] * a.v[i];
          sum += s * a.d[b0 / a.block];
        }
        acc[t * w.n_out + r] = sum;
      }
    }
  });
  const writer o = write(y);
  for (int64_t t = 0; t < x.rows; ++t)
    for (int64_t r = 0; r < w.n_out; ++r) {
      float s = partial[0][t * w.n_out + r];
      for (int64_t p = 1; p < n_parts; ++p) s += partial[p][t * w.n_out + r];
      o.row(t)[r] = s;
    }
}

void ops_float::matmul_gemm(const model::weight& w, model::act x, model::act y) {
  const writer o = write(y);
  parallel(n_threads(), [&](int64_t part) {
    int64_t r0, r1;
    split_range(w.n_out, n_threads(), part, 1, &r0, &r1);
    std::vector<float> wf(static_cast<size_t>(w.n_in));
    for (int64_t r = r0; r < r1; ++r) {
      gguf::quants_dequantize_row(w.type, w.row(r), wf.data(), w.n_in);
      for (int64_t t = 0; t < x.rows; ++t) {
        const float* a = row(x, t);
        float sum = 0;
        for (int64_t k0 = 0; k0 < w.n_in; k0 += GEMM_TILE) {
          float s = 0;
          for (int64_t i = k0; i < std::min(k0 + GEMM_TILE, w.n_in); ++i) s += wf[i] * a[i];
          sum += s;
        }
        o.row(t)[r] = sum;
      }
    }
  });
}

// llama.cpp's build_moe_ffn with softmax gating: ggml_soft_max (expf, a double sum, the f32
// reciprocal of it multiplied in), top-k of the probabilities (ties: lower id), their sum in double
// rounded to f32 (ggml_sum_rows), clamped below at 2^-14, and an f32 division. gpt-oss's gating
// (hparams.expert_softmax_chosen): top-k of the logits, then ggml_soft_max over the k chosen.
void ops_float::moe_route(model::act logits, int64_t n_used, bool norm, std::vector<int32_t>& ids, std::vector<float>& weights) {
  const int64_t n_expert = logits.cols;
  ids.resize(static_cast<size_t>(logits.rows * n_used));
  weights.resize(ids.size());
  std::vector<float> p(static_cast<size_t>(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < logits.rows; ++t) {
    const float* l = row(logits, t);
    for (int64_t i = 0; i < n_expert; ++i) order[i] = static_cast<int32_t>(i);
    if (hp_.expert_softmax_chosen) {  // gpt-oss: top k of the logits, then ggml_soft_max over those k
      std::partial_sort(order.begin(), order.begin() + n_used, order.end(),
                        [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      const float top = l[order[0]];
      double sum = 0;
      for (int64_t j = 0; j < n_used; ++j) sum += static_cast<double>(p[j] = std::exp(l[order[j]] - top));
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < n_used; ++j) {
        ids[t * n_used + j] = order[j];
        weights[t * n_used + j] = p[j] * inv;
      }
      continue;
    }
    float mx = -INFINITY;
    for (int64_t i = 0; i < n_expert; ++i) mx = std::max(mx, l[i]);
    double sum = 0;
    for (int64_t i = 0; i < n_expert; ++i) sum += static_cast<double>(p[i] = std::exp(l[i] - mx));
    const float inv = static_cast<float>(1.0 / sum);
    for (float& v : p) v *= inv;
    std::partial_sort(order.begin(), order.begin() + n_used, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double chosen = 0;
    for (int64_t j = 0; j < n_used; ++j) chosen += static_cast<double>(p[order[j]]);
    const float denom = std::max(static_cast<float>(chosen), 6.103515625e-5f);
    for (int64_t j = 0; j < n_used; ++j) {
      ids[t * n_used + j] = order[j];
      weights[t * n_used + j] = norm ? p[order[j]] / denom : p[order[j]];
    }
  }
}

void ops_float::rope(model::act x, int64_t n_head, const model::rope_params& rp) {
  const int64_t hd = hp_.head_dim, n_rot = hp_.n_rot, half = n_rot / 2;
  const bool neox = model::arch_rope_kind(hp_.arch) == model::ROPE_NEOX;
  const float theta_scale = std::pow(static_cast<float>(rp.freq_base), -2.0f / static_cast<float>(n_rot));
  const float freq_scale = static_cast<float>(rp.freq_scale), mscale = static_cast<float>(rp.mscale);
  std::vector<float> cs(static_cast<size_t>(n_rot));
  const writer o = write(x);
  for (int64_t t = 0; t < x.rows; ++t) {
    float theta = static_cast<float>(tok(t).pos);
    for (int64_t i = 0; i < half; ++i) {
      const float ff = m_.rope_factors.empty() ? 1.0f : m_.rope_factors[i];
      float th = freq_scale * (theta / ff);
      if (rp.ext_factor != 0) {  // ggml's rope_yarn
        const float y = (static_cast<float>(i) - static_cast<float>(rp.corr_low)) /
                        std::max(0.001f, static_cast<float>(rp.corr_high - rp.corr_low));
        const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * static_cast<float>(rp.ext_factor);
        th = th * (1.0f - mix) + (theta / ff) * mix;
      }
      cs[2 * i] = std::cos(th) * mscale;
      cs[2 * i + 1] = std::sin(th) * mscale;
      theta *= theta_scale;
    }
    for (int64_t h = 0; h < n_head; ++h) {
      float* p = o.row(t) + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const float a = p[i0], b = p[i1], c = cs[2 * i], s = cs[2 * i + 1];
        p[i0] = a * c - b * s;
        p[i1] = a * s + b * c;
      }
    }
  }
}

void ops_float::attend_token(int64_t layer, int64_t t, model::act q, const writer& out, const model::attn_params& ap) {
  const float* f16 = fp16_table();
  const int64_t hd = hp_.head_dim, p0 = model::attn_first(tok(t).pos, ap.window), n_kv = tok(t).pos + 1 - p0,
                group = hp_.n_head / hp_.n_head_kv;
  // llama.cpp's default scale is 1.0f / sqrtf(head_dim), computed in float
  const float scale = ap.kq_scale == 1.0 / std::sqrt(static_cast<double>(hd)) ? 1.0f / std::sqrt(static_cast<float>(hd))
                                                                               : static_cast<float>(ap.kq_scale);
  const float cap = static_cast<float>(ap.softcap), inv_cap = cap > 0 ? 1.0f / cap : 0.0f;
  std::vector<float> w(static_cast<size_t>(n_kv)), qh(static_cast<size_t>(hd));
  for (int64_t h = 0; h < hp_.n_head; ++h) {
    for (int64_t i = 0; i < hd; ++i) qh[i] = round_fp16(row(q, t)[h * hd + i]);
    const int64_t off = (h / group) * hd;
    float mx = -INFINITY;
    for (int64_t p = 0; p < n_kv; ++p) {
      const uint16_t* kp = reinterpret_cast<const uint16_t*>(tok(t).cache->cell(layer, p0 + p)) + off;
      float s = 0;
      for (int64_t i = 0; i < hd; ++i) s += qh[i] * f16[kp[i]];
      w[p] = s * scale;
      if (cap > 0) w[p] = std::tanh(w[p] * inv_cap) * cap;
      mx = std::max(mx, w[p]);
    }
    if (ap.sinks) mx = std::max(mx, ap.sinks[h]);  // ggml_soft_max_add_sinks: the sink joins max and sum
    double sum = ap.sinks ? static_cast<double>(std::exp(ap.sinks[h] - mx)) : 0.0;
    for (int64_t p = 0; p < n_kv; ++p) sum += static_cast<double>(w[p] = std::exp(w[p] - mx));
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t p = 0; p < n_kv; ++p) w[p] = round_fp16(w[p] * inv);
    float* o = out.row(t) + h * hd;
    for (int64_t i = 0; i < hd; ++i) {
      float s = 0;
      for (int64_t p = 0; p < n_kv; ++p)
        s += w[p] * f16[reinterpret_cast<const uint16_t*>(tok(t).cache->cell(layer, p0 + p))[kv_dim() + off + i]];
      o[i] = s;
    }
  }
}

}  // namespace

std::unique_ptr<model::ops> ops_float_create(const model::model& m, thread_pool* pool) {
  return std::make_unique<ops_float>(m, pool);
}

}  // namespace detaudit::backends
