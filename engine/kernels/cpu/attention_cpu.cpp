// attention_exact_cpu (cpu.h): attention_exact_ref bit for bit, with the per-position work done
// by integer code specialised to unit-scale K blocks, and its portable scalar variant.
//
// Goals: the three O(n_kv * head_dim) passes of attention_internal.h (scores, weights, values)
// run without wblock copies or per-position allocations; the variant picked by isa changes only
// the speed. Everything O(head_dim) or O(n_kv) and branchy (quantizing q, the maximum score, the
// value grids, the final division) is shared portable code.
// Inputs the fast passes do not cover (head_dim < 1, n_kv <= 0, a non-finite kq_scale or score)
// go to attention_exact_ref, which gives the contract's result or its error.
// Non-goals: splitting one head's positions across threads (the caller splits heads).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/cpu.h"
#include "util/error.h"

namespace detaudit::kernels::cpu {

using numerics::EXP_ZERO;
using numerics::QBLOCK;

namespace {

constexpr int SCORE_SHIFT_CONST = numerics::ACC_BITS - numerics::DOT_TERM_BITS;  // 18
constexpr uint32_t EXP_MASK = 0x7f800000u;
constexpr int WEIGHT_BITS = numerics::ATT_WEIGHT_BITS;
constexpr int VALUE_BITS = numerics::ATT_VALUE_BITS;

// sum_i a_i b_i over one block (|sum| < 2^35).
inline int64_t dot_block(const int16_t* a, const int16_t* b) {
  int64_t s = 0;
  for (int i = 0; i < QBLOCK; ++i) s += static_cast<int32_t>(a[i]) * static_cast<int32_t>(b[i]);
  return s;
}

float score_one(const attn_query& q, const int16_t* kq, const int32_t* ke, int clog, float scale) {
  int32_t ek_max = EXP_ZERO;
  for (int64_t b = 0; b < q.n_blocks; ++b) ek_max = ke[b] > ek_max ? ke[b] : ek_max;
  if (ek_max == EXP_ZERO) return numerics::inl::flush(0.0f * scale);
  const int32_t g = q.max_exp + ek_max - SCORE_SHIFT_CONST + clog;
  int64_t acc = 0;
  for (int64_t b = 0; b < q.n_blocks; ++b) {
    if (q.exp[b] == EXP_ZERO || ke[b] == EXP_ZERO) continue;
    acc += round_shift_fast(dot_block(q.q + b * QBLOCK, kq + b * QBLOCK), q.exp[b] + ke[b] - g);
  }
  return numerics::inl::flush(fixed_to_f32_fast(acc, g) * scale);
}

// attention_finish_ref with fixed_to_f32_fast (the same floats, exact_inline.h) in place of the
// reference's conversion.
void finish_head(const int64_t* acc, int64_t s_sum, const int32_t* gv, int64_t head_dim, float* out) {
  const float inv_s = numerics::recip_f32(fixed_to_f32_fast(s_sum, 0));
  for (int64_t d = 0; d < head_dim; ++d) {
    const int32_t g = gv[d / QBLOCK];
    out[d] = g == EXP_ZERO ? 0.0f : numerics::inl::flush(fixed_to_f32_fast(acc[d], g) * inv_s);
  }
}

// rne(w * 2^30) for w = exp_f32(...) in [0, 1]: w * 2^30 is exact, and below 2^23 adding and
// removing 2^23 rounds it to an integer half to even (round_shift of the float's bits).
inline int32_t weight_of_unit(float w) {
  if (!(w >= 1.17549435e-38f)) return 0;
  float v = w * 1073741824.0f;
  if (v < 8388608.0f) v = (v + 8388608.0f) - 8388608.0f;
  return static_cast<int32_t>(v);
}

bool is_finite(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (b & EXP_MASK) != EXP_MASK;
}

// A soft cap the fast path takes: none (0) or one softcap_f32 takes; anything else goes to the
// reference, which refuses it.
bool cap_ok(float c) { return c == 0.0f || numerics::softcap_cap_ok(c); }

// Sinks the fast path takes: none, or finite values (the reference reports a non-finite one).
bool sink_ok(const float* sink) { return !sink || *sink - *sink == 0.0f; }
bool sinks_ok(const float* sinks, int64_t n) {
  for (int64_t h = 0; sinks && h < n; ++h)
    if (!sink_ok(sinks + h)) return false;
  return true;
}

// The sink's term of the denominator (attention_weight_ref of the flushed sink); 0 without one.
int64_t sink_weight(const float* sink, float m) { return sink ? attention_weight_ref(numerics::flush(*sink), m) : 0; }

// attention_value_grids_ref, with four independent maxima per block. gv: (nb).
void value_grids(const kv_head_view& v, int64_t n_kv, int64_t nb, int32_t* gv) {
  const int32_t bits = WEIGHT_BITS + VALUE_BITS + numerics::ceil_log2(n_kv) - numerics::ACC_BITS;
  const int64_t es = v.exp_stride;
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t* e = v.exp + b;
    int32_t m0 = EXP_ZERO, m1 = EXP_ZERO, m2 = EXP_ZERO, m3 = EXP_ZERO;
    int64_t t = 0;
    for (; t + 4 <= n_kv; t += 4) {
      m0 = e[t * es] > m0 ? e[t * es] : m0;
      m1 = e[(t + 1) * es] > m1 ? e[(t + 1) * es] : m1;
      m2 = e[(t + 2) * es] > m2 ? e[(t + 2) * es] : m2;
      m3 = e[(t + 3) * es] > m3 ? e[(t + 3) * es] : m3;
    }
    for (; t < n_kv; ++t) m0 = e[t * es] > m0 ? e[t * es] : m0;
    m0 = m1 > m0 ? m1 : m0;
    m2 = m3 > m2 ? m3 : m2;
    m0 = m2 > m0 ? m2 : m0;
    gv[b] = m0 == EXP_ZERO ? EXP_ZERO : m0 + bits;
  }
}

// The maximum of s[0, n) (n >= 1) into *m, with four independent maxima: for finite scores the
// order changes at most the sign of a zero maximum, which the caller makes +0. False when some
// score is not finite.
bool scores_max(const float* s, int64_t n, float* m) {
  float m4[4] = {s[0], s[0], s[0], s[0]};
  uint32_t bad = 0;
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    for (int j = 0; j < 4; ++j) {
      m4[j] = s[t + j] > m4[j] ? s[t + j] : m4[j];
      bad |= is_finite(s[t + j]) ? 0u : 1u;
    }
  }
  for (; t < n; ++t) {
    m4[0] = s[t] > m4[0] ? s[t] : m4[0];
    bad |= is_finite(s[t]) ? 0u : 1u;
  }
  m4[0] = m4[1] > m4[0] ? m4[1] : m4[0];
  m4[2] = m4[3] > m4[2] ? m4[3] : m4[2];
  *m = m4[2] > m4[0] ? m4[2] : m4[0];
  return bad == 0;
}

