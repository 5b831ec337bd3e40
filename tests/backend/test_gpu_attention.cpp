// gpu::device::attention against kernels/ref (attention_exact_ref per query row and head) by
// memcmp, on the test device of the executable's API: head sizes 8, 64, 128 and 80 (not a multiple
// of 32), grouped-query layouts, rows attending different numbers of positions in one call, and
// sentinels (no position, all-zero q, zero K/V blocks, scores far apart, exponents far apart).
// The cells are written in the layout of kernels/gpu/gpu.h from per-position blocks made with
// numerics::quantize_block; the reference reads those blocks from separate arrays, so a
// misreading of the layout cannot cancel out.
#include <doctest/doctest.h>

#include "backend/gpu_test_util.h"
#include "test_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/gpu/gpu.h"
#include "kernels/ref/ref.h"
#include "numerics/exact.h"
#include "util/error.h"

using namespace detaudit;

namespace {

using rng = detaudit::test::test_rng;
using numerics::QBLOCK;

constexpr float kSentinel = -7.25f;

struct attn_shape {
  int64_t n_head = 1;
  int64_t n_head_kv = 1;
  int64_t head_dim = 32;
  int64_t n_cells = 1;
  int64_t nb() const { return (head_dim + QBLOCK - 1) / QBLOCK; }
  int64_t kv_q() const { return n_head_kv * nb() * QBLOCK; }  // int16 per position and K or V
  int64_t kv_e() const { return n_head_kv * nb(); }           // exponents per position and K or V
  int64_t cell_bytes() const { return 2 * kv_q() * 2 + 2 * kv_e() * 4; }
};

// The quantized cache of one layer: K and V blocks per position (separate arrays) and the same
// data as gpu.h cells.
struct kv_cache {
  std::vector<int16_t> kq, vq;  // (n_cells, kv_q)
  std::vector<int32_t> ke, ve;  // (n_cells, kv_e)
  std::vector<uint8_t> cells;   // (n_cells, cell_bytes)
};

// Floats with block scales 2^lo .. 2^hi; 1 in zero_every blocks all zero (0: never).
void fill_blocks(rng& r, float* x, int64_t n, int lo, int hi, int zero_every) {
  for (int64_t b = 0; b < n; b += QBLOCK) {
    const float sc = numerics::pow2_f32(static_cast<int>(r.range(lo, hi)));
    const bool zero = zero_every > 0 && r.range(0, zero_every - 1) == 0;
    for (int64_t i = b; i < std::min(n, b + QBLOCK); ++i) x[i] = zero ? 0.0f : r.normal() * sc;
  }
}

// Quantizes k and v rows (n_cells, n_head_kv * head_dim) head by head into c.
kv_cache make_cache(const attn_shape& s, const std::vector<float>& k, const std::vector<float>& v) {
  kv_cache c;
  const int64_t nb = s.nb(), hd = s.head_dim;
  c.kq.assign(static_cast<size_t>(s.n_cells * s.kv_q()), 0);
  c.vq = c.kq;
  c.ke.assign(static_cast<size_t>(s.n_cells * s.kv_e()), 0);
  c.ve = c.ke;
  for (int64_t t = 0; t < s.n_cells; ++t) {
    for (int64_t g = 0; g < s.n_head_kv; ++g) {
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t src = (t * s.n_head_kv + g) * hd + b * QBLOCK;
        const int n = static_cast<int>(std::min<int64_t>(QBLOCK, hd - b * QBLOCK));
        const int64_t q_at = t * s.kv_q() + (g * nb + b) * QBLOCK, e_at = t * s.kv_e() + g * nb + b;
        c.ke[static_cast<size_t>(e_at)] = numerics::quantize_block(k.data() + src, n, c.kq.data() + q_at);
        c.ve[static_cast<size_t>(e_at)] = numerics::quantize_block(v.data() + src, n, c.vq.data() + q_at);
      }
    }
  }
  c.cells.resize(static_cast<size_t>(s.n_cells * s.cell_bytes()));
  for (int64_t t = 0; t < s.n_cells; ++t) {
    uint8_t* p = c.cells.data() + t * s.cell_bytes();
    const int64_t qb = s.kv_q() * 2, eb = s.kv_e() * 4;
    std::memcpy(p, c.kq.data() + t * s.kv_q(), static_cast<size_t>(qb));
    std::memcpy(p + qb, c.vq.data() + t * s.kv_q(), static_cast<size_t>(qb));
    std::memcpy(p + 2 * qb, c.ke.data() + t * s.kv_e(), static_cast<size_t>(eb));
    std::memcpy(p + 2 * qb + eb, c.ve.data() + t * s.kv_e(), static_cast<size_t>(eb));
  }
  return c;
}

