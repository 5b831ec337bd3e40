// Fuzzed shapes of the generation kernels (gemv_blocks.h, q8_0 / q4_K fused, packed q4_K)
// against matmul_exact_ref by memcmp over many shapes the op table does not list: every block
// count 1..19 for the legacy types (tails of 1..7 blocks), several super-block counts, 1..4
// tokens, row counts that are not multiples of 16, row ranges, extreme codes and scales; plus
// guard pages behind every weight and activation array, so a read past the end faults.
#include <doctest/doctest.h>

#include "op_cases.h"
#include "guard_pages.h"
#include "test_util.h"


#include <cstring>
#include <string>
#include <vector>

#include "gguf/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/ref/ref.h"
#include "numerics/exact.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::kernels;
using gguf::dtype;

namespace {

using rng = detaudit::test::test_rng;

const dtype INT_TYPES[] = {gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_1, gguf::DTYPE_Q5_0, gguf::DTYPE_Q5_1, gguf::DTYPE_Q8_0,
                           gguf::DTYPE_Q2_K, gguf::DTYPE_Q3_K, gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K,
                           gguf::DTYPE_MXFP4};

// Weights whose codes and sub-block scales are at their extremes: every byte 0x00 or 0xff (per
// block, at random), fp16 fields at the largest finite magnitudes or tiny subnormals.
std::vector<uint8_t> extreme_weights(rng& r, dtype t, int64_t n_in, int64_t n_out) {
  const gguf::dtype_traits& tr = gguf::dtype_get(t);
  std::vector<uint8_t> w(gguf::dtype_row_bytes(t, n_in) * static_cast<uint64_t>(n_out));
  for (uint64_t off = 0; off < w.size(); off += tr.type_size) {
    const uint8_t fill = r.range(0, 1) ? 0xff : 0x00;
    std::memset(w.data() + off, fill, tr.type_size);
    for (int f : test::fp16_fields(t)) {
      const uint16_t choices[] = {0x7bff, 0xfbff, 0x0001, 0x8001, 0x0000, 0x3c00, 0x7800};
      const uint16_t h = choices[r.range(0, 6)];
      std::memcpy(w.data() + off + static_cast<uint64_t>(f), &h, 2);
    }
    if (t == gguf::DTYPE_MXFP4) {  // E8M0 scales at the extremes whose values stay finite floats
      const uint8_t scales[] = {0, 1, 2, 127, 128, 200, 252};
      w[off] = scales[r.range(0, 6)];
    }
  }
  return w;
}

// Activations at the int16 extremes: every value +-the block's max, or random.
std::vector<float> extreme_acts(rng& r, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; b += 32) {
    const int kind = static_cast<int>(r.range(0, 3));
    const float big = kind == 3 ? 0.0f : 1.0f;
    for (int64_t i = b; i < b + 32 && i < n; ++i) {
      if (kind == 0) x[static_cast<size_t>(i)] = big;
      else if (kind == 1) x[static_cast<size_t>(i)] = -big;
      else if (kind == 2) x[static_cast<size_t>(i)] = r.range(0, 1) ? big : -big;
      else x[static_cast<size_t>(i)] = 0.0f;
    }
  }
  return x;
}

struct fuzz_case {
  dtype t;
  int64_t n_in, n_out, n_tok;
  std::vector<uint8_t> w;
  std::vector<float> x;
  std::string name;
};

// The reference output (NaN-free sentinel outside rows [r0, r1)).
std::vector<float> ref_out(const fuzz_case& c, int64_t r0, int64_t r1) {
  std::vector<numerics::qvec> xs(static_cast<size_t>(c.n_tok));
  for (int64_t t = 0; t < c.n_tok; ++t) numerics::quantize_act(c.x.data() + t * c.n_in, c.n_in, xs[static_cast<size_t>(t)]);
  std::vector<float> y(static_cast<size_t>(c.n_tok * c.n_out), -12345.0f);
  matmul_exact_ref(xs.data(), c.n_tok, c.t, c.w.data(), c.n_in, c.n_out, y.data(), r0, r1);
  return y;
}

std::vector<float> cpu_out(const fuzz_case& c, cpu::isa isa, int64_t r0, int64_t r1) {
  cpu::act_pack p;
  cpu::act_pack_build(c.x.data(), c.n_tok, c.n_in, p);
  std::vector<int32_t> bounds(static_cast<size_t>(c.n_out));
  cpu::weight_row_bounds(c.t, c.w.data(), c.n_in, 0, c.n_out, bounds.data());
  std::vector<float> y(static_cast<size_t>(c.n_tok * c.n_out), -12345.0f);
  cpu::matmul_exact_cpu(isa, p, c.t, c.w.data(), c.n_out, bounds.data(), y.data(), r0, r1);
  return y;
}

std::vector<float> packed_out(const fuzz_case& c, cpu::isa isa, int64_t r0, int64_t r1, bool* packed) {
  cpu::act_pack p;
  cpu::act_pack_build(c.x.data(), c.n_tok, c.n_in, p);
  std::vector<int32_t> bounds(static_cast<size_t>(c.n_out));
  cpu::weight_row_bounds(c.t, c.w.data(), c.n_in, 0, c.n_out, bounds.data());
  cpu::row_pack w;
  cpu::row_pack_init(c.t, c.n_out, c.n_in, isa, w);
  *packed = cpu::row_pack_groups(c.w.data(), bounds.data(), 0, (c.n_out + 15) / 16, w);
  std::vector<float> y(static_cast<size_t>(c.n_tok * c.n_out), -12345.0f);
  if (*packed) cpu::matmul_exact_cpu_packed(isa, p, w, bounds.data(), y.data(), r0, r1);
  return y;
}

