// Attention of one query token and one head over int16 K/V blocks, and the reporting
// log-softmax (docs/precision-contract.md, "Attention" and "Log-softmax").
#include <algorithm>
#include <bit>
#include <string>
#include <vector>

#include "kernels/ref/ref.h"
#include "util/error.h"

namespace detaudit::kernels {

using numerics::EXP_ZERO;
using numerics::flush;
using numerics::QBLOCK;

namespace {

constexpr int WEIGHT_BITS = numerics::ATT_WEIGHT_BITS;  // softmax weights on a 2^-30 grid; W_max = 2^30
constexpr int VALUE_BITS = numerics::ATT_VALUE_BITS;    // |v| <= 32767 < 2^15

// round-half-even(w * 2^30) for w in [0, 1], from the float bits.
int64_t weight_fixed(float w) {
  int32_t m;
  int e;
  numerics::f32_decompose(flush(w), &m, &e);
  return numerics::round_shift(m, e + WEIGHT_BITS);
}

// K position t as unit-scale weight blocks (d_mant = 1, d_exp = block exp, scale 1, no offset).
void k_blocks(const kv_head_view& k, int64_t t, int64_t nb, numerics::wblock* w) {
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t e = k.exp[t * k.exp_stride + b];
    const int16_t* src = k.q + t * k.q_stride + b * QBLOCK;
    std::copy(src, src + QBLOCK, w[b].q);
    w[b].scale[0] = w[b].scale[1] = 1;
    w[b].d_mant = e == EXP_ZERO ? 0 : 1;
    w[b].d_exp = e == EXP_ZERO ? 0 : e;
    w[b].mcoef[0] = w[b].mcoef[1] = 0;
    w[b].m_mant = 0;
    w[b].m_exp = 0;
  }
}

}  // namespace

float attention_kq_scale(int64_t head_dim) {
  if (head_dim < 1) throw input_error("attention_kq_scale: head_dim " + std::to_string(head_dim));
  const double x = static_cast<double>(head_dim);
  double y = std::bit_cast<double>(0x5FE6EB50C7B537A9ull - (std::bit_cast<uint64_t>(x) >> 1));
  for (int i = 0; i < 6; ++i) y = y * (1.5 - ((0.5 * x) * y) * y);
  return static_cast<float>(y);
}

float attention_score_ref(const numerics::qvec& qq, const kv_head_view& k, int64_t t, float kq_scale,
                          float softcap) {
  const int64_t nb = qq.n_blocks();
  std::vector<numerics::wblock> w(static_cast<size_t>(nb));
  k_blocks(k, t, nb, w.data());
  const float s = flush(dot_exact_blocks_ref(qq, w.data(), nb) * flush(kq_scale));
  return softcap > 0.0f ? numerics::softcap_f32(s, softcap) : s;
}

int64_t attention_weight_ref(float s, float m) {
  return weight_fixed(numerics::exp_f32(flush(s - m)));
}

void attention_value_grids_ref(const kv_head_view& v, int64_t n_kv, int64_t n_hblocks, int32_t* gv) {
  for (int64_t b = 0; b < n_hblocks; ++b) {
    int32_t e = EXP_ZERO;
    for (int64_t t = 0; t < n_kv; ++t) e = std::max(e, v.exp[t * v.exp_stride + b]);
    gv[b] = e == EXP_ZERO ? EXP_ZERO
                          : e + WEIGHT_BITS + VALUE_BITS + numerics::ceil_log2(n_kv) - numerics::ACC_BITS;
  }
}

void attention_accumulate_ref(int64_t w, const kv_head_view& v, int64_t t, const int32_t* gv,
                              int64_t head_dim, int64_t* acc) {
  if (w == 0) return;
  for (int64_t d = 0; d < head_dim; ++d) {
    const int64_t b = d / QBLOCK;
    const int32_t ev = v.exp[t * v.exp_stride + b];
    if (ev == EXP_ZERO) continue;
    const int64_t a = v.q[t * v.q_stride + d];
    acc[d] += numerics::round_shift(w * a, ev - gv[b]);
  }
}

