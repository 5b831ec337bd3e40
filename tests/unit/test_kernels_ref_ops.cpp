// Reference kernels other than matmul (kernels/ref/ref.h): rms_norm, swiglu, add, RoPE,
// attention and log-softmax against long double references within stated bounds; order and
// chunking invariance by memcmp; sentinel inputs that would underflow never give subnormals.
#include <doctest/doctest.h>

#include "test_util.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/ref/ref.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::numerics;
using namespace detaudit::kernels;

namespace {

using rng = detaudit::test::test_rng;

double ulp_error(float f, long double v) {
  if (v == 0) return f == 0 ? 0.0 : 1e30;
  int e;
  std::frexp(static_cast<double>(fabsl(v)), &e);
  return static_cast<double>(fabsl(static_cast<long double>(f) - v) / ldexpl(1.0L, std::max(e - 24, -149)));
}

void require_no_subnormal(const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) REQUIRE_FALSE(is_subnormal(y[i]));
}

// A K or V cache of one head: n_kv positions quantized with quantize_act.
struct kv_store {
  int64_t nb = 0;
  std::vector<int16_t> q;
  std::vector<int32_t> exp;
  std::vector<std::vector<float>> raw;
  void add(const std::vector<float>& v) {
    qvec qv;
    quantize_act(v.data(), static_cast<int64_t>(v.size()), qv);
    nb = qv.n_blocks();
    q.insert(q.end(), qv.q.begin(), qv.q.end());
    exp.insert(exp.end(), qv.exp.begin(), qv.exp.end());
    raw.push_back(v);
  }
  kv_head_view view() const { return {q.data(), exp.data(), nb * QBLOCK, nb}; }
  long double at(int64_t t, int64_t d) const {
    const int32_t e = exp[static_cast<size_t>(t * nb + d / QBLOCK)];
    return e == EXP_ZERO ? 0.0L : ldexpl(q[static_cast<size_t>(t * nb * QBLOCK + d)], e);
  }
};

}  // namespace

TEST_CASE("rms_norm_f32_ref: accuracy permutation invariance and underflow") {
  rng r{31};
  double worst = 0;
  for (int64_t n : {1, 8, 172, 288, 4096}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(n)), y(static_cast<size_t>(n));
      const int sc = static_cast<int>(r.range(-20, 20));
      for (auto& v : x) v = std::ldexp(r.normal(), sc);
      for (auto& v : w) v = 1.0f + 0.1f * r.normal();
      const float eps = 1e-5f;
      rms_norm_f32_ref(x.data(), trial % 2 ? w.data() : nullptr, n, eps, y.data());
      require_no_subnormal(y.data(), y.size());
      long double ss = 0;
      for (float v : x) ss += static_cast<long double>(v) * v;
      const long double rr = 1.0L / sqrtl(ss / n + eps);
      for (int64_t i = 0; i < n; ++i) {
        const long double want = x[static_cast<size_t>(i)] * rr * (trial % 2 ? w[static_cast<size_t>(i)] : 1.0f);
        if (fabsl(want) > 0x1p-120L) worst = std::max(worst, ulp_error(y[static_cast<size_t>(i)], want));
      }
      // Any order of the elements gives the same outputs, permuted, bit for bit.
      std::vector<size_t> perm(static_cast<size_t>(n));
      std::iota(perm.begin(), perm.end(), size_t(0));
      for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[static_cast<size_t>(r.range(0, int64_t(i) - 1))]);
      std::vector<float> xp(x.size()), wp(w.size()), yp(y.size());
      for (size_t i = 0; i < perm.size(); ++i) {
        xp[i] = x[perm[i]];
        wp[i] = w[perm[i]];
      }
      rms_norm_f32_ref(xp.data(), trial % 2 ? wp.data() : nullptr, n, eps, yp.data());
      for (size_t i = 0; i < perm.size(); ++i) REQUIRE(std::bit_cast<uint32_t>(yp[i]) == std::bit_cast<uint32_t>(y[perm[i]]));
    }
  }
  MESSAGE("rms_norm_f32_ref: worst " << worst << " ulp");
  CHECK(worst <= 4.0);
  // Underflow: tiny elements next to a large one, tiny weights; subnormal inputs read as zero.
  std::vector<float> x = {1e3f, 1e-38f, -2e-38f, 1e-40f, 5.0f, 0.0f};
  std::vector<float> w = {1e-37f, 1.0f, 1.0f, 1.0f, 1e-38f, 1.0f};
  std::vector<float> y(x.size());
  rms_norm_f32_ref(x.data(), w.data(), static_cast<int64_t>(x.size()), 1e-6f, y.data());
  require_no_subnormal(y.data(), y.size());
  CHECK(std::bit_cast<uint32_t>(y[1]) == 0u);
  CHECK(std::bit_cast<uint32_t>(y[2]) == 0x80000000u);
  // All zero: out = 0; eps must be positive.
  std::vector<float> z(5, 0.0f);
  rms_norm_f32_ref(z.data(), nullptr, 5, 1e-5f, y.data());
  CHECK(y[0] == 0.0f);
  CHECK_THROWS_AS(rms_norm_f32_ref(z.data(), nullptr, 5, 0.0f, y.data()), input_error);
}

