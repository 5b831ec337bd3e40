// gpu::device::matmul against kernels/ref (matmul_exact_ref on quantize_act rows) by memcmp, on
// the test device of the executable's API, over every matmul case of the op table
// (tests/op_cases.h): every weight type, random block bytes (every code and sub-block scale a type
// can hold, fp16 scales from subnormal to 2^15) and quantized real rows, odd lengths for
// F32/F16/BF16, f32 weights near the ends of the float range, shapes of 1 to 65570 rows and 1 to
// 130 tokens, activation exponents from 2^-120 to 2^110, zero rows and tokens, subnormal inputs.
// Also: zero tokens and zero rows, the errors the reference throws, and (Vulkan) both the int8
// dot-product path and the plain path.
#include <doctest/doctest.h>

#include "backend/gpu_test_util.h"
#include "op_cases.h"
#include "op_table_driver.h"
#include "test_util.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gguf/quants.h"
#include "gguf/weight_types.h"
#include "kernels/gpu/gpu.h"
#include "util/error.h"

using namespace detaudit;
using gguf::dtype;
using test::op_case;

namespace {

using rng = detaudit::test::test_rng;

constexpr float SENTINEL = -7.25f;

// Case c on a device, into a guarded buffer.
std::vector<float> gpu_matmul(const op_case& c, const test::op_inputs& in, kernels::gpu::device& dev) {
  const kernels::gpu::weight_handle h = dev.upload_weight(c.type, in.w.data(), c.n_in, c.n_out);
  std::vector<float> out = test::output_buffer(c, in);
  dev.matmul(h, in.x.data(), c.n_tok, out.data() + test::GUARD);
  return out;
}

#ifdef DETAUDIT_HAVE_VULKAN
// The Vulkan device opened with DETAUDIT_VULKAN_DOT8=0: the plain 32-bit products path.
kernels::gpu::device& vulkan_plain_device() {
  static const std::unique_ptr<kernels::gpu::device> plain = [] {
    ::setenv("DETAUDIT_VULKAN_DOT8", "0", 1);
    std::unique_ptr<kernels::gpu::device> d;
    try {
      d = kernels::gpu::open_device(kernels::gpu::api::vulkan, test::gpu_test_device_index());
    } catch (...) {
      ::unsetenv("DETAUDIT_VULKAN_DOT8");
      throw;
    }
    ::unsetenv("DETAUDIT_VULKAN_DOT8");
    return d;
  }();
  return *plain;
}
#endif

// The test device's matmul (and on Vulkan its plain path too) as backends of the op table
// (op_table_driver.h): every weight type the devices decode, random block bytes and quantized
// real rows, odd lengths, zero rows and tokens, subnormal inputs.
[[maybe_unused]] const bool gpu_matmul_registered = [] {
  std::vector<test::op_backend> bs;
  test::op_backend b;
  b.name = "the test device";
  b.ops = {test::op_kind::matmul};
  b.skips = test::GPU_SKIPS;
  b.run = [](const op_case& c, const test::op_inputs& in) { return gpu_matmul(c, in, test::gpu_test_device()); };
  bs.push_back(std::move(b));
#ifdef DETAUDIT_HAVE_VULKAN
  // The Vulkan matmul has two paths for the integer block types: 4x8-bit integer dot products
  // (matmul_dot8.comp, on devices with VK_KHR_shader_integer_dot_product; lavapipe has it) and
  // plain 32-bit products (matmul.comp). The device above runs the int8 path where it has one.
  test::op_backend plain;
  plain.name = "the test device's plain path (DETAUDIT_VULKAN_DOT8=0)";
  plain.ops = {test::op_kind::matmul};
  plain.skips = test::GPU_SKIPS;
  plain.leaves_out = [](const op_case& c) -> std::string {
    if (test::gpu_test_api() != kernels::gpu::api::vulkan) return "the plain path is the Vulkan matmul's";
    return test::is_float_type(c.type) ? "f32/f16/bf16 rows: one path only" : "";
  };
  plain.run = [](const op_case& c, const test::op_inputs& in) { return gpu_matmul(c, in, vulkan_plain_device()); };
  bs.push_back(std::move(plain));
#endif
  return test::op_backends_add(std::move(bs));
}();

}  // namespace