int64_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -2;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<int64_t>(i);
  return -1;
}

// The packed kernel of c's type against the reference over all rows and over group-aligned row
// ranges (random ends); counts cases and differing ones (the first 20 reported).
// Every instruction set with a packed kernel for the type (none: nothing counted).
void check_packed(rng& r, const fuzz_case& c, int64_t& n_cases, int64_t& n_bad) {
  std::vector<std::pair<int64_t, int64_t>> ranges = {{0, c.n_out}};
  for (int64_t g = 0; g * 16 < c.n_out; ++g) ranges.emplace_back(g * 16, r.range(g * 16, c.n_out));
  for (auto [r0, r1] : ranges) {
    const std::vector<float> want = ref_out(c, r0, r1);
    for (cpu::isa isa : cpu::isa_all_supported()) {
      if (!cpu::row_pack_kernel(c.t, isa)) continue;
      bool packed = false;
      const std::vector<float> got = packed_out(c, isa, r0, r1, &packed);
      REQUIRE(packed);
      const int64_t d = first_diff(want, got);
      if (d != -1) {
        ++n_bad;
        if (n_bad < 20) FAIL_CHECK(c.name << " " << cpu::isa_name(isa) << " rows " << r0 << ".." << r1 << ": first difference at " << d);
      }
      ++n_cases;
    }
  }
}

fuzz_case make_case(rng& r, dtype t, int64_t n_in, int64_t n_out, int64_t n_tok, int kind) {
  fuzz_case c{t, n_in, n_out, n_tok, {}, {}, {}};
  const test::dist dists[] = {test::d_normal, test::d_wide, test::d_tiny, test::d_huge, test::d_outliers, test::d_mixed};
  if (kind == 0) c.w = test::weight_rows(r, t, n_in, n_out, test::weights::random_bytes);
  else if (kind == 1) c.w = test::weight_rows(r, t, n_in, n_out, test::weights::random_bytes_narrow);
  else c.w = extreme_weights(r, t, n_in, n_out);
  if (kind == 2) c.x = extreme_acts(r, n_tok * n_in);
  else c.x = test::draw(r, dists[r.range(0, 5)], n_tok * n_in, n_in);
  c.name = std::string(gguf::dtype_get(t).name) + " n_in " + std::to_string(n_in) + " n_out " + std::to_string(n_out) +
           " n_tok " + std::to_string(n_tok) + " kind " + std::to_string(kind);
  return c;
}

// Every supported instruction set against the reference on all rows of c and on a random row
// range; counts the case and, when some output differs, a bad one.
void check_case(rng& r, const fuzz_case& c, int64_t n_out, int64_t& n_cases, int64_t& n_bad) {
  const int64_t r0 = r.range(0, n_out - 1), r1 = r.range(r0 + 1, n_out);
  const std::vector<float> want = ref_out(c, 0, n_out), want_part = ref_out(c, r0, r1);
  for (cpu::isa isa : cpu::isa_all_supported()) {
    const int64_t d = first_diff(want, cpu_out(c, isa, 0, n_out));
    const int64_t d2 = first_diff(want_part, cpu_out(c, isa, r0, r1));
    if (d != -1 || d2 != -1) {
      ++n_bad;
      if (n_bad < 20)
        FAIL_CHECK(c.name << " " << cpu::isa_name(isa) << ": first difference at " << d << " / rows " << r0 << ".." << r1 << " at " << d2);
    }
  }
  ++n_cases;
}

}  // namespace

TEST_CASE("gemv fuzz: every integer type, block tails, 1..4 tokens, all ISAs, row ranges") {
  rng r{20240611};
  int64_t n_cases = 0, n_bad = 0;
  for (dtype t : INT_TYPES) {
    const bool k = gguf::dtype_get(t).block_size == 256;
    std::vector<int64_t> n_ins;
    if (k) n_ins = {256, 512, 768, 1280, 2304};
    else
      for (int64_t nb = 1; nb <= 19; ++nb) n_ins.push_back(nb * 32);
    for (int64_t n_in : n_ins)
      for (int64_t n_tok = 1; n_tok <= 5; ++n_tok)
        for (int kind = 0; kind < 3; ++kind) {
          const int64_t n_out = r.range(1, 37);
          const fuzz_case c = make_case(r, t, n_in, n_out, n_tok, kind);
          check_case(r, c, n_out, n_cases, n_bad);
        }
  }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " fuzz cases");
}

TEST_CASE("q4_K packed fuzz: row counts not multiples of 16, row ranges, extreme blocks") {
  if (!cpu::row_pack_kernel(gguf::DTYPE_Q4_K, cpu::isa_default())) MESSAGE("no packed q4_K kernel on this CPU: nothing to check");
  rng r{777};
  int64_t n_cases = 0, n_bad = 0;
  for (int64_t n_out : {1, 2, 15, 16, 17, 31, 33, 47, 48, 65})
    for (int64_t n_in : {256, 512, 1536})
      for (int64_t n_tok = 1; n_tok <= 4; ++n_tok)
        for (int kind = 0; kind < 3; ++kind) check_packed(r, make_case(r, gguf::DTYPE_Q4_K, n_in, n_out, n_tok, kind), n_cases, n_bad);
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " packed cases");
}

