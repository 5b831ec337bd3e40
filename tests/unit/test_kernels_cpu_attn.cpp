// attention_exact_cpu (kernels/cpu/cpu.h) against attention_exact_ref by memcmp, on every
// supported instruction set: head sizes 1 to 300 with and without a partial last block, position
// counts from 0 to 2000, strided views laid out like the runtime's KV cache cells (several KV
// heads per cell), and K/V whose block magnitudes spread over 2^-60 .. 2^20 so that scores round
// and weights underflow, with zero blocks, all-equal scores, one dominant score and negative
// zeros; hand-made scores reach the flush boundary 2^-126 and rounding ties.
#include <doctest/doctest.h>

#include "test_util.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::numerics;
using namespace detaudit::kernels;

namespace {

using rng = detaudit::test::test_rng;

constexpr uint32_t kSentinel = 0x7fc0dead;

// How the floats of a K or V block are drawn: a block exponent in [lo, hi], then each element a
// near-normal value times 2^exponent; p_zero_block of the blocks are all (signed) zeros and
// p_neg_zero of the elements are -0.
struct spread {
  int lo = 0;
  int hi = 0;
  float p_zero_block = 0.0f;
  float p_neg_zero = 0.0f;
};

void fill_block(rng& r, float* x, int64_t n, const spread& sp) {
  if (r.uniform() < sp.p_zero_block) {
    for (int64_t i = 0; i < n; ++i) x[i] = (r.next() & 1) ? -0.0f : 0.0f;
    return;
  }
  const float scale = std::ldexp(1.0f, static_cast<int>(r.range(sp.lo, sp.hi)));
  for (int64_t i = 0; i < n; ++i) x[i] = r.uniform() < sp.p_neg_zero ? -0.0f : r.normal() * scale;
}

void fill_vector(rng& r, float* x, int64_t head_dim, const spread& sp) {
  for (int64_t i0 = 0; i0 < head_dim; i0 += QBLOCK)
    fill_block(r, x + i0, std::min<int64_t>(QBLOCK, head_dim - i0), sp);
}

// A KV cache laid out like backends/exact_cell.h, one cell per position, nb = ceil(head_dim/32):
//   [K q: (n_head_kv, nb * 32) int16][V q: same][K exp: (n_head_kv, nb) int32][V exp: same]
struct gqa_cache {
  int64_t head_dim = 0;
  int64_t nb = 0;
  int64_t n_head_kv = 3;
  int64_t n_kv = 0;
  std::vector<int32_t> cells;  // int32 storage keeps the exponents aligned

  gqa_cache(int64_t hd, int64_t n) : head_dim(hd), nb((hd + QBLOCK - 1) / QBLOCK), n_kv(n) {
    cells.assign(static_cast<size_t>((n_kv > 0 ? n_kv : 1) * cell_words()), 0);
  }
  int64_t q_elems() const { return n_head_kv * nb * QBLOCK; }
  int64_t exp_elems() const { return n_head_kv * nb; }
  int64_t cell_words() const { return (2 * q_elems() * 2 + 2 * exp_elems() * 4) / 4; }
  int16_t* q_at(int64_t t) { return reinterpret_cast<int16_t*>(cells.data() + t * cell_words()); }
  int32_t* e_at(int64_t t) { return cells.data() + t * cell_words() + q_elems() / 2; }

  // Quantizes x (head_dim) into head h of position t, K (which 0) or V (which 1).
  void store(int64_t t, int64_t h, int which, const float* x) {
    int16_t* q = q_at(t) + which * q_elems() + h * nb * QBLOCK;
    int32_t* e = e_at(t) + which * exp_elems() + h * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t i0 = b * QBLOCK, n = std::min<int64_t>(QBLOCK, head_dim - i0);
      e[b] = quantize_block(x + i0, static_cast<int>(n), q + b * QBLOCK);
    }
  }
  kv_head_view view(int64_t h, int which) {
    const int64_t qs = cell_words() * 2, es = cell_words();
    return {q_at(0) + which * q_elems() + h * nb * QBLOCK, e_at(0) + which * exp_elems() + h * nb, qs, es};
  }
};

