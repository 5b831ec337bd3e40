// The element-wise ops of a gpu::device (rms_norm, swiglu, add, add_bias, rope, kv_quantize)
// against kernels/ref by memcmp, in the style of a backend op table: seeded random inputs over
// wide magnitude ranges, odd shapes (rows 1..7; cols 1, 31, 33, 100, 4096; groups of 8, 64, 128),
// sentinel values (signed zeros, subnormal inputs, products and sums that land on or just below
// the smallest normal, an exact rounding tie at 2^-126, magnitudes near overflow), outputs with a
// guard value on each side, and no subnormal in any output. The device's copies of exp_f32,
// recip_f32, rsqrt_f32 and silu_f32 are checked through swiglu (up = 1: the output is silu_f32
// itself) and rms_norm (rows whose rsqrt argument spans every exponent) on dense sweeps.
// Non-goals: NaN payloads (IEEE leaves them to the hardware; the exact path never produces NaN from
// finite model inputs).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/gpu_test_util.h"
#include "kernels/ref/ref.h"
#include "numerics/exact.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::kernels;

namespace {

using rng = detaudit::test::test_rng;

constexpr uint32_t kGuard = 0x7fc0beefu;
constexpr int64_t kCols[] = {1, 31, 33, 100, 4096};

float f_of(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

// ulp distance between two finite floats of the same sign (for failure messages only).
int64_t ulp_distance(float a, float b) {
  const int64_t ia = bits_of(a) & 0x80000000u ? -int64_t(bits_of(a) & 0x7fffffffu) : int64_t(bits_of(a));
  const int64_t ib = bits_of(b) & 0x80000000u ? -int64_t(bits_of(b) & 0x7fffffffu) : int64_t(bits_of(b));
  return ia > ib ? ia - ib : ib - ia;
}

// n floats with one guard on each side; data() + 1 is the payload.
std::vector<float> guarded(int64_t n) { return std::vector<float>(static_cast<size_t>(n + 2), f_of(kGuard)); }
std::vector<float> guarded_copy(const std::vector<float>& x) {
  std::vector<float> g = guarded(static_cast<int64_t>(x.size()));
  std::memcpy(g.data() + 1, x.data(), x.size() * 4);
  return g;
}

// memcmp of got and want (guards included); on a mismatch the first index, both values and
// their ulp distance. Also fails on a subnormal in got.
void check_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (numerics::is_subnormal(got[i])) {
      FAIL_CHECK(what << ": subnormal output at index " << i);
      return;
    }
  }
  if (std::memcmp(got.data(), want.data(), got.size() * 4) == 0) return;
  for (size_t i = 0; i < got.size(); ++i) {
    if (bits_of(got[i]) == bits_of(want[i])) continue;
    char buf[200];
    std::snprintf(buf, sizeof buf, ": index %zu of %zu: got %08x (%.9g) want %08x (%.9g), %lld ulp", i, got.size(),
                  bits_of(got[i]), static_cast<double>(got[i]), bits_of(want[i]), static_cast<double>(want[i]),
                  static_cast<long long>(ulp_distance(got[i], want[i])));
    FAIL_CHECK(what << buf);
    return;
  }
}

// A value of magnitude about 2^[lo, hi]; with `special`, one in five is a sentinel.
float draw_value(rng& r, int lo, int hi, bool special) {
  if (special && r.uniform() < 0.2f) {
    const uint32_t sign = (r.next() & 1) ? 0x80000000u : 0u;
    switch (r.next() % 6) {
      case 0: return f_of(sign);                                                      // +-0
      case 1: return f_of(sign | static_cast<uint32_t>(1 + r.next() % 0x7fffff));     // subnormal
      case 2: return f_of(sign | (0x00800000u + static_cast<uint32_t>(r.next() % 4)));  // smallest normals
      case 3: return f_of(sign | (0x7f7fffffu - static_cast<uint32_t>(r.next() % 4)));  // largest finite
      case 4: return f_of(sign | (bits_of(1.0f) + static_cast<uint32_t>(r.next() % 3)));
      default: return std::ldexp(1.0f + std::ldexp(1.0f, -static_cast<int>(r.range(0, 23))),
                                 static_cast<int>(r.range(-40, 0))) * (sign ? -1.0f : 1.0f);
    }
  }
  return r.normal() * std::ldexp(1.0f, static_cast<int>(r.range(lo, hi)));
}

