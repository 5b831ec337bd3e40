// The element-wise ops of a gpu::device (rms_norm, swiglu, add, add_bias, rope, kv_quantize, and
// the activations geglu, swiglu_oai, softcap and scale)
// against kernels/ref by memcmp, over every case of those ops in the op table (tests/op_cases.h):
// seeded random inputs over wide magnitude ranges, odd shapes (lengths 1 to 16.8 M, past 65535
// groups of 256 invocations; rows 1..7; cols 1, 31, 33, 100, 4096, 5632; groups of 2 to 600),
// sentinel values (signed zeros, subnormal inputs, products and sums that land on or just below
// the smallest normal, an exact rounding tie at 2^-126, magnitudes near overflow, eps from 1e-44
// to inf), outputs with guard words on each side, and add, swiglu and rms_norm in place as well.
// The device's copies of exp_f32, recip_f32, rsqrt_f32 and silu_f32 are checked through swiglu
// (up = 1: the output is silu_f32 itself) and rms_norm (rows whose rsqrt argument spans every
// exponent) on the table's dense sweeps.
// Non-goals: NaN payloads (IEEE leaves them to the hardware; the exact path never produces NaN from
// finite model inputs): the table's cases with non-finite inputs are skipped, and say so.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/gpu_test_util.h"
#include "op_cases.h"
#include "op_table_driver.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using test::op_case;
using test::op_kind;

namespace {

kernels::gpu::device& dev() { return detaudit::test::gpu_test_device(); }

// Case c on the device, into a guarded buffer; in_place: the output buffer starts as input 0 (rms
// x, a, an activation's first input) or input 1 (swiglu's and geglu's up) and the device writes
// over it.
std::vector<float> gpu_run(const op_case& c, const test::op_inputs& in, bool in_place) {
  const bool on_up = c.op == op_kind::swiglu || c.op == op_kind::geglu;
  const std::vector<float>& aliased = on_up ? in.y : in.x;
  std::vector<float> out = in_place ? test::output_buffer_with(aliased) : test::output_buffer(c, in);
  float* y = out.data() + test::GUARD;
  const float* x = in_place && !on_up ? y : in.x.data();
  const float* u = in_place && on_up ? y : in.y.data();
  const kernels::gpu::act_params p = test::gpu_act_params(c);
  switch (c.op) {
    case op_kind::rms_norm: dev().rms_norm(x, c.rows, c.cols, c.group, c.weighted ? in.y.data() : nullptr, c.eps, y); break;
    case op_kind::swiglu: dev().swiglu(x, u, c.cols, y); break;
    case op_kind::add: dev().add(x, u, c.cols, y); break;
    case op_kind::add_bias: dev().add_bias(y, c.rows, c.cols, in.y.data()); break;
    case op_kind::rope: dev().rope(y, c.rows, c.n_head, c.head_dim, c.n_rot, c.neox, in.tables.data()); break;
    case op_kind::geglu: case op_kind::swiglu_oai: case op_kind::softcap: case op_kind::scale:
      dev().activation(test::gpu_act(c), x, kernels::gpu::act_binary(test::gpu_act(c)) ? u : nullptr, c.cols, p, y);
      break;
    case op_kind::kv_quantize:
      dev().kv_quantize(in.x.data(), in.y.data(), c.rows, c.n_head_kv, c.head_dim, reinterpret_cast<uint8_t*>(y));
      break;
    default: break;
  }
  return out;
}

// The test device's element-wise ops and kv_quantize, and (add, swiglu, rms_norm) in place, as
// backends of the op table (op_table_driver.h).
[[maybe_unused]] const bool gpu_elementwise_registered = [] {
  test::op_backend b;
  b.name = "the test device";
  b.ops = {op_kind::rms_norm, op_kind::swiglu,     op_kind::add,     op_kind::add_bias, op_kind::rope,
           op_kind::kv_quantize, op_kind::geglu, op_kind::swiglu_oai, op_kind::softcap, op_kind::scale};
  b.skips = test::GPU_SKIPS;
  b.run = [](const op_case& c, const test::op_inputs& in) { return gpu_run(c, in, false); };
  test::op_backend in_place = b;
  in_place.name = "the test device, in place";
  in_place.ops = {op_kind::rms_norm, op_kind::swiglu,     op_kind::add,    op_kind::geglu,
                  op_kind::swiglu_oai, op_kind::softcap, op_kind::scale};
  in_place.run = [](const op_case& c, const test::op_inputs& in) { return gpu_run(c, in, true); };
  return test::op_backends_add({std::move(b), std::move(in_place)});
}();

}  // namespace

TEST_CASE("gpu softcap rejects the caps softcap_f32_ref rejects, before anything runs") {
  const std::vector<float> x = {1.0f, 2.0f};
  std::vector<float> out(2, 7.0f), ref(2);
  for (float cap : {0.0f, -30.0f, NAN, INFINITY, 1e-40f, 1e38f * 10.0f, 0x1p127f}) {
    kernels::gpu::act_params p;
    p.cap = cap;
    CHECK_THROWS_AS(kernels::softcap_f32_ref(x.data(), 2, cap, ref.data()), input_error);
    CHECK_THROWS_WITH_AS(dev().activation(kernels::gpu::act::softcap, x.data(), nullptr, 2, p, out.data()),
                         doctest::Contains("is not a positive normal float"), input_error);
    CHECK(out[0] == 7.0f);  // nothing written
  }
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

TEST_CASE("gpu kv_quantize rejects a non-finite K or V") {
  std::vector<float> k(64, 1.0f), v(64, 1.0f);
  std::vector<uint8_t> cells(2 * 2 * (64 + 4));
  k[5] = INFINITY;
  CHECK_THROWS_AS(dev().kv_quantize(k.data(), v.data(), 1, 1, 64, cells.data()), input_error);
}