enum class kv_mode { wide, narrow, equal_scores, dominant, zeros };

const char* mode_name(kv_mode m) {
  switch (m) {
    case kv_mode::wide: return "wide";
    case kv_mode::narrow: return "narrow";
    case kv_mode::equal_scores: return "equal_scores";
    case kv_mode::dominant: return "dominant";
    case kv_mode::zeros: return "zeros";
  }
  return "?";
}

// Fills every head of every position; the head under test is head 1.
void fill_cache(rng& r, gqa_cache& c, kv_mode mode) {
  const spread wide{-60, 20, 0.1f, 0.05f};
  const spread narrow{-3, 3, 0.02f, 0.05f};
  const spread sparse{-20, 10, 0.6f, 0.2f};
  const spread k_sp = mode == kv_mode::wide ? wide : mode == kv_mode::zeros ? sparse : narrow;
  const spread v_sp = mode == kv_mode::narrow ? spread{-10, 10, 0.05f, 0.05f} : mode == kv_mode::zeros ? sparse : wide;
  const int64_t dominant_at = c.n_kv > 0 ? r.range(0, c.n_kv - 1) : 0;
  std::vector<float> first(static_cast<size_t>(c.head_dim)), x(static_cast<size_t>(c.head_dim));
  fill_vector(r, first.data(), c.head_dim, k_sp);
  for (int64_t t = 0; t < c.n_kv; ++t) {
    for (int64_t h = 0; h < c.n_head_kv; ++h) {
      fill_vector(r, x.data(), c.head_dim, k_sp);
      if (mode == kv_mode::equal_scores) x = first;
      if (mode == kv_mode::dominant && t == dominant_at) fill_vector(r, x.data(), c.head_dim, spread{20, 20, 0, 0});
      c.store(t, h, 0, x.data());
      fill_vector(r, x.data(), c.head_dim, v_sp);
      c.store(t, h, 1, x.data());
    }
  }
}

std::string bits_hex(float f) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", std::bit_cast<uint32_t>(f));
  return buf;
}

// attention_exact_cpu on every supported instruction set against attention_exact_ref: the same
// bytes (or both throw input_error), and nothing written outside out[0, head_dim).
void compare_all(const std::vector<float>& q, int64_t head_dim, const kv_head_view& k,
                 const kv_head_view& v, int64_t n_kv, float kq_scale, const std::string& what) {
  std::vector<float> want(static_cast<size_t>(head_dim));
  bool ref_threw = false;
  try {
    attention_exact_ref(q.data(), head_dim, k, v, n_kv, kq_scale, want.data());
  } catch (const input_error&) {
    ref_threw = true;
  }
  for (cpu::isa i : cpu::isa_all_supported()) {
    INFO(what, " isa ", cpu::isa_name(i));
    std::vector<float> got(static_cast<size_t>(head_dim + 2), std::bit_cast<float>(kSentinel));
    if (ref_threw) {
      CHECK_THROWS_AS(cpu::attention_exact_cpu(i, q.data(), head_dim, k, v, n_kv, kq_scale, got.data() + 1),
                      input_error);
      continue;
    }
    cpu::attention_exact_cpu(i, q.data(), head_dim, k, v, n_kv, kq_scale, got.data() + 1);
    CHECK(std::bit_cast<uint32_t>(got.front()) == kSentinel);
    CHECK(std::bit_cast<uint32_t>(got.back()) == kSentinel);
    if (std::memcmp(got.data() + 1, want.data(), want.size() * sizeof(float)) == 0) continue;
    for (int64_t d = 0; d < head_dim; ++d) {
      const float g = got[static_cast<size_t>(d + 1)], w = want[static_cast<size_t>(d)];
      if (std::bit_cast<uint32_t>(g) == std::bit_cast<uint32_t>(w)) continue;
      FAIL_CHECK("first difference at d=", d, ": cpu ", g, " (", bits_hex(g), ") ref ", w, " (", bits_hex(w), ")");
      break;
    }
  }
}