// attention_exact_ref for every row and head; out (n_q, n_head * head_dim) plus sentinels.
std::vector<float> ref_attention(const attn_shape& s, const kv_cache& c, const std::vector<float>& q,
                                 const std::vector<int64_t>& n_kv, float kq_scale) {
  const int64_t n_q = static_cast<int64_t>(n_kv.size()), hd = s.head_dim, nb = s.nb();
  std::vector<float> out(static_cast<size_t>(n_q * s.n_head * hd + 3), kSentinel);
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t g = h / (s.n_head / s.n_head_kv);
      const kernels::kv_head_view kv{c.kq.data() + g * nb * QBLOCK, c.ke.data() + g * nb, s.kv_q(), s.kv_e()};
      const kernels::kv_head_view vv{c.vq.data() + g * nb * QBLOCK, c.ve.data() + g * nb, s.kv_q(), s.kv_e()};
      const int64_t at = (r * s.n_head + h) * hd;
      kernels::attention_exact_ref(q.data() + at, hd, kv, vv, n_kv[static_cast<size_t>(r)], kq_scale, out.data() + at);
    }
  }
  return out;
}

std::vector<float> gpu_attention(const attn_shape& s, const kv_cache& c, const std::vector<float>& q,
                                 const std::vector<int64_t>& n_kv, float kq_scale) {
  const int64_t n_q = static_cast<int64_t>(n_kv.size());
  std::vector<float> out(static_cast<size_t>(n_q * s.n_head * s.head_dim + 3), kSentinel);
  test::gpu_test_device().attention(q.data(), n_q, n_kv.data(), s.n_head, s.n_head_kv, s.head_dim, c.cells.data(),
                                    s.n_cells, kq_scale, out.data());
  return out;
}

struct value_ranges {
  int q_lo = -3, q_hi = 3;
  int kv_lo = -3, kv_hi = 3;
  int zero_every = 9;
};

// One call: random q, K and V, rows attending n_kv positions each; device vs reference.
void check_case(rng& r, const attn_shape& s, const std::vector<int64_t>& n_kv, const value_ranges& v) {
  CAPTURE(s.head_dim);
  CAPTURE(s.n_head);
  CAPTURE(s.n_head_kv);
  CAPTURE(s.n_cells);
  const int64_t n_q = static_cast<int64_t>(n_kv.size());
  std::vector<float> q(static_cast<size_t>(n_q * s.n_head * s.head_dim));
  std::vector<float> k(static_cast<size_t>(s.n_cells * s.n_head_kv * s.head_dim)), vals(k.size());
  fill_blocks(r, q.data(), static_cast<int64_t>(q.size()), v.q_lo, v.q_hi, v.zero_every);
  fill_blocks(r, k.data(), static_cast<int64_t>(k.size()), v.kv_lo, v.kv_hi, v.zero_every);
  fill_blocks(r, vals.data(), static_cast<int64_t>(vals.size()), v.kv_lo, v.kv_hi, v.zero_every);
  const kv_cache c = make_cache(s, k, vals);
  const float kq_scale = kernels::attention_kq_scale(s.head_dim);
  const std::string diff = test::first_difference(ref_attention(s, c, q, n_kv, kq_scale), gpu_attention(s, c, q, n_kv, kq_scale));
  CHECK_MESSAGE(diff.empty(), diff);
}

}  // namespace

