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
#include "test_util.h"

#include <algorithm>
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
                                    out.data() + test::GUARD);
  return out;
}

void compare_attention(bool (*pick)(const op_case&), const char* what) {
  test::table_tally tally;
  for (const op_case& c : test::op_cases()) {
    if (!pick(c)) continue;
    CAPTURE(c.name);
    const auto p = test::prepare_for(c, {test::op_kind::attention}, test::GPU_SKIPS, tally);
    if (!p) continue;
    const auto diff = test::first_difference(p->want, gpu_attention(c, p->in));
    CHECK_MESSAGE(!diff, diff->to_string());
  }
  MESSAGE(tally.to_string(std::string(what) + " on " + test::gpu_test_device().desc().name));
}

}  // namespace

TEST_CASE("gpu attention: head sizes, grouped heads and position counts give the reference bits") {
  compare_attention([](const op_case&) { return true; }, "attention");
}

TEST_CASE("gpu attention: no position, all-zero q, and non-finite q") {
  // The table's rows of all-zero q next to a row attending nothing; a NaN query, more positions
  // than cells and no query row at all.
  compare_attention([](const op_case& c) { return c.pat == test::pattern::zero_q_rows; }, "attention, zero q rows");
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
                                    c.n_cells, c.kq_scale, none.data());
  CHECK(none == std::vector<float>(2, SENTINEL));
}