void run_mode(kv_mode mode, uint64_t seed) {
  rng r{seed};
  const spread q_sp{-8, 8, 0.1f, 0.05f};
  int64_t n_cases = 0;
  for (int64_t head_dim : {1, 8, 32, 33, 48, 64, 100, 128, 256, 300}) {
    for (int64_t n_kv : {0, 1, 2, 7, 33, 300, 2000}) {
      gqa_cache c(head_dim, n_kv);
      fill_cache(r, c, mode);
      std::vector<float> q(static_cast<size_t>(head_dim));
      fill_vector(r, q.data(), head_dim, q_sp);
      if (mode == kv_mode::zeros && n_kv % 2 == 1)
        for (float& x : q) x = -0.0f;
      for (float scale : {attention_kq_scale(head_dim), 8.0f, -0.25f}) {
        const std::string what = std::string(mode_name(mode)) + " head_dim " + std::to_string(head_dim) +
                                 " n_kv " + std::to_string(n_kv) + " kq_scale " + std::to_string(scale);
        compare_all(q, head_dim, c.view(1, 0), c.view(1, 1), n_kv, scale, what);
        ++n_cases;
      }
    }
  }
  MESSAGE(std::string(mode_name(mode)), ": ", n_cases, " cases compared on ", cpu::isa_all_supported().size(),
          " instruction sets");
}

}  // namespace

TEST_CASE("attention_exact_cpu runs and reports every supported instruction set") {
  const std::vector<cpu::isa> all = cpu::isa_all_supported();
  std::string names;
  for (cpu::isa i : all) names += std::string(names.empty() ? "" : ", ") + cpu::isa_name(i);
  MESSAGE("attention_exact_cpu variants compared with attention_exact_ref: ", names);
  REQUIRE(!all.empty());
  CHECK(all.front() == cpu::isa::scalar);
#if defined(__x86_64__)
  const bool has_avx2 = __builtin_cpu_supports("avx2");
  const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  CHECK(cpu::isa_supported(cpu::isa::avx2) == has_avx2);
  CHECK(cpu::isa_supported(cpu::isa::avx512) == has_avx512);
  if (!has_avx512) MESSAGE("this CPU lacks AVX-512 (F/BW/DQ/VL/VNNI): the avx512 variant is not compared here");
  if (!has_avx2) MESSAGE("this CPU lacks AVX2: the avx2 variant is not compared here");
#endif
}

TEST_CASE("attention_exact_cpu equals attention_exact_ref with magnitudes spread over 2^-60 to 2^20") {
  run_mode(kv_mode::wide, 101);
}

TEST_CASE("attention_exact_cpu equals attention_exact_ref with many nonzero weights") {
  run_mode(kv_mode::narrow, 202);
}

TEST_CASE("attention_exact_cpu equals attention_exact_ref when every score is equal") {
  run_mode(kv_mode::equal_scores, 303);
}

TEST_CASE("attention_exact_cpu equals attention_exact_ref with one dominant score") {
  run_mode(kv_mode::dominant, 404);
}

TEST_CASE("attention_exact_cpu equals attention_exact_ref with zero blocks and zero queries") {
  run_mode(kv_mode::zeros, 505);
}

TEST_CASE("attention_exact_cpu rounds value terms at every shift") {
  // K near 1 everywhere (scores close together), V blocks whose exponents step through 80 values so
  // that ev - gv covers left shifts, every right shift up to past 63, and ties.
  rng r{606};
  const int64_t head_dim = 64, n_kv = 140;
  gqa_cache c(head_dim, n_kv);
  std::vector<float> x(static_cast<size_t>(head_dim));
  for (int64_t t = 0; t < n_kv; ++t) {
    for (int64_t h = 0; h < c.n_head_kv; ++h) {
      for (float& e : x) e = 1.0f + 0.01f * r.normal();
      c.store(t, h, 0, x.data());
      const int e0 = 20 - static_cast<int>(t % 80);
      for (int64_t d = 0; d < head_dim; ++d)
        x[static_cast<size_t>(d)] = std::ldexp(static_cast<float>(r.range(-32767, 32767)), e0 - 15);
      c.store(t, h, 1, x.data());
    }
  }
  std::vector<float> q(static_cast<size_t>(head_dim));
  for (float& e : q) e = r.normal();
  for (float scale : {attention_kq_scale(head_dim), 0.001f})
    compare_all(q, head_dim, c.view(1, 0), c.view(1, 1), n_kv, scale, "shift sweep");
}

