// rms_norm_f32_cpu, swiglu_f32_cpu and add_f32_cpu (kernels/cpu/cpu.h) against their kernels/ref
// twins by memcmp, on every supported instruction set: every rms_norm, swiglu and add case of the
// op table (tests/op_cases.h: lengths 1 to 5632 around the vector widths, magnitudes over
// 2^-140 .. 2^127 so that squares and exponentials overflow and underflow, signed zeros,
// subnormals, mantissas on rounding ties, +-inf and NaN where the reference accepts them), each
// with the output separate and aliasing each input. Also: the reference's errors where it rejects
// its input, each variant's integer sum of squares against the contract's, and the vectorised
// exp_f32 / recip_f32 / silu_f32 (kernels/cpu/elementwise_internal.h) against numerics' by bits on
// a stride through all 2^32 patterns and dense sweeps around every threshold of the scalar code.
#include <doctest/doctest.h>

#include "op_cases.h"
#include "op_table_driver.h"
#include "test_util.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/elementwise_internal.h"
#include "kernels/ref/ref.h"
#include "numerics/exact.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::kernels;
using test::op_case;
using test::op_kind;

namespace {

using rng = detaudit::test::test_rng;

constexpr uint32_t QUIET_NAN = 0x7fc00000u;
constexpr int64_t LENGTHS[] = {1, 7, 16, 31, 32, 33, 100, 2048, 5632};

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

std::string isa_list() {
  std::string s;
  for (cpu::isa i : cpu::isa_all_supported()) s += std::string(" ") + cpu::isa_name(i);
  return s;
}

// The output aliasing of a call: a separate buffer, or the output in place of input 0 (x, gate,
// a) or input 1 (the RMS weight, up, b).
enum class alias { none, in0, in1 };
const char* alias_name(alias a) { return a == alias::none ? "separate output" : a == alias::in0 ? "out = input 0" : "out = input 1"; }

// The CPU kernel of case c (rms_norm per group, swiglu, add, geglu, swiglu_oai, softcap, scale) at isa, into a guarded buffer whose
// payload starts as the aliased input.
std::vector<float> cpu_elementwise(const op_case& c, const test::op_inputs& in, cpu::isa isa, alias a) {
  std::vector<float> out = a == alias::none ? test::output_buffer(c, in)
                                            : test::output_buffer_with(a == alias::in0 ? in.x : in.y);
  float* o = out.data() + test::GUARD;
  const float* x = a == alias::in0 ? o : in.x.data();
  const float* y = a == alias::in1 ? o : in.y.data();
  if (c.op == op_kind::rms_norm) {
    for (int64_t s = 0; s < c.rows * c.cols; s += c.group)
      cpu::rms_norm_f32_cpu(isa, x + s, c.weighted ? y : nullptr, c.group, c.eps, o + s);
  } else if (c.op == op_kind::geglu) {
    cpu::geglu_f32_cpu(isa, x, y, c.cols, o);
  } else if (c.op == op_kind::swiglu_oai) {
    cpu::swiglu_oai_f32_cpu(isa, x, y, c.cols, c.alpha, c.limit, o);
  } else if (c.op == op_kind::softcap) {
    cpu::softcap_f32_cpu(isa, x, c.cols, c.softcap, o);
  } else if (c.op == op_kind::scale) {
    cpu::scale_f32_cpu(isa, x, c.cols, c.factor, o);
  } else {
    (c.op == op_kind::swiglu ? cpu::swiglu_f32_cpu : cpu::add_f32_cpu)(isa, x, y, c.cols, o);
  }
  return out;
}

// The element-wise CPU kernels at each instruction set and output aliasing, as
// backends of the op table (op_table_driver.h).
[[maybe_unused]] const bool cpu_elem_registered = [] {
  std::vector<test::op_backend> bs;
  for (alias a : {alias::none, alias::in0, alias::in1}) {
    for (cpu::isa isa : {cpu::isa::scalar, cpu::isa::avx2, cpu::isa::avx512}) {
      test::op_backend b;
      b.name = std::string("cpu ") + cpu::isa_name(isa) + ", " + alias_name(a);
      b.ops = {op_kind::rms_norm, op_kind::swiglu, op_kind::add,     op_kind::geglu,
               op_kind::swiglu_oai, op_kind::softcap, op_kind::scale};
      b.leaves_out = [isa, a](const op_case& c) -> std::string {
        if (!cpu::isa_supported(isa)) return std::string("this CPU has no ") + cpu::isa_name(isa);
        if (a == alias::in1 && (c.op == op_kind::softcap || c.op == op_kind::scale)) return "one input";
        if (a == alias::in1 && c.op == op_kind::rms_norm && (!c.weighted || c.group != c.rows * c.cols))
          return "out = the weight only where one group spans the input";
        return "";
      };
      b.run = [isa, a](const op_case& c, const test::op_inputs& in) { return cpu_elementwise(c, in, isa, a); };
      bs.push_back(std::move(b));
    }
  }
  return test::op_backends_add(std::move(bs));
}();

// The sum of squares of docs/precision-contract.md section 8 on grid g, from numerics' primitives.
int64_t contract_sum_squares(const std::vector<float>& x, int32_t g) {
  int64_t acc = 0;
  for (float v : x) {
    int32_t m;
    int e;
    numerics::f32_decompose(numerics::flush(v), &m, &e);
    if (m != 0) acc += numerics::round_shift(int64_t{m} * m, 2 * e - g);
  }
  return acc;
}

using sum_squares_fn = int64_t (*)(const float*, int64_t, int32_t);

}  // namespace

