// gpu::device::attention against kernels/ref (attention_exact_ref per query row and head) by
// memcmp, on the test device of the executable's API, over every attention case of the op table
// (tests/op_cases.h): head sizes 1 to 300 (partial last blocks included), grouped-query layouts,
// rows attending different numbers of positions in one call, 0 to 2000 positions, kq_scales from
// -0.25 to 2^126, and magnitude profiles from sharp to flat softmax, zero blocks and queries,
// equal and dominant scores, far exponents, crafted scores at 2^-126 and on rounding ties. The
// device reads the cells of kernels/gpu/gpu.h's layout; the reference reads the same blocks from
// arrays of their own, so a misreading of the layout cannot cancel out.
#include <doctest/doctest.h>

#include "backend/gpu_test_util.h"
#include "op_cases.h"
#include "op_table_driver.h"
#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/gpu/gpu.h"
#include "util/error.h"

using namespace detaudit;
using test::op_case;

namespace {

constexpr float SENTINEL = -7.25f;

std::vector<float> gpu_attention(const op_case& c, const test::op_inputs& in) {
  std::vector<float> out = test::output_buffer(c, in);
  test::gpu_test_device().attention(in.q.data(), static_cast<int64_t>(c.n_kv.size()), c.n_kv.data(), c.n_head,
                                    c.n_head_kv, c.head_dim, in.cells.data(), c.n_cells, c.kq_scale,
                                    test::gpu_attention_extras(c), out.data() + test::GUARD);
  return out;
}

// The test device's attention as a backend of the op table (op_table_driver.h): head sizes,
// grouped heads, position counts, all-zero q rows next to a row attending nothing.
[[maybe_unused]] const bool gpu_attention_registered = [] {
  test::op_backend b;
  b.name = "the test device";
  b.ops = {test::op_kind::attention};
  b.skips = test::GPU_SKIPS;
  b.run = gpu_attention;
  return test::op_backends_add({std::move(b)});
}();

}  // namespace

TEST_CASE("gpu attention: no position, all-zero q, and non-finite q") {
  // A row attending nothing gives zeros (the table's all-zero q rows run in the op table); a NaN
  // query, more positions than cells and no query row at all.
  const op_case& c = *std::find_if(test::op_cases().begin(), test::op_cases().end(),
                                   [](const op_case& o) { return o.pat == test::pattern::zero_q_rows; });
  test::op_inputs in = test::make_inputs(c);
  const std::vector<float> out = gpu_attention(c, in);
  CHECK(out[test::GUARD + static_cast<size_t>(c.n_head * c.head_dim)] == 0.0f);  // row 1 attends nothing
  in.q[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(gpu_attention(c, in), input_error);
  in.q[3] = 0.0f;
  op_case more = c;
  more.n_kv = {5, 6, 1};  // more positions than cells
  CHECK_THROWS_AS(gpu_attention(more, in), input_error);
  std::vector<float> none(2, SENTINEL);
  test::gpu_test_device().attention(in.q.data(), 0, c.n_kv.data(), c.n_head, c.n_head_kv, c.head_dim, in.cells.data(),
                                    c.n_cells, c.kq_scale, {}, none.data());
  CHECK(none == std::vector<float>(2, SENTINEL));
  // A soft cap or a sink attention_exact_ref refuses is refused before anything runs.
  std::vector<float> got(static_cast<size_t>(test::output_size(c)), SENTINEL);
  kernels::gpu::attention_extras x;
  for (float cap : {-1.0f, NAN, INFINITY, 1e-40f}) {
    x.softcap = cap;
    CHECK_THROWS_WITH_AS(test::gpu_test_device().attention(in.q.data(), static_cast<int64_t>(c.n_kv.size()), c.n_kv.data(),
                                                           c.n_head, c.n_head_kv, c.head_dim, in.cells.data(), c.n_cells,
                                                           c.kq_scale, x, got.data()),
                         doctest::Contains("soft cap"), input_error);
  }
  x.softcap = 0.0f;
  std::vector<float> sinks(static_cast<size_t>(c.n_head), 1.0f);
  sinks.back() = INFINITY;
  x.sinks = sinks.data();
  CHECK_THROWS_WITH_AS(test::gpu_test_device().attention(in.q.data(), static_cast<int64_t>(c.n_kv.size()), c.n_kv.data(),
                                                         c.n_head, c.n_head_kv, c.head_dim, in.cells.data(), c.n_cells,
                                                         c.kq_scale, x, got.data()),
                       doctest::Contains("sink of head"), input_error);
  CHECK(std::all_of(got.begin(), got.end(), [](float v) { return v == SENTINEL; }));
}