// Scores built by hand (head_dim 64, two blocks): block 0 of q and of k_t are orthogonal (q
// nonzero only at element 0, k only at element 1), so they fix max_exp and Ek_t but add nothing;
// block 1 has q = (16384, 0, q2, 1, 0...) * 2^eq and k_t = (0, 16384, k2, k3, 0...) * 2^ek, so
// T = q2 * k2 + k3, shifted onto the grid by 16 - (e0q - eq) - (e0k - ek).
struct crafted_scores {
  int e0q = 0;
  int eq = 0;
  int q2 = 0;
};

void crafted_query(const crafted_scores& c, std::vector<float>& q) {
  q.assign(64, 0.0f);
  q[0] = std::ldexp(16384.0f, c.e0q);
  q[32] = std::ldexp(16384.0f, c.eq);
  q[34] = std::ldexp(static_cast<float>(c.q2), c.eq);
  q[35] = std::ldexp(1.0f, c.eq);
}

void crafted_key(int e0k, int ek, int k2, int k3, std::vector<float>& k) {
  k.assign(64, 0.0f);
  k[1] = std::ldexp(16384.0f, e0k);
  k[33] = std::ldexp(16384.0f, ek);
  k[34] = std::ldexp(static_cast<float>(k2), ek);
  k[35] = std::ldexp(static_cast<float>(k3), ek);
}

TEST_CASE("attention_exact_cpu rounds scores near the smallest normal float") {
  // T = 2^24 + k3 or 2^25 + k3, shifted by -1 .. 1 bits onto grids 2^-153 .. 2^-149, every
  // combination once: fixed_to_f32 lands on both sides of 2^-126 (2^-126 - 2^-150 flushes,
  // (2^25 - 1) * 2^-151 rounds up to 2^-126), and kq_scale = 2^126 turns those tiny scores into
  // weights that differ.
  rng r{808};
  const crafted_scores cs{-68, -76, 2048};
  const int64_t n_kv = 5 * 3 * 7 * 2;
  gqa_cache c(64, n_kv);
  std::vector<float> x, v(64);
  for (int64_t t = 0; t < n_kv; ++t) {
    const int e0k = -69 + static_cast<int>(t % 5), shift = static_cast<int>(t / 5 % 3) - 1;
    const int k3 = static_cast<int>(t / 15 % 7) - 3, k2 = t / 105 == 0 ? 8192 : 16384;
    crafted_key(e0k, e0k - 8 + shift, k2, k3, x);
    for (int64_t h = 0; h < c.n_head_kv; ++h) {
      c.store(t, h, 0, x.data());
      fill_vector(r, v.data(), 64, spread{-4, 4, 0, 0});
      c.store(t, h, 1, v.data());
    }
  }
  std::vector<float> q;
  crafted_query(cs, q);
  for (float scale : {std::ldexp(1.0f, 126), std::ldexp(1.0f, 100), 1.0f})
    compare_all(q, 64, c.view(1, 0), c.view(1, 1), n_kv, scale, "scores near 2^-126");
}

TEST_CASE("attention_exact_cpu rounds score ties half to even") {
  // With k2 = 1, T = q2 + k3 is small and shifted right by 1 .. 4 bits, so ties are frequent and
  // the score (a few significant bits) shows every rounding decision.
  rng r{909};
  const crafted_scores cs{0, -10, 16};
  const int64_t n_kv = 400;
  gqa_cache c(64, n_kv);
  std::vector<float> x, v(64);
  for (int64_t t = 0; t < n_kv; ++t) {
    const int ek = -7 - static_cast<int>(r.range(0, 3));
    crafted_key(0, ek, 1, static_cast<int>(r.range(-40, 40)), x);
    for (int64_t h = 0; h < c.n_head_kv; ++h) {
      c.store(t, h, 0, x.data());
      fill_vector(r, v.data(), 64, spread{-4, 4, 0, 0});
      c.store(t, h, 1, v.data());
    }
  }
  std::vector<float> q;
  crafted_query(cs, q);
  for (float scale : {1.0f, 1024.0f, 16384.0f})
    compare_all(q, 64, c.view(1, 0), c.view(1, 1), n_kv, scale, "score ties");
}

