// Quantizers and dequantizers (engine/gguf/quants.h): half-precision conversions, round trips of
// every type, and the layouts checked against blocks llama.cpp's quantizer wrote (tests/data).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/quants.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit::gguf;

namespace {

// ---- Data -----------------------------------------------------------------------------------

using rng = detaudit::test::test_rng;

enum distribution {
  DIST_NORMAL,
  DIST_UNIFORM,
  DIST_POSITIVE,   // all in [0.5, 1.5): the K-quant min cannot help
  DIST_SMALL,      // 1e-3 * N(0, 1): K-quant super-block scales are fp16 subnormals
  DIST_OUTLIER,    // N(0, 1) with one 40
  DIST_LAPLACE,
  DIST_ZERO,
};

const distribution RANDOM_DISTRIBUTIONS[] = {DIST_NORMAL, DIST_UNIFORM, DIST_POSITIVE,
                                             DIST_SMALL,  DIST_LAPLACE, DIST_OUTLIER};

std::string dist_name(distribution d) {
  static const char* names[] = {"normal", "uniform", "positive", "small", "outlier", "laplace", "zero"};
  return names[d];
}

std::vector<float> make_row(distribution dist, int64_t n, uint64_t seed) {
  rng r{seed};
  std::vector<float> x(size_t(n), 0.0f);
  for (float& v : x) {
    switch (dist) {
      case DIST_NORMAL: v = r.normal(); break;
      case DIST_UNIFORM: v = 2.0f * r.uniform() - 1.0f; break;
      case DIST_POSITIVE: v = 0.5f + r.uniform(); break;
      case DIST_SMALL: v = 1e-3f * r.normal(); break;
      case DIST_OUTLIER: v = r.normal(); break;
      case DIST_LAPLACE: v = (r.uniform() < 0.5f ? -1.0f : 1.0f) * -std::log(1.0f - r.uniform()); break;
      case DIST_ZERO: break;
    }
  }
  if (dist == DIST_OUTLIER) x[size_t(n / 3)] = 40.0f;
  return x;
}

// sqrt(sum (y - x)^2 / sum x^2); 0 when both are all zero.
double rel_rms(const float* x, const float* y, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    den += double(x[i]) * x[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<uint8_t> quantize(dtype t, const std::vector<float>& x) {
  std::vector<uint8_t> q(dtype_row_bytes(t, int64_t(x.size())));
  quants_quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  return q;
}

std::vector<float> dequantize(dtype t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  quants_dequantize_row(t, q.data(), y.data(), n);
  return y;
}

// ---- Per-type expectations ------------------------------------------------------------------

struct type_case {
  dtype type;
  std::string name;
  double max_rel_rms;  // bound for the round trip of one row of any of RANDOM_DISTRIBUTIONS
  bool idempotent;     // quantize(dequantize(quantize(x))) == quantize(x), byte for byte
};

// Bounds: the relative RMS error measured on one row of 4096 values (N(0,1) / worst of the six
// distributions of the round-trip test), plus about 20%. Q8_K's f32 scale is recomputed from its
// own products on requantization, so it is not promised to reproduce its bytes (it did on these
// rows); the K-quants search their scales and are not idempotent.
const type_case TYPES[] = {
    {DTYPE_F32, "f32", 0.0, true},         // 0 / 0
    {DTYPE_F16, "f16", 0.0003, true},      // 0.000204 / 0.000213
    {DTYPE_BF16, "bf16", 0.0021, true},    // 0.00167 / 0.00170
    {DTYPE_Q4_0, "q4_0", 0.13, true},      // 0.0863 / 0.108 (outlier)
    {DTYPE_Q4_1, "q4_1", 0.11, true},      // 0.0793 / 0.0913 (laplace)
    {DTYPE_Q5_0, "q5_0", 0.072, true},     // 0.0433 / 0.0598 (outlier)
    {DTYPE_Q5_1, "q5_1", 0.053, true},     // 0.0384 / 0.0439 (laplace)
    {DTYPE_Q8_0, "q8_0", 0.01, true},      // 0.00539 / 0.00817 (outlier)
    {DTYPE_Q2_K, "q2_K", 0.35, false},     // 0.264 / 0.290 (laplace)
    {DTYPE_Q3_K, "q3_K", 0.20, false},     // 0.143 / 0.169 (laplace)
    {DTYPE_Q4_K, "q4_K", 0.10, false},     // 0.0704 / 0.0830 (outlier)
    {DTYPE_Q5_K, "q5_K", 0.049, false},    // 0.0345 / 0.0406 (laplace)
    {DTYPE_Q6_K, "q6_K", 0.029, false},    // 0.0166 / 0.0239 (outlier)
    {DTYPE_Q8_K, "q8_K", 0.024, false},    // 0.00694 / 0.0197 (outlier: one scale per 256)
};

const type_case& case_of(dtype t) {
  for (const type_case& c : TYPES) {
    if (c.type == t) return c;
  }
  throw std::logic_error("no test case for type " + std::to_string(uint32_t(t)));
}

}  // namespace

// ---- Half precision -------------------------------------------------------------------------

TEST_CASE("fp16_to_f32 decodes all 65536 halves like the IEEE formula") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    const float f = fp16_to_f32(uint16_t(h));
    bool ok;
    if (exp == 0x1f) {
      ok = mant ? std::isnan(f) : f == sign * INFINITY;
    } else {
      const float expect = exp == 0 ? sign * std::ldexp(float(mant), -24)
                                    : sign * std::ldexp(float(1024 + mant), int(exp) - 25);
      ok = std::bit_cast<uint32_t>(f) == std::bit_cast<uint32_t>(expect);
    }
    if (!ok && mismatches++ == 0) FAIL_CHECK("first mismatch at half 0x" << std::hex << h << ": got " << f);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("f32_to_fp16 inverts fp16_to_f32 on all 65536 halves and keeps NaN a NaN") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t back = f32_to_fp16(fp16_to_f32(uint16_t(h)));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    const bool ok = is_nan ? ((back & 0x7c00) == 0x7c00 && (back & 0x3ff) && (back & 0x8000) == (h & 0x8000))
                           : back == h;
    if (!ok && mismatches++ == 0) FAIL_CHECK("half 0x" << std::hex << h << " came back as 0x" << back);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("f32_to_fp16 rounds to nearest, ties to even") {
  const float ulp_f32_at_1 = std::ldexp(1.0f, -23);
  struct rounding {
    float in;
    uint16_t out;
    const char* what;
  } cases[] = {
      {1.0f, 0x3c00, "one"},
      {0.1f, 0x2e66, "0.1: 1.6 * 2^-4, mantissa 614.4 -> 614"},
      {1.0f / 3.0f, 0x3555, "1/3: mantissa 341.33 -> 341"},
      {1.0f + std::ldexp(1.0f, -11), 0x3c00, "tie between 0x3c00 and 0x3c01 -> even 0x3c00"},
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02, "tie between 0x3c01 and 0x3c02 -> even 0x3c02"},
      {1.0f + std::ldexp(1.0f, -11) + ulp_f32_at_1, 0x3c01, "just above a tie rounds up"},
      {-2.0f, 0xc000, "minus two"},
      {65504.0f, 0x7bff, "largest half"},
      {65519.99f, 0x7bff, "below the tie with 65536 stays finite"},
      {65520.0f, 0x7c00, "tie between 65504 (odd) and 65536 (even, inf) -> inf"},
      {1e10f, 0x7c00, "overflow"},
      {-1e10f, 0xfc00, "negative overflow"},
      {std::ldexp(1.0f, -14), 0x0400, "smallest normal"},
      {std::ldexp(1023.5f, -24), 0x0400, "tie between largest subnormal (odd) and smallest normal"},
      {std::ldexp(1.0f, -24), 0x0001, "smallest subnormal"},
      {std::ldexp(1.0f, -25), 0x0000, "half the smallest subnormal: tie -> even zero"},
      {std::ldexp(1.0f, -25) + std::ldexp(1.0f, -40), 0x0001, "just above that tie"},
      {std::ldexp(3.0f, -25), 0x0002, "tie between 1 and 2 subnormal units -> 2"},
      {std::ldexp(5.0f, -25), 0x0002, "tie between 2 and 3 subnormal units -> 2"},
      {-std::ldexp(1.0f, -25), 0x8000, "negative tiny -> -0"},
      {std::ldexp(1.0f, -149), 0x0000, "f32 subnormal underflows"},
      {-0.0f, 0x8000, "minus zero"},
      {INFINITY, 0x7c00, "inf"},
      {-INFINITY, 0xfc00, "-inf"},
  };
  for (const rounding& c : cases) {
    CAPTURE(c.what);
    CHECK(f32_to_fp16(c.in) == c.out);
  }
  CHECK((f32_to_fp16(NAN) & 0x7fff) > 0x7c00);
  CHECK((f32_to_fp16(std::bit_cast<float>(0x7f800001u)) & 0x7fff) > 0x7c00);  // signalling NaN
}

TEST_CASE("bf16 round trips all 65536 patterns and rounds to nearest, ties to even") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(uint16_t(h));
    if (std::bit_cast<uint32_t>(f) != h << 16 && mismatches++ == 0) FAIL_CHECK("decode 0x" << std::hex << h);
    const uint16_t back = f32_to_bf16(f);
    const bool is_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    const bool ok = is_nan ? std::isnan(bf16_to_f32(back)) : back == h;
    if (!ok && mismatches++ == 0) FAIL_CHECK("bf16 0x" << std::hex << h << " came back as 0x" << back);
  }
  CHECK(mismatches == 0);
  struct rounding {
    uint32_t in;
    uint16_t out;
    const char* what;
  } cases[] = {
      {0x3f800000, 0x3f80, "one"},
      {0x3f808000, 0x3f80, "tie -> even 0x3f80"},
      {0x3f818000, 0x3f82, "tie -> even 0x3f82"},
      {0x3f808001, 0x3f81, "just above a tie"},
      {0x7f7fffff, 0x7f80, "FLT_MAX rounds up to inf"},
      {0x7f7f7fff, 0x7f7f, "below the tie stays finite"},
      {0x00000001, 0x0000, "smallest f32 subnormal"},
      {0x00008000, 0x0000, "subnormal tie -> even 0"},
      {0x00018000, 0x0002, "subnormal tie -> even 2"},
      {0x00008001, 0x0001, "smallest bf16 subnormal"},
      {0xff800000, 0xff80, "-inf"},
      {0x7f800001, 0x7fc0, "signalling NaN is quieted, not turned into inf"},
      {0xffc00001, 0xffc0, "negative quiet NaN"},
  };
  for (const rounding& c : cases) {
    CAPTURE(c.what);
    CHECK(f32_to_bf16(std::bit_cast<float>(c.in)) == c.out);
  }
}