void scores_dispatch(isa i, const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                     float* s) {
  switch (i) {
    case isa::avx512: attention_scores_avx512(q, k, n_kv, scale, s); return;
    case isa::avx2: attention_scores_avx2(q, k, n_kv, scale, s); return;
    case isa::scalar: break;
  }
  attention_scores_scalar(q, k, n_kv, scale, s);
}

int64_t weights_dispatch(isa i, const float* s, int64_t n_kv, float m, int32_t* w) {
  switch (i) {
    case isa::avx512: return attention_weights_avx512(s, n_kv, m, w);
    case isa::avx2: return attention_weights_avx2(s, n_kv, m, w);
    case isa::scalar: break;
  }
  return attention_weights_scalar(s, n_kv, m, w);
}

void values_dispatch(isa i, const int32_t* w, const kv_head_view& v, int64_t n_kv,
                     const int32_t* gv, int64_t nb, int64_t* acc) {
  switch (i) {
    case isa::avx512: attention_values_avx512(w, v, n_kv, gv, nb, acc); return;
    case isa::avx2: attention_values_avx2(w, v, n_kv, gv, nb, acc); return;
    case isa::scalar: break;
  }
  attention_values_scalar(w, v, n_kv, gv, nb, acc);
}

}  // namespace

void attention_scores_scalar(const attn_query& q, const kv_head_view& k, int64_t n_kv, float scale,
                             float* s) {
  const int clog = numerics::ceil_log2(2 * q.n_blocks);
  for (int64_t t = 0; t < n_kv; ++t)
    s[t] = score_one(q, k.q + t * k.q_stride, k.exp + t * k.exp_stride, clog, scale);
}

