// rms_norm_f32_cpu, swiglu_f32_cpu and add_f32_cpu (kernels/cpu/cpu.h) against their kernels/ref
// twins by memcmp, on every supported instruction set: lengths 1 to 5632 around the vector
// widths, values whose magnitudes spread over 2^-140 .. 2^120 (squares and exponentials overflow
// and underflow, products land on subnormals), signed zeros, subnormal inputs, mantissas that put
// RMS norm's squares on rounding ties, +-inf and NaN where the reference accepts them, the
// reference's errors where it rejects them, outputs aliasing each input, and no RMS weight.
// The vectorised exp_f32 / recip_f32 / silu_f32 (kernels/cpu/elementwise_internal.h) are compared
// with numerics' by bits on a stride through all 2^32 patterns and dense sweeps around every
// threshold of the scalar code.
#include <doctest/doctest.h>

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

namespace {

using rng = detaudit::test::test_rng;

constexpr uint32_t kSentinel = 0x7fc0dead;
constexpr uint32_t kQuietNan = 0x7fc00000u;
constexpr int64_t kLengths[] = {1, 7, 16, 31, 32, 33, 100, 2048, 5632};

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }
bool is_nan(float x) { return x != x; }

// How values are drawn: a normal deviate times 2^e, e uniform in [lo, hi]; with `special`, a few
// are signed zeros, subnormals, the smallest normals, values near exp's thresholds, or have a
// mantissa with one low bit set (ties in RMS norm's squares); with `nonfinite`, a few are +-inf
// or NaN (quiet or signalling, either sign).
struct spread {
  int lo = 0;
  int hi = 0;
  bool special = false;
  bool nonfinite = false;
};

float draw_special(rng& r) {
  const uint32_t sign = (r.next() & 1) ? 0x80000000u : 0u;
  const float thresholds[] = {100.0f, 104.0f, 87.33654f, 88.72284f, 103.97208f, 0x1p-126f};
  switch (r.next() % 5) {
    case 0: return from_bits(sign);
    case 1: return from_bits(sign | static_cast<uint32_t>(1 + r.next() % 0x7fffff));
    case 2: return from_bits(sign | (0x00800000u + static_cast<uint32_t>(r.next() % 4)));
    case 3: {
      const float t = thresholds[r.next() % 6];
      return from_bits(sign | (to_bits(t) + static_cast<uint32_t>(r.range(-3, 3))));
    }
    default: {
      const int j = static_cast<int>(r.range(0, 23));
      const float m = 1.0f + std::ldexp(1.0f, -j);
      return from_bits(sign | to_bits(std::ldexp(m, static_cast<int>(r.range(-30, 2)))));
    }
  }
}

float draw_nonfinite(rng& r) {
  const uint32_t sign = (r.next() & 1) ? 0x80000000u : 0u;
  switch (r.next() % 3) {
    case 0: return from_bits(sign | 0x7f800000u);
    case 1: return from_bits(sign | kQuietNan | static_cast<uint32_t>(r.next() % 0x3fffff));
    default: return from_bits(sign | 0x7f800000u | static_cast<uint32_t>(1 + r.next() % 0x3fffff));
  }
}

std::vector<float> draw(rng& r, int64_t n, const spread& sp) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    const float u = r.uniform();
    if (sp.nonfinite && u < 0.03f) {
      v = draw_nonfinite(r);
    } else if (sp.special && u < 0.2f) {
      v = draw_special(r);
    } else {
      v = r.normal() * std::ldexp(1.0f, static_cast<int>(r.range(sp.lo, sp.hi)));
    }
  }
  return x;
}

// An output buffer of n floats with a sentinel on each side; data() + 1 is the output.
std::vector<float> guarded(int64_t n) { return std::vector<float>(static_cast<size_t>(n + 2), from_bits(kSentinel)); }

// memcmp of the two buffers; on a mismatch, the first differing index and both values.
void check_same(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) return;
  for (size_t i = 0; i < got.size(); ++i) {
    if (to_bits(got[i]) == to_bits(want[i])) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, " index %zu: got %08x (%g) want %08x (%g)", i, to_bits(got[i]),
                  static_cast<double>(got[i]), to_bits(want[i]), static_cast<double>(want[i]));
    const std::string msg = what + buf;
    FAIL_CHECK(msg);
    return;
  }
}

std::string variants_message(const char* op) {
  std::string s = std::string(op) + ": compared against the reference on";
  for (cpu::isa i : cpu::isa_all_supported()) s += std::string(" ") + cpu::isa_name(i);
  return s;
}