// ---- Contracts ------------------------------------------------------------------------------

TEST_CASE("quants_can_quantize / quants_can_dequantize name exactly the supported types") {
  for (const type_case& c : TYPES) {
    CAPTURE(c.name);
    CHECK(quants_can_quantize(c.type));
    CHECK(quants_can_dequantize(c.type));
  }
  for (dtype t : {DTYPE_Q8_1, DTYPE_IQ2_XXS, DTYPE_IQ4_NL, DTYPE_IQ4_XS, DTYPE_I8, DTYPE_I32, DTYPE_F64,
                  DTYPE_TQ1_0, DTYPE_TQ2_0, dtype(4), dtype(999)}) {
    CAPTURE(uint32_t(t));
    CHECK_FALSE(quants_can_quantize(t));
    CHECK_FALSE(quants_can_dequantize(t));
  }
}

TEST_CASE("quantize / dequantize reject a bad type or a length that is not whole blocks") {
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> q(4096);
  CHECK_THROWS_AS(quants_quantize_row(DTYPE_IQ2_XXS, x.data(), q.data(), 256), detaudit::input_error);
  CHECK_THROWS_AS(quants_dequantize_row(DTYPE_Q8_1, q.data(), x.data(), 32), detaudit::input_error);
  CHECK_THROWS_WITH_AS(quants_quantize_row(DTYPE_Q4_0, x.data(), q.data(), 33),
                       doctest::Contains("multiple of 32, got 33"), detaudit::input_error);
  CHECK_THROWS_WITH_AS(quants_dequantize_row(DTYPE_Q4_K, q.data(), x.data(), 128),
                       doctest::Contains("multiple of 256, got 128"), detaudit::input_error);
  CHECK_THROWS_AS(quants_quantize_row(DTYPE_F16, x.data(), q.data(), -1), detaudit::input_error);
  CHECK_NOTHROW(quants_quantize_row(DTYPE_Q6_K, x.data(), q.data(), 0));
}