int64_t attention_weights_scalar(const float* s, int64_t n_kv, float m, int32_t* w) {
  int64_t sum = 0;
  for (int64_t t = 0; t < n_kv; ++t) {
    w[t] = weight_of_unit(numerics::exp_f32(numerics::flush(s[t] - m)));
    sum += w[t];
  }
  return sum;
}

void attention_values_scalar(const int32_t* w, const kv_head_view& v, int64_t n_kv,
                             const int32_t* gv, int64_t n_blocks, int64_t* acc) {
  for (int64_t t = 0; t < n_kv; ++t) {
    if (w[t] == 0) continue;
    const int64_t wt = w[t];
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int32_t ev = v.exp[t * v.exp_stride + b];
      if (ev == EXP_ZERO) continue;
      const int16_t* a = v.q + t * v.q_stride + b * QBLOCK;
      int64_t* out = acc + b * QBLOCK;
      const int64_t sh = ev - gv[b];
      for (int i = 0; i < QBLOCK; ++i) out[i] += round_shift_fast(wt * a[i], sh);
    }
  }
}

void attention_exact_cpu(isa i, const float* q, int64_t head_dim, const kv_head_view& k,
                         const kv_head_view& v, int64_t n_kv, float kq_scale, float* out, float softcap,
                         const float* sink) {
  if (head_dim < 1 || n_kv <= 0 || !is_finite(kq_scale) || !cap_ok(softcap) || !sink_ok(sink)) {
    attention_exact_ref(q, head_dim, k, v, n_kv, kq_scale, out, softcap, sink);
    return;
  }
  if (!isa_supported(i))
    throw input_error(std::string("attention_exact_cpu: ") + isa_name(i) + " is not supported here");
  const int64_t nb = (head_dim + QBLOCK - 1) / QBLOCK;
  numerics::qvec qq;
  numerics::quantize_act_by(q, head_dim, qq, quantize_block_cpu);  // the same integers, faster
  const float scale = numerics::flush(kq_scale);
  std::vector<float> s(static_cast<size_t>(n_kv));
  if (qq.max_exp == EXP_ZERO) {
    const float zero_score = numerics::flush(0.0f * scale);
    for (float& x : s) x = zero_score;
  } else {
    const attn_query aq{qq.q.data(), qq.exp.data(), qq.max_exp, nb};
    scores_dispatch(i, aq, k, n_kv, scale, s.data());
  }
  if (softcap > 0.0f) softcap_f32_cpu(i, s.data(), n_kv, softcap, s.data());
  float m;
  if (!scores_max(s.data(), n_kv, &m)) {
    attention_exact_ref(q, head_dim, k, v, n_kv, kq_scale, out, softcap, sink);
    return;
  }
  if (sink && numerics::flush(*sink) > m) m = numerics::flush(*sink);
  if (m == 0.0f) m = 0.0f;  // +0 whichever zero came first
  std::vector<int32_t> w(static_cast<size_t>(n_kv));
  const int64_t s_sum = weights_dispatch(i, s.data(), n_kv, m, w.data()) + sink_weight(sink, m);
  std::vector<int32_t> gv(static_cast<size_t>(nb));
  value_grids(v, n_kv, nb, gv.data());
  std::vector<int64_t> acc(static_cast<size_t>(nb * QBLOCK), 0);
  values_dispatch(i, w.data(), v, n_kv, gv.data(), nb, acc.data());
  finish_head(acc.data(), s_sum, gv.data(), head_dim, out);
}

namespace {

constexpr int64_t HEADS_CHUNK = 128;  // positions per chunk: one KV head's lines of a chunk stay in L1

kv_head_view view_from(const kv_head_view& x, int64_t t0) {
  return {x.q + t0 * x.q_stride, x.exp + t0 * x.exp_stride, x.q_stride, x.exp_stride};
}

}  // namespace