std::vector<float> draw(rng& r, int64_t n, int lo, int hi, bool special) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = draw_value(r, lo, hi, special);
  return x;
}

// kTieA * kTieB = (2^24 - 1) * 2^-150 = 2^-126 (1 - 2^-24), halfway between the largest subnormal
// and 2^-126: IEEE gradual underflow rounds it (ties to even) to 2^-126. Both factors are normal.
constexpr float kTieA = 0x1.fffffep-64f;  // (2^24 - 1) * 2^-87
constexpr float kTieB = 0x1p-63f;

gpu::device& dev() { return detaudit::test::gpu_test_device(); }

}  // namespace

TEST_CASE("gpu add equals add_f32_ref") {
  rng r{11};
  const int64_t sizes[] = {1, 31, 33, 100, 4096, 100003};
  for (int64_t n : sizes) {
    for (int spread = 0; spread < 3; ++spread) {
      const int lo = spread == 0 ? -3 : (spread == 1 ? -135 : 100);
      const int hi = spread == 0 ? 3 : (spread == 1 ? -110 : 127);
      const std::vector<float> a = draw(r, n, lo, hi, true), b = draw(r, n, lo, hi, true);
      std::vector<float> want = guarded(n), got = guarded(n);
      add_f32_ref(a.data(), b.data(), n, want.data() + 1);
      dev().add(a.data(), b.data(), n, got.data() + 1);
      check_same(got, want, "add n " + std::to_string(n) + " spread " + std::to_string(spread));
      std::vector<float> in_place = guarded_copy(a);
      dev().add(in_place.data() + 1, b.data(), n, in_place.data() + 1);
      check_same(in_place, want, "add in place n " + std::to_string(n));
    }
  }
  // Sums that cancel to +0, land below 2^-126 (flushed, sign kept), or overflow.
  const std::vector<float> a = {0.0f, -0.0f, -0.0f, 0x1.8p-126f, -0x1.8p-126f, 0x1p-126f, 3e38f, -3e38f, 0x1p-149f, 1.0f};
  const std::vector<float> b = {-0.0f, -0.0f, 0.0f, -0x1.4p-126f, 0x1.4p-126f, -0x1p-126f, 3e38f, -3e38f, 0x1p-126f, 0x1p-24f};
  std::vector<float> want = guarded(10), got = guarded(10);
  add_f32_ref(a.data(), b.data(), 10, want.data() + 1);
  dev().add(a.data(), b.data(), 10, got.data() + 1);
  check_same(got, want, "add sentinels");
}

TEST_CASE("gpu add covers more elements than 65535 groups of 256 invocations") {
  // 65535 is the smallest maxComputeWorkGroupCount Vulkan allows: past it the shader's loop wraps.
  const int64_t n = 65535 * 256 + 4097;
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    a[static_cast<size_t>(i)] = static_cast<float>(i % 8191) * 0.25f;
    b[static_cast<size_t>(i)] = static_cast<float>(i / 8191) - 1000.0f;
  }
  std::vector<float> want = guarded(n), got = guarded(n);
  add_f32_ref(a.data(), b.data(), n, want.data() + 1);
  dev().add(a.data(), b.data(), n, got.data() + 1);
  check_same(got, want, "add n " + std::to_string(n));
}