const spread kRmsSpreads[] = {{-140, 120, true, false}, {-3, 3, false, false}, {-130, -100, true, false},
                              {60, 120, false, false}, {-20, 20, true, false}};
const float kEps[] = {1e-5f, 1e-6f, 1e30f, 1e-44f, INFINITY};

// out = 0: separate buffer, 1: out == x, 2: out == w.
void rms_case(cpu::isa isa, const std::vector<float>& x, const std::vector<float>* w, float eps, int alias,
              const std::string& what) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> got = guarded(n), want = guarded(n);
  std::vector<float> xg = x, xw = x;
  std::vector<float> wg = w ? *w : std::vector<float>(), ww = wg;
  if (alias == 1) {
    std::memcpy(got.data() + 1, x.data(), x.size() * 4);
    std::memcpy(want.data() + 1, x.data(), x.size() * 4);
  } else if (alias == 2) {
    std::memcpy(got.data() + 1, wg.data(), wg.size() * 4);
    std::memcpy(want.data() + 1, wg.data(), wg.size() * 4);
  }
  const float* xa_got = alias == 1 ? got.data() + 1 : xg.data();
  const float* xa_want = alias == 1 ? want.data() + 1 : xw.data();
  const float* wa_got = !w ? nullptr : (alias == 2 ? got.data() + 1 : wg.data());
  const float* wa_want = !w ? nullptr : (alias == 2 ? want.data() + 1 : ww.data());
  rms_norm_f32_ref(xa_want, wa_want, n, eps, want.data() + 1);
  cpu::rms_norm_f32_cpu(isa, xa_got, wa_got, n, eps, got.data() + 1);
  check_same(got, want, what);
}

}  // namespace

TEST_CASE("elem rms_norm_f32_cpu equals rms_norm_f32_ref on every isa") {
  const std::string msg = variants_message("rms_norm_f32_cpu");
  MESSAGE(msg);
  rng r{101};
  for (cpu::isa isa : cpu::isa_all_supported()) {
    for (int64_t n : kLengths) {
      for (size_t si = 0; si < std::size(kRmsSpreads); ++si) {
        const std::vector<float> x = draw(r, n, kRmsSpreads[si]);
        const std::vector<float> w = draw(r, n, {-4, 4, true, false});
        for (float eps : kEps) {
          for (int mode = 0; mode < 4; ++mode) {
            const std::string what = std::string(cpu::isa_name(isa)) + " n " + std::to_string(n) +
                                     " spread " + std::to_string(si) + " eps " + std::to_string(eps) +
                                     " mode " + std::to_string(mode);
            rms_case(isa, x, mode == 0 ? nullptr : &w, eps, mode == 3 ? 2 : (mode == 2 ? 1 : 0), what);
          }
        }
      }
    }
  }
}

TEST_CASE("elem rms_norm_f32_cpu rounds tied squares and non-finite weights like the reference") {
  rng r{202};
  for (cpu::isa isa : cpu::isa_all_supported()) {
    // 1 and (1 + 2^-10) 2^-20 with n = 2: the second square lands on the grid at exactly .5.
    rms_case(isa, {1.0f, std::ldexp(1.0f + std::ldexp(1.0f, -10), -20)}, nullptr, 1e-5f, 0, "tie n 2");
    for (int64_t n : kLengths) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = std::ldexp(1.0f + std::ldexp(1.0f, -static_cast<int>(r.range(0, 23))),
                                        static_cast<int>(r.range(-30, 0)));
      rms_case(isa, x, nullptr, 1e-6f, 0, std::string(cpu::isa_name(isa)) + " ties n " + std::to_string(n));
      const std::vector<float> w = draw(r, n, {-4, 4, true, true});
      rms_case(isa, x, &w, 1e-6f, 0, std::string(cpu::isa_name(isa)) + " nonfinite w n " + std::to_string(n));
    }
  }
}