TEST_CASE("packed fuzz: q4_0, q5_K and q6_K tiles (byte products) at extreme codes, scales and activations") {
  // The q4_K fuzz above covers one of the four packed kernels; the byte-product rewrite changed
  // all four (q5_K fifth-bit masks, q6_K high-bit planes, q4_0's - 8 * block sum), so each gets the
  // same shapes: row counts not multiples of 16, group-aligned row ranges, 0x00 / 0xff blocks
  // (q6_K codes 0 and 63, q5_K with every fifth bit set), fp16 scales at +-65504 and subnormals.
  // Each instruction set runs the types it has a packed kernel for (AVX-512 and AVX2: all four).
  rng r{4242};
  int64_t n_cases = 0, n_bad = 0;
  for (dtype t : {gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K})
    for (int64_t n_out : {1, 15, 17, 33, 48})
      for (int64_t n_in : {256, 768})
        for (int64_t n_tok = 1; n_tok <= 4; ++n_tok)
          for (int kind = 0; kind < 3; ++kind) check_packed(r, make_case(r, t, n_in, n_out, n_tok, kind), n_cases, n_bad);
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " packed cases of all four types");
}

// The AVX2 scalar tile kernel (the fallback of a group whose terms leave the rounding binade)
// against the vector kernel on the same AVX2 pack, group by group, int64 sums compared: where the
// vector kernel keeps a group (every q4_0 group: its terms cannot leave the binade) the two must
// agree, so the fallback is checked on inputs that never reach it. Returns the groups compared
// (0 without AVX2); a difference fails the check.
int64_t check_scalar_tiles(const fuzz_case& c) {
  if (!cpu::row_pack_kernel(c.t, cpu::isa::avx2)) return 0;
  cpu::act_pack p;
  cpu::act_pack_build(c.x.data(), c.n_tok, c.n_in, p);
  std::vector<int32_t> bounds(static_cast<size_t>(c.n_out));
  cpu::weight_row_bounds(c.t, c.w.data(), c.n_in, 0, c.n_out, bounds.data());
  cpu::row_pack w;
  cpu::row_pack_init(c.t, c.n_out, c.n_in, cpu::isa::avx2, w);
  REQUIRE(cpu::row_pack_groups(c.w.data(), bounds.data(), 0, w.n_groups, w));
  const cpu::packed_act xa{p.bytes.data(), p.q.data(), p.shift.data(), p.half_sum.data(), p.block_sum.data(), p.n_blocks,
                           c.n_tok, p.pairs.data(), p.scale.data(), p.sum_scaled.data(), p.lo_half.data()};
  int64_t n = 0;
  for (int64_t g = 0; g < w.n_groups; ++g) {
    const uint8_t* tiles = w.data + g * w.n_super * w.tile_bytes;
    std::vector<int64_t> vec(static_cast<size_t>(16 * c.n_tok), 0), sca(vec.size(), 0);
    if (c.t == gguf::DTYPE_Q4_0) cpu::gemv_q40_packed_avx2(tiles, w.n_super, xa, vec.data());
    else if (c.t == gguf::DTYPE_Q4_K) cpu::gemv_q4k_packed_avx2(tiles, w.n_super, xa, vec.data());
    else if (c.t == gguf::DTYPE_Q5_K) cpu::gemv_q5k_packed_avx2(tiles, w.n_super, xa, vec.data());
    else cpu::gemv_q6k_packed_avx2(tiles, w.n_super, xa, vec.data());
    REQUIRE(cpu::gemv_packed_scalar_avx2(c.t, tiles, w.n_super, xa, sca.data()));
    CHECK_MESSAGE(vec == sca, c.name << " group " << g << ": the scalar tile kernel's sums differ from the vector kernel's");
    ++n;
  }
  return n;
}