TEST_CASE("gpu add_bias equals add_f32_ref per row") {
  rng r{12};
  for (int64_t rows = 1; rows <= 7; rows += 3) {
    for (int64_t cols : kCols) {
      const std::vector<float> x = draw(r, rows * cols, -20, 20, true), b = draw(r, cols, -20, 20, true);
      std::vector<float> want = guarded_copy(x), got = guarded_copy(x);
      for (int64_t t = 0; t < rows; ++t) add_f32_ref(want.data() + 1 + t * cols, b.data(), cols, want.data() + 1 + t * cols);
      dev().add_bias(got.data() + 1, rows, cols, b.data());
      check_same(got, want, "add_bias rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    }
  }
}

TEST_CASE("gpu swiglu equals swiglu_f32_ref") {
  rng r{13};
  const int64_t sizes[] = {1, 31, 33, 100, 4096, 100003};
  for (int64_t n : sizes) {
    for (int spread = 0; spread < 3; ++spread) {
      const int lo = spread == 0 ? -3 : (spread == 1 ? -130 : 2);
      const int hi = spread == 0 ? 7 : (spread == 1 ? -100 : 127);
      const std::vector<float> g = draw(r, n, lo, hi, true), u = draw(r, n, -60, 60, true);
      std::vector<float> want = guarded(n), got = guarded(n);
      swiglu_f32_ref(g.data(), u.data(), n, want.data() + 1);
      dev().swiglu(g.data(), u.data(), n, got.data() + 1);
      check_same(got, want, "swiglu n " + std::to_string(n) + " spread " + std::to_string(spread));
      std::vector<float> in_place = guarded_copy(u);
      dev().swiglu(g.data(), in_place.data() + 1, n, in_place.data() + 1);
      check_same(in_place, want, "swiglu in place n " + std::to_string(n));
    }
  }
  // silu_f32(0x1.474972p+0) is 1 - 2^-24, so with up = +-2^-126 the product is the rounding tie
  // just below 2^-126, which IEEE gradual underflow rounds to +-2^-126 (a device flushing before
  // rounding would give 0); its neighbours; gates around exp's thresholds; huge gates.
  const std::vector<float> g = {0x1.474972p+0f, 0x1.474972p+0f, 0x1.474970p+0f, 0x1.474974p+0f, 87.33654f,
                                -87.33654f, 88.72284f, -100.0f, 104.0f, -104.5f, 3e38f, -3e38f, 0.0f, -0.0f,
                                0x1p-140f};
  const std::vector<float> u = {0x1p-126f, -0x1p-126f, 0x1p-126f, 0x1p-126f, 0x1p-126f, 1.0f, 2.0f, 1e30f,
                                -1.0f, 1e38f, 2.0f, 2.0f, 1.0f, 1.0f, 1e30f};
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<float> want = guarded(n), got = guarded(n);
  swiglu_f32_ref(g.data(), u.data(), n, want.data() + 1);
  REQUIRE((want[1] == 0x1p-126f && want[2] == -0x1p-126f));
  dev().swiglu(g.data(), u.data(), n, got.data() + 1);
  check_same(got, want, "swiglu sentinels");
}

TEST_CASE("gpu swiglu with up = 1 gives silu_f32 bit for bit on dense sweeps") {
  const int64_t n = 1 << 20;
  std::vector<float> g(static_cast<size_t>(n)), ones(static_cast<size_t>(n), 1.0f);
  // 1 M evenly spaced gates over [-100, 100] ...
  for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = -100.0f + 200.0f * static_cast<float>(i) / static_cast<float>(n);
  std::vector<float> want = guarded(n), got = guarded(n);
  swiglu_f32_ref(g.data(), ones.data(), n, want.data() + 1);
  dev().swiglu(g.data(), ones.data(), n, got.data() + 1);
  check_same(got, want, "silu sweep [-100, 100]");
  // ... and 1 M bit patterns striding through every finite float of either sign.
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = static_cast<uint32_t>(i) * 4093u;
    g[static_cast<size_t>(i)] = (b & 0x7f800000u) == 0x7f800000u ? 0.0f : f_of(b);
  }
  swiglu_f32_ref(g.data(), ones.data(), n, want.data() + 1);
  dev().swiglu(g.data(), ones.data(), n, got.data() + 1);
  check_same(got, want, "silu sweep of bit patterns");
}

namespace {

void rms_case(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
              const std::string& what) {
  std::vector<float> want = guarded(rows * cols), got = guarded(rows * cols);
  for (int64_t s = 0; s < rows * cols / group; ++s)
    rms_norm_f32_ref(x.data() + s * group, w, group, eps, want.data() + 1 + s * group);
  dev().rms_norm(x.data(), rows, cols, group, w, eps, got.data() + 1);
  check_same(got, want, what);
  std::vector<float> in_place = guarded_copy(x);
  dev().rms_norm(in_place.data() + 1, rows, cols, group, w, eps, in_place.data() + 1);
  check_same(in_place, want, what + " in place");
}

}  // namespace

TEST_CASE("gpu rms_norm equals rms_norm_f32_ref") {
  rng r{14};
  const int spreads[][2] = {{-3, 3}, {-140, 120}, {-130, -100}, {60, 120}};
  const float eps[] = {1e-5f, 1e-6f, 1e30f, INFINITY};
  for (int64_t rows = 1; rows <= 7; rows += 2) {
    for (int64_t cols : kCols) {
      for (size_t si = 0; si < std::size(spreads); ++si) {
        const std::vector<float> x = draw(r, rows * cols, spreads[si][0], spreads[si][1], true);
        const std::vector<float> w = draw(r, cols, -4, 4, true);
        const float e = eps[(static_cast<size_t>(rows) + si) % std::size(eps)];
        const std::string what = "rms_norm rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
                                 " spread " + std::to_string(si) + " eps " + std::to_string(e);
        rms_case(x, rows, cols, cols, nullptr, e, what);
        rms_case(x, rows, cols, cols, w.data(), e, what + " weighted");
      }
    }
  }
}

TEST_CASE("gpu rms_norm per head group equals rms_norm_f32_ref") {
  rng r{15};
  const int64_t groups[] = {8, 64, 128};
  for (int64_t group : groups) {
    for (int64_t n_head = 1; n_head <= 5; n_head += 2) {
      const int64_t rows = 1 + n_head;
      const int64_t cols = n_head * group;
      const std::vector<float> x = draw(r, rows * cols, -30, 30, true), w = draw(r, group, -2, 2, true);
      const std::string what = "rms_norm group " + std::to_string(group) + " heads " + std::to_string(n_head);
      rms_case(x, rows, cols, group, w.data(), 1e-6f, what);
      rms_case(x, rows, cols, group, nullptr, 1e-5f, what + " no weight");
    }
  }
  // Rounding ties in the squares; all-zero and subnormal-only groups; magnitudes near 2^-64.
  std::vector<float> x = {1.0f, std::ldexp(1.0f + std::ldexp(1.0f, -10), -20), 0.0f, -0.0f, 0x1p-140f, -0x1p-149f,
                          kTieA, kTieA, -kTieA, kTieA};
  const std::vector<float> w = {1.0f, kTieB};
  rms_case(x, 5, 2, 2, w.data(), 1e-6f, "rms_norm sentinels");
  rms_case(x, 5, 2, 2, nullptr, 1e30f, "rms_norm sentinels big eps");
  // Squares 2^57 + 2 m1^2 + o^2 / 2 on the grid of n = 8: the last term is a tie that rounds to even,
  // which leaves the sum exactly halfway between two floats (rounded to even: down); rounding that
  // tie up would round the sum up, and r and every output with it.
  const std::vector<float> tie = {1.0f, std::ldexp(8393718.0f, -28), std::ldexp(16109081.0f, -29), 0.0f,
                                  0.0f, 0.0f, 0.0f, 0.0f};
  rms_case(tie, 1, 8, 8, nullptr, 0x1p-126f, "rms_norm sum of squares on a tie");
}

TEST_CASE("gpu rms_norm sweeps rsqrt_f32 over every exponent") {
  // 256 K segments of 2 elements: mean(x^2) + eps covers every binade of rsqrt's argument.
  rng r{16};
  const int64_t n_seg = 1 << 18;
  std::vector<float> x(static_cast<size_t>(2 * n_seg));
  for (int64_t s = 0; s < n_seg; ++s) {
    const int e = static_cast<int>(s % 254) - 126;
    x[static_cast<size_t>(2 * s)] = std::ldexp(1.0f + r.uniform(), e / 2) * (s & 1 ? -1.0f : 1.0f);
    x[static_cast<size_t>(2 * s + 1)] = std::ldexp(1.0f + r.uniform(), e / 2 - static_cast<int>(r.range(0, 30)));
  }
  rms_case(x, n_seg, 2, 2, nullptr, 0x1p-126f, "rsqrt sweep");
}

TEST_CASE("gpu rms_norm rejects what rms_norm_f32_ref rejects") {
  std::vector<float> x = {1.0f, NAN, 2.0f, 3.0f}, out(4);
  CHECK_THROWS_AS(dev().rms_norm(x.data(), 1, 4, 4, nullptr, 1e-5f, out.data()), input_error);
  x[1] = INFINITY;
  CHECK_THROWS_AS(dev().rms_norm(x.data(), 1, 4, 4, nullptr, 1e-5f, out.data()), input_error);
  x[1] = 1.0f;
  CHECK_THROWS_AS(dev().rms_norm(x.data(), 1, 4, 4, nullptr, 0.0f, out.data()), input_error);
  CHECK_THROWS_AS(dev().rms_norm(x.data(), 1, 4, 3, nullptr, 1e-5f, out.data()), input_error);
}

namespace {

void rope_case(rng& r, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox) {
  std::vector<float> tables(static_cast<size_t>(rows * n_rot));
  for (int64_t t = 0; t < rows; ++t)
    rope_table_row(r.range(0, 100000), n_rot, 10000.0, 1.0, nullptr, tables.data() + t * n_rot);
  const int64_t width = n_head * head_dim;
  std::vector<float> x = draw(r, rows * width, -30, 30, true);
  for (int64_t i = 0; i < rows * width; ++i) {  // dimensions >= n_rot pass through: no subnormals there
    if (i % head_dim >= n_rot) x[static_cast<size_t>(i)] = numerics::flush(x[static_cast<size_t>(i)]);
  }
  std::vector<float> want = guarded_copy(x), got = guarded_copy(x);
  for (int64_t t = 0; t < rows; ++t)
    rope_f32_ref(want.data() + 1 + t * width, n_head, head_dim, n_rot, 0, neox, tables.data() + t * n_rot);
  dev().rope(got.data() + 1, rows, n_head, head_dim, n_rot, neox, tables.data());
  check_same(got, want, "rope rows " + std::to_string(rows) + " heads " + std::to_string(n_head) + " head_dim " +
                            std::to_string(head_dim) + " n_rot " + std::to_string(n_rot) + (neox ? " neox" : " normal"));
}

}  // namespace

TEST_CASE("gpu rope equals rope_f32_ref") {
  rng r{17};
  const int64_t head_dims[] = {8, 64, 128};
  for (bool neox : {false, true}) {
    for (int64_t head_dim : head_dims) {
      for (int64_t rows = 1; rows <= 7; rows += 3) {
        rope_case(r, rows, 1 + rows % 3, head_dim, head_dim, neox);
        rope_case(r, rows, 2, head_dim, head_dim / 2, neox);
        rope_case(r, rows, 3, head_dim, 2, neox);
      }
    }
  }
  // x0 * c on the rounding tie just below 2^-126 (kTieA * kTieB, either sign) with x1 = 0, so the
  // rotated value is that product; huge values; signed zeros; a subnormal input.
  const std::vector<float> table = {kTieB, 1.0f, -kTieB, 0.5f};
  const std::vector<float> x = {kTieA, 0.0f, -kTieA, -0.0f, 3e38f, -3e38f, -0.0f, 0x1p-130f};
  std::vector<float> want = guarded_copy(x), got = guarded_copy(x);
  for (int64_t t = 0; t < 2; ++t) rope_f32_ref(want.data() + 1 + t * 4, 1, 4, 4, 0, false, table.data());
  REQUIRE((want[1] == 0x1p-126f && want[3] == 0x1p-126f));
  std::vector<float> tables2 = table;
  tables2.insert(tables2.end(), table.begin(), table.end());
  dev().rope(got.data() + 1, 2, 1, 4, 4, false, tables2.data());
  check_same(got, want, "rope sentinels");
}

namespace {

// The exact-mode cell of one position (kernels/gpu/gpu.h) from numerics::quantize_block.
void ref_cell(const float* k, const float* v, int64_t n_head_kv, int64_t head_dim, uint8_t* cell) {
  const int64_t nb = (head_dim + 31) / 32;
  int16_t* q = reinterpret_cast<int16_t*>(cell);
  int32_t* e = reinterpret_cast<int32_t*>(cell + 2 * n_head_kv * nb * 32 * 2);
  for (int tensor = 0; tensor < 2; ++tensor) {
    const float* x = tensor == 0 ? k : v;
    for (int64_t h = 0; h < n_head_kv; ++h) {
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t len = std::min<int64_t>(32, head_dim - b * 32);
        const int64_t blk = tensor * n_head_kv * nb + h * nb + b;
        e[blk] = numerics::quantize_block(x + h * head_dim + b * 32, static_cast<int>(len), q + blk * 32);
      }
    }
  }
}

}  // namespace