TEST_CASE("quantize writes exactly dtype_row_bytes, every byte, whatever the buffer held") {
  const std::vector<float> x = make_row(DIST_NORMAL, 512, 7);
  for (const type_case& c : TYPES) {
    CAPTURE(c.name);
    const size_t n_bytes = dtype_row_bytes(c.type, 512);
    std::vector<uint8_t> a(n_bytes + 64, 0x00), b(n_bytes + 64, 0xab);
    quants_quantize_row(c.type, x.data(), a.data(), 512);
    quants_quantize_row(c.type, x.data(), b.data(), 512);
    CHECK(std::memcmp(a.data(), b.data(), n_bytes) == 0);
    CHECK(std::vector<uint8_t>(b.begin() + long(n_bytes), b.end()) == std::vector<uint8_t>(64, 0xab));
  }
}

// ---- Hand-made blocks: one rule of each layout ----------------------------------------------

TEST_CASE("hand-made blocks decode by ggml's layout rules") {
  SUBCASE("q4_0: low nibbles are elements 0..15, high nibbles 16..31") {
    uint8_t b[18] = {0x00, 0x3c};  // d = 1
    b[2 + 3] = 0xa1;               // element 3: 1 - 8, element 19: 10 - 8
    std::vector<float> y(32);
    quants_dequantize_row(DTYPE_Q4_0, b, y.data(), 32);
    CHECK(y[3] == -7.0f);
    CHECK(y[19] == 2.0f);
    CHECK(y[0] == -8.0f);
  }
  SUBCASE("q5_1: bit j of qh is bit 4 of element j") {
    uint8_t b[24] = {0x00, 0x40, 0x00, 0xbc};  // d = 2, m = -1
    b[4 + 2] = 0x01;                           // qh bit 16: element 16
    b[8 + 0] = 0x3f;                           // element 0: 15, element 16: 3 | 16
    std::vector<float> y(32);
    quants_dequantize_row(DTYPE_Q5_1, b, y.data(), 32);
    CHECK(y[0] == 15 * 2.0f - 1.0f);
    CHECK(y[16] == 19 * 2.0f - 1.0f);
    CHECK(y[1] == -1.0f);
  }
  SUBCASE("q4_K: scale/min 5 come from the 6-bit packing of bytes 1, 5 and 9") {
    std::vector<uint8_t> b(144, 0);
    b[0] = 0x00, b[1] = 0x3c;  // d = 1
    b[2] = 0x00, b[3] = 0x3c;  // dmin = 1
    b[4 + 1] = 0x40;           // sc[5] bits 4..5 = 1
    b[4 + 5] = 0x80;           // m[5] bits 4..5 = 2
    b[4 + 9] = 0x73;           // sc[5] low = 3, m[5] low = 7
    b[16 + 32 * 2 + 5] = 0x20;  // element 64*2 + 32 + 5 (sub-block 5): high nibble 2
    std::vector<float> y(256);
    quants_dequantize_row(DTYPE_Q4_K, b.data(), y.data(), 256);
    CHECK(y[160 + 5] == 19.0f * 2.0f - 39.0f);
    CHECK(y[0] == 0.0f);
  }
  SUBCASE("q3_K: hmask bit clear subtracts 4; scale 6 bits split over bytes") {
    std::vector<uint8_t> b(110, 0);
    b[108] = 0x00, b[109] = 0x3c;  // d = 1
    // scale 9: low nibble in the high half of scales[1], bits 4..5 in bits 4..5 of scales[9]
    b[96 + 1] = 0x50;
    b[96 + 9] = 0x30;  // v = 5 | 3 << 4 = 53 -> 21
    b[32 + 32 + 16] = 0x03;  // element 128 + 16 = 144 (sub-block 9): low bits 3
    b[16] = 1 << 4;          // hmask[16] bit 4: element 4 * 32 + 16 = 144 keeps its code
    std::vector<float> y(256);
    quants_dequantize_row(DTYPE_Q3_K, b.data(), y.data(), 256);
    CHECK(y[144] == 21.0f * 3.0f);
    CHECK(y[145] == 21.0f * -4.0f);
  }
  SUBCASE("q6_K: element 128 + 64 + 7 is the high nibble of ql[64 + 7] and bits 4..5 of qh[32 + 7]") {
    std::vector<uint8_t> b(210, 0);
    b[208] = 0x00, b[209] = 0x38;  // d = 0.5
    b[192 + 12] = uint8_t(int8_t(-3));
    b[64 + 7] = 0x90;
    b[128 + 32 + 7] = 0x20;  // bits 4..5 = 2
    std::vector<float> y(256);
    quants_dequantize_row(DTYPE_Q6_K, b.data(), y.data(), 256);
    CHECK(y[128 + 64 + 7] == 0.5f * -3.0f * float((9 | 2 << 4) - 32));
  }
}

