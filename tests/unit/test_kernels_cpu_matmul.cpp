// The fast exact matmul (kernels/cpu) against the reference (kernels/ref) by memcmp, on every
// supported instruction set and every integer weight type, with weight blocks of random bytes
// (every code and sub-block scale a type can hold, fp16 scales from subnormal to 2^15) and
// activations whose block exponents spread over 2^-40 .. 2^20, so that block terms land on
// both sides of the accumulator grid and every rounding branch runs.
#include <doctest/doctest.h>

#include "test_util.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gguf/quants.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/ref/ref.h"
#include "numerics/wblock.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::kernels;
using gguf::dtype;

namespace {

using rng = detaudit::test::test_rng;

const dtype kFastTypes[] = {gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_1, gguf::DTYPE_Q5_0, gguf::DTYPE_Q5_1,
                            gguf::DTYPE_Q8_0, gguf::DTYPE_Q2_K, gguf::DTYPE_Q3_K, gguf::DTYPE_Q4_K,
                            gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K};

// Offsets of the fp16 scale fields in one block (super-block) of t (ggml's block layouts).
std::vector<int> fp16_fields(dtype t) {
  switch (t) {
    case gguf::DTYPE_Q4_1: case gguf::DTYPE_Q5_1: case gguf::DTYPE_Q4_K: case gguf::DTYPE_Q5_K: return {0, 2};
    case gguf::DTYPE_Q2_K: return {80, 82};
    case gguf::DTYPE_Q3_K: return {108};
    case gguf::DTYPE_Q6_K: return {208};
    default: return {0};
  }
}

// A finite fp16: zero (1 in 16), subnormal (1 in 16) or normal with any exponent; either sign.
uint16_t random_fp16(rng& r, int spread) {
  const uint16_t sign = r.range(0, 1) ? 0x8000 : 0;
  const int64_t kind = r.range(0, 15);
  if (kind == 0) return sign;
  const uint16_t frac = static_cast<uint16_t>(r.range(0, 1023));
  if (kind == 1) return static_cast<uint16_t>(sign | (frac | 1));
  const int64_t e = spread ? r.range(1, 30) : r.range(14, 15);
  return static_cast<uint16_t>(sign | e << 10 | frac);
}

// n_out rows of n_in elements of type t: random bytes with finite fp16 scales.
std::vector<uint8_t> random_matrix(rng& r, dtype t, int64_t n_in, int64_t n_out, bool spread) {
  const gguf::dtype_traits& tr = gguf::dtype_get(t);
  std::vector<uint8_t> w(gguf::dtype_row_bytes(t, n_in) * static_cast<uint64_t>(n_out));
  for (auto& b : w) b = static_cast<uint8_t>(r.next());
  for (uint64_t off = 0; off < w.size(); off += tr.type_size) {
    for (int f : fp16_fields(t)) {
      const uint16_t h = random_fp16(r, spread);
      std::memcpy(&w[off + static_cast<uint64_t>(f)], &h, 2);
    }
  }
  return w;
}

// Activations with block scales 2^-40 .. 2^20 (spread) or 2^-2 .. 2^2, some zero blocks.
std::vector<float> random_acts(rng& r, int64_t n_tokens, int64_t n_in, bool spread) {
  std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
  for (int64_t b = 0; b * 32 < n_tokens * n_in; ++b) {
    const int sc = static_cast<int>(spread ? r.range(-40, 20) : r.range(-2, 2));
    const bool zero = r.range(0, 11) == 0;
    for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
      const float v = r.normal();
      x[static_cast<size_t>(i)] = zero ? 0.0f : v * static_cast<float>(1ull << (sc + 40)) / static_cast<float>(1ull << 40);
    }
  }
  return x;
}

struct case_result {
  std::vector<float> ref, fast;
};