TEST_CASE("swiglu_f32_ref and add_f32_ref: accuracy and underflow") {
  rng r{32};
  double worst = 0;
  std::vector<float> g(4096), u(4096), y(4096);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = 8.0f * r.normal();
    u[i] = r.normal();
  }
  swiglu_f32_ref(g.data(), u.data(), 4096, y.data());
  for (size_t i = 0; i < g.size(); ++i) {
    const long double want = g[i] / (1.0L + expl(-static_cast<long double>(g[i]))) * u[i];
    if (fabsl(want) > 0x1p-120L) worst = std::max(worst, ulp_error(y[i], want));
  }
  MESSAGE("swiglu_f32_ref: worst " << worst << " ulp");
  CHECK(worst <= 4.0);
  std::vector<float> gs = {-100.0f, -80.0f, 1e-30f, 3.0f}, us = {1.0f, 1e-10f, 1e-10f, 1e-40f}, ys(4);
  swiglu_f32_ref(gs.data(), us.data(), 4, ys.data());
  require_no_subnormal(ys.data(), 4);
  std::vector<float> a = {1e-38f, 1.5f, -1e-38f}, b = {-0.9e-38f, 2.25f, 0.95e-38f}, s(3);
  add_f32_ref(a.data(), b.data(), 3, s.data());
  require_no_subnormal(s.data(), 3);
  CHECK(s[1] == 3.75f);
  CHECK(s[0] == 0.0f);
}

TEST_CASE("rope: table rows against libm and the rotation against long double") {
  rng r{33};
  double worst_tab = 0;
  for (int64_t pos : {0, 1, 7, 100, 4095, 131071, 1000000}) {
    for (int64_t n_rot : {8, 64, 128}) {
      std::vector<float> factors(static_cast<size_t>(n_rot / 2));
      for (auto& f : factors) f = 1.0f + 7.0f * r.uniform();
      for (bool use_factors : {false, true}) {
        std::vector<float> tab(static_cast<size_t>(n_rot));
        rope_table_row(pos, n_rot, 500000.0, 0.5, use_factors ? factors.data() : nullptr, tab.data());
        require_no_subnormal(tab.data(), tab.size());
        for (int64_t i = 0; i < n_rot / 2; ++i) {
          long double theta = pos * 0.5L * powl(500000.0L, -2.0L * i / n_rot);
          if (use_factors) theta /= factors[static_cast<size_t>(i)];
          worst_tab = std::max(worst_tab, static_cast<double>(fabsl(tab[static_cast<size_t>(2 * i)] - cosl(theta))));
          worst_tab = std::max(worst_tab, static_cast<double>(fabsl(tab[static_cast<size_t>(2 * i + 1)] - sinl(theta))));
        }
      }
    }
  }
  MESSAGE("rope_table_row: worst absolute error " << worst_tab);
  CHECK(worst_tab <= 6e-8);  // the rounding to float (2^-25 below 1) plus the double's error
  std::vector<float> tab0(128);
  rope_table_row(0, 128, 10000.0, 1.0, nullptr, tab0.data());
  for (int i = 0; i < 64; ++i) CHECK((tab0[static_cast<size_t>(2 * i)] == 1.0f && tab0[static_cast<size_t>(2 * i + 1)] == 0.0f));

  for (bool neox : {false, true}) {
    const int64_t n_head = 3, head_dim = 80, n_rot = 64, pos = 77;
    std::vector<float> tab(static_cast<size_t>(n_rot));
    rope_table_row(pos, n_rot, 10000.0, 1.0, nullptr, tab.data());
    std::vector<float> x(static_cast<size_t>(n_head * head_dim));
    for (auto& v : x) v = r.normal();
    x[5] = 1e-38f;
    x[6] = 1e-38f;
    std::vector<float> y = x;
    rope_f32_ref(y.data(), n_head, head_dim, n_rot, pos, neox, tab.data());
    require_no_subnormal(y.data(), y.size());
    for (int64_t h = 0; h < n_head; ++h) {
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        const size_t i0 = static_cast<size_t>(h * head_dim + (neox ? i : 2 * i));
        const size_t i1 = static_cast<size_t>(h * head_dim + (neox ? i + n_rot / 2 : 2 * i + 1));
        const long double c = tab[static_cast<size_t>(2 * i)], s = tab[static_cast<size_t>(2 * i + 1)];
        const long double w0 = x[i0] * c - x[i1] * s, w1 = x[i0] * s + x[i1] * c;
        const long double tol = (fabsl(x[i0]) + fabsl(x[i1])) * 0x1p-23L;
        REQUIRE(fabsl(y[i0] - w0) <= tol);
        REQUIRE(fabsl(y[i1] - w1) <= tol);
      }
      for (int64_t d = n_rot; d < head_dim; ++d) {
        REQUIRE(std::bit_cast<uint32_t>(y[static_cast<size_t>(h * head_dim + d)]) ==
                std::bit_cast<uint32_t>(x[static_cast<size_t>(h * head_dim + d)]));
      }
    }
  }
  std::vector<float> x(8);
  CHECK_THROWS_AS(rope_f32_ref(x.data(), 1, 8, 10, 0, false, tab0.data()), input_error);
}