// ---- Round trips ----------------------------------------------------------------------------

TEST_CASE("every type round-trips random rows within its error bound") {
  const int64_t n = 4096;
  for (const type_case& c : TYPES) {
    for (distribution dist : RANDOM_DISTRIBUTIONS) {
      CAPTURE(c.name);
      CAPTURE(dist_name(dist));
      const std::vector<float> x = make_row(dist, n, 1000 + uint64_t(dist));
      const std::vector<uint8_t> q = quantize(c.type, x);
      const std::vector<float> y = dequantize(c.type, q, n);
      const double err = rel_rms(x.data(), y.data(), size_t(n));
      CHECK(err <= c.max_rel_rms);
    }
  }
}

TEST_CASE("an all-zero row encodes to zero scales and decodes to exact zeros") {
  const std::vector<float> x = make_row(DIST_ZERO, 512, 0);
  for (const type_case& c : TYPES) {
    CAPTURE(c.name);
    const std::vector<uint8_t> q = quantize(c.type, x);
    const std::vector<float> y = dequantize(c.type, q, 512);
    int nonzero = 0;
    for (float v : y) nonzero += !(v == 0.0f);
    CHECK(nonzero == 0);
    CHECK(q == quantize(c.type, y));
  }
}

TEST_CASE("NaN and inf in the input stay inside their own blocks") {
  const int64_t n = 1024;
  const std::vector<float> clean = make_row(DIST_NORMAL, n, 99);
  std::vector<float> dirty = clean;
  dirty[5] = NAN;
  dirty[300] = INFINITY;
  dirty[301] = -INFINITY;
  for (const type_case& c : TYPES) {
    CAPTURE(c.name);
    const int64_t bs = dtype_get(c.type).block_size;
    const std::vector<float> a = dequantize(c.type, quantize(c.type, clean), n);
    const std::vector<float> b = dequantize(c.type, quantize(c.type, dirty), n);
    int differing = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool touched = i / bs == 5 / bs || i / bs == 300 / bs || i / bs == 301 / bs;
      const bool same = std::bit_cast<uint32_t>(a[size_t(i)]) == std::bit_cast<uint32_t>(b[size_t(i)]);
      if (!touched && !same) ++differing;
    }
    CHECK(differing == 0);
  }
}