// AVX2 q4_0 tiles hold each block's fp16 d as it stands and the row's -bound once (cpu.h); the
// kernel widens d twice and multiplies by 2^-bound, the other layout's d_mant * 2^dsh. The rows
// here take that to its ends: every scale zero or -0 (bound EXP_ZERO, output 0), every scale
// subnormal (bound -24: the largest -bound), -0 next to a subnormal, +-65504 next to the smallest
// subnormal (dsh -29), and one row of random scales, over one, two and three super-blocks, each
// block's codes random. Each row is compared bit for bit with the reference, and the scalar tile
// kernel, which no q4_0 input reaches through the driver, with the vector kernel.
TEST_CASE("packed q4_0: zero, -0, subnormal and extreme fp16 scales give the reference bits, and the scalar tile kernel agrees") {
  if (!cpu::row_pack_kernel(gguf::DTYPE_Q4_0, cpu::isa_default())) MESSAGE("no packed q4_0 kernel on this CPU: nothing to check");
  rng r{2336};
  int64_t n_cases = 0, n_bad = 0, n_groups = 0;
  const uint16_t patterns[6][4] = {{0x0000, 0x8000, 0x0000, 0x8000},   // every scale zero: bound EXP_ZERO
                                   {0x0001, 0x8001, 0x03ff, 0x0200},   // subnormal only: bound -24
                                   {0x8000, 0x0001, 0x8000, 0x0000},   // -0 beside the smallest subnormal
                                   {0x7bff, 0x0001, 0xfbff, 0x8001},   // +-65504 beside +-2^-24
                                   {0x3c00, 0xbc00, 0x0400, 0x8400},   // +-1 and the smallest normals
                                   {0, 0, 0, 0}};                      // random (filled below)
  for (int64_t n_in : {256, 512, 768})
    for (int64_t n_tok = 1; n_tok <= 4; ++n_tok) {
      const int64_t n_out = 37;
      const gguf::dtype_traits& tr = gguf::dtype_get(gguf::DTYPE_Q4_0);
      fuzz_case c{gguf::DTYPE_Q4_0, n_in, n_out, n_tok, {}, {}, {}};
      c.w.assign(gguf::dtype_row_bytes(gguf::DTYPE_Q4_0, n_in) * static_cast<uint64_t>(n_out), 0);
      for (int64_t row = 0; row < n_out; ++row) {
        const int p = static_cast<int>(row % 6);
        for (int64_t b = 0; b < n_in / 32; ++b) {
          uint8_t* blk = c.w.data() + static_cast<uint64_t>(row * (n_in / 32) + b) * tr.type_size;
          const uint16_t h = p == 5 ? static_cast<uint16_t>(r.range(0, 0x7bff) | (r.range(0, 1) << 15)) : patterns[p][b % 4];
          std::memcpy(blk, &h, 2);
          for (int i = 2; i < 18; ++i) blk[i] = static_cast<uint8_t>(r.range(0, 255));
        }
      }
      c.x = extreme_acts(r, n_tok * n_in);
      c.name = "q4_0 scales n_in " + std::to_string(n_in) + " n_tok " + std::to_string(n_tok);
      check_packed(r, c, n_cases, n_bad);
      n_groups += check_scalar_tiles(c);
    }
  // The scalar tile kernel of the other three types on random and extreme blocks as well.
  for (dtype t : {gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K})
    for (int64_t n_tok = 1; n_tok <= 4; ++n_tok)
      for (int kind = 0; kind < 3; ++kind) n_groups += check_scalar_tiles(make_case(r, t, 512, 40, n_tok, kind));
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " packed q4_0 cases, " << n_groups << " groups of the scalar tile kernel against the vector kernels");
}

// AVX2 q4_0 tiles copy each block's fp16 d as it stands (cpu.h), so a non-finite d would reach
// the kernel's conversions unless the pack refuses it as the reference does: +-inf, quiet and
// signalling NaNs with payloads, in each of the eight blocks of a super-block, in the last
// super-block of the last row of a partial group (rows 0..19, the bad one 19). Every such matrix
// must be refused by the reference, the unpacked CPU kernels and weight_row_bounds with an
// input_error, and by row_pack_groups (given the finite matrix's bounds) on every set with a
// packed kernel; the same matrix with the scale finite again packs and gives the reference bits.
TEST_CASE("packed q4_0: a non-finite fp16 scale in any block of any super-block is refused like the reference refuses it") {
  rng r{0x7c00};
  const int64_t n_in = 768, n_out = 20, bad_row = 19;
  fuzz_case c = make_case(r, gguf::DTYPE_Q4_0, n_in, n_out, 1, 0);
  const uint64_t row_bytes = gguf::dtype_row_bytes(gguf::DTYPE_Q4_0, n_in);
  std::vector<int32_t> bounds(static_cast<size_t>(n_out));
  cpu::weight_row_bounds(c.t, c.w.data(), n_in, 0, n_out, bounds.data());
  int64_t n_refused = 0;
  for (int64_t b = 0; b < 8; ++b)
    for (const uint16_t h : {uint16_t{0x7c00}, uint16_t{0xfc00}, uint16_t{0x7e00}, uint16_t{0x7c01}, uint16_t{0xfdff}, uint16_t{0xffff}}) {
      CAPTURE(b);
      CAPTURE(h);
      uint8_t* d = c.w.data() + static_cast<uint64_t>(bad_row) * row_bytes + static_cast<uint64_t>((16 + b) * 18);  // super-block 2
      uint8_t keep[2];
      std::memcpy(keep, d, 2);
      std::memcpy(d, &h, 2);
      CHECK_THROWS_AS(ref_out(c, 0, n_out), input_error);
      for (cpu::isa isa : cpu::isa_all_supported()) {
        CHECK_THROWS_AS(cpu_out(c, isa, 0, n_out), input_error);
        std::vector<int32_t> bad_bounds(static_cast<size_t>(n_out));
        CHECK_THROWS_AS(cpu::weight_row_bounds(c.t, c.w.data(), n_in, 0, n_out, bad_bounds.data()), input_error);
        if (!cpu::row_pack_kernel(c.t, isa)) continue;
        // weight_row_bounds refuses the matrix too; the pack is given the finite matrix's bounds.
        cpu::row_pack w;
        cpu::row_pack_init(c.t, n_out, n_in, isa, w);
        const bool packed = cpu::row_pack_groups(c.w.data(), bounds.data(), 0, w.n_groups, w);
        CHECK_FALSE(packed);
        n_refused += !packed;
      }
      std::memcpy(d, keep, 2);
    }
  for (cpu::isa isa : cpu::isa_all_supported()) {
    if (!cpu::row_pack_kernel(c.t, isa)) continue;
    bool packed = false;
    CHECK(first_diff(ref_out(c, 0, n_out), packed_out(c, isa, 0, n_out, &packed)) == -1);
    CHECK(packed);
  }
  MESSAGE(n_refused << " packs refused for a non-finite q4_0 scale");
}

