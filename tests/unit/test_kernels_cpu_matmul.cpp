// The fast exact matmul (kernels/cpu) against the reference (kernels/ref) by memcmp, on every
// supported instruction set: every matmul case of the op table (tests/op_cases.h) whose weight
// type has a fast path (the ten integer block types; the CPU backend runs F32/F16/BF16 through
// kernels/ref), over all rows and over row ranges. The table's weight blocks include random bytes
// (every code and sub-block scale a type can hold, fp16 scales from subnormal to 2^15) and its
// activations block exponents over 2^-120 .. 2^110, so that block terms land on both sides of the
// accumulator grid and every rounding branch runs. Also: the helpers of the fast path
// (act_pack, fixed_to_f32_fast, round_shift_fast, row bounds) against their numerics twins.
#include <doctest/doctest.h>

#include "guard_pages.h"
#include "op_cases.h"
#include "op_table_driver.h"
#include "test_util.h"

#include <algorithm>
#include <bit>
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
using test::op_case;

namespace {

using rng = detaudit::test::test_rng;

bool cpu_matmul_case(const op_case& c) { return c.op == test::op_kind::matmul && cpu::matmul_fast_type(c.type); }

// matmul_exact_cpu at isa over rows [r0, r1) of case c, into a guarded output buffer.
std::vector<float> cpu_matmul(const op_case& c, const test::op_inputs& in, cpu::isa isa, int64_t r0, int64_t r1) {
  cpu::act_pack p;
  cpu::act_pack_build(in.x.data(), c.n_tok, c.n_in, p);
  std::vector<int32_t> bounds(static_cast<size_t>(c.n_out));
  cpu::weight_row_bounds(c.type, in.w.data(), c.n_in, 0, c.n_out, bounds.data());
  std::vector<float> out = test::output_buffer(c, in);
  cpu::matmul_exact_cpu(isa, p, c.type, in.w.data(), c.n_out, bounds.data(), out.data() + test::GUARD, r0, r1);
  return out;
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
    const int64_t nb = n_in / 32;
    bool derived = true;  // block sums and shifts, from the fields they are defined by
    for (int64_t b = 0; b < nb; ++b) {
      const size_t k = static_cast<size_t>(t * nb + b);
      derived = derived && p.block_sum[k] == p.half_sum[2 * k] + p.half_sum[2 * k + 1] &&
                p.shift[k] == static_cast<int64_t>(cpu::matmul_shift_const(nb)) + p.exp[k] - p.max_exp[static_cast<size_t>(t)];
    }
    CHECK(derived);
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

// Both full-block quantizers of the CPU kernels (matmul_internal.h: the portable one, and the
// AVX2 one that act_pack_build and quantize_block_cpu take on AVX2 machines) against
// numerics::quantize_block, block by block: random bits over the whole finite range, subnormal
// and zero blocks of either sign, ties at every shift (values k + 1/2 on the block's grid), the
// block maximum rounding up to 2^15 (clamped to QMAX), one element 2^9 .. 2^40 below the maximum
// (shifts past the 32-bit lanes), and non-finite values, which must throw the reference's error.
TEST_CASE("cpu quantize_block: the portable and AVX2 full-block quantizers give the reference's integers") {
  rng r{0x9b10c};
  std::vector<std::pair<const char*, int32_t (*)(const float*, int16_t*)>> qs = {{"scalar", cpu::quantize_block_scalar}};
  if (cpu::isa_supported(cpu::isa::avx2)) qs.emplace_back("avx2", cpu::quantize_block_avx2);
  else MESSAGE("no AVX2 on this CPU: its quantizer is not compared here");
  int64_t n_blocks = 0, n_bad = 0;
  auto check = [&](const float* x, const std::string& what) {
    int16_t want[32];
    const int32_t we = numerics::quantize_block(x, 32, want);
    for (const auto& [name, fn] : qs) {
      int16_t got[32];
      std::memset(got, 0x55, sizeof got);
      const int32_t ge = fn(x, got);
      if (ge != we || std::memcmp(want, got, sizeof got) != 0) {
        if (++n_bad < 10) FAIL_CHECK(name << " differs on " << what << " block " << n_blocks);
      }
    }
    ++n_blocks;
  };
  float x[32];
  auto set_bits = [&](int i, uint32_t b) { std::memcpy(&x[i], &b, 4); };
  for (int rep = 0; rep < 4000; ++rep) {
    const int kind = static_cast<int>(r.range(0, 7));
    const uint32_t top = static_cast<uint32_t>(r.range(1, 254));  // the block's largest exponent
    for (int i = 0; i < 32; ++i) {
      uint32_t b = static_cast<uint32_t>(r.next());
      if (kind == 0) b &= 0xff7fffffu;                                      // any finite
      else if (kind == 1) b &= 0x807fffffu;                                 // subnormal or zero
      else if (kind == 2) b = (b & 0x807fffffu) | std::min<uint32_t>(top, static_cast<uint32_t>(r.range(0, 254))) << 23;
      else if (kind == 3) {                                                 // ties: k + 1/2 on the grid
        const uint32_t e = static_cast<uint32_t>(std::max<int64_t>(1, static_cast<int64_t>(top) - r.range(0, 23)));
        const uint32_t sh = top - e + 9;                                    // the element's shift
        const uint32_t m = sh >= 24 ? 0 : ((static_cast<uint32_t>(r.next()) >> (sh + 8)) << sh) | (1u << (sh - 1));
        b = (b & 0x80000000u) | e << 23 | (m & 0x7fffffu);
      } else if (kind == 4) b = (b & 0x80000000u) | top << 23 | 0x7fffffu;   // rounds up to 2^15: QMAX
      else if (kind == 5) b = (b & 0x80000000u) | std::max<int64_t>(1, static_cast<int64_t>(top) - r.range(0, 40)) << 23 | (b & 0x7fffffu);
      else if (kind == 6) b = i == 0 ? (top << 23) : (b & 0x80000000u);     // one value, the rest +-0
      else b = (b & 0x807fffffu) | static_cast<uint32_t>(r.range(100, 140)) << 23;
      set_bits(i, b);
    }
    check(x, "kind " + std::to_string(kind));
  }
  for (int i = 0; i < 32; ++i) set_bits(i, 0x80000000u);  // every element -0
  check(x, "-0");
  for (const uint32_t nf : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffffffffu}) {
    for (int i = 0; i < 32; ++i) x[i] = 1.0f;
    set_bits(static_cast<int>(r.range(0, 31)), nf);
    for (const auto& [name, fn] : qs) {
      int16_t q[32];
      CHECK_THROWS_AS(fn(x, q), input_error);
    }
  }
  CHECK(n_bad == 0);
  MESSAGE(n_blocks << " blocks against numerics::quantize_block");
}

// A non-finite activation must be refused with the reference's error, text included, whichever
// quantizer sees it: numerics::quantize_block names the first non-finite element, so the full-block
// quantizers (portable, AVX2, quantize_block_cpu) and act_pack_build are compared with it on a
// block holding one non-finite value at each of the 32 positions (+-inf, quiet and signalling
// NaNs with payloads), and two of them (the first is named). Finite blocks at every float offset
// from a 32-byte boundary, and blocks whose input and output end at a guard page, give the
// reference's integers.
TEST_CASE("cpu quantize_block: non-finite values at every position give the reference's error, and any address gives its integers") {
  std::vector<std::pair<const char*, int32_t (*)(const float*, int16_t*)>> qs = {{"scalar", cpu::quantize_block_scalar}};
  if (cpu::isa_supported(cpu::isa::avx2)) qs.emplace_back("avx2", cpu::quantize_block_avx2);
  qs.emplace_back("quantize_block_cpu", [](const float* x, int16_t* q) { return cpu::quantize_block_cpu(x, 32, q); });
  qs.emplace_back("act_pack_build", [](const float* x, int16_t*) {
    cpu::act_pack p;
    cpu::act_pack_build(x, 1, 32, p);
    return 0;
  });
  auto error_of = [](auto&& f) { return test::thrown_text<input_error>(f); };
  rng r{0x7fc00001};
  const uint32_t non_finite[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffbfffffu, 0x7fffffffu, 0xffffffffu};
  int64_t n_checked = 0;
  float x[32];
  int16_t q[32];
  for (int pos = 0; pos < 32; ++pos)
    for (const uint32_t nf : non_finite) {
      for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(r.range(-1000, 1000)) * 0.37f;
      std::memcpy(&x[pos], &nf, 4);
      if (pos < 31 && r.range(0, 1)) {  // a second non-finite value after the first
        const uint32_t other = non_finite[r.range(0, 7)];
        std::memcpy(&x[r.range(pos + 1, 31)], &other, 4);
      }
      const std::string want = error_of([&] { numerics::quantize_block(x, 32, q); });
      REQUIRE(want != "(nothing thrown)");
      for (const auto& [name, fn] : qs) {
        CAPTURE(name);
        CAPTURE(pos);
        CAPTURE(nf);
        CHECK(error_of([&] { fn(x, q); }) == want);
        ++n_checked;
      }
    }
  // Finite blocks: every offset from a 32-byte boundary, then at the end of a guarded page.
  std::vector<float> buf(64 + 8);
  for (int rep = 0; rep < 200; ++rep)
    for (int off = 0; off < 8; ++off) {
      float* xs = buf.data() + off;
      for (int i = 0; i < 32; ++i) {
        uint32_t b = static_cast<uint32_t>(r.next());
        b = (b & 0x807fffffu) | static_cast<uint32_t>(r.range(rep % 2 ? 0 : 100, 140)) << 23;  // odd reps: subnormals too
        std::memcpy(&xs[i], &b, 4);
      }
      int16_t want[32];
      const int32_t we = numerics::quantize_block(xs, 32, want);
      for (const auto& [name, fn] : qs) {
        if (std::string(name) == "act_pack_build") continue;
        test::guarded<int16_t> out(32);
        test::guarded<float> in(xs, 32, true);
        CAPTURE(name);
        CAPTURE(off);
        CHECK(fn(in.p, out.p) == we);
        CHECK(std::memcmp(out.p, want, sizeof want) == 0);
        int16_t got[33];
        CHECK(fn(xs, got + 1) == we);  // an output 2 bytes past a 4-byte boundary
        CHECK(std::memcmp(got + 1, want, sizeof want) == 0);
        ++n_checked;
      }
    }
  MESSAGE(n_checked << " quantizer calls against numerics::quantize_block");
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
  int64_t n = 0;
  for (const op_case& c : test::op_cases()) {
    if (!cpu_matmul_case(c) || c.gpu_scale) continue;
    CAPTURE(c.name);
    const test::op_inputs in = test::make_inputs(c);
    std::vector<int32_t> bounds(static_cast<size_t>(c.n_out));
    cpu::weight_row_bounds(c.type, in.w.data(), c.n_in, 0, c.n_out, bounds.data());
    std::vector<numerics::wblock> blocks(static_cast<size_t>(c.n_in / 32));
    bool same = true;
    for (int64_t row = 0; row < c.n_out; ++row) {
      weight_decode_row(c.type, in.w.data() + row * gguf::dtype_row_bytes(c.type, c.n_in), c.n_in, blocks.data());
      same = same && bounds[static_cast<size_t>(row)] == numerics::wblock_exp_bound(blocks.data(), c.n_in / 32);
    }
    CHECK(same);
    ++n;
  }
  MESSAGE(n << " matmul cases of the op table");
}

namespace {

// matmul_exact_cpu at each instruction set, as backends of the op table (op_table_driver.h).
[[maybe_unused]] const bool cpu_matmul_registered = [] {
  std::vector<test::op_backend> bs;
  for (cpu::isa isa : {cpu::isa::scalar, cpu::isa::avx2, cpu::isa::avx512}) {
    test::op_backend b;
    b.name = std::string("matmul_exact_cpu ") + cpu::isa_name(isa);
    b.ops = {test::op_kind::matmul};
    b.leaves_out = [isa](const op_case& c) -> std::string {
      if (!cpu::isa_supported(isa)) return std::string("this CPU has no ") + cpu::isa_name(isa);
      if (!cpu::matmul_fast_type(c.type)) return "f32/f16/bf16: the CPU backend runs kernels/ref for them";
      return "";
    };
    b.run = [isa](const op_case& c, const test::op_inputs& in) { return cpu_matmul(c, in, isa, 0, c.n_out); };
    bs.push_back(std::move(b));
  }
  return test::op_backends_add(std::move(bs));
}();

}  // namespace

TEST_CASE("cpu matmul: token tiles, partial panels and row ranges give the reference bits") {
  // Row ranges that start and end inside panels, a single last row and an empty range; the rows
  // outside a range keep their sentinels.
  int64_t n = 0;
  for (const op_case& c : test::op_cases()) {
    if (!cpu_matmul_case(c)) continue;
    CAPTURE(c.name);
    const test::prepared_case p = test::prepare(c);
    REQUIRE(p.refused.empty());
    std::vector<std::pair<int64_t, int64_t>> ranges = {{c.n_out - 1, c.n_out}, {c.n_out / 2, c.n_out / 2}};
    if (c.n_out > 4) ranges.emplace_back(2, c.n_out - 2);
    if (c.n_out > 16) ranges.emplace_back(3, c.n_out - 13);
    if (c.n_out >= 32) ranges.emplace_back(16, 32);
    for (auto [r0, r1] : ranges) {
      std::vector<float> want = p.want;
      for (int64_t tok = 0; tok < c.n_tok; ++tok)
        for (int64_t row = 0; row < c.n_out; ++row)
          if (row < r0 || row >= r1) want[test::GUARD + static_cast<size_t>(tok * c.n_out + row)] = test::float_of(test::SENTINEL);
      for (cpu::isa isa : cpu::isa_all_supported()) {
        const auto diff = test::first_difference(want, cpu_matmul(c, p.in, isa, r0, r1));
        CHECK_MESSAGE(!diff, std::string(cpu::isa_name(isa)) << " rows " << r0 << ".." << r1 << ": " << diff->to_string());
      }
    }
    ++n;
  }
  MESSAGE(n << " matmul cases of the op table, each over several row ranges");
}

TEST_CASE("cpu matmul: zero rows, zero tokens and non-finite scales") {
  // The table's edge cases (zero rows and tokens) are compared above; here, their outputs are +0
  // and a non-finite fp16 scale is refused.
  rng r{5};
  const dtype t = gguf::DTYPE_Q8_0;
  const int64_t n_in = 256, n_out = 18, n_tok = 3;
  std::vector<uint8_t> w = test::weight_rows(r, t, n_in, n_out, test::weights::random_bytes);
  std::memset(w.data() + 2 * gguf::dtype_row_bytes(t, n_in), 0, gguf::dtype_row_bytes(t, n_in));  // row 2 all zero
  std::vector<float> x = test::draw(r, test::d_mixed, n_tok * n_in);
  std::fill(x.begin() + n_in, x.begin() + 2 * n_in, 0.0f);  // token 1 all zero
  cpu::act_pack p;
  cpu::act_pack_build(x.data(), n_tok, n_in, p);
  std::vector<int32_t> bounds(n_out);
  cpu::weight_row_bounds(t, w.data(), n_in, 0, n_out, bounds.data());
  for (cpu::isa isa : cpu::isa_all_supported()) {
    const std::string isa_s = cpu::isa_name(isa);
    CAPTURE(isa_s);
    std::vector<float> y(static_cast<size_t>(n_tok * n_out), -7.0f);
    cpu::matmul_exact_cpu(isa, p, t, w.data(), n_out, bounds.data(), y.data(), 0, n_out);
    CHECK(std::bit_cast<uint32_t>(y[static_cast<size_t>(1 * n_out + 5)]) == 0u);
    CHECK(std::bit_cast<uint32_t>(y[2]) == 0u);
  }
  const uint16_t inf = 0x7c00;
  std::memcpy(w.data() + 34 * 3, &inf, 2);  // block 3 of row 0
  CHECK_THROWS_AS(cpu::weight_row_bounds(t, w.data(), n_in, 0, n_out, bounds.data()), input_error);
}

TEST_CASE("cpu matmul: q4_0 and q4_K and q5_K and q6_K repacked into 16-row tiles give the reference bits on the generation path") {
  // Every q4_0, q4_K, q5_K and q6_K matmul case (rows of whole 256s) of the op table with at most four tokens, over all rows and
  // over row ranges starting at group boundaries (16 rows), with sentinels outside them.
  for (cpu::isa isa : cpu::isa_all_supported()) {
  if (isa == cpu::isa::scalar) continue;
  const std::string isa_s = cpu::isa_name(isa);
  CAPTURE(isa_s);
  int64_t n[4] = {0, 0, 0, 0};
  for (const op_case& c : test::op_cases()) {
    if (c.op != test::op_kind::matmul || !cpu::row_pack_kernel(c.type, isa) || c.n_tok > cpu::GEMV_PACKED_MAX_TOKENS || c.n_in % 256 != 0) continue;
    CAPTURE(c.name);
    const test::prepared_case p = test::prepare(c);
    REQUIRE(p.refused.empty());
    cpu::act_pack x;
    cpu::act_pack_build(p.in.x.data(), c.n_tok, c.n_in, x);
    std::vector<int32_t> bounds(static_cast<size_t>(c.n_out));
    cpu::weight_row_bounds(c.type, p.in.w.data(), c.n_in, 0, c.n_out, bounds.data());
    cpu::row_pack w;
    cpu::row_pack_init(c.type, c.n_out, c.n_in, isa, w);
    const int64_t n_groups = (c.n_out + 15) / 16;
    if (!cpu::row_pack_groups(p.in.w.data(), bounds.data(), 0, n_groups / 2, w) ||
        !cpu::row_pack_groups(p.in.w.data(), bounds.data(), n_groups / 2, n_groups, w)) {
      MESSAGE("a non-finite scale: not packed (" << c.name << ")");
      continue;
    }
    std::vector<std::pair<int64_t, int64_t>> ranges = {{0, c.n_out}};
    if (c.n_out > 16) ranges.emplace_back(16, c.n_out);
    if (c.n_out > 17) ranges.emplace_back(0, 17);
    for (auto [r0, r1] : ranges) {
      std::vector<float> want = p.want;
      for (int64_t tok = 0; tok < c.n_tok; ++tok)
        for (int64_t row = 0; row < c.n_out; ++row)
          if (row < r0 || row >= r1) want[test::GUARD + static_cast<size_t>(tok * c.n_out + row)] = test::float_of(test::SENTINEL);
      std::vector<float> got = test::output_buffer(c, p.in);
      cpu::matmul_exact_cpu_packed(isa, x, w, bounds.data(), got.data() + test::GUARD, r0, r1);
      const auto diff = test::first_difference(want, got);
      CHECK_MESSAGE(!diff, "rows " << r0 << ".." << r1 << ": " << diff->to_string());
    }
    ++n[c.type == dtype::DTYPE_Q4_K ? 0 : c.type == dtype::DTYPE_Q5_K ? 1 : c.type == dtype::DTYPE_Q6_K ? 2 : 3];
  }
  const dtype types[4] = {dtype::DTYPE_Q4_K, dtype::DTYPE_Q5_K, dtype::DTYPE_Q6_K, dtype::DTYPE_Q4_0};
  for (int i = 0; i < 4; ++i) CHECK(n[i] >= (cpu::row_pack_kernel(types[i], isa) ? 5 : 0));
  MESSAGE(isa_s << ": " << n[0] << " q4_K, " << n[1] << " q5_K, " << n[2] << " q6_K and " << n[3]
                << " q4_0 cases of the op table on the packed generation kernels");
  }
}

TEST_CASE("cpu matmul: packing refuses a non-finite scale and other types and bad shapes") {
  const int64_t n_in = 256, n_out = 3;
  const cpu::isa best = cpu::isa_all_supported().back();
  if (best == cpu::isa::scalar) {
    cpu::row_pack p;
    CHECK_THROWS_AS(cpu::row_pack_init(dtype::DTYPE_Q4_K, 3, 256, cpu::isa::scalar, p), input_error);
    MESSAGE("no SIMD here: no packed kernels");
    return;
  }
  for (dtype t : {dtype::DTYPE_Q4_0, dtype::DTYPE_Q4_K, dtype::DTYPE_Q5_K, dtype::DTYPE_Q6_K}) {
    CAPTURE(gguf::dtype_get(t).name);
    const int64_t sb = gguf::dtype_get(t).type_size * (256 / gguf::dtype_get(t).block_size);  // bytes of 256 weights
    std::vector<uint8_t> w(static_cast<size_t>(n_out * sb), 0);
    std::vector<int32_t> bounds(n_out, numerics::EXP_ZERO);
    cpu::row_pack p;
    cpu::row_pack_init(t, n_out, n_in, best, p);
    CHECK(cpu::row_pack_groups(w.data(), bounds.data(), 0, 1, p));
    w[static_cast<size_t>(sb + (t == dtype::DTYPE_Q6_K ? 209 : t == dtype::DTYPE_Q4_0 ? 18 * 5 + 1 : 1))] = 0x7c;  // row 1: d = +inf
    CHECK_FALSE(cpu::row_pack_groups(w.data(), bounds.data(), 0, 1, p));
    CHECK_THROWS_AS(cpu::row_pack_init(t, 3, 255, best, p), input_error);
    CHECK_THROWS_AS(cpu::row_pack_init(t, 0, 256, best, p), input_error);
    CHECK_THROWS_AS(cpu::row_pack_init(t, 3, 256, cpu::isa::scalar, p), input_error);  // no packed kernel there
    cpu::act_pack x;
    std::vector<float> xs(5 * 256, 1.0f);
    cpu::act_pack_build(xs.data(), 5, 256, x);  // five tokens: more than the packed kernels take
    cpu::row_pack_init(t, n_out, n_in, best, p);
    std::vector<float> y(5 * n_out);
    for (cpu::isa isa : {cpu::isa::scalar, cpu::isa::avx2, cpu::isa::avx512})
      CHECK_THROWS_AS(cpu::matmul_exact_cpu_packed(isa, x, p, bounds.data(), y.data(), 0, n_out), input_error);
    // One token: refused by every set but the one the pack was made for (another set's layout of
    // the high bits differs).
    cpu::act_pack x1;
    cpu::act_pack_build(xs.data(), 1, 256, x1);
    for (cpu::isa isa : {cpu::isa::scalar, cpu::isa::avx2, cpu::isa::avx512}) {
      CAPTURE(cpu::isa_name(isa));
      if (isa == best) CHECK_NOTHROW(cpu::matmul_exact_cpu_packed(isa, x1, p, bounds.data(), y.data(), 0, n_out));
      else CHECK_THROWS_AS(cpu::matmul_exact_cpu_packed(isa, x1, p, bounds.data(), y.data(), 0, n_out), input_error);
    }
  }
  CHECK_FALSE(cpu::row_pack_kernel(dtype::DTYPE_Q4_K, cpu::isa::scalar));
  CHECK(cpu::row_pack_kernel(dtype::DTYPE_Q6_K, cpu::isa::avx2) == cpu::isa_supported(cpu::isa::avx2));
  CHECK_FALSE(cpu::row_pack_kernel(dtype::DTYPE_Q8_0, best));
  cpu::row_pack q;
  CHECK_THROWS_AS(cpu::row_pack_init(dtype::DTYPE_Q8_0, 3, 256, best, q), input_error);
  CHECK_THROWS_AS(cpu::row_pack_init(dtype::DTYPE_Q3_K, 3, 256, best, q), input_error);
}