TEST_CASE("requantizing a decoded row reproduces its bytes") {
  for (const type_case& c : TYPES) {
    if (!c.idempotent) continue;
    for (distribution dist : RANDOM_DISTRIBUTIONS) {
      CAPTURE(c.name);
      CAPTURE(dist_name(dist));
      const std::vector<float> x = make_row(dist, 4096, 2000 + uint64_t(dist));
      const std::vector<uint8_t> q = quantize(c.type, x);
      CHECK(q == quantize(c.type, dequantize(c.type, q, 4096)));
    }
  }
}

// ---- Against llama.cpp ----------------------------------------------------------------------

namespace {

// A tensor of any supported type as floats, dequantized row by row.
std::vector<float> tensor_floats(const file& f, const tensor_info& t) {
  const int64_t ne0 = t.ne.at(0);
  const int64_t n_rows = int64_t(t.n_elements) / ne0;
  const uint64_t row_bytes = dtype_row_bytes(t.type, ne0);
  REQUIRE(row_bytes * uint64_t(n_rows) == t.n_bytes);
  std::vector<float> y(t.n_elements);
  for (int64_t r = 0; r < n_rows; ++r) {
    quants_dequantize_row(t.type, f.tensor_data(t) + uint64_t(r) * row_bytes, y.data() + r * ne0, ne0);
  }
  return y;
}

// Our quantizer on x (rows of ne0), decoded again.
std::vector<float> our_round_trip(dtype type, const std::vector<float>& x, int64_t ne0) {
  const uint64_t row_bytes = dtype_row_bytes(type, ne0);
  std::vector<uint8_t> q(row_bytes);
  std::vector<float> y(x.size());
  for (size_t r = 0; r < x.size() / size_t(ne0); ++r) {
    quants_quantize_row(type, x.data() + r * size_t(ne0), q.data(), ne0);
    quants_dequantize_row(type, q.data(), y.data() + r * size_t(ne0), ne0);
  }
  return y;
}

// llama.cpp's quantizer on a fixed input (tests/data/llamacpp-quants-b4748.gguf; tests/data/README.md
// says how it was made): per type, the blocks ggml_quantize_chunk wrote and ggml's own decoding of
// them. Rows 0-5 are N(0, s) for s = 1, 0.02, 1e-3, 100, 0.3, 3; then zeros, an outlier, all
// positive, all negative, alternating signs, 1e-8-sized values.
const char* const QUANT_VECTORS = "llamacpp-quants-b4748.gguf";
const int NORMAL_ROWS = 6;

}  // namespace