// AVX2 q4_0 tiles keep -bound per row, read once per group (two groups at once for one token):
// groups here differ as a whole (every scale zero: bound EXP_ZERO; subnormal only: bound -24;
// +-65504 beside +-2^-24 and -0; random scales), in that order, so that each pair of neighbouring
// groups has different row exponents, over long rows (8 to 21 super-blocks: the sums of many
// blocks), 1..4 tokens and group-aligned row ranges that end inside a group. Bits against the
// reference, and the scalar tile kernel against the vector kernel.
TEST_CASE("packed q4_0: long rows, neighbouring groups with different row bounds, 1..4 tokens, row ranges") {
  if (!cpu::row_pack_kernel(gguf::DTYPE_Q4_0, cpu::isa_default())) MESSAGE("no packed q4_0 kernel on this CPU: nothing to check");
  rng r{9749};
  int64_t n_cases = 0, n_bad = 0, n_groups = 0;
  const uint16_t patterns[3][4] = {{0x0000, 0x8000, 0x0000, 0x8000}, {0x0001, 0x83ff, 0x0200, 0x8001}, {0x7bff, 0x0001, 0x8000, 0xfbff}};
  const gguf::dtype_traits& tr = gguf::dtype_get(gguf::DTYPE_Q4_0);
  for (int64_t n_in : {2048, 4096, 5376})
    for (int64_t n_out : {32, 47, 80})
      for (int64_t n_tok = 1; n_tok <= 4; ++n_tok) {
        fuzz_case c{gguf::DTYPE_Q4_0, n_in, n_out, n_tok, {}, {}, {}};
        c.w.assign(gguf::dtype_row_bytes(gguf::DTYPE_Q4_0, n_in) * static_cast<uint64_t>(n_out), 0);
        for (int64_t row = 0; row < n_out; ++row) {
          const int p = static_cast<int>((row / 16) % 4);
          for (int64_t b = 0; b < n_in / 32; ++b) {
            uint8_t* blk = c.w.data() + static_cast<uint64_t>(row * (n_in / 32) + b) * tr.type_size;
            const uint16_t h = p == 3 ? static_cast<uint16_t>(r.range(0, 0x7bff) | (r.range(0, 1) << 15)) : patterns[p][(b + row) % 4];
            std::memcpy(blk, &h, 2);
            for (int i = 2; i < 18; ++i) blk[i] = static_cast<uint8_t>(r.range(0, 1) ? r.range(0, 255) : (r.range(0, 1) ? 0x00 : 0xff));
          }
        }
        c.x = r.range(0, 1) ? extreme_acts(r, n_tok * n_in) : test::draw(r, test::d_mixed, n_tok * n_in, n_in);
        c.name = "q4_0 groups n_in " + std::to_string(n_in) + " n_out " + std::to_string(n_out) + " n_tok " + std::to_string(n_tok);
        check_packed(r, c, n_cases, n_bad);
        n_groups += check_scalar_tiles(c);
      }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " packed q4_0 cases of long rows, " << n_groups << " groups of the scalar tile kernel");
}

