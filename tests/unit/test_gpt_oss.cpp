// gpt-oss's parts below the model: the MXFP4 weight type (known answers from the OCP microscaling
// spec, the integer decode against the float decode, round trips), the clamped SwiGLU (known
// answers, every CPU instruction set against the reference by memcmp over bit-pattern sweeps),
// attention sinks (known answers; the op table's sink cases run in test_kernels_cpu_attn.cpp) and
// the YaRN RoPE table against an independent evaluation of ggml's formula.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "gguf/dtype.h"
#include "gguf/quants.h"
#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "model/forward.h"
#include "numerics/exact.h"
#include "numerics/wblock.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::kernels;

namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// One MXFP4 block: scale byte e, codes c[0..31] (element j < 16 in the low nibble of byte j).
std::vector<uint8_t> mxfp4_block(uint8_t e, const int (&c)[32]) {
  std::vector<uint8_t> b(17);
  b[0] = e;
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(c[j] | (c[j + 16] << 4));
  return b;
}

}  // namespace

TEST_CASE("mxfp4: the type's layout is ggml's (id 39, 32 elements in 17 bytes)") {
  const gguf::dtype_traits* t = gguf::dtype_find(39);
  REQUIRE(t != nullptr);
  CHECK(std::string(t->name) == "mxfp4");
  CHECK(t->block_size == 32);
  CHECK(t->type_size == 17);
  CHECK(gguf::dtype_row_bytes(gguf::DTYPE_MXFP4, 64) == 34);
  CHECK(gguf::dtype_from_name("MXFP4") == t);
}

TEST_CASE("mxfp4: blocks decode to the OCP spec's E2M1 values times the E8M0 scale") {
  // E2M1 codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign. E8M0 byte e is 2^(e - 127).
  const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  int codes[32];
  for (int j = 0; j < 32; ++j) codes[j] = j % 16;
  for (int e : {127, 128, 120, 140, 2, 1, 0, 252}) {
    CAPTURE(e);
    const std::vector<uint8_t> b = mxfp4_block(static_cast<uint8_t>(e), codes);
    float y[32];
    gguf::quants_dequantize_row(gguf::DTYPE_MXFP4, b.data(), y, 32);
    for (int j = 0; j < 32; ++j) {
      const int c = codes[j];
      const double want = (c & 8 ? -1.0 : 1.0) * e2m1[c & 7] * std::ldexp(1.0, e - 127);
      CAPTURE(j);
      CHECK(static_cast<double>(y[j]) == want);
    }
    // The integer form holds the same values exactly: doubled code values times 2^(e - 128).
    numerics::wblock w;
    numerics::weight_decode_block(gguf::DTYPE_MXFP4, b.data(), 0, w);
    CHECK(w.d_exp == e - 128);
    for (int j = 0; j < 32; ++j) CHECK(numerics::wblock_value(w, j) == static_cast<double>(y[j]));
  }
  // Scale bytes whose values overflow a float (or are NaN, 255) decode to inf as in ggml, and the
  // integer form refuses them: no weight of such a block is a finite number.
  for (int e : {253, 254, 255}) {
    CAPTURE(e);
    const std::vector<uint8_t> b = mxfp4_block(static_cast<uint8_t>(e), codes);
    float y[32];
    gguf::quants_dequantize_row(gguf::DTYPE_MXFP4, b.data(), y, 32);
    CHECK(std::isinf(y[7]));  // 12 * 2^(e - 128) >= 2^128
    numerics::wblock w;
    CHECK_THROWS_WITH_AS(numerics::weight_decode_block(gguf::DTYPE_MXFP4, b.data(), 0, w),
                         doctest::Contains(e == 255 ? "NaN in the OCP MX format" : "overflow a float"), input_error);
  }
  const int small[32] = {1, 2, 3, 9, 10, 11};  // at most 3 (1.5 in E2M1): 3 * 2^126 is finite
  {
    const std::vector<uint8_t> b = mxfp4_block(254, small);
    numerics::wblock w;
    numerics::weight_decode_block(gguf::DTYPE_MXFP4, b.data(), 0, w);
    CHECK(numerics::wblock_value(w, 2) == std::ldexp(3.0, 126));
  }
  CHECK(numerics::mxfp4_block_problem(252, 12) == nullptr);
  CHECK(numerics::mxfp4_block_problem(253, 6) == nullptr);
  CHECK(numerics::mxfp4_block_problem(253, 8) != nullptr);
  CHECK(numerics::mxfp4_block_problem(255, 0) != nullptr);
  // Element placement: j < 16 in the low nibbles, j >= 16 in the high ones.
  int one_hot[32] = {};
  one_hot[3] = 7;    // 6
  one_hot[19] = 10;  // -1
  const std::vector<uint8_t> b = mxfp4_block(127, one_hot);
  CHECK(b[1 + 3] == 0xA7);
  float y[32];
  gguf::quants_dequantize_row(gguf::DTYPE_MXFP4, b.data(), y, 32);
  for (int j = 0; j < 32; ++j) CHECK(y[j] == (j == 3 ? 6.0f : j == 19 ? -1.0f : 0.0f));
}