namespace {

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
  for (int64_t n : kLengths) {
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) {
        const float m = 1.0f + std::ldexp(1.0f, -static_cast<int>(r.range(0, 23))) * (r.next() & 1 ? 1.0f : 3.0f);
        v = r.uniform() < 0.2f ? draw_special(r) : std::ldexp(m, static_cast<int>(r.range(-60, 0)));
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
    for (int64_t n : kLengths) {
      std::vector<float> x = draw(r, n, {-10, 10, true, false});
      x[static_cast<size_t>(r.range(0, n - 1))] = draw_nonfinite(r);
      std::vector<float> out = guarded(n), before = out;
      CHECK_THROWS_AS(rms_norm_f32_ref(x.data(), nullptr, n, 1e-5f, out.data() + 1), input_error);
      CHECK_THROWS_AS(cpu::rms_norm_f32_cpu(isa, x.data(), nullptr, n, 1e-5f, out.data() + 1), input_error);
      check_same(out, before, std::string(cpu::isa_name(isa)) + " non-finite x n " + std::to_string(n));
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

// The binary element-wise ops: f(a, b, n, out). A NaN never meets another NaN in one element
// (x86 returns one operand's payload, and which one is the compiler's order of operands).
using binary_ref = void (*)(const float*, const float*, int64_t, float*);
using binary_cpu = void (*)(cpu::isa, const float*, const float*, int64_t, float*);

// Where b is NaN, a becomes 1.5: no element multiplies or adds two NaNs (silu of -inf is NaN).
void keep_one_nan(std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (is_nan(b[i])) a[i] = 1.5f;
}

void binary_case(cpu::isa isa, binary_ref fref, binary_cpu fcpu, const std::vector<float>& a,
                 const std::vector<float>& b, int alias, const std::string& what) {
  const int64_t n = static_cast<int64_t>(a.size());
  std::vector<float> got = guarded(n), want = guarded(n);
  std::vector<float> ag = a, aw = a, bg = b, bw = b;
  if (alias != 0) {
    const std::vector<float>& src = alias == 1 ? a : b;
    std::memcpy(got.data() + 1, src.data(), src.size() * 4);
    std::memcpy(want.data() + 1, src.data(), src.size() * 4);
  }
  fref(alias == 1 ? want.data() + 1 : aw.data(), alias == 2 ? want.data() + 1 : bw.data(), n, want.data() + 1);
  fcpu(isa, alias == 1 ? got.data() + 1 : ag.data(), alias == 2 ? got.data() + 1 : bg.data(), n, got.data() + 1);
  check_same(got, want, what);
}

const spread kBinarySpreads[] = {{-140, 120, true, true}, {-3, 3, false, false}, {-8, 8, true, true},
                                 {-130, -100, true, false}, {3, 7, true, false}};

void binary_sweep(binary_ref fref, binary_cpu fcpu, const char* name, uint64_t seed) {
  const std::string msg = variants_message(name);
  MESSAGE(msg);
  rng r{seed};
  for (cpu::isa isa : cpu::isa_all_supported()) {
    for (int64_t n : kLengths) {
      for (size_t sa = 0; sa < std::size(kBinarySpreads); ++sa) {
        for (size_t sb = 0; sb < std::size(kBinarySpreads); ++sb) {
          std::vector<float> a = draw(r, n, kBinarySpreads[sa]);
          const std::vector<float> b = draw(r, n, kBinarySpreads[sb]);
          keep_one_nan(a, b);
          for (int alias = 0; alias < 3; ++alias) {
            binary_case(isa, fref, fcpu, a, b, alias,
                        std::string(name) + " " + cpu::isa_name(isa) + " n " + std::to_string(n) + " spreads " +
                            std::to_string(sa) + "/" + std::to_string(sb) + " alias " + std::to_string(alias));
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("elem swiglu_f32_cpu equals swiglu_f32_ref on every isa") {
  binary_sweep(swiglu_f32_ref, cpu::swiglu_f32_cpu, "swiglu_f32_cpu", 404);
}

TEST_CASE("elem add_f32_cpu equals add_f32_ref on every isa") {
  binary_sweep(add_f32_ref, cpu::add_f32_cpu, "add_f32_cpu", 505);
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
                           from_bits(kQuietNan), from_bits(0x7f800001u)};
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
  std::vector<float> want = guarded(n);
  for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i + 1)] = ref(x[static_cast<size_t>(i)]);
  std::string isas;
  for (cpu::isa isa : cpu::isa_all_supported()) {
    isas += std::string(" ") + cpu::isa_name(isa);
    std::vector<float> got = guarded(n);
    f(isa, x.data(), n, got.data() + 1);
    check_same(got, want, std::string(name) + " " + cpu::isa_name(isa));
    std::vector<float> inplace = guarded(n);
    std::memcpy(inplace.data() + 1, x.data(), x.size() * 4);
    f(isa, inplace.data() + 1, n, inplace.data() + 1);
    check_same(inplace, want, std::string(name) + " in place " + cpu::isa_name(isa));
  }
  const std::string msg = std::string(name) + ": " + std::to_string(n) + " patterns compared by bits on" + isas;
  MESSAGE(msg);
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