TEST_CASE("gpu kv_quantize equals quantize_block per head block") {
  rng r{18};
  const int64_t head_dims[] = {8, 33, 64, 100, 128};
  for (int64_t head_dim : head_dims) {
    for (int64_t n_head_kv = 1; n_head_kv <= 3; ++n_head_kv) {
      const int64_t rows = 1 + (head_dim + n_head_kv) % 5;
      const int64_t nb = (head_dim + 31) / 32;
      const int64_t cell_bytes = 2 * n_head_kv * nb * (32 * 2 + 4);
      const int64_t width = n_head_kv * head_dim;
      std::vector<float> k = draw(r, rows * width, -40, 40, true), v = draw(r, rows * width, -140, 120, true);
      for (int64_t i = 0; i < std::min<int64_t>(width, 40); ++i) k[static_cast<size_t>(i)] = 0.0f;  // a zero block
      std::vector<uint8_t> want(static_cast<size_t>(rows * cell_bytes + 8), 0xA5), got = want;
      for (int64_t t = 0; t < rows; ++t)
        ref_cell(k.data() + t * width, v.data() + t * width, n_head_kv, head_dim, want.data() + 4 + t * cell_bytes);
      dev().kv_quantize(k.data(), v.data(), rows, n_head_kv, head_dim, got.data() + 4);
      const bool same = std::memcmp(got.data(), want.data(), want.size()) == 0;
      size_t first = 0;
      while (same == false && first < want.size() && got[first] == want[first]) ++first;
      CHECK_MESSAGE(same, "kv_quantize head_dim " << head_dim << " heads " << n_head_kv << " rows " << rows
                                                  << ": first differing byte " << first << " of " << want.size());
    }
  }
  std::vector<float> k(64, 1.0f), v(64, 1.0f);
  std::vector<uint8_t> cells(2 * 2 * (64 + 4));
  k[5] = INFINITY;
  CHECK_THROWS_AS(dev().kv_quantize(k.data(), v.data(), 1, 1, 64, cells.data()), input_error);
}