TEST_CASE("gpu attention: head sizes, grouped heads and position counts give the reference bits") {
  rng r{901};
  for (int64_t head_dim : {8, 64, 128, 80}) {
    for (auto [n_head, n_head_kv] : {std::pair<int64_t, int64_t>{1, 1}, {4, 2}, {8, 1}}) {
      for (int64_t n : {1, 2, 37, 300}) {
        const attn_shape s{n_head, n_head_kv, head_dim, n};
        CAPTURE(n);
        check_case(r, s, {n}, value_ranges{});
      }
    }
  }
}

TEST_CASE("gpu attention: rows attending different numbers of positions in one call") {
  rng r{902};
  for (int64_t head_dim : {64, 80}) {
    const attn_shape s{4, 2, head_dim, 300};
    check_case(r, s, {1, 2, 37, 300, 0, 150}, value_ranges{});
    std::vector<int64_t> causal;
    for (int64_t i = 0; i < 9; ++i) causal.push_back(300 - 9 + i + 1);
    check_case(r, s, causal, value_ranges{});
  }
}

TEST_CASE("gpu attention: sharp and flat softmax, zero blocks and far exponents give the reference bits") {
  rng r{903};
  const attn_shape s{4, 2, 80, 37};
  check_case(r, s, {37, 20, 1}, value_ranges{6, 9, -2, 2, 9});         // scores far apart: many W = 0
  check_case(r, s, {37, 20, 1}, value_ranges{-40, -30, -2, 2, 9});     // scores near 0: W near 2^30
  for (int64_t head_dim : {8, 80, 128}) {
    const attn_shape wide{4, 2, head_dim, 300};
    check_case(r, wide, {300, 150, 37, 2}, value_ranges{-3, 3, -60, 40, 3});  // V exponents far apart
    check_case(r, wide, {300, 299}, value_ranges{-1, 1, -8, 8, 0});          // smooth weights, long sums
  }
  check_case(r, s, {37, 20, 1}, value_ranges{-3, 3, -3, 3, 2});        // half the blocks zero
  check_case(r, s, {37, 20, 1}, value_ranges{-120, -100, -20, -10, 9});  // scores underflow to zero
  check_case(r, s, {37, 20, 1}, value_ranges{-3, 3, -3, 3, 1});        // everything zero
}

TEST_CASE("gpu attention: no position, all-zero q, and non-finite q") {
  rng r{904};
  const attn_shape s{2, 1, 40, 5};
  std::vector<float> k(static_cast<size_t>(s.n_cells * s.head_dim)), v(k.size());
  fill_blocks(r, k.data(), static_cast<int64_t>(k.size()), -2, 2, 0);
  fill_blocks(r, v.data(), static_cast<int64_t>(v.size()), -2, 2, 0);
  const kv_cache c = make_cache(s, k, v);
  std::vector<float> q(static_cast<size_t>(3 * s.n_head * s.head_dim), 0.0f);
  fill_blocks(r, q.data() + s.n_head * s.head_dim, s.n_head * s.head_dim, -2, 2, 0);  // row 1 nonzero
  const std::vector<int64_t> n_kv{5, 0, 3};
  const float kq = kernels::attention_kq_scale(s.head_dim);
  const std::vector<float> out = gpu_attention(s, c, q, n_kv, kq);
  const std::string diff = test::first_difference(ref_attention(s, c, q, n_kv, kq), out);
  CHECK_MESSAGE(diff.empty(), diff);
  CHECK(out[static_cast<size_t>(s.n_head * s.head_dim)] == 0.0f);  // row 1 attends nothing
  q[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(gpu_attention(s, c, q, n_kv, kq), input_error);
  q[3] = 0.0f;
  CHECK_THROWS_AS(gpu_attention(s, c, q, {5, 6, 1}, kq), input_error);  // more positions than cells
  std::vector<float> none(2, kSentinel);
  test::gpu_test_device().attention(q.data(), 0, n_kv.data(), s.n_head, s.n_head_kv, s.head_dim, c.cells.data(),
                                    s.n_cells, kq, none.data());
  CHECK(none == std::vector<float>(2, kSentinel));
}