// Runs the reference and the fast kernel over rows [r0, r1) of the same inputs; entries outside
// the range keep a sentinel in both.
case_result run_case(cpu::isa isa, dtype t, const std::vector<uint8_t>& w, const std::vector<float>& x,
                     int64_t n_tokens, int64_t n_in, int64_t n_out, int64_t r0, int64_t r1) {
  std::vector<numerics::qvec> xs(static_cast<size_t>(n_tokens));
  for (int64_t k = 0; k < n_tokens; ++k) numerics::quantize_act(x.data() + k * n_in, n_in, xs[static_cast<size_t>(k)]);
  case_result res;
  res.ref.assign(static_cast<size_t>(n_tokens * n_out), -7.0f);
  res.fast.assign(static_cast<size_t>(n_tokens * n_out), -7.0f);
  matmul_exact_ref(xs.data(), n_tokens, t, w.data(), n_in, n_out, res.ref.data(), r0, r1);
  cpu::act_pack p;
  cpu::act_pack_build(x.data(), n_tokens, n_in, p);
  std::vector<int32_t> bounds(static_cast<size_t>(n_out));
  cpu::weight_row_bounds(t, w.data(), n_in, 0, n_out, bounds.data());
  cpu::matmul_exact_cpu(isa, p, t, w.data(), n_out, bounds.data(), res.fast.data(), r0, r1);
  return res;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("cpu isa: the supported sets are listed and DETAUDIT_CPU_ISA selects one") {
  const std::vector<cpu::isa> all = cpu::isa_all_supported();
  REQUIRE(!all.empty());
  CHECK(all.front() == cpu::isa::scalar);
  std::string names;
  for (cpu::isa i : all) names += std::string(cpu::isa_name(i)) + " ";
  MESSAGE("instruction sets compared with the reference: " << names);
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) CHECK(cpu::isa_supported(cpu::isa::avx2));
#endif
  ::setenv("DETAUDIT_CPU_ISA", "scalar", 1);
  CHECK(cpu::isa_default() == cpu::isa::scalar);
  ::setenv("DETAUDIT_CPU_ISA", "sse9", 1);
  CHECK_THROWS_AS(cpu::isa_default(), input_error);
  ::unsetenv("DETAUDIT_CPU_ISA");
  CHECK(cpu::isa_default() == all.back());
}

TEST_CASE("cpu act_pack: the same blocks as quantize_act, ties, subnormals and extremes included") {
  rng r{17};
  const int64_t n_in = 64 * 32, n_tokens = 3;
  std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t kind = r.range(0, 9);
    uint32_t bits = static_cast<uint32_t>(r.next());
    if (kind == 0) bits &= 0x807fffffu;                 // subnormal or zero of either sign
    else if (kind == 1) bits &= 0xff7fffffu;            // up to the largest finite exponent range
    else if (kind == 2) bits = (bits & 0x80000000u) | 0x3f000000u | ((bits & 3u) << 13);  // halves: ties
    else bits = (bits & 0x807fffffu) | static_cast<uint32_t>(r.range(100, 140)) << 23;
    std::memcpy(&x[i], &bits, 4);
  }
  for (int64_t b = 0; b < 3; ++b) x[static_cast<size_t>(b * 32 + 5)] = 0.0f;  // a few zero blocks
  for (int64_t i = 64; i < 96; ++i) x[static_cast<size_t>(i)] = -0.0f;
  cpu::act_pack p;
  cpu::act_pack_build(x.data(), n_tokens, n_in, p);
  for (int64_t t = 0; t < n_tokens; ++t) {
    numerics::qvec q;
    numerics::quantize_act(x.data() + t * n_in, n_in, q);
    CHECK(std::memcmp(q.q.data(), p.q.data() + t * n_in, n_in * sizeof(int16_t)) == 0);
    CHECK(std::memcmp(q.exp.data(), p.exp.data() + t * (n_in / 32), (n_in / 32) * sizeof(int32_t)) == 0);
    CHECK(q.max_exp == p.max_exp[static_cast<size_t>(t)]);
  }
  for (int n : {32, 31, 1}) {
    int16_t a[32], b[32];
    for (int64_t blk = 0; blk < n_tokens * n_in / 32; ++blk) {
      const float* src = x.data() + blk * 32;
      CHECK(numerics::quantize_block(src, n, a) == cpu::quantize_block_cpu(src, n, b));
      CHECK(std::memcmp(a, b, sizeof a) == 0);
    }
  }
  x[100] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(cpu::act_pack_build(x.data(), n_tokens, n_in, p), input_error);
  int16_t q[32];
  CHECK_THROWS_AS(cpu::quantize_block_cpu(x.data() + 96, 32, q), input_error);
}