TEST_CASE("mxfp4: the quantizer's blocks decode back to the nearest code, and re-encode to the same bytes") {
  test::test_rng r{39};
  std::vector<float> x(32 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r.normal() * std::ldexp(1.0, static_cast<int>(i / 32) % 40 - 20));
  for (int j = 0; j < 32; ++j) x[5 * 32 + j] = 0.0f;  // an all-zero block
  std::vector<uint8_t> q(gguf::dtype_row_bytes(gguf::DTYPE_MXFP4, static_cast<int64_t>(x.size())));
  gguf::quants_quantize_row(gguf::DTYPE_MXFP4, x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size());
  gguf::quants_dequantize_row(gguf::DTYPE_MXFP4, q.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    // ggml's scale e = floor(log2 max|x|) - 2 + 127: the largest magnitude is 8 to 16 half-scales
    // (4 to 8 in E2M1 units), so the top code (12) saturates the largest values of a block
    const double half = std::ldexp(1.0, q[b * 17] - 128);
    if (amax > 0) {
      CHECK(amax / half >= 8.0);
      CHECK(amax / half < 16.0);
    }
    for (int j = 0; j < 32; ++j) {  // the nearest of the 16 values: no other is closer
      const double err = std::fabs(static_cast<double>(y[b * 32 + j]) - x[b * 32 + j]);
      for (int v : {0, 1, 2, 3, 4, 6, 8, 12})
        for (int s : {-1, 1}) CHECK(err <= std::fabs(s * v * half - x[b * 32 + j]) + 1e-30);
    }
  }
  std::vector<uint8_t> again(q.size());
  gguf::quants_quantize_row(gguf::DTYPE_MXFP4, y.data(), again.data(), static_cast<int64_t>(y.size()));
  CHECK(std::memcmp(q.data(), again.data(), q.size()) == 0);
}