// RMS norm's output rounds the integer sum to 24 bits, which hides most off-by-one terms, so the
// integer sum of every variant is compared with the contract's directly.
TEST_CASE("elem sum of squares of every variant equals the contract's integer sum") {
  rng r{606};
  const sum_squares_fn fns[] = {cpu::elem_sum_squares_scalar, cpu::elem_sum_squares_avx2,
                                cpu::elem_sum_squares_avx512};
  const cpu::isa isas[] = {cpu::isa::scalar, cpu::isa::avx2, cpu::isa::avx512};
  int64_t cases = 0;
  for (int64_t n : LENGTHS) {
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) {
        const float m = 1.0f + std::ldexp(1.0f, -static_cast<int>(r.range(0, 23))) * (r.next() & 1 ? 1.0f : 3.0f);
        v = r.uniform() < 0.2f ? test::special_value(r) : std::ldexp(m, static_cast<int>(r.range(-60, 0)));
      }
      const uint32_t field = cpu::elem_max_exp_field_scalar(x.data(), n);
      if (field == 0) continue;
      const int32_t g = 2 * (static_cast<int32_t>(field) - 150) + 48 + numerics::ceil_log2(n) - 62;
      const int64_t want = contract_sum_squares(x, g);
      for (int k = 0; k < 3; ++k) {
        if (!cpu::isa_supported(isas[k])) continue;
        CHECK(fns[k](x.data(), n, g) == want);
        ++cases;
      }
    }
  }
  CHECK(cases > 0);
}

TEST_CASE("elem rms_norm_f32_cpu throws the reference's error and writes nothing") {
  rng r{303};
  for (cpu::isa isa : cpu::isa_all_supported()) {
    for (int64_t n : LENGTHS) {
      std::vector<float> x = test::draw(r, test::elem(-10, 10), n);
      x[static_cast<size_t>(r.range(0, n - 1))] = test::nonfinite_value(r);
      std::vector<float> out = test::output_buffer_with(std::vector<float>(static_cast<size_t>(n), from_bits(test::SENTINEL)));
      const std::vector<float> before = out;
      CHECK_THROWS_AS(rms_norm_f32_ref(x.data(), nullptr, n, 1e-5f, out.data() + test::GUARD), input_error);
      CHECK_THROWS_AS(cpu::rms_norm_f32_cpu(isa, x.data(), nullptr, n, 1e-5f, out.data() + test::GUARD), input_error);
      const auto diff = test::first_difference(before, out);
      CHECK_MESSAGE(!diff, std::string(cpu::isa_name(isa)) << " non-finite x n " << n << ": " << diff->to_string());
    }
    const float x1[1] = {1.0f};
    float o1[1] = {0.0f};
    for (float eps : {0.0f, -1.0f, NAN, -INFINITY}) {
      CHECK_THROWS_AS(rms_norm_f32_ref(x1, nullptr, 1, eps, o1), input_error);
      CHECK_THROWS_AS(cpu::rms_norm_f32_cpu(isa, x1, nullptr, 1, eps, o1), input_error);
    }
    CHECK_THROWS_AS(cpu::rms_norm_f32_cpu(isa, x1, nullptr, 0, 1e-5f, o1), input_error);
  }
}

namespace {

// Bit patterns: a stride of 4099 through all 2^32, and 4001 patterns around each threshold of the
// scalar exp_f32 / recip_f32 (its range limits, the 2^127 split, results at 2^-126), the
// smallest normals, zeros, infinities and NaNs of both signs.
std::vector<float> sweep_patterns() {
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) x.push_back(from_bits(static_cast<uint32_t>(b)));
  const float centres[] = {100.0f, 104.0f, 88.0f, 88.72284f, 87.33654f, 0.5f, 1.0f, 2.0f,
                           0x1p126f, 0x1p127f, 0x1p-126f, 0x1p-125f, 3.4028235e38f, 0.0f, INFINITY,
                           from_bits(QUIET_NAN), from_bits(0x7f800001u)};
  for (float c : centres) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint32_t cb = to_bits(c);
      for (int d = -2000; d <= 2000; ++d) {
        const int64_t b = static_cast<int64_t>(cb) + d;
        if (b < 0 || b > 0x7fffffff) continue;
        x.push_back(from_bits(static_cast<uint32_t>(b) | sign));
      }
    }
  }
  x.push_back(1.0f);  // odd length: a partial last vector
  return x;
}