TEST_CASE("cpu fixed_to_f32_fast: the reference's bits over every magnitude, exponent and edge") {
  rng r{23};
  int n_checked = 0;
  auto check_one = [&](int64_t v, int32_t e) {
    const float a = numerics::fixed_to_f32(v, e), b = cpu::fixed_to_f32_fast(v, e);
    if (std::memcmp(&a, &b, 4) != 0) FAIL_CHECK("v " << v << " e " << e << ": " << a << " vs " << b);
    ++n_checked;
  };
  for (int i = 0; i < 200000; ++i) {
    const int bits = static_cast<int>(r.range(0, 62));
    int64_t v = static_cast<int64_t>(r.next() >> (63 - bits));
    if (r.range(0, 7) == 0) v |= (int64_t(1) << bits) - (int64_t(1) << std::max(0, bits - 25));  // ties and carries
    if (r.range(0, 1)) v = -v;
    check_one(v, static_cast<int32_t>(r.range(-250, 150)));
  }
  for (int32_t e : {-213, -150, -149, -127, -126, -100, 0, 64, 65, 66, 104, 105})
    for (int64_t v : {int64_t(1), int64_t(-1), int64_t(0xffffff), int64_t(0x1ffffff), int64_t(0x2000001), INT64_MAX, INT64_MIN + 1,
                      int64_t(3) << 40, -(int64_t(0xffffff80) << 20)})
      check_one(v, e);
  CHECK(n_checked > 200000);
}

TEST_CASE("cpu round_shift_fast: the reference's bits for every shift direction, ties included") {
  rng r{29};
  int n_checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const int bits = static_cast<int>(r.range(0, 44));
    int64_t v = static_cast<int64_t>(r.next() >> (63 - bits));
    const int64_t s = r.range(-70, 62 - bits - 1);
    if (r.range(0, 3) == 0 && s < 0 && -s < 40) v = (v >> -s << -s) | (int64_t(1) << (-s - 1));  // exact ties
    if (r.range(0, 1)) v = -v;
    const int64_t a = numerics::round_shift(v, static_cast<int>(s)), b = cpu::round_shift_fast(v, s);
    if (a != b) FAIL_CHECK("v " << v << " shift " << s << ": " << a << " vs " << b);
    ++n_checked;
  }
  CHECK(n_checked == 200000);
}

TEST_CASE("cpu matmul: row bounds equal the decoded blocks' exponent bound on every type") {
  rng r{11};
  for (dtype t : kFastTypes) {
    const std::string type_s = gguf::dtype_get(t).name;
    CAPTURE(type_s);
    const int64_t n_in = 512, n_out = 9;
    const std::vector<uint8_t> w = random_matrix(r, t, n_in, n_out, true);
    std::vector<int32_t> bounds(n_out);
    cpu::weight_row_bounds(t, w.data(), n_in, 0, n_out, bounds.data());
    std::vector<numerics::wblock> blocks(n_in / 32);
    for (int64_t row = 0; row < n_out; ++row) {
      weight_decode_row(t, w.data() + row * gguf::dtype_row_bytes(t, n_in), n_in, blocks.data());
      CHECK(bounds[static_cast<size_t>(row)] == numerics::wblock_exp_bound(blocks.data(), n_in / 32));
    }
  }
}

TEST_CASE("cpu matmul: bit-identical to matmul_exact_ref on every type and instruction set") {
  for (cpu::isa isa : cpu::isa_all_supported()) {
    rng r{static_cast<uint64_t>(100 + static_cast<int>(isa))};
    for (dtype t : kFastTypes) {
      for (bool spread : {false, true}) {
        const std::string isa_s = cpu::isa_name(isa), type_s = gguf::dtype_get(t).name;
        CAPTURE(isa_s);
        CAPTURE(type_s);
        CAPTURE(spread);
        const int64_t n_in = gguf::dtype_get(t).block_size == 256 ? 768 : 352;
        const int64_t n_out = 37, n_tokens = 7;
        const std::vector<uint8_t> w = random_matrix(r, t, n_in, n_out, spread);
        const std::vector<float> x = random_acts(r, n_tokens, n_in, spread);
        const case_result c = run_case(isa, t, w, x, n_tokens, n_in, n_out, 0, n_out);
        CHECK(same_bits(c.ref, c.fast));
      }
    }
  }
}