TEST_CASE("mxfp4: the exact matmul of an mxfp4 row equals the matmul of its decoded f32 values") {
  // Every mxfp4 value is exact in f32, so both rows are the same numbers: the exact dot products of
  // the two types must agree bit for bit.
  test::test_rng r{7};
  const int64_t n_in = 96, n_out = 5;
  std::vector<float> wf(static_cast<size_t>(n_in * n_out));
  for (float& v : wf) v = static_cast<float>(r.normal() * 0.05);
  std::vector<uint8_t> wq(gguf::dtype_row_bytes(gguf::DTYPE_MXFP4, n_in) * n_out);
  gguf::quants_quantize_row(gguf::DTYPE_MXFP4, wf.data(), wq.data(), n_in * n_out);
  std::vector<float> wd(wf.size());
  gguf::quants_dequantize_row(gguf::DTYPE_MXFP4, wq.data(), wd.data(), n_in * n_out);
  std::vector<float> x(static_cast<size_t>(n_in));
  for (float& v : x) v = static_cast<float>(r.normal());
  numerics::qvec xq;
  numerics::quantize_act(x.data(), n_in, xq);
  std::vector<float> y4(static_cast<size_t>(n_out)), y32(static_cast<size_t>(n_out));
  matmul_exact_ref(&xq, 1, gguf::DTYPE_MXFP4, wq.data(), n_in, n_out, y4.data(), 0, n_out);
  matmul_exact_ref(&xq, 1, gguf::DTYPE_F32, reinterpret_cast<const uint8_t*>(wd.data()), n_in, n_out, y32.data(), 0, n_out);
  CHECK(std::memcmp(y4.data(), y32.data(), sizeof(float) * y4.size()) == 0);
  double want = 0;
  for (int64_t i = 0; i < n_in; ++i) want += static_cast<double>(wd[i]) * x[i];
  CHECK(std::fabs(y4[0] - want) <= 1e-3 * std::fabs(want) + 1e-6);
}

TEST_CASE("swiglu_oai: known answers, clamps and special values") {
  const float a = 1.702f, lim = 7.0f;
  // Inside the clamps: x * sigmoid(alpha x) * (y + 1).
  for (float g : {-3.0f, -0.5f, 0.25f, 1.0f, 6.5f})
    for (float u : {-6.0f, -1.0f, 0.0f, 2.5f}) {
      const double want = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
      CHECK(std::fabs(numerics::swiglu_oai_f32(g, u, a, lim) - want) <= 4e-7 * std::fabs(want) + 1e-30);
    }
  // The gate is clamped above only; up on both sides.
  CHECK(bits(numerics::swiglu_oai_f32(100.0f, 1.0f, a, lim)) == bits(numerics::swiglu_oai_f32(7.0f, 1.0f, a, lim)));
  CHECK(bits(numerics::swiglu_oai_f32(1.0f, 1e30f, a, lim)) == bits(numerics::swiglu_oai_f32(1.0f, 7.0f, a, lim)));
  CHECK(bits(numerics::swiglu_oai_f32(1.0f, -1e30f, a, lim)) == bits(numerics::swiglu_oai_f32(1.0f, -7.0f, a, lim)));
  CHECK(bits(numerics::swiglu_oai_f32(INFINITY, 0.0f, a, lim)) == bits(numerics::swiglu_oai_f32(7.0f, 0.0f, a, lim)));
  CHECK(numerics::swiglu_oai_f32(1.0f, -1.0f, a, lim) == 0.0f);     // up + 1 == 0
  CHECK(numerics::swiglu_oai_f32(-200.0f, 3.0f, a, lim) == 0.0f);  // the sigmoid underflows
  CHECK(std::isnan(numerics::swiglu_oai_f32(NAN, 1.0f, a, lim)));
  CHECK(std::isnan(numerics::swiglu_oai_f32(1.0f, NAN, a, lim)));
  CHECK(numerics::swiglu_oai_f32(0x1p-130f, 5.0f, a, lim) == 0.0f);  // a subnormal gate is zero
}