TEST_CASE("gpu matmul: zero tokens, zero rows, all-zero tokens and subnormal inputs") {
  // The table's cases with zero rows, zero tokens and subnormal tokens run in the op table; here,
  // a call of no token and a weight of no row write nothing.
  kernels::gpu::device& dev = test::gpu_test_device();
  rng r{805};
  const std::vector<uint8_t> w = test::weight_rows(r, gguf::DTYPE_Q8_0, 256, 9, test::weights::random_bytes);
  const kernels::gpu::weight_handle h = dev.upload_weight(gguf::DTYPE_Q8_0, w.data(), 256, 9);
  const std::vector<float> x(256, 1.0f);
  std::vector<float> none(3, SENTINEL);
  dev.matmul(h, x.data(), 0, none.data());
  CHECK(none == std::vector<float>(3, SENTINEL));
  const std::vector<uint8_t> zero_w;
  const kernels::gpu::weight_handle h0 = dev.upload_weight(gguf::DTYPE_Q8_0, zero_w.data(), 64, 0);
  std::vector<float> x2(128, 1.0f), y(2, SENTINEL);
  dev.matmul(h0, x2.data(), 2, y.data());
  CHECK(y == std::vector<float>(2, SENTINEL));
}

TEST_CASE("gpu matmul: the errors of the reference (type, non-finite scale or input) are thrown") {
  rng r{806};
  kernels::gpu::device& dev = test::gpu_test_device();
  std::vector<uint8_t> w = test::weight_rows(r, gguf::DTYPE_Q8_0, 64, 3, test::weights::random_bytes);
  CHECK_THROWS_AS(dev.upload_weight(gguf::DTYPE_Q8_1, w.data(), 64, 1), input_error);
  // What gguf/weight_types.h declares the devices do not decode (the op table skips those cases
  // by that column) is refused by name, never computed wrongly (no such type today: mxfp4 was the
  // last; the loop holds a new type added with gpu = false to it).
  for (const gguf::weight_type& wt : gguf::weight_types()) {
    if (wt.gpu) continue;
    const std::vector<uint8_t> zeros(gguf::dtype_row_bytes(wt.type, 256), 0);
    const std::string name = gguf::dtype_get(wt.type).name;
    CHECK_THROWS_WITH_AS(dev.upload_weight(wt.type, zeros.data(), 256, 1), doctest::Contains(name.c_str()), input_error);
  }
  CHECK_THROWS_AS(dev.upload_weight(gguf::DTYPE_Q8_0, w.data(), 48, 1), input_error);
  const uint16_t inf = 0x7c00;
  std::memcpy(w.data() + 34, &inf, 2);
  CHECK_THROWS_AS(dev.upload_weight(gguf::DTYPE_Q8_0, w.data(), 64, 3), input_error);
  std::vector<float> fw(33, 1.0f);
  fw[32] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(dev.upload_weight(gguf::DTYPE_F32, reinterpret_cast<const uint8_t*>(fw.data()), 33, 1), input_error);
  std::memcpy(w.data() + 34, w.data(), 2);
  const kernels::gpu::weight_handle h = dev.upload_weight(gguf::DTYPE_Q8_0, w.data(), 64, 3);
  std::vector<float> x(128, 0.5f), y(6, SENTINEL);
  x[70] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(dev.matmul(h, x.data(), 2, y.data()), input_error);
}

#ifdef DETAUDIT_HAVE_VULKAN
TEST_CASE("gpu matmul: DETAUDIT_VULKAN_DOT8=0 opens the plain path (the op table runs both)") {
  if (test::gpu_test_api() != kernels::gpu::api::vulkan) return;
  CHECK(vulkan_plain_device().desc().features.find("int8 dot product") == std::string::npos);
  if (test::gpu_test_device().desc().features.find("int8 dot product") == std::string::npos)
    MESSAGE("this Vulkan device has no int8 dot product: both backends of the op table ran the plain path");
}
#endif