TEST_CASE("cpu matmul: one to five tokens (the generation path) give the reference bits") {
  rng r{13};
  for (cpu::isa isa : cpu::isa_all_supported()) {
    for (dtype t : kFastTypes) {
      for (int64_t n_tokens : {1, 2, 4, 5}) {
        const std::string isa_s = cpu::isa_name(isa), type_s = gguf::dtype_get(t).name;
        CAPTURE(isa_s);
        CAPTURE(type_s);
        CAPTURE(n_tokens);
        const int64_t n_in = gguf::dtype_get(t).block_size == 256 ? 1024 : 288, n_out = 21;
        const std::vector<uint8_t> w = random_matrix(r, t, n_in, n_out, n_tokens % 2 == 1);
        const std::vector<float> x = random_acts(r, n_tokens, n_in, n_tokens % 2 == 1);
        const case_result c = run_case(isa, t, w, x, n_tokens, n_in, n_out, 2, 19);
        CHECK(same_bits(c.ref, c.fast));
      }
    }
  }
}

TEST_CASE("cpu matmul: token tiles, partial panels and row ranges give the reference bits") {
  rng r{7};
  for (cpu::isa isa : cpu::isa_all_supported()) {
    for (dtype t : {gguf::DTYPE_Q8_0, gguf::DTYPE_Q4_K, gguf::DTYPE_Q6_K}) {
      const std::string isa_s = cpu::isa_name(isa), type_s = gguf::dtype_get(t).name;
      CAPTURE(isa_s);
      CAPTURE(type_s);
      const int64_t n_in = 512, n_out = 50, n_tokens = 70;  // 70 tokens: two tiles of 64, groups of 4 and a rest
      const std::vector<uint8_t> w = random_matrix(r, t, n_in, n_out, true);
      const std::vector<float> x = random_acts(r, n_tokens, n_in, true);
      for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 50}, {3, 37}, {16, 32}, {49, 50}, {20, 20}}) {
        CAPTURE(r0);
        CAPTURE(r1);
        const case_result c = run_case(isa, t, w, x, n_tokens, n_in, n_out, r0, r1);
        CHECK(same_bits(c.ref, c.fast));
      }
    }
  }
}

TEST_CASE("cpu matmul: quantized weights and activations of a real scale match the reference") {
  rng r{3};
  for (cpu::isa isa : cpu::isa_all_supported()) {
    for (dtype t : kFastTypes) {
      const std::string isa_s = cpu::isa_name(isa), type_s = gguf::dtype_get(t).name;
      CAPTURE(isa_s);
      CAPTURE(type_s);
      const int64_t n_in = 1024, n_out = 20, n_tokens = 5;
      std::vector<float> wf(static_cast<size_t>(n_in * n_out));
      for (auto& v : wf) v = 0.05f * r.normal();
      std::vector<uint8_t> w(gguf::dtype_row_bytes(t, n_in) * n_out);
      for (int64_t row = 0; row < n_out; ++row)
        gguf::quants_quantize_row(t, wf.data() + row * n_in, w.data() + row * gguf::dtype_row_bytes(t, n_in), n_in);
      const std::vector<float> x = random_acts(r, n_tokens, n_in, false);
      const case_result c = run_case(isa, t, w, x, n_tokens, n_in, n_out, 0, n_out);
      CHECK(same_bits(c.ref, c.fast));
    }
  }
}

TEST_CASE("cpu matmul: zero rows, zero tokens and non-finite scales") {
  rng r{5};
  const dtype t = gguf::DTYPE_Q8_0;
  const int64_t n_in = 256, n_out = 18, n_tokens = 3;
  std::vector<uint8_t> w = random_matrix(r, t, n_in, n_out, true);
  std::memset(w.data() + 2 * gguf::dtype_row_bytes(t, n_in), 0, gguf::dtype_row_bytes(t, n_in));  // row 2 all zero
  std::vector<float> x = random_acts(r, n_tokens, n_in, true);
  std::fill(x.begin() + n_in, x.begin() + 2 * n_in, 0.0f);  // token 1 all zero
  for (cpu::isa isa : cpu::isa_all_supported()) {
    const std::string isa_s = cpu::isa_name(isa);
    CAPTURE(isa_s);
    const case_result c = run_case(isa, t, w, x, n_tokens, n_in, n_out, 0, n_out);
    CHECK(same_bits(c.ref, c.fast));
    CHECK(c.fast[static_cast<size_t>(1 * n_out + 5)] == 0.0f);
    CHECK(c.fast[2] == 0.0f);
  }
  const uint16_t inf = 0x7c00;
  std::memcpy(w.data() + 34 * 3, &inf, 2);  // block 3 of row 0
  std::vector<int32_t> bounds(n_out);
  CHECK_THROWS_AS(cpu::weight_row_bounds(t, w.data(), n_in, 0, n_out, bounds.data()), input_error);
}
