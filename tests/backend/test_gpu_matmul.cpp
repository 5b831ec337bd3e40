// gpu::device::matmul against kernels/ref (matmul_exact_ref on quantize_act rows) by memcmp, on
// the test device of the executable's API: every weight type, random block bytes (every code and
// sub-block scale a type can hold, fp16 scales from subnormal to 2^15) and quantized real rows,
// odd lengths for F32/F16/BF16, several shapes and token counts, and sentinels (zero tokens, zero
// rows, all-zero tokens, activation and weight exponents far apart, subnormal inputs, the errors
// the reference throws).
#include <doctest/doctest.h>

#include "backend/gpu_test_util.h"
#include "test_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "gguf/quants.h"
#include "kernels/gpu/gpu.h"
#include "kernels/ref/ref.h"
#include "numerics/exact.h"
#include "util/error.h"

using namespace detaudit;
using gguf::dtype;

namespace {

using rng = detaudit::test::test_rng;

const dtype kLegacyTypes[] = {gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_1, gguf::DTYPE_Q5_0, gguf::DTYPE_Q5_1,
                              gguf::DTYPE_Q8_0};
const dtype kSuperTypes[] = {gguf::DTYPE_Q2_K, gguf::DTYPE_Q3_K, gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K,
                             gguf::DTYPE_Q6_K};
const dtype kFloatTypes[] = {gguf::DTYPE_F32, gguf::DTYPE_F16, gguf::DTYPE_BF16};

constexpr float kSentinel = -7.25f;
constexpr int64_t kGuard = 5;  // sentinel floats after y

std::string type_name(dtype t) { return gguf::dtype_get(t).name; }

bool is_float_type(dtype t) { return t == gguf::DTYPE_F32 || t == gguf::DTYPE_F16 || t == gguf::DTYPE_BF16; }

// Offsets of the fp16 scale fields in one block (super-block) of an integer type (ggml layouts).
std::vector<int> fp16_fields(dtype t) {
  switch (t) {
    case gguf::DTYPE_Q4_1: case gguf::DTYPE_Q5_1: case gguf::DTYPE_Q4_K: case gguf::DTYPE_Q5_K: return {0, 2};
    case gguf::DTYPE_Q2_K: return {80, 82};
    case gguf::DTYPE_Q3_K: return {108};
    case gguf::DTYPE_Q6_K: return {208};
    default: return {0};
  }
}

// A finite fp16: zero (1 in 16), subnormal (1 in 16) or normal; either sign.
uint16_t random_fp16(rng& r) {
  const uint16_t sign = r.range(0, 1) ? 0x8000 : 0;
  const int64_t kind = r.range(0, 15);
  if (kind == 0) return sign;
  const uint16_t frac = static_cast<uint16_t>(r.range(0, 1023));
  if (kind == 1) return static_cast<uint16_t>(sign | (frac | 1));
  return static_cast<uint16_t>(sign | r.range(1, 30) << 10 | frac);
}

// A float of random sign with exponent 2^lo .. 2^hi (1 in 16 zero, 1 in 32 subnormal).
float random_float(rng& r, int lo, int hi) {
  const uint32_t sign = r.range(0, 1) ? 0x80000000u : 0u;
  const int64_t kind = r.range(0, 31);
  if (kind < 2) return 0.0f;
  uint32_t bits = sign | (static_cast<uint32_t>(r.next()) & 0x007fffffu);
  if (kind > 2) bits |= static_cast<uint32_t>(r.range(lo, hi) + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// n_out rows of n_in elements of type t. Integer types: random bytes with finite fp16 scales, or
// (quantized) real rows from quants_quantize_row. Float types: values with exponents over
// 2^-30 .. 2^14 (F32 and BF16) or the finite fp16 range, subnormals and zeros included.
std::vector<uint8_t> random_matrix(rng& r, dtype t, int64_t n_in, int64_t n_out, bool quantized) {
  const uint64_t row_bytes = gguf::dtype_row_bytes(t, n_in);
  std::vector<uint8_t> w(row_bytes * static_cast<uint64_t>(n_out));
  if (is_float_type(t) || quantized) {
    std::vector<float> f(static_cast<size_t>(n_in));
    for (int64_t row = 0; row < n_out; ++row) {
      for (auto& v : f) v = quantized ? 0.05f * r.normal() : random_float(r, t == gguf::DTYPE_F16 ? -24 : -30, 14);
      gguf::quants_quantize_row(t, f.data(), w.data() + static_cast<uint64_t>(row) * row_bytes, n_in);
    }
    if (t == gguf::DTYPE_F16 && !quantized) {
      for (size_t i = 0; i + 1 < w.size(); i += 8) {  // some raw fp16 subnormals
        const uint16_t h = static_cast<uint16_t>(r.range(1, 1023) | (r.range(0, 1) << 15));
        std::memcpy(&w[i], &h, 2);
      }
    }
    return w;
  }
  const gguf::dtype_traits& tr = gguf::dtype_get(t);
  for (auto& b : w) b = static_cast<uint8_t>(r.next());
  for (uint64_t off = 0; off < w.size(); off += tr.type_size) {
    for (int f : fp16_fields(t)) {
      const uint16_t h = random_fp16(r);
      std::memcpy(&w[off + static_cast<uint64_t>(f)], &h, 2);
    }
  }
  return w;
}

// Activations whose 32-element blocks have scales 2^lo .. 2^hi, 1 in 12 blocks zero.
std::vector<float> random_acts(rng& r, int64_t n_tok, int64_t n_in, int lo, int hi) {
  std::vector<float> x(static_cast<size_t>(n_tok * n_in));
  for (size_t b = 0; b * 32 < x.size(); ++b) {
    const int sc = static_cast<int>(r.range(lo, hi));
    const bool zero = r.range(0, 11) == 0;
    for (size_t i = b * 32; i < std::min(x.size(), b * 32 + 32); ++i) {
      x[i] = zero ? 0.0f : r.normal() * numerics::pow2_f32(sc);
    }
  }
  return x;
}

std::vector<float> ref_matmul(dtype t, const std::vector<uint8_t>& w, const std::vector<float>& x, int64_t n_tok,
                              int64_t n_in, int64_t n_out) {
  std::vector<numerics::qvec> xs(static_cast<size_t>(n_tok));
  for (int64_t k = 0; k < n_tok; ++k) numerics::quantize_act(x.data() + k * n_in, n_in, xs[static_cast<size_t>(k)]);
  std::vector<float> y(static_cast<size_t>(n_tok * n_out + kGuard), kSentinel);
  kernels::matmul_exact_ref(xs.data(), n_tok, t, w.data(), n_in, n_out, y.data(), 0, n_out);
  return y;
}

std::vector<float> gpu_matmul(dtype t, const std::vector<uint8_t>& w, const std::vector<float>& x, int64_t n_tok,
                              int64_t n_in, int64_t n_out, kernels::gpu::device& dev = test::gpu_test_device()) {
  const kernels::gpu::weight_handle h = dev.upload_weight(t, w.data(), n_in, n_out);
  std::vector<float> y(static_cast<size_t>(n_tok * n_out + kGuard), kSentinel);
  dev.matmul(h, x.data(), n_tok, y.data());
  return y;
}

// One case: reference and device on the same inputs, compared by memcmp (sentinels included).
void check_case(rng& r, dtype t, int64_t n_in, int64_t n_out, int64_t n_tok, bool quantized, int lo, int hi) {
  const std::string type_s = type_name(t);
  CAPTURE(type_s);
  CAPTURE(n_in);
  CAPTURE(n_out);
  CAPTURE(n_tok);
  CAPTURE(quantized);
  const std::vector<uint8_t> w = random_matrix(r, t, n_in, n_out, quantized);
  const std::vector<float> x = random_acts(r, n_tok, n_in, lo, hi);
  const std::string diff = test::first_difference(ref_matmul(t, w, x, n_tok, n_in, n_out), gpu_matmul(t, w, x, n_tok, n_in, n_out));
  CHECK_MESSAGE(diff.empty(), diff);
}

// Every (n_out, n_tok) of {1, 7, 33} x {1, 3, 9} for the short rows, two shapes for n_in 4096.
void check_shapes(rng& r, dtype t, std::initializer_list<int64_t> n_ins, bool quantized) {
  for (int64_t n_in : n_ins) {
    for (int64_t n_out : {1, 7, 33}) {
      for (int64_t n_tok : {1, 3, 9}) {
        if (n_in >= 4096 && n_out * n_tok != 1 && n_out * n_tok != 33 * 9) continue;
        check_case(r, t, n_in, n_out, n_tok, quantized, -8, 8);
      }
    }
  }
}

}  // namespace

TEST_CASE("gpu matmul: legacy block types (q4_0 q4_1 q5_0 q5_1 q8_0) give the reference bits") {
  rng r{801};
  for (dtype t : kLegacyTypes) {
    check_shapes(r, t, {32, 64, 256, 4096}, false);
    check_case(r, t, 256, 7, 3, true, -2, 2);
  }
}

TEST_CASE("gpu matmul: K-quant types (q2_K q3_K q4_K q5_K q6_K) give the reference bits") {
  rng r{802};
  for (dtype t : kSuperTypes) {
    check_shapes(r, t, {256, 4096}, false);
    check_case(r, t, 512, 7, 3, true, -2, 2);
  }
}

TEST_CASE("gpu matmul: f32 f16 bf16 rows, odd lengths included, give the reference bits") {
  rng r{803};
  for (dtype t : kFloatTypes) check_shapes(r, t, {8, 33, 172, 32, 64, 256, 4096}, false);
}

TEST_CASE("gpu matmul: activation exponents spread over 2^-100 .. 2^100 give the reference bits") {
  rng r{804};
  for (dtype t : {gguf::DTYPE_Q4_0, gguf::DTYPE_Q5_1, gguf::DTYPE_Q8_0, gguf::DTYPE_Q2_K, gguf::DTYPE_Q4_K,
                  gguf::DTYPE_Q6_K, gguf::DTYPE_F32, gguf::DTYPE_BF16}) {
    check_case(r, t, 512, 7, 3, false, -100, 100);
    check_case(r, t, 512, 7, 3, false, -120, -100);
    check_case(r, t, 256, 5, 2, false, 90, 110);
  }
}

TEST_CASE("gpu matmul: f32 weights near the ends of the float range give the reference bits") {
  rng r{807};
  for (auto [lo, hi] : {std::pair<int, int>{100, 127}, {-126, -100}, {-126, 127}}) {
    CAPTURE(lo);
    CAPTURE(hi);
    const int64_t n_in = 200, n_out = 7, n_tok = 3;
    std::vector<float> wf(static_cast<size_t>(n_in * n_out));
    for (auto& v : wf) v = random_float(r, lo, hi);
    std::vector<uint8_t> w(wf.size() * 4);
    std::memcpy(w.data(), wf.data(), w.size());
    const std::vector<float> x = random_acts(r, n_tok, n_in, -100, 100);
    const std::string diff = test::first_difference(ref_matmul(gguf::DTYPE_F32, w, x, n_tok, n_in, n_out),
                                              gpu_matmul(gguf::DTYPE_F32, w, x, n_tok, n_in, n_out));
    CHECK_MESSAGE(diff.empty(), diff);
  }
}

TEST_CASE("gpu matmul: more rows than one dispatch's group count give the reference bits") {
  rng r{808};
  const int64_t n_out = 65537 + 33;  // beyond maxComputeWorkGroupCount[0] (65535 on most devices)
  check_case(r, gguf::DTYPE_Q4_0, 32, n_out, 2, false, -4, 4);
}

TEST_CASE("gpu matmul: zero tokens, zero rows, all-zero tokens and subnormal inputs") {
  rng r{805};
  kernels::gpu::device& dev = test::gpu_test_device();
  for (dtype t : {gguf::DTYPE_Q8_0, gguf::DTYPE_Q4_K, gguf::DTYPE_F16}) {
    const std::string type_s = type_name(t);
    CAPTURE(type_s);
    const int64_t n_in = 256, n_out = 9, n_tok = 4;
    const uint64_t row_bytes = gguf::dtype_row_bytes(t, n_in);
    std::vector<uint8_t> w = random_matrix(r, t, n_in, n_out, false);
    std::memset(w.data() + 2 * row_bytes, 0, row_bytes);  // row 2: all zero
    std::vector<float> x = random_acts(r, n_tok, n_in, -4, 4);
    std::fill(x.begin() + n_in, x.begin() + 2 * n_in, 0.0f);  // token 1: all zero
    for (int64_t i = 2 * n_in; i < 3 * n_in; i += 3) x[static_cast<size_t>(i)] = -0.0f;
    for (int64_t i = 3 * n_in; i < 4 * n_in; i += 2) {  // token 3: subnormals among normals
      const uint32_t bits = static_cast<uint32_t>(r.range(1, 0x7fffff)) | (i % 4 ? 0x80000000u : 0u);
      std::memcpy(&x[static_cast<size_t>(i)], &bits, 4);
    }
    const std::vector<float> y = gpu_matmul(t, w, x, n_tok, n_in, n_out);
    const std::string diff = test::first_difference(ref_matmul(t, w, x, n_tok, n_in, n_out), y);
    CHECK_MESSAGE(diff.empty(), diff);
    CHECK(y[2] == 0.0f);
    CHECK(y[static_cast<size_t>(n_out + 4)] == 0.0f);
    const kernels::gpu::weight_handle h = dev.upload_weight(t, w.data(), n_in, n_out);
    std::vector<float> none(3, kSentinel);
    dev.matmul(h, x.data(), 0, none.data());
    CHECK(none == std::vector<float>(3, kSentinel));
  }
  const std::vector<uint8_t> zero_w;
  const kernels::gpu::weight_handle h0 = dev.upload_weight(gguf::DTYPE_Q8_0, zero_w.data(), 64, 0);
  std::vector<float> x(128, 1.0f), y(2, kSentinel);
  dev.matmul(h0, x.data(), 2, y.data());
  CHECK(y == std::vector<float>(2, kSentinel));
}

TEST_CASE("gpu matmul: the errors of the reference (type, non-finite scale or input) are thrown") {
  rng r{806};
  kernels::gpu::device& dev = test::gpu_test_device();
  std::vector<uint8_t> w = random_matrix(r, gguf::DTYPE_Q8_0, 64, 3, false);
  CHECK_THROWS_AS(dev.upload_weight(gguf::DTYPE_Q8_1, w.data(), 64, 1), input_error);
  CHECK_THROWS_AS(dev.upload_weight(gguf::DTYPE_Q8_0, w.data(), 48, 1), input_error);
  const uint16_t inf = 0x7c00;
  std::memcpy(w.data() + 34, &inf, 2);
  CHECK_THROWS_AS(dev.upload_weight(gguf::DTYPE_Q8_0, w.data(), 64, 3), input_error);
  std::vector<float> fw(33, 1.0f);
  fw[32] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(dev.upload_weight(gguf::DTYPE_F32, reinterpret_cast<const uint8_t*>(fw.data()), 33, 1), input_error);
  std::memcpy(w.data() + 34, w.data(), 2);
  const kernels::gpu::weight_handle h = dev.upload_weight(gguf::DTYPE_Q8_0, w.data(), 64, 3);
  std::vector<float> x(128, 0.5f), y(6, kSentinel);
  x[70] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(dev.matmul(h, x.data(), 2, y.data()), input_error);
}

#ifdef DETAUDIT_HAVE_VULKAN
// The Vulkan matmul has two paths for the integer block types: 4x8-bit integer dot products
// (matmul_dot8.comp, on devices with VK_KHR_shader_integer_dot_product; lavapipe has it) and
// plain 32-bit products (matmul.comp, DETAUDIT_VULKAN_DOT8=0). Both must give the reference bits.
TEST_CASE("gpu matmul: the Vulkan int8 dot-product path and the plain path both give the reference bits") {
  std::unique_ptr<kernels::gpu::device> dot8 = kernels::gpu::open_device(kernels::gpu::api::vulkan, test::gpu_test_device_index());
  ::setenv("DETAUDIT_VULKAN_DOT8", "0", 1);
  std::unique_ptr<kernels::gpu::device> plain;
  try {
    plain = kernels::gpu::open_device(kernels::gpu::api::vulkan, test::gpu_test_device_index());
  } catch (...) {
    ::unsetenv("DETAUDIT_VULKAN_DOT8");
    throw;
  }
  ::unsetenv("DETAUDIT_VULKAN_DOT8");
  CHECK(plain->desc().features.find("int8 dot product") == std::string::npos);
  const bool has_dot8 = dot8->desc().features.find("int8 dot product") != std::string::npos;
  if (!has_dot8) MESSAGE("this Vulkan device has no int8 dot product: only the plain path is checked here");
  rng r{811};
  for (const dtype* types : {kLegacyTypes, kSuperTypes}) {
    for (int k = 0; k < 5; ++k) {
      const dtype t = types[k];
      const int64_t n_in = types == kLegacyTypes ? 96 : 512;
      for (auto [n_out, n_tok] : {std::pair<int64_t, int64_t>{7, 1}, {33, 9}, {5, 3}}) {
        const std::string type_s = type_name(t);
        CAPTURE(type_s);
        CAPTURE(n_out);
        CAPTURE(n_tok);
        const std::vector<uint8_t> w = random_matrix(r, t, n_in, n_out, k % 2 == 0);
        const std::vector<float> x = random_acts(r, n_tok, n_in, -12, 12);
        const std::vector<float> want = ref_matmul(t, w, x, n_tok, n_in, n_out);
        const std::string d_plain = test::first_difference(want, gpu_matmul(t, w, x, n_tok, n_in, n_out, *plain));
        CHECK_MESSAGE(d_plain.empty(), "plain path: " << d_plain);
        const std::string d_dot8 = test::first_difference(want, gpu_matmul(t, w, x, n_tok, n_in, n_out, *dot8));
        CHECK_MESSAGE(d_dot8.empty(), "int8 dot-product path: " << d_dot8);
      }
    }
  }
}
#endif