TEST_CASE("attention_exact_cpu fails like attention_exact_ref on non-finite scores and bad sizes") {
  rng r{707};
  const int64_t head_dim = 32, n_kv = 9;
  gqa_cache c(head_dim, n_kv);
  std::vector<float> x(static_cast<size_t>(head_dim));
  for (int64_t t = 0; t < n_kv; ++t)
    for (int64_t h = 0; h < c.n_head_kv; ++h) {
      fill_vector(r, x.data(), head_dim, spread{100, 110, 0, 0});
      c.store(t, h, 0, x.data());
      c.store(t, h, 1, x.data());
    }
  std::vector<float> q(static_cast<size_t>(head_dim));
  fill_vector(r, q.data(), head_dim, spread{100, 110, 0, 0});
  compare_all(q, head_dim, c.view(1, 0), c.view(1, 1), n_kv, attention_kq_scale(head_dim), "overflowing scores");
  const float inf = std::bit_cast<float>(0x7f800000u);
  compare_all(q, head_dim, c.view(1, 0), c.view(1, 1), n_kv, inf, "infinite kq_scale");
  q[3] = std::bit_cast<float>(0x7fc00000u);
  compare_all(q, head_dim, c.view(1, 0), c.view(1, 1), n_kv, 0.125f, "NaN query");
  for (cpu::isa i : cpu::isa_all_supported()) {
    float out = 0;
    CHECK_THROWS_AS(cpu::attention_exact_cpu(i, q.data(), 0, c.view(1, 0), c.view(1, 1), n_kv, 0.125f, &out),
                    input_error);
  }
}

TEST_CASE("attention_exact_cpu_heads gives every query head of a group the reference's bits") {
  rng r{91};
  const spread q_sp{-8, 8, 0.1f, 0.05f};
  int64_t n_cases = 0;
  for (cpu::isa isa : cpu::isa_all_supported()) {
    for (kv_mode mode : {kv_mode::wide, kv_mode::narrow, kv_mode::zeros}) {
      for (int64_t head_dim : {8, 48, 64}) {
        for (int64_t n_kv : {1, 7, 129, 300, 1000}) {
          gqa_cache c(head_dim, n_kv);
          fill_cache(r, c, mode);
          for (int64_t n_heads : {1, 4, 8}) {
            std::vector<float> q(static_cast<size_t>(n_heads * head_dim));
            for (int64_t h = 0; h < n_heads; ++h) fill_vector(r, q.data() + h * head_dim, head_dim, q_sp);
            if (mode == kv_mode::zeros) std::fill(q.begin(), q.begin() + head_dim, -0.0f);  // one zero query
            const float scale = attention_kq_scale(head_dim);
            std::vector<float> got(q.size()), want(q.size());
            cpu::attention_exact_cpu_heads(isa, q.data(), n_heads, head_dim, c.view(1, 0), c.view(1, 1), n_kv, scale, got.data());
            for (int64_t h = 0; h < n_heads; ++h)
              attention_exact_ref(q.data() + h * head_dim, head_dim, c.view(1, 0), c.view(1, 1), n_kv, scale,
                                  want.data() + h * head_dim);
            const std::string what = std::string(cpu::isa_name(isa)) + " " + mode_name(mode) + " head_dim " +
                                     std::to_string(head_dim) + " n_kv " + std::to_string(n_kv) + " heads " +
                                     std::to_string(n_heads);
            CAPTURE(what);
            CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
            ++n_cases;
          }
        }
      }
    }
  }
  MESSAGE(n_cases, " grouped cases compared");
}
