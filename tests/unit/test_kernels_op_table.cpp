// The op table of the kernel tests (tests/op_cases.h) itself: its cases are unique, cover every
// op, weight type and magnitude profile the backends' tests rely on, draw the same inputs from the
// same seed, and kernels/ref gives no subnormal on any of them; first_difference reports what a
// failure message needs. And the table run on every backend this executable registers
// (op_table_driver.h: kernels/cpu at each instruction set, CUDA's host twins).
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "numerics/exact.h"
#include "op_cases.h"
#include "op_table_driver.h"

using namespace detaudit;
using test::op_case;
using test::op_kind;

TEST_CASE("op table: names are unique and every op, weight type and profile has cases") {
  const std::vector<op_case>& cases = test::op_cases();
  std::set<std::string> names;
  std::map<op_kind, int64_t> per_op;
  std::set<gguf::dtype> types;
  std::set<std::string> profiles;
  for (const op_case& c : cases) {
    CHECK_MESSAGE(names.insert(c.name).second, "duplicate name " << c.name);
    CHECK(c.name.find(';') == std::string::npos);
    CHECK(test::output_size(c) > 0);
    ++per_op[c.op];
    if (c.op == op_kind::matmul) types.insert(c.type);
    profiles.insert(test::dist_name(c.d0));
  }
  std::string counts;
  for (const auto& [op, n] : per_op) counts += std::string(" ") + test::op_name(op) + " " + std::to_string(n);
  MESSAGE(cases.size() << " cases:" << counts);
  // Every op of the table has cases (op_kind's last value is scale).
  CHECK(per_op.size() == static_cast<size_t>(op_kind::scale) + 1);
  // every type the engine computes (gguf/weight_types.h)
  CHECK(types.size() == gguf::weight_types().size());
  for (const gguf::weight_type& t : gguf::weight_types()) CHECK(types.count(t.type) == 1);
  for (const char* p : {"normal", "moderate", "mixed", "wide", "tiny", "huge", "outliers"})
    CHECK_MESSAGE(profiles.count(p) == 1, "no case of the profile " << std::string(p));
}

TEST_CASE("op table: a case draws the same inputs from its seed every time") {
  for (const op_case& c : test::op_cases()) {
    if (c.gpu_scale || test::output_size(c) > 100000 || c.n_cells * c.n_head_kv * c.head_dim > 100000) continue;
    CAPTURE(c.name);
    const test::op_inputs a = test::make_inputs(c), b = test::make_inputs(c);
    const bool same = a.w == b.w && a.cells == b.cells && a.x.size() == b.x.size() && a.y.size() == b.y.size() &&
                      std::memcmp(a.x.data(), b.x.data(), a.x.size() * 4) == 0 &&
                      std::memcmp(a.y.data(), b.y.data(), a.y.size() * 4) == 0 &&
                      std::memcmp(a.q.data(), b.q.data(), a.q.size() * 4) == 0;
    REQUIRE(same);
  }
}

TEST_CASE("op table: kernels/ref gives no subnormal output on any case") {
  int64_t n = 0, refused = 0;
  for (const op_case& c : test::op_cases()) {
    if (c.op == op_kind::kv_quantize) continue;  // cells: integers, not floats
    CAPTURE(c.name);
    const test::prepared_case p = test::prepare(c);
    if (!p.refused.empty()) {
      ++refused;
      continue;
    }
    const size_t payload = p.want.size() - 2 * test::GUARD;
    for (size_t i = 0; i < payload; ++i) {
      // rope passes dimensions >= n_rot through unchanged
      if (c.op == op_kind::rope && static_cast<int64_t>(i) % c.head_dim >= c.n_rot) continue;
      if (numerics::is_subnormal(p.want[test::GUARD + i])) {
        FAIL_CHECK("subnormal output at index " << i);
        break;
      }
    }
    ++n;
  }
  MESSAGE(n << " cases checked; kernels/ref refuses the inputs of " << refused);
  CHECK(refused < n / 50);
}

TEST_CASE("op table: first_difference reports index, values, bits and ulps") {
  std::vector<float> a = {1.0f, -0.0f, 2.5f, 3.0f}, b = a;
  CHECK_FALSE(test::first_difference(a.data(), b.data(), a.size()));
  b[2] = std::bit_cast<float>(std::bit_cast<uint32_t>(2.5f) + 3);
  auto d = test::first_difference(a.data(), b.data(), a.size());
  REQUIRE(d);
  CHECK(d->index == 2);
  CHECK(d->a == 2.5f);
  CHECK(d->ulp == 3);
  CHECK(d->to_string() == "first difference at index 2: ref 2.5 (0x40200000), backend 2.50000072 (0x40200003), 3 ulp");
  b = a;
  b[1] = 0.0f;  // +0 vs -0: the bits differ, no ulp between them
  d = test::first_difference(a.data(), b.data(), a.size());
  REQUIRE(d);
  CHECK(d->index == 1);
  CHECK(d->ulp == 0);
  b = a;
  b[0] = -1.0f;
  CHECK(test::first_difference(a.data(), b.data(), a.size())->ulp == 2 * int64_t(0x3f800000));
  CHECK_FALSE(test::first_difference(a.data(), b.data(), 0));
  // Guarded outputs: where the index lies.
  const std::vector<float> want = test::output_buffer_with(a);
  std::vector<float> got = want;
  CHECK_FALSE(test::first_difference(want, got));
  got[test::GUARD + 3] = 4.0f;
  CHECK(test::first_difference(want, got)->to_string() ==
        "first difference at index 7 (output element 3): ref 3 (0x40400000), backend 4 (0x40800000), 4194304 ulp");
  got = want;
  got[got.size() - 1] = 0.0f;
  CHECK(test::first_difference(want, got)->where == " (in the guard after the output)");
  got = want;
  got[0] = 0.0f;
  CHECK(test::first_difference(want, got)->where == " (in the guard before the output)");
  got.push_back(1.0f);
  CHECK(test::first_difference(want, got)->to_string() == "lengths differ: ref 12 floats, backend 13");
}

DETAUDIT_OP_TABLE_TESTS("")