namespace {

// Random K and V of n_kv positions; every fifth V is all zero.
void make_cache(rng& r, int64_t head_dim, int64_t n_kv, kv_store* k, kv_store* v) {
  for (int64_t t = 0; t < n_kv; ++t) {
    std::vector<float> kt(static_cast<size_t>(head_dim)), vt(static_cast<size_t>(head_dim));
    const int ks = static_cast<int>(r.range(-2, 2));
    for (auto& e : kt) e = std::ldexp(r.normal(), ks);
    for (auto& e : vt) e = r.normal();
    if (t % 5 == 3) std::fill(vt.begin(), vt.end(), 0.0f);
    k->add(kt);
    v->add(vt);
  }
}

// max_d |out_d - ref_d| / max |v| against a long double softmax over the dequantized K and V,
// with q quantized (quantized_q) or as given.
double attention_error(const std::vector<float>& q, bool quantized_q, const kv_store& k,
                       const kv_store& v, int64_t n_kv, float kq_scale, const std::vector<float>& out) {
  const int64_t head_dim = static_cast<int64_t>(q.size());
  qvec qq;
  quantize_act(q.data(), head_dim, qq);
  std::vector<long double> s(static_cast<size_t>(n_kv));
  long double m = -1e30L, den = 0, vmax = 0;
  for (int64_t t = 0; t < n_kv; ++t) {
    long double d = 0;
    for (int64_t i = 0; i < head_dim; ++i) {
      const int32_t e = qq.exp[static_cast<size_t>(i / 32)];
      const long double qi = !quantized_q ? q[static_cast<size_t>(i)]
                             : e == EXP_ZERO ? 0.0L : ldexpl(qq.q[static_cast<size_t>(i)], e);
      d += qi * k.at(t, i);
    }
    s[static_cast<size_t>(t)] = d * kq_scale;
    m = std::max(m, s[static_cast<size_t>(t)]);
  }
  for (auto& e : s) den += (e = expl(e - m));
  double worst = 0;
  for (int64_t d = 0; d < head_dim; ++d) {
    long double want = 0;
    for (int64_t t = 0; t < n_kv; ++t) {
      want += s[static_cast<size_t>(t)] / den * v.at(t, d);
      vmax = std::max(vmax, fabsl(v.at(t, d)));
    }
    worst = std::max(worst, static_cast<double>(fabsl(out[static_cast<size_t>(d)] - want)));
  }
  return vmax > 0 ? worst / static_cast<double>(vmax) : worst;
}

// attention_exact_ref from its pieces, as a split-KV kernel: global max and value grids first,
// integer sums per random chunk, chunks combined in reverse order.
std::vector<float> attention_chunked(rng& r, const std::vector<float>& q, const kv_store& k,
                                     const kv_store& v, int64_t n_kv, float kq_scale) {
  const int64_t head_dim = static_cast<int64_t>(q.size());
  qvec qq;
  quantize_act(q.data(), head_dim, qq);
  std::vector<float> sc(static_cast<size_t>(n_kv));
  float m = 0;
  for (int64_t t = 0; t < n_kv; ++t) {
    sc[static_cast<size_t>(t)] = attention_score_ref(qq, k.view(), t, kq_scale);
    if (t == 0 || sc[static_cast<size_t>(t)] > m) m = sc[static_cast<size_t>(t)];
  }
  std::vector<int32_t> gv(static_cast<size_t>(k.nb));
  attention_value_grids_ref(v.view(), n_kv, k.nb, gv.data());
  std::vector<std::vector<int64_t>> chunk_acc;
  std::vector<int64_t> chunk_s;
  for (int64_t t0 = 0; t0 < n_kv;) {
    const int64_t t1 = std::min(n_kv, t0 + r.range(1, 40));
    chunk_acc.emplace_back(static_cast<size_t>(head_dim), 0);
    chunk_s.push_back(0);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t w = attention_weight_ref(sc[static_cast<size_t>(t)], m);
      chunk_s.back() += w;
      attention_accumulate_ref(w, v.view(), t, gv.data(), head_dim, chunk_acc.back().data());
    }
    t0 = t1;
  }
  std::vector<int64_t> acc(static_cast<size_t>(head_dim), 0);
  int64_t ssum = 0;
  for (size_t c = chunk_acc.size(); c-- > 0;) {
    ssum += chunk_s[c];
    for (size_t d = 0; d < acc.size(); ++d) acc[d] += chunk_acc[c][d];
  }
  std::vector<float> out(static_cast<size_t>(head_dim));
  attention_finish_ref(acc.data(), ssum, gv.data(), head_dim, out.data());
  return out;
}