// The int16 lanes of the AVX2 packed kernels at their bounds (matmul_avx2.cpp, tile_block_sums):
// every activation of a token's blocks has low byte 255 (+32767 = 0x7fff: high byte +127;
// -32513 = 0x80ff: high byte -128) or is -32767 (0x8001: high byte -128), and each row's codes sit
// at one end of their range: q4_0 / q4_K 0 or 15, q5_K 0 (c - 16 = -16 on the low bytes) or 31,
// q6_K 0 (c - 32 = -32) or 63, so that the low and high sums of each lane reach their extremes
// over the runs taken before widening (q4 / q5: two runs, q6: one): -32640 low with codes 0 for
// q5_K and q6_K, -31744 and -32256 high with codes 31 and 63. Scales at the ends too (q4_K / q5_K
// 63, q6_K -128 and +127: |U * s| near 2^31). When such blocks set the row's exponent bound
// (variants 0-2) their terms can pass 2^51 and the scalar tile fallback take the group (q4_K and
// q6_K here); in variants 3-5 (lead) every row's first super-block has fp16 fields of 65504
// against zero activation blocks, so the bound sits 2^15 above the extreme blocks, their terms
// stay inside the double epilogue's binade and the vector path gives these bits.
TEST_CASE("packed AVX2 kernels: int16 lanes at their bounds (low bytes 255, codes at both ends) give the reference bits") {
  if (!cpu::row_pack_kernel(gguf::DTYPE_Q4_0, cpu::isa::avx2)) MESSAGE("no AVX2 here: nothing to check");
  rng r{32640};
  int64_t n_cases = 0, n_bad = 0;
  const float acts[3] = {32767.0f, -32513.0f, -32767.0f};
  for (dtype t : {gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K})
    for (int64_t n_in : {512, 1024})
      for (int64_t n_tok = 1; n_tok <= 4; ++n_tok)
        for (int variant = 0; variant < 6; ++variant) {
          const bool lead = variant >= 3;
          const gguf::dtype_traits& tr = gguf::dtype_get(t);
          const int64_t n_out = 35, super = tr.type_size * (256 / tr.block_size);
          fuzz_case c{t, n_in, n_out, n_tok, {}, {}, {}};
          c.w.assign(static_cast<size_t>(n_out * (n_in / 256) * super), 0);
          for (int64_t row = 0; row < n_out; ++row)
            for (int64_t s = 0; s < n_in / 256; ++s) {
              uint8_t* sb = c.w.data() + (row * (n_in / 256) + s) * super;
              // Codes at the top on odd rows (variant 0), even rows (1) or by super-block (2).
              const bool top = variant % 3 == 0 ? row % 2 == 1 : variant % 3 == 1 ? row % 2 == 0 : r.range(0, 1) == 1;
              const uint8_t fill = top ? 0xff : 0x00;
              const bool big = lead && s == 0;
              const uint16_t d = big ? 0x7bff : static_cast<uint16_t>(0x3c00 | r.range(0, 1023)),
                             dmin = big ? 0x7bff : static_cast<uint16_t>(0x3800 | r.range(0, 1023));
              if (t == gguf::DTYPE_Q4_0) {
                for (int b = 0; b < 8; ++b) {
                  std::memcpy(sb + 18 * b, &d, 2);
                  std::memset(sb + 18 * b + 2, fill, 16);
                }
              } else if (t == gguf::DTYPE_Q6_K) {
                std::memset(sb, fill, 192);                                      // ql, qh: codes 63 or 0
                std::memset(sb + 192, r.range(0, 1) ? 0x80 : 0x7f, 16);          // scales -128 or +127
                std::memcpy(sb + 208, &d, 2);
              } else {
                std::memcpy(sb, &d, 2);
                std::memcpy(sb + 2, &dmin, 2);
                std::memset(sb + 4, 0xff, 12);                                   // scales and mins 63
                std::memset(sb + 16, fill, static_cast<size_t>(super - 16));     // (qh and) qs
              }
            }
          // Token t: one of the three activations everywhere (t < 3), or one per half block (t = 3:
          // the halves' low-byte sums differ); with lead, zeros over the first super-block.
          c.x.assign(static_cast<size_t>(n_tok * n_in), 0.0f);
          for (int64_t tok = 0; tok < n_tok; ++tok)
            for (int64_t h = 0; h < n_in / 16; ++h) {
              const float v = lead && h < 16 ? 0.0f : acts[tok < 3 ? (tok + variant) % 3 : r.range(0, 2)];
              for (int64_t i = 0; i < 16; ++i) c.x[static_cast<size_t>(tok * n_in + h * 16 + i)] = v;
            }
          c.name = std::string(tr.name) + " n_in " + std::to_string(n_in) + " n_tok " + std::to_string(n_tok) + " variant " +
                   std::to_string(variant);
          check_packed(r, c, n_cases, n_bad);
        }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " packed cases at the int16 bounds");
}

using test::guarded;  // tests/guard_pages.h