using unary_array = void (*)(cpu::isa, const float*, int64_t, float*);

void unary_sweep(unary_array f, float (*ref)(float), const char* name) {
  const std::vector<float> x = sweep_patterns();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = ref(x[i]);
  want = test::output_buffer_with(want);
  const std::vector<float> sentinels(x.size(), from_bits(test::SENTINEL));
  for (cpu::isa isa : cpu::isa_all_supported()) {
    std::vector<float> got = test::output_buffer_with(sentinels);
    f(isa, x.data(), n, got.data() + test::GUARD);
    const auto diff = test::first_difference(want, got);
    CHECK_MESSAGE(!diff, std::string(name) << " " << std::string(cpu::isa_name(isa)) << ": " << diff->to_string());
    std::vector<float> inplace = test::output_buffer_with(x);
    f(isa, inplace.data() + test::GUARD, n, inplace.data() + test::GUARD);
    const auto diff_inplace = test::first_difference(want, inplace);
    CHECK_MESSAGE(!diff_inplace, std::string(name) << " in place " << std::string(cpu::isa_name(isa)) << ": " << diff_inplace->to_string());
  }
  MESSAGE(std::string(name) << ": " << n << " patterns compared by bits on" << isa_list());
}

}  // namespace

TEST_CASE("elem vectorised exp_f32 matches numerics exp_f32 by bits") {
  unary_sweep(cpu::exp_f32_array_cpu, numerics::exp_f32, "exp_f32_array_cpu");
}

TEST_CASE("elem vectorised recip_f32 matches numerics recip_f32 by bits") {
  unary_sweep(cpu::recip_f32_array_cpu, numerics::recip_f32, "recip_f32_array_cpu");
}

TEST_CASE("elem vectorised silu_f32 matches numerics silu_f32 by bits") {
  unary_sweep(cpu::silu_f32_array_cpu, numerics::silu_f32, "silu_f32_array_cpu");
}

namespace {

void geglu_ones(cpu::isa isa, const float* x, int64_t n, float* out) {
  const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  cpu::geglu_f32_cpu(isa, x, ones.data(), n, out);
}
float gelu_times_one(float x) { return numerics::flush(numerics::gelu_f32(x) * 1.0f); }
void softcap_30(cpu::isa isa, const float* x, int64_t n, float* out) { cpu::softcap_f32_cpu(isa, x, n, 30.0f, out); }
float softcap_30_ref(float x) { return numerics::softcap_f32(x, 30.0f); }
void softcap_50(cpu::isa isa, const float* x, int64_t n, float* out) { cpu::softcap_f32_cpu(isa, x, n, 50.0f, out); }
float softcap_50_ref(float x) { return numerics::softcap_f32(x, 50.0f); }

}  // namespace

TEST_CASE("elem vectorised gelu_f32 (geglu with up = 1) matches numerics gelu_f32 by bits") {
  unary_sweep(geglu_ones, gelu_times_one, "geglu_f32_cpu");
}

TEST_CASE("elem vectorised softcap_f32 matches numerics softcap_f32 by bits") {
  unary_sweep(softcap_30, softcap_30_ref, "softcap_f32_cpu cap 30");
  unary_sweep(softcap_50, softcap_50_ref, "softcap_f32_cpu cap 50");
}

TEST_CASE("elem geglu_f32_cpu and scale_f32_cpu equal their references on every isa") {
  rng r{2323};
  for (int64_t n : LENGTHS) {
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = r.uniform() < 0.1f ? test::special_value(r) : (r.uniform() * 2 - 1) * 12.0f;
      u[i] = r.uniform() < 0.1f ? test::special_value(r) : (r.uniform() * 2 - 1) * 3.0f;
    }
    std::vector<float> want(g.size()), want_s(g.size());
    geglu_f32_ref(g.data(), u.data(), n, want.data());
    scale_f32_ref(g.data(), n, 45.254833f, want_s.data());
    for (cpu::isa isa : cpu::isa_all_supported()) {
      std::vector<float> got(g.size()), got_s = g;
      cpu::geglu_f32_cpu(isa, g.data(), u.data(), n, got.data());
      cpu::scale_f32_cpu(isa, got_s.data(), n, 45.254833f, got_s.data());
      CHECK_MESSAGE(std::memcmp(want.data(), got.data(), sizeof(float) * g.size()) == 0, cpu::isa_name(isa) << " geglu n " << n);
      CHECK_MESSAGE(std::memcmp(want_s.data(), got_s.data(), sizeof(float) * g.size()) == 0, cpu::isa_name(isa) << " scale n " << n);
    }
  }
  float o = 0;
  const float one = 1.0f;
  for (float cap : {0.0f, -1.0f, NAN, INFINITY, 1e-40f}) {
    CHECK_THROWS_AS(softcap_f32_ref(&one, 1, cap, &o), input_error);
    CHECK_THROWS_AS(cpu::softcap_f32_cpu(cpu::isa::scalar, &one, 1, cap, &o), input_error);
  }
}