void attention_finish_ref(const int64_t* acc, int64_t s_sum, const int32_t* gv, int64_t head_dim,
                          float* out) {
  const float inv_s = numerics::recip_f32(numerics::fixed_to_f32(s_sum, 0));
  for (int64_t d = 0; d < head_dim; ++d) {
    const int32_t g = gv[d / QBLOCK];
    out[d] = g == EXP_ZERO ? 0.0f : flush(numerics::fixed_to_f32(acc[d], g) * inv_s);
  }
}

void attention_exact_ref(const float* q, int64_t head_dim, const kv_head_view& k,
                         const kv_head_view& v, int64_t n_kv, float kq_scale, float* out, float softcap,
                         const float* sink) {
  if (head_dim < 1) throw input_error("attention_exact_ref: head_dim " + std::to_string(head_dim));
  if (sink && !(*sink - *sink == 0.0f))
    throw input_error("attention_exact_ref: attention sink " + std::to_string(*sink) + " is not finite");
  if (softcap != 0.0f && !numerics::softcap_cap_ok(softcap))
    throw input_error("attention_exact_ref: soft cap " + std::to_string(softcap) + " is not 0 (none) or a positive normal float "
                      "with a normal reciprocal");
  if (n_kv == 0) {
    std::fill(out, out + head_dim, 0.0f);
    return;
  }
  const int64_t nb = (head_dim + QBLOCK - 1) / QBLOCK;
  numerics::qvec qq;
  numerics::quantize_act(q, head_dim, qq);
  std::vector<float> s(static_cast<size_t>(n_kv));
  float m = 0.0f;
  for (int64_t t = 0; t < n_kv; ++t) {
    s[static_cast<size_t>(t)] = attention_score_ref(qq, k, t, kq_scale, softcap);
    if (t == 0 || s[static_cast<size_t>(t)] > m) m = s[static_cast<size_t>(t)];
  }
  if (sink && flush(*sink) > m) m = flush(*sink);
  if (m == 0.0f) m = 0.0f;  // +0 whichever zero came first
  std::vector<int32_t> gv(static_cast<size_t>(nb));
  attention_value_grids_ref(v, n_kv, nb, gv.data());
  std::vector<int64_t> acc(static_cast<size_t>(head_dim), 0);
  int64_t s_sum = sink ? attention_weight_ref(flush(*sink), m) : 0;
  for (int64_t t = 0; t < n_kv; ++t) {
    const int64_t w = attention_weight_ref(s[static_cast<size_t>(t)], m);
    s_sum += w;
    attention_accumulate_ref(w, v, t, gv.data(), head_dim, acc.data());
  }
  attention_finish_ref(acc.data(), s_sum, gv.data(), head_dim, out);
}

float log_softmax_logz_ref(const float* logits, int64_t n_vocab, float* max_out) {
  if (n_vocab < 1) throw input_error("log_softmax: empty logits");
  const float neg_inf = std::bit_cast<float>(0xff800000u);
  float m = neg_inf;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const float l = logits[i];
    if (l != l || l == -neg_inf) {
      throw input_error("log_softmax: logit " + std::to_string(i) + " is " + std::to_string(l) +
                        ", expected a finite value or -inf");
    }
    if (flush(l) > m) m = flush(l);
  }
  if (m == neg_inf) throw input_error("log_softmax: every logit is -inf");
  if (m == 0.0f) m = 0.0f;  // +0 whichever zero came first
  int64_t s = 0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    s += weight_fixed(numerics::exp_f32(flush(flush(logits[i]) - m)));
  }
  *max_out = m;
  return numerics::log_f32(numerics::fixed_to_f32(s, -WEIGHT_BITS));
}

int64_t log_softmax_top_ref(const float* logits, int64_t n_vocab, int64_t k, token_logprob* out) {
  float m;
  const float logz = log_softmax_logz_ref(logits, n_vocab, &m);
  const int64_t n_out = std::clamp<int64_t>(k, 0, n_vocab);
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  auto before = [&](int32_t a, int32_t b) {
    const float la = flush(logits[a]), lb = flush(logits[b]);
    return la > lb || (la == lb && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + n_out, ids.end(), before);
  for (int64_t j = 0; j < n_out; ++j) {
    const int32_t id = ids[static_cast<size_t>(j)];
    out[j].id = id;
    out[j].logprob = flush(flush(flush(logits[id]) - m) - logz);
  }
  return n_out;
}

}  // namespace detaudit::kernels