TEST_CASE("gemv: no read past the end of the weights or any activation array (guard pages)") {
  rng r{99};
  for (dtype t : INT_TYPES) {
    const bool k = gguf::dtype_get(t).block_size == 256;
    for (int64_t n_in : k ? std::vector<int64_t>{256, 512, 768, 1024, 2304} : std::vector<int64_t>{32, 64, 96, 160, 224, 288, 512, 544, 1056}) {
      for (int64_t n_tok = 1; n_tok <= 4; ++n_tok) {
        CAPTURE(n_in);
        CAPTURE(n_tok);
        const int64_t n_out = 3;
        const fuzz_case c = make_case(r, t, n_in, n_out, n_tok, 0);
        cpu::act_pack p;
        cpu::act_pack_build(c.x.data(), n_tok, n_in, p);
        guarded<int16_t> q(p.q.size()), qe(p.q_eo.size());
        guarded<int32_t> ex(p.exp.size()), mx(p.max_exp.size()), hs(p.half_sum.size());
        guarded<double> sc(p.scale.size()), hsc(p.half_scaled.size()), ssc(p.sum_scaled.size()), asc(p.abs_scaled.size()),
            mdv(p.magic_div.size());
        guarded<uint8_t> w(c.w.size());
        std::memcpy(sc.p, p.scale.data(), p.scale.size() * 8);
        std::memcpy(hsc.p, p.half_scaled.data(), p.half_scaled.size() * 8);
        std::memcpy(ssc.p, p.sum_scaled.data(), p.sum_scaled.size() * 8);
        std::memcpy(asc.p, p.abs_scaled.data(), p.abs_scaled.size() * 8);
        std::memcpy(mdv.p, p.magic_div.data(), p.magic_div.size() * 8);
        std::memcpy(q.p, p.q.data(), p.q.size() * 2);
        std::memcpy(qe.p, p.q_eo.data(), p.q_eo.size() * 2);
        std::memcpy(ex.p, p.exp.data(), p.exp.size() * 4);
        std::memcpy(mx.p, p.max_exp.data(), p.max_exp.size() * 4);
        std::memcpy(hs.p, p.half_sum.data(), p.half_sum.size() * 4);
        std::memcpy(w.p, c.w.data(), c.w.size());
        std::vector<int32_t> bounds(static_cast<size_t>(n_out));
        cpu::weight_row_bounds(t, c.w.data(), n_in, 0, n_out, bounds.data());
        const cpu::act_view xv{p.n_blocks, q.p, ex.p, mx.p, hs.p, sc.p, hsc.p, ssc.p, asc.p, mdv.p, qe.p};
        const cpu::act_view xn{p.n_blocks, p.q.data(), p.exp.data(), p.max_exp.data(), p.half_sum.data(), p.scale.data(),
                               p.half_scaled.data(), p.sum_scaled.data(), p.abs_scaled.data(), p.magic_div.data(), p.q_eo.data()};
        const uint64_t rb = gguf::dtype_row_bytes(t, n_in);
        for (cpu::isa isa : cpu::isa_all_supported()) {
          if (isa == cpu::isa::scalar) continue;
          std::vector<int64_t> a(static_cast<size_t>(n_tok * n_out), 0), b(a.size(), 0);
          const bool ok_a = isa == cpu::isa::avx512 ? cpu::gemv_avx512(t, xv, n_tok, w.p, rb, bounds.data(), 0, n_out, a.data())
                                                    : cpu::gemv_avx2(t, xv, n_tok, w.p, rb, bounds.data(), 0, n_out, a.data());
          const bool ok_b = isa == cpu::isa::avx512 ? cpu::gemv_avx512(t, xn, n_tok, c.w.data(), rb, bounds.data(), 0, n_out, b.data())
                                                    : cpu::gemv_avx2(t, xn, n_tok, c.w.data(), rb, bounds.data(), 0, n_out, b.data());
          CHECK(ok_a);  // finite scales: the row kernels ran (a false would leave nothing tested)
          CHECK(ok_a == ok_b);
          CHECK(a == b);
        }
      }
    }
  }
}

// The AVX2 row kernels take two groups of eight blocks per iteration (GROUPS = 2) with a partial
// last group; every tail shape of that loop (nb 1..40: 0..15 blocks past a multiple of 16; 1..9
// super-blocks: an odd last super-block), on the five fused types, plus blocks built to reach the
// 2^51 limit of the double epilogue so that each fused kernel's integer fallback runs (q4_K's reads
// act_pack::q_eo too): fp16 scales up to 65504, codes at their extreme on even elements and 0 on odd
// ones, even activations +-32767 and odd ones small (so an even/odd mix-up changes the sums), fp16
// scales of the top binade with random mantissas and signs. The extreme blocks also run with six
// tokens, where the prompt path's panel kernel takes them and needs the same fallback.
TEST_CASE("gemv fuzz: two-group tails of the AVX2 row kernels, and the 2^51 fallback of row and panel kernels") {
  rng r{20261203};
  int64_t n_cases = 0, n_bad = 0;
  for (dtype t : {gguf::DTYPE_Q8_0, gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K}) {
    const gguf::dtype_traits& tr = gguf::dtype_get(t);
    const bool k = tr.block_size == 256;
    for (int64_t units = 1; units <= (k ? 9 : 40); ++units)
      for (int64_t n_tok : {1, 2, 3, 4, 6})
        for (int kind = 0; kind < 4; ++kind) {
          if (n_tok > cpu::GEMV_MAX_TOKENS && kind != 3) continue;  // 6 tokens: the panel kernel's fallback
          const int64_t n_in = units * tr.block_size, n_out = r.range(1, 9);
          fuzz_case c = make_case(r, t, n_in, n_out, n_tok, kind == 3 ? 2 : kind);
          if (kind == 3) {
            // Codes at their extreme on even elements, zero-ish on odd ones (so that an even/odd
            // mix-up of codes or activations changes the sum), largest scales.
            int64_t c0 = 0, c1 = 0;  // the code bytes of a block
            if (t == gguf::DTYPE_Q8_0) c0 = 2, c1 = 34;
            if (t == gguf::DTYPE_Q4_0) c0 = 2, c1 = 18;
            if (t == gguf::DTYPE_Q4_K) c0 = 16, c1 = 144;
            if (t == gguf::DTYPE_Q5_K) c0 = 48, c1 = 176;
            if (t == gguf::DTYPE_Q6_K) c0 = 0, c1 = 128;
            for (uint64_t off = 0; off < c.w.size(); off += tr.type_size) {
              uint8_t* blk = c.w.data() + off;
              std::memset(blk, 0xff, tr.type_size);
              for (int64_t j = c0; j < c1; ++j) blk[j] = j % 2 == 0 ? (t == gguf::DTYPE_Q8_0 ? 0x80 : 0xff) : 0x00;
              if (t == gguf::DTYPE_Q6_K) std::memset(blk + 192, 0x7f, 16);  // int8 scales +127
              // Largest magnitude 65504 for a quarter of the fields, otherwise any mantissa of
              // that binade and either sign: the row's terms then sweep 2^51 .. 2^55 of both
              // signs as the row length sets C, through every window the fallback test must
              // catch (a term near -6 * 2^51 rounds into [-4, -2], whose exponent is the valid
              // one: only the sign tells it apart).
              for (int f : test::fp16_fields(t)) {
                const uint16_t h = r.range(0, 3) == 0 ? 0x7bff
                                                      : static_cast<uint16_t>((r.range(0, 1) ? 0x8000 : 0) | 0x7800 | r.range(0, 1023));
                std::memcpy(blk + f, &h, 2);
              }
            }
            // Activations: every even element of a block +-32767 (one sign per block), odd ones small.
            for (size_t b = 0; b < c.x.size(); b += 32) {
              const float v = r.range(0, 1) ? 32767.0f : -32767.0f;
              for (size_t i = b; i < b + 32; ++i) c.x[i] = i % 2 == 0 ? v : static_cast<float>(r.range(-300, 300));
            }
          }
          check_case(r, c, n_out, n_cases, n_bad);
        }
  }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " two-group tail cases");
}