TEST_CASE("llama.cpp's blocks decode bit for bit as ggml decodes them, for every quantized type") {
  const file f = file::open(detaudit::test::test_data(QUANT_VECTORS));
  int n_types = 0;
  for (const tensor_info& t : f.tensors()) {
    if (t.type == DTYPE_F32) continue;
    CAPTURE(t.name);
    const tensor_info* decoded = f.find_tensor(t.name + ".decoded");
    REQUIRE(decoded != nullptr);
    REQUIRE(decoded->n_elements == t.n_elements);
    const std::vector<float> ours = tensor_floats(f, t);
    // memcmp, not a tolerance: the block layout and the decoding arithmetic are ggml's.
    CHECK(std::memcmp(ours.data(), f.tensor_data(*decoded), ours.size() * sizeof(float)) == 0);
    ++n_types;
  }
  CHECK(n_types == 10);
}

TEST_CASE("our quantizers come as close to the input as llama.cpp's, for every quantized type") {
  const file f = file::open(detaudit::test::test_data(QUANT_VECTORS));
  const tensor_info* in = f.find_tensor("input");
  REQUIRE(in != nullptr);
  const int64_t ne0 = in->ne.at(0);
  const std::vector<float> x = tensor_floats(f, *in);
  int n_types = 0;
  for (const tensor_info& t : f.tensors()) {
    if (t.type == DTYPE_F32) continue;
    CAPTURE(t.name);
    const std::vector<float> theirs = tensor_floats(f, t);
    const std::vector<float> ours = our_round_trip(t.type, x, ne0);
    // The random rows: relative RMS error over them, ours against llama.cpp's.
    double llama = 0, own = 0;
    for (int r = 0; r < NORMAL_ROWS; ++r) {
      const size_t o = size_t(r * ne0);
      llama += rel_rms(x.data() + o, theirs.data() + o, size_t(ne0));
      own += rel_rms(x.data() + o, ours.data() + o, size_t(ne0));
    }
    MESSAGE(t.name << ": mean relative RMS error over " << NORMAL_ROWS << " random rows, llama.cpp " << llama / NORMAL_ROWS
                   << ", ours " << own / NORMAL_ROWS);
    CHECK(own <= 1.5 * llama);
    CHECK(own / NORMAL_ROWS <= case_of(t.type).max_rel_rms);  // the round-trip bound of the tests above
    // The crafted rows: zeros stay exact zeros in both; every value stays finite in ours.
    for (int64_t j = 0; j < ne0; ++j) {
      CHECK(theirs[size_t(6 * ne0 + j)] == 0.0f);
      CHECK(ours[size_t(6 * ne0 + j)] == 0.0f);
    }
    for (float v : ours) CHECK(std::isfinite(v));
    ++n_types;
  }
  CHECK(n_types == 10);
}