TEST_CASE("swiglu_oai: every CPU instruction set gives the reference's bits, out of place and in place") {
  // Gates and ups: a stride through the bit patterns, dense sweeps around the clamp (+-7), 0, the
  // sigmoid's underflow, subnormals, infinities and NaNs; every gate with several ups.
  std::vector<float> g, u;
  const float ups[] = {0.0f, -0.0f, 1.0f, -1.0f, 6.999999f, 7.0f, 7.000001f, -7.0f, -7.000001f, 1e30f, -INFINITY, NAN, 0x1p-140f};
  auto push = [&](float x) {
    for (float y : ups) {
      g.push_back(x);
      u.push_back(y);
    }
  };
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 1000003) push(from_bits(static_cast<uint32_t>(b)));
  for (float c : {7.0f, -7.0f, 0.0f, 52.0f, -52.0f, 60.0f, -60.0f, 0x1p-126f})
    for (int d = -300; d <= 300; ++d) push(from_bits(static_cast<uint32_t>(static_cast<int64_t>(bits(c)) + d)));
  push(INFINITY);
  push(-INFINITY);
  push(NAN);
  g.push_back(1.0f);  // odd length: a partial last vector
  u.push_back(2.0f);
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<float> want(g.size());
  swiglu_oai_f32_ref(g.data(), u.data(), n, 1.702f, 7.0f, want.data());
  for (cpu::isa isa : cpu::isa_all_supported()) {
    CAPTURE(cpu::isa_name(isa));
    std::vector<float> got(g.size(), from_bits(0x7fc0deadu));
    cpu::swiglu_oai_f32_cpu(isa, g.data(), u.data(), n, 1.702f, 7.0f, got.data());
    CHECK(std::memcmp(want.data(), got.data(), sizeof(float) * g.size()) == 0);
    std::vector<float> in_g = g, in_u = u;
    cpu::swiglu_oai_f32_cpu(isa, in_g.data(), in_u.data(), n, 1.702f, 7.0f, in_g.data());
    CHECK(std::memcmp(want.data(), in_g.data(), sizeof(float) * g.size()) == 0);
    cpu::swiglu_oai_f32_cpu(isa, g.data(), in_u.data(), n, 1.702f, 7.0f, in_u.data());
    CHECK(std::memcmp(want.data(), in_u.data(), sizeof(float) * g.size()) == 0);
  }
  MESSAGE("swiglu_oai: " << n << " gate/up pairs compared by bits");
}

TEST_CASE("attention sinks: known answers and refusals") {
  // One position whose score is 0 (a zero query) and a sink of 0: the two share the softmax
  // equally, so the output is exactly half of V (small integers, exact in the int16 cache).
  const int64_t hd = 32;
  std::vector<float> v(hd), k(hd, 1.0f), q(hd, 0.0f), out(hd);
  for (int64_t i = 0; i < hd; ++i) v[i] = static_cast<float>(i + 1) * (i % 2 ? -1.0f : 1.0f);
  numerics::qvec kq, vq;
  numerics::quantize_act(k.data(), hd, kq);
  numerics::quantize_act(v.data(), hd, vq);
  const kv_head_view kv{kq.q.data(), kq.exp.data(), hd, 1}, vv{vq.q.data(), vq.exp.data(), hd, 1};
  const float zero = 0.0f;
  attention_exact_ref(q.data(), hd, kv, vv, 1, attention_kq_scale(hd), out.data(), 0.0f, &zero);
  for (int64_t i = 0; i < hd; ++i) CHECK(out[i] == v[i] / 2);
  // No sink: all of V.
  attention_exact_ref(q.data(), hd, kv, vv, 1, attention_kq_scale(hd), out.data());
  for (int64_t i = 0; i < hd; ++i) CHECK(out[i] == v[i]);
  // A sink of ln 3 takes three quarters of the weight.
  const float ln3 = static_cast<float>(std::log(3.0));
  attention_exact_ref(q.data(), hd, kv, vv, 1, attention_kq_scale(hd), out.data(), 0.0f, &ln3);
  for (int64_t i = 0; i < hd; ++i) CHECK(std::fabs(out[i] - v[i] / 4) <= 1e-6f * std::fabs(v[i]));
  // A sink far above the scores takes everything: the output underflows to zero.
  const float big = 200.0f;
  attention_exact_ref(q.data(), hd, kv, vv, 1, attention_kq_scale(hd), out.data(), 0.0f, &big);
  for (int64_t i = 0; i < hd; ++i) CHECK(out[i] == 0.0f);
  // The CPU kernels agree, and both refuse a non-finite sink.
  for (cpu::isa isa : cpu::isa_all_supported()) {
    std::vector<float> got(hd);
    cpu::attention_exact_cpu(isa, q.data(), hd, kv, vv, 1, attention_kq_scale(hd), got.data(), 0.0f, &ln3);
    attention_exact_ref(q.data(), hd, kv, vv, 1, attention_kq_scale(hd), out.data(), 0.0f, &ln3);
    CHECK(std::memcmp(out.data(), got.data(), sizeof(float) * hd) == 0);
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      CHECK_THROWS_AS(attention_exact_ref(q.data(), hd, kv, vv, 1, 0.125f, out.data(), 0.0f, &bad), input_error);
      CHECK_THROWS_AS(cpu::attention_exact_cpu(isa, q.data(), hd, kv, vv, 1, 0.125f, got.data(), 0.0f, &bad), input_error);
      const float sinks[2] = {0.0f, bad};
      std::vector<float> q2(2 * hd, 0.0f), got2(2 * hd);
      CHECK_THROWS_AS(cpu::attention_exact_cpu_heads(isa, q2.data(), 2, hd, kv, vv, 1, 0.125f, got2.data(), 0.0f, sinks),
                      input_error);
    }
  }
}