// The same positions in a random order.
std::vector<float> attention_permuted(rng& r, const std::vector<float>& q, const kv_store& k,
                                      const kv_store& v, int64_t n_kv, float kq_scale) {
  std::vector<int64_t> perm(static_cast<size_t>(n_kv));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[static_cast<size_t>(r.range(0, int64_t(i) - 1))]);
  kv_store kp, vp;
  for (int64_t t : perm) {
    kp.add(k.raw[static_cast<size_t>(t)]);
    vp.add(v.raw[static_cast<size_t>(t)]);
  }
  std::vector<float> out(q.size());
  attention_exact_ref(q.data(), static_cast<int64_t>(q.size()), kp.view(), vp.view(), n_kv, kq_scale, out.data());
  return out;
}

// The same K through a strided view (32 junk values and one junk exponent between positions).
std::vector<float> attention_strided(const std::vector<float>& q, const kv_store& k, const kv_store& v,
                                     int64_t n_kv, float kq_scale) {
  std::vector<int16_t> kq_pad;
  std::vector<int32_t> ke_pad;
  for (int64_t t = 0; t < n_kv; ++t) {
    kq_pad.insert(kq_pad.end(), k.q.begin() + t * k.nb * 32, k.q.begin() + (t + 1) * k.nb * 32);
    kq_pad.insert(kq_pad.end(), 32, int16_t(12345));
    ke_pad.insert(ke_pad.end(), k.exp.begin() + t * k.nb, k.exp.begin() + (t + 1) * k.nb);
    ke_pad.push_back(77);
  }
  const kv_head_view strided{kq_pad.data(), ke_pad.data(), k.nb * 32 + 32, k.nb + 1};
  std::vector<float> out(q.size());
  attention_exact_ref(q.data(), static_cast<int64_t>(q.size()), strided, v.view(), n_kv, kq_scale, out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("attention_exact_ref: accuracy order and chunking invariance and zero blocks") {
  rng r{34};
  double worst_q = 0, worst_f = 0;
  for (int64_t head_dim : {8, 64, 80, 128}) {
    for (int64_t n_kv : {1, 2, 17, 300}) {
      kv_store k, v;
      make_cache(r, head_dim, n_kv, &k, &v);
      std::vector<float> q(static_cast<size_t>(head_dim));
      for (auto& e : q) e = 2.0f * r.normal();
      const float kq_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
      std::vector<float> out(static_cast<size_t>(head_dim));
      attention_exact_ref(q.data(), head_dim, k.view(), v.view(), n_kv, kq_scale, out.data());
      require_no_subnormal(out.data(), out.size());
      worst_q = std::max(worst_q, attention_error(q, true, k, v, n_kv, kq_scale, out));
      worst_f = std::max(worst_f, attention_error(q, false, k, v, n_kv, kq_scale, out));
      REQUIRE(same_bits(attention_permuted(r, q, k, v, n_kv, kq_scale), out));
      REQUIRE(same_bits(attention_chunked(r, q, k, v, n_kv, kq_scale), out));
      REQUIRE(same_bits(attention_strided(q, k, v, n_kv, kq_scale), out));
    }
  }
  MESSAGE("attention_exact_ref: max |out - ref| / max|v|: " << worst_q << " (quantized q), " << worst_f << " (float q)");
  CHECK(worst_q <= 1e-5);
  CHECK(worst_f <= 2e-3);
}

TEST_CASE("attention_kq_scale: the float nearest 1 over sqrt of head_dim") {
  for (int64_t n = 1; n <= 8192; ++n) {
    REQUIRE(attention_kq_scale(n) == static_cast<float>(1.0L / sqrtl(static_cast<long double>(n))));
  }
}

TEST_CASE("attention_exact_ref: underflowing values and empty and all-zero caches") {
  kv_store k, v;
  for (int t = 0; t < 4; ++t) {
    std::vector<float> kt(32, t == 2 ? 30.0f : 0.1f), vt(32, t == 2 ? 1e-37f : 1e-30f);
    k.add(kt);
    v.add(vt);
  }
  std::vector<float> q(32, 1.0f), out(32);
  attention_exact_ref(q.data(), 32, k.view(), v.view(), 4, 0.17677669f, out.data());
  require_no_subnormal(out.data(), out.size());
  attention_exact_ref(q.data(), 32, k.view(), v.view(), 0, 0.17677669f, out.data());
  CHECK(out[0] == 0.0f);
  kv_store z;
  for (int t = 0; t < 3; ++t) z.add(std::vector<float>(32, 0.0f));
  attention_exact_ref(q.data(), 32, z.view(), z.view(), 3, 0.17677669f, out.data());
  for (float e : out) CHECK(std::bit_cast<uint32_t>(e) == 0u);
}

TEST_CASE("log_softmax_top_ref: accuracy ordering and invariance") {
  rng r{35};
  const int64_t n = 5000;
  std::vector<float> l(static_cast<size_t>(n));
  for (auto& e : l) e = 4.0f * r.normal();
  l[10] = l[20] = l[30] = 25.0f;  // ties: ids ascending
  l[40] = -INFINITY;              // masked
  std::vector<token_logprob> top(20);
  CHECK(log_softmax_top_ref(l.data(), n, 20, top.data()) == 20);
  CHECK(top[0].id == 10);
  CHECK(top[1].id == 20);
  CHECK(top[2].id == 30);
  CHECK(top[0].logprob == top[1].logprob);
  long double m = 25.0L, z = 0;
  for (float e : l) z += expl(e - m);
  double worst = 0;
  for (int i = 0; i < 20; ++i) {
    if (i > 0) CHECK((l[static_cast<size_t>(top[i - 1].id)] > l[static_cast<size_t>(top[i].id)] ||
                      (l[static_cast<size_t>(top[i - 1].id)] == l[static_cast<size_t>(top[i].id)] && top[i - 1].id < top[i].id)));
    const long double want = l[static_cast<size_t>(top[i].id)] - m - logl(z);
    worst = std::max(worst, static_cast<double>(fabsl(top[i].logprob - want)));
  }
  MESSAGE("log_softmax_top_ref: worst absolute error " << worst);
  CHECK(worst <= 2e-6);
  // The normaliser does not depend on the order of the logits.
  float m1, m2;
  const float z1 = log_softmax_logz_ref(l.data(), n, &m1);
  std::vector<float> rev(l.rbegin(), l.rend());
  const float z2 = log_softmax_logz_ref(rev.data(), n, &m2);
  CHECK(std::bit_cast<uint32_t>(z1) == std::bit_cast<uint32_t>(z2));
  // k beyond n_vocab, a masked token's log-prob, no subnormals.
  std::vector<float> small = {0.0f, -INFINITY, -1e-40f, -100.0f};
  std::vector<token_logprob> all(10);
  CHECK(log_softmax_top_ref(small.data(), 4, 10, all.data()) == 4);
  CHECK(all[3].id == 1);
  CHECK(std::isinf(all[3].logprob));
  for (int i = 0; i < 4; ++i) CHECK_FALSE(is_subnormal(all[static_cast<size_t>(i)].logprob));
  std::vector<float> bad = {0.0f, NAN};
  CHECK_THROWS_AS(log_softmax_top_ref(bad.data(), 2, 1, all.data()), input_error);
  std::vector<float> masked = {-INFINITY, -INFINITY};
  CHECK_THROWS_AS(log_softmax_top_ref(masked.data(), 2, 1, all.data()), input_error);
}