void attention_exact_cpu_heads(isa i, const float* q, int64_t n_heads, int64_t head_dim,
                               const kv_head_view& k, const kv_head_view& v, int64_t n_kv,
                               float kq_scale, float* out, float softcap, const float* sinks) {
  if (n_heads == 1 || head_dim < 1 || n_kv <= 0 || !is_finite(kq_scale) || !cap_ok(softcap) || !sinks_ok(sinks, n_heads)) {
    for (int64_t h = 0; h < n_heads; ++h)
      attention_exact_cpu(i, q + h * head_dim, head_dim, k, v, n_kv, kq_scale, out + h * head_dim, softcap,
                          sinks ? sinks + h : nullptr);
    return;
  }
  if (!isa_supported(i))
    throw input_error(std::string("attention_exact_cpu_heads: ") + isa_name(i) + " is not supported here");
  const int64_t nb = (head_dim + QBLOCK - 1) / QBLOCK;
  const float scale = numerics::flush(kq_scale);
  std::vector<numerics::qvec> qq(static_cast<size_t>(n_heads));
  std::vector<float> s(static_cast<size_t>(n_heads * n_kv));
  for (int64_t h = 0; h < n_heads; ++h) {
    numerics::quantize_act_by(q + h * head_dim, head_dim, qq[static_cast<size_t>(h)], quantize_block_cpu);
    if (qq[static_cast<size_t>(h)].max_exp == EXP_ZERO)
      std::fill(s.begin() + h * n_kv, s.begin() + (h + 1) * n_kv, numerics::flush(0.0f * scale));
  }
  for (int64_t t0 = 0; t0 < n_kv; t0 += HEADS_CHUNK) {
    const int64_t n = std::min(HEADS_CHUNK, n_kv - t0);
    for (int64_t h = 0; h < n_heads; ++h) {
      const numerics::qvec& x = qq[static_cast<size_t>(h)];
      if (x.max_exp == EXP_ZERO) continue;
      const attn_query aq{x.q.data(), x.exp.data(), x.max_exp, nb};
      scores_dispatch(i, aq, view_from(k, t0), n, scale, s.data() + h * n_kv + t0);
    }
  }
  if (softcap > 0.0f) softcap_f32_cpu(i, s.data(), n_heads * n_kv, softcap, s.data());
  std::vector<int32_t> w(static_cast<size_t>(n_heads * n_kv));
  std::vector<int64_t> s_sum(static_cast<size_t>(n_heads));
  std::vector<char> by_ref(static_cast<size_t>(n_heads), 0);
  for (int64_t h = 0; h < n_heads; ++h) {
    float m;
    if (!scores_max(s.data() + h * n_kv, n_kv, &m)) {  // a non-finite score: the reference decides
      attention_exact_ref(q + h * head_dim, head_dim, k, v, n_kv, kq_scale, out + h * head_dim, softcap,
                          sinks ? sinks + h : nullptr);
      by_ref[static_cast<size_t>(h)] = 1;
      continue;
    }
    const float* sink = sinks ? sinks + h : nullptr;
    if (sink && numerics::flush(*sink) > m) m = numerics::flush(*sink);
    if (m == 0.0f) m = 0.0f;  // +0 whichever zero came first
    s_sum[static_cast<size_t>(h)] = weights_dispatch(i, s.data() + h * n_kv, n_kv, m, w.data() + h * n_kv) + sink_weight(sink, m);
  }
  std::vector<int32_t> gv(static_cast<size_t>(nb));
  value_grids(v, n_kv, nb, gv.data());
  std::vector<int64_t> acc(static_cast<size_t>(n_heads * nb * QBLOCK), 0);
  if (i == isa::avx2) {  // chunks of its own; each V block widened once for the heads
    attention_values_heads_avx2(w.data(), n_kv, n_heads, by_ref.data(), v, n_kv, gv.data(), nb, acc.data());
  } else {
    for (int64_t t0 = 0; t0 < n_kv; t0 += HEADS_CHUNK) {
      const int64_t n = std::min(HEADS_CHUNK, n_kv - t0);
      for (int64_t h = 0; h < n_heads; ++h) {
        if (by_ref[static_cast<size_t>(h)]) continue;
        values_dispatch(i, w.data() + h * n_kv + t0, view_from(v, t0), n, gv.data(), nb, acc.data() + h * nb * QBLOCK);
      }
    }
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    if (by_ref[static_cast<size_t>(h)]) continue;
    finish_head(acc.data() + h * nb * QBLOCK, s_sum[static_cast<size_t>(h)], gv.data(), head_dim, out + h * head_dim);
  }
}

}  // namespace detaudit::kernels::cpu