TEST_CASE("yarn: the RoPE table follows ggml's YaRN formula, and leaves tables without it unchanged") {
  // gpt-oss's values: base 150000, factor 32 over 4096 original positions, 64 rotated dimensions.
  model::hparams hp;
  hp.arch = model::ARCH_GPT_OSS;
  hp.n_rot = hp.head_dim = 64;
  hp.n_ctx_train = 131072;
  hp.rope_freq_base = hp.rope_freq_base_swa = 150000.0;
  hp.rope_scale_linear = hp.rope_scale_linear_swa = 1.0 / 32.0;
  hp.rope_yarn = true;
  hp.n_ctx_orig_yarn = 4096;
  const model::rope_params p = model::layer_rope(hp, 1);
  // ggml_rope_yarn_corr_dims: floor(64 ln(4096 / (32 * 2 pi)) / (2 ln 150000)) = 8 and
  // ceil(64 ln(4096 / (2 pi)) / (2 ln 150000)) = 18.
  CHECK(p.corr_low == 8.0);
  CHECK(p.corr_high == 18.0);
  CHECK(p.ext_factor == 1.0);
  CHECK(std::fabs(p.mscale - (1.0 + 0.1 * std::log(32.0))) < 1e-12);
  for (int64_t pos : {0, 1, 17, 1000, 100000}) {
    CAPTURE(pos);
    std::vector<float> row(64);
    rope_table_row(pos, 64, p.freq_base, p.freq_scale, nullptr, row.data(), p.ext_factor, p.corr_low, p.corr_high, p.mscale);
    for (int i = 0; i < 32; ++i) {
      const double extrap = static_cast<double>(pos) * std::pow(150000.0, -2.0 * i / 64.0);
      const double ramp = 1.0 - std::min(1.0, std::max(0.0, (i - 8.0) / 10.0));
      const double theta = extrap / 32.0 * (1.0 - ramp) + extrap * ramp;
      const double m = 1.0 + 0.1 * std::log(32.0);
      CAPTURE(i);
      CHECK(std::fabs(row[2 * i] - std::cos(theta) * m) <= 2e-7);
      CHECK(std::fabs(row[2 * i + 1] - std::sin(theta) * m) <= 2e-7);
    }
  }
  // Without YaRN the parameters are the plain ones, and the table is the same bits as before.
  hp.rope_yarn = false;
  hp.rope_scale_linear = hp.rope_scale_linear_swa = 1.0;
  const model::rope_params plain = model::layer_rope(hp, 1);
  CHECK(plain.ext_factor == 0.0);
  CHECK(plain.mscale == 1.0);
  std::vector<float> a(64), b(64);
  rope_table_row(777, 64, 150000.0, 1.0, nullptr, a.data());
  rope_table_row(777, 64, plain.freq_base, plain.freq_scale, nullptr, b.data(), plain.ext_factor, plain.corr_low,
                 plain.corr_high, plain.mscale);
  CHECK(std::memcmp(a.data(), b.data(), sizeof(float) * 64) == 0);
}