// The AVX2 epilogue rounds a term x as M + x * 2^-51 (M = 3 + 2^-50) and accepts the sum only when
// every result kept the sign and exponent of [2, 4). A term near -6 * 2^51 lands in (-4, -2]: the
// exponent is the accepted one and only the sign bit refuses it. Here one row of one or two q8_0
// blocks (even codes -128, the rest 0) meets activations whose even elements are all +32767, and
// the fp16 scale runs over every mantissa of the top binade with both signs: the row's single
// term sweeps about +-2^52 .. +-2^55 in steps of a 2^-10 part, through that window, on the row
// kernel (one token) and on the panel kernel (six tokens, the same activations each).
TEST_CASE("AVX2 double epilogue: a term that rounds to between -4 and -2 falls back to the integer path") {
  rng r{61};
  int64_t n_cases = 0, n_bad = 0;
  for (int64_t n_in : {32, 64})
    for (int64_t n_tok : {1, 6})
      for (int sign = 0; sign < 2; ++sign)
        for (int mant = 0; mant < 1024; mant += 3) {
          fuzz_case c{gguf::DTYPE_Q8_0, n_in, 1, n_tok, {}, {}, {}};
          c.w.assign(static_cast<size_t>(n_in / 32 * 34), 0);
          for (int64_t b = 0; b < n_in / 32; ++b) {
            uint8_t* blk = c.w.data() + b * 34;
            const uint16_t h = static_cast<uint16_t>((sign ? 0x8000 : 0) | 0x7800 | mant);
            std::memcpy(blk, &h, 2);
            for (int j = 0; j < 32; j += 2) blk[2 + j] = 0x80;
          }
          c.x.assign(static_cast<size_t>(n_tok * n_in), 0.0f);
          for (size_t i = 0; i < c.x.size(); i += 2) c.x[i] = 32767.0f;
          c.name = "q8_0 n_in " + std::to_string(n_in) + " n_tok " + std::to_string(n_tok) + " d " + (sign ? "-" : "+") + std::to_string(mant);
          check_case(r, c, 1, n_cases, n_bad);
        }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " single-term rows");
}

// q6_K codes reach 4096 (q -32 times scale -128), so a 32-element block's sum of products can pass
// 2^31 (32 * 4096 * 32767 > 2^31): a panel with such codes is "wide" (matmul_internal.h) and sums
// each half block apart. Every code of these rows at an extreme (+31 * 127, -32 * -128, or mixed
// by block) against activations at +-32767: the decoders must mark the panel wide, on the prompt
// path (six tokens) and the row kernels (one and four).
TEST_CASE("cpu matmul: q6_K blocks whose sums pass 2^31 take the wide panel and give the reference bits") {
  rng r{4096};
  int64_t n_cases = 0, n_bad = 0;
  for (int64_t n_tok : {1, 4, 6})
    for (int variant = 0; variant < 3; ++variant) {
      const int64_t n_in = 512, n_out = r.range(1, 20);
      fuzz_case c{gguf::DTYPE_Q6_K, n_in, n_out, n_tok, {}, {}, {}};
      c.w.assign(static_cast<size_t>(n_out * (n_in / 256) * 210), 0);
      for (size_t off = 0; off < c.w.size(); off += 210) {
        uint8_t* sb = c.w.data() + off;
        const bool top = variant == 0 || (variant == 2 && r.range(0, 1) == 0);
        std::memset(sb, top ? 0xff : 0x00, 192);              // q = 31 or -32 everywhere
        std::memset(sb + 192, top ? 0x7f : 0x80, 16);         // scales 127 or -128
        const uint16_t h = static_cast<uint16_t>(0x3c00 | r.range(0, 1023));  // d in [1, 2)
        std::memcpy(sb + 208, &h, 2);
      }
      c.x.assign(static_cast<size_t>(n_tok * n_in), 0.0f);
      for (size_t b = 0; b < c.x.size(); b += 32) {
        const float v = r.range(0, 3) == 0 ? -32767.0f : 32767.0f;
        for (size_t i = b; i < b + 32; ++i) c.x[i] = v;
      }
      c.name = "q6_K extreme n_tok " + std::to_string(n_tok) + " variant " + std::to_string(variant);
      check_case(r, c, n_out, n_cases, n_bad);
    }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " extreme q6_K cases");
}
