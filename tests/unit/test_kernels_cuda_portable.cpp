// The CUDA backend's per-thread arithmetic (kernels/cuda/exact_device.h), run on the host and
// compared with numerics/ and kernels/ref by memcmp. Each op's twin below calls the header's
// functions in the thread layout of its kernel (kernels/cuda/kernels_*.cu) and in other splits and
// orders, so the combining logic of the kernels is checked here too, over every case of the op
// table (tests/op_cases.h, through op_table_driver.h); a GPU is needed only for the tests/backend
// tests. Built in every configuration, with or without CUDA. The weight-block decode is not
// compared here: the kernels run numerics/wblock_inline.h itself, which test_numerics_wblock.cpp
// holds to the dequantizer.
#include <doctest/doctest.h>

#include "op_cases.h"
#include "op_table_driver.h"
#include "test_util.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/quants.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/exact_device.h"
#include "kernels/gpu/gpu.h"
#include "kernels/ref/ref.h"

using namespace detaudit;
namespace xd = detaudit::kernels::cuda::xd;
using gguf::dtype;
using test::is_float_type;
using test::op_case;
using test::op_kind;

namespace {

using rng = detaudit::test::test_rng;

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// n_out rows of type t: quantized rows of a real scale (row 1 zero), or random codes and scales
// with finite fp16 fields (decode_block's precondition).
std::vector<uint8_t> make_rows(rng& r, dtype t, int64_t n_in, int64_t n_out, bool random_bytes) {
  std::vector<uint8_t> w = test::weight_rows(r, t, n_in, n_out, random_bytes ? test::weights::random_bytes
                                                                             : test::weights::quantized_real);
  const std::vector<float> zero(static_cast<size_t>(n_in), 0.0f);
  if (n_out > 1) gguf::quants_quantize_row(t, zero.data(), w.data() + gguf::dtype_row_bytes(t, n_in), n_in);
  return w;
}

// The host twin of quantize_blocks_kernel + max_exp_kernel: one call per (row, block).
void quantize_rows(const float* x, int64_t rows, int64_t n, std::vector<int16_t>& q, std::vector<int32_t>& exp,
                   std::vector<int32_t>& mx) {
  const int64_t nb = (n + 31) / 32;
  q.assign(static_cast<size_t>(rows * nb * 32), 0);
  exp.assign(static_cast<size_t>(rows * nb), 0);
  mx.assign(static_cast<size_t>(rows), xd::EXP_ZERO);
  for (int64_t i = rows * nb - 1; i >= 0; --i) {  // any order: each block is independent
    const int64_t r = i / nb, b = i % nb;
    const int len = static_cast<int>(std::min<int64_t>(32, n - b * 32));
    exp[static_cast<size_t>(i)] = xd::quantize_block(x + r * n + b * 32, len, q.data() + i * 32);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) mx[static_cast<size_t>(r)] = std::max(mx[static_cast<size_t>(r)], exp[static_cast<size_t>(r * nb + b)]);
}

}  // namespace

TEST_CASE("cuda portable: round_shift fixed_to_f32 ceil_log2 flush decompose match numerics") {
  rng r{801};
  for (int i = 0; i < 400000; ++i) {
    const int64_t v = static_cast<int64_t>(r.next() >> r.range(0, 63)) * (r.range(0, 1) ? 1 : -1);
    const int s = static_cast<int>(r.range(-70, 0));
    REQUIRE(xd::round_shift(v, s) == numerics::round_shift(v, s));
    const int64_t small = static_cast<int64_t>(r.next() >> r.range(33, 63)) * (r.range(0, 1) ? 1 : -1);
    const int ls = static_cast<int>(r.range(0, 30));
    REQUIRE(xd::round_shift(small, ls) == numerics::round_shift(small, ls));
    const int e = static_cast<int>(r.range(-220, 140));
    const float a = xd::fixed_to_f32(v, e), b = numerics::fixed_to_f32(v, e);
    REQUIRE(bits(a) == bits(b));
    const int64_t c = static_cast<int64_t>(r.next() >> r.range(1, 63));
    REQUIRE(xd::ceil_log2(c) == numerics::ceil_log2(c));
    const float f = test::random_finite(r);
    REQUIRE(bits(xd::flush(f)) == bits(numerics::flush(f)));
    int32_t m1, m2;
    int e1, e2;
    xd::decompose(f, &m1, &e1);
    numerics::f32_decompose(f, &m2, &e2);
    REQUIRE((m1 == m2 && e1 == e2));
  }
  for (int64_t v : {int64_t(1), int64_t(3), int64_t(-5), (int64_t(1) << 24) - 1, (int64_t(1) << 25) - 1,
                    (int64_t(1) << 62) - 1, -(int64_t(1) << 62)}) {
    for (int s : {-64, -63, -40, -25, -1}) REQUIRE(xd::round_shift(v, s) == numerics::round_shift(v, s));
    for (int e : {-200, -150, -149, -126, 0, 100, 127}) {
      REQUIRE(bits(xd::fixed_to_f32(v, e)) == bits(numerics::fixed_to_f32(v, e)));
    }
  }
  for (int k = -126; k <= 127; ++k) REQUIRE(bits(xd::pow2_f32(k)) == bits(numerics::pow2_f32(k)));
}

TEST_CASE("cuda portable: exp recip rsqrt silu match numerics bit for bit over a million inputs each") {
  rng r{802};
  auto sweep = [&](const std::string& name, float (*dev)(float), float (*ref)(float), float lo, float hi) {
    int64_t bad = 0;
    for (int i = 0; i < 1000000; ++i) {
      // Half from random bit patterns (every class: NaN, inf, subnormal), half dense in [lo, hi].
      const float x = i % 2 ? from_bits(static_cast<uint32_t>(r.next())) : lo + (hi - lo) * r.uniform();
      const float a = dev(x), b = ref(x);
      // NaN in gives NaN out; its payload and sign are not part of the contract (a GPU returns
      // its canonical NaN), so two NaNs count as equal. Every other result is compared bit for bit.
      if (a != a && b != b) continue;
      if (std::memcmp(&a, &b, 4) != 0 && bad++ == 0) {
        FAIL_CHECK(name << "(" << x << " bits " << bits(x) << "): device twin " << bits(a) << ", numerics "
                        << bits(b));
      }
    }
    CHECK_MESSAGE(bad == 0, name << ": " << bad << " mismatches");
  };
  sweep("exp_f32", xd::exp_f32, numerics::exp_f32, -110.0f, 110.0f);
  sweep("recip_f32", xd::recip_f32, numerics::recip_f32, -4.0f, 4.0f);
  sweep("rsqrt_f32", xd::rsqrt_f32, numerics::rsqrt_f32, 0.0f, 8.0f);
  sweep("silu_f32", xd::silu_f32, numerics::silu_f32, -100.0f, 100.0f);
}

TEST_CASE("cuda portable: quantize_block matches numerics incl partial blocks and sentinels") {
  rng r{803};
  for (int trial = 0; trial < 20000; ++trial) {
    float x[32];
    const int n = trial % 7 == 0 ? static_cast<int>(r.range(0, 32)) : 32;
    for (int i = 0; i < 32; ++i) x[i] = trial % 3 == 0 ? test::random_finite(r) : r.normal() * 1e-3f;
    if (trial % 11 == 0) for (int i = 0; i < 32; ++i) x[i] = from_bits(static_cast<uint32_t>(r.next()) & 0x807fffffu);
    if (trial % 13 == 0) x[trial % 32] = from_bits(0x7f7fffffu);  // the largest float: clamps
    int16_t qa[32], qb[32];
    std::memset(qa, 0x55, sizeof qa);
    const int32_t ea = xd::quantize_block(x, n, qa);
    const int32_t eb = numerics::quantize_block(x, n, qb);
    REQUIRE(ea == eb);
    REQUIRE(std::memcmp(qa, qb, sizeof qa) == 0);
  }
}

namespace {

// Activation blocks for the int8 path: the extremes +-32767 and -32766 (next to the excluded
// -32768), values whose low byte is >= 128 (-1, 255, -129, 32767, 0x7f80 ...), hi bytes of -128
// and 127, and random values, all within [-QMAX, QMAX].
std::vector<std::vector<int16_t>> int8_act_blocks(rng& r) {
  const int16_t edge[] = {32767, -32767, -32766, -1, 255, -129, 128, -128, 32640, -32640, 0x7f80, 0x00ff,
                          -256, 256, 383, -383, 1, 0, 32512, -32513};
  std::vector<std::vector<int16_t>> out;
  for (int16_t v : {int16_t(32767), int16_t(-32767), int16_t(-32766), int16_t(-1), int16_t(255)})
    out.push_back(std::vector<int16_t>(32, v));
  std::vector<int16_t> alt(32);
  for (int i = 0; i < 32; ++i) alt[static_cast<size_t>(i)] = i % 2 ? int16_t(32767) : int16_t(-32767);
  out.push_back(alt);
  for (int k = 0; k < 40; ++k) {
    std::vector<int16_t> a(32);
    for (auto& v : a) {
      v = r.range(0, 2) == 0 ? edge[r.range(0, static_cast<int64_t>(std::size(edge)) - 1)]
                             : static_cast<int16_t>(r.range(-xd::QMAX, xd::QMAX));
      if (k % 4 == 1) v = static_cast<int16_t>(v | 0x80);  // low byte >= 128, still in range
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace

TEST_CASE("cuda portable: dp4a twins give the signed and signed-unsigned byte dot products") {
  rng r{811};
  const uint32_t fixed[] = {0u, 0x80808080u, 0x7f7f7f7fu, 0xffffffffu, 0x01ff80u, 0x807f01ffu};
  for (int k = 0; k < 20000; ++k) {
    const uint32_t a = k < 36 ? fixed[k % 6] : static_cast<uint32_t>(r.next());
    const uint32_t b = k < 36 ? fixed[k / 6] : static_cast<uint32_t>(r.next());
    const int32_t c = static_cast<int32_t>(r.range(-(1 << 24), 1 << 24));
    int32_t ss = c, su = c;
    for (int j = 0; j < 4; ++j) {
      const int8_t ab = static_cast<int8_t>(a >> (8 * j));
      ss += ab * static_cast<int8_t>(b >> (8 * j));
      su += ab * static_cast<uint8_t>(b >> (8 * j));
    }
    INFO("a " << a << " b " << b << " c " << c);
    REQUIRE(xd::dp4a_ss(a, b, c) == ss);
    REQUIRE(xd::dp4a_su(a, b, c) == su);
  }
}

TEST_CASE("cuda portable: the int8 block terms match numerics dot_block_terms for every integer type") {
  rng r{812};
  const std::vector<std::vector<int16_t>> acts = int8_act_blocks(r);
  for (dtype t : test::WEIGHT_TYPES) {
    if (is_float_type(t)) continue;
    const std::string name = gguf::dtype_get(t).name;
    const int64_t n = 512;
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<uint8_t> w = make_rows(r, t, n, 3, variant > 0);
      if (variant == 2 && t == gguf::DTYPE_Q8_0) {
        // Codes of -128 (and 127) in every block of row 0.
        for (int64_t b = 0; b < n / 32; ++b)
          for (int j = 0; j < 32; ++j) w[static_cast<size_t>(b * 34 + 2 + j)] = j % 3 ? 0x80 : 0x7f;
      }
      const uint64_t rb = gguf::dtype_row_bytes(t, n);
      for (int64_t row = 0; row < 3; ++row) {
        for (int64_t b = 0; b < n / 32; ++b) {
          const uint8_t* p = w.data() + rb * static_cast<uint64_t>(row);
          numerics::wblock ref;
          numerics::weight_decode_block(t, p, b, ref);
          xd::wblock dev;
          xd::decode_block(static_cast<int32_t>(t), p, b, 32, dev);
          uint32_t wq[xd::PACK_WORDS];
          xd::pack_codes(dev, wq);
          for (size_t k = 0; k < acts.size(); ++k) {
            const int16_t* a = acts[k].data();
            uint32_t pa[xd::ACT_PACK_WORDS];
            xd::pack_act(a, pa);
            const int32_t e_a = static_cast<int32_t>(r.range(-40, 10));
            const numerics::dot_terms want = numerics::dot_block_terms(a, e_a, ref);
            int64_t t1 = 0, t2 = 0;
            xd::dot_block_terms8(pa, dev, wq, &t1, &t2);
            INFO(name << " variant " << variant << " row " << row << " block " << b << " act " << k);
            REQUIRE(t1 == want.t1);
            REQUIRE(t2 == want.t2);
            const int32_t bound = numerics::wblock_exp_bound(&ref, 1);
            if (bound == xd::EXP_ZERO) continue;
            const int32_t g = numerics::dot_grid(e_a, bound, int64_t(1) << r.range(0, 20));
            REQUIRE(xd::dot_block_fixed8(pa, e_a, dev, wq, g) == numerics::dot_block_fixed(a, e_a, ref, g));
          }
        }
      }
    }
  }
}

namespace {

// The host twin of matmul_kernel for one launch shape: decoded blocks in steps of `step` (the
// kernel's DECODE_BLOCKS is 8), each (token, row) summing its terms; `order` 0 forward,
// 1 backward, 2 two partial sums (a split-K) added at the end. int8: the kernel's dp4a path
// (activation blocks packed once, codes packed after each decode); integer block types only.
void matmul_twin(dtype t, const uint8_t* w, int64_t n_in, int64_t n_out, const int32_t* bounds, const float* x,
                 int64_t n_tok, int step, int order, bool int8, float* y) {
  std::vector<int16_t> q;
  std::vector<int32_t> exp, mx;
  quantize_rows(x, n_tok, n_in, q, exp, mx);
  const int64_t nb = (n_in + 31) / 32;
  const uint64_t rb = gguf::dtype_row_bytes(t, n_in);
  std::vector<uint32_t> pack(static_cast<size_t>(n_tok * nb * xd::ACT_PACK_WORDS));
  for (int64_t i = 0; i < n_tok * nb; ++i) xd::pack_act(q.data() + i * 32, pack.data() + i * xd::ACT_PACK_WORDS);
  std::vector<xd::wblock> sw(static_cast<size_t>(step));
  std::vector<uint32_t> swq(static_cast<size_t>(step * xd::PACK_WORDS));
  for (int64_t row = 0; row < n_out; ++row) {
    std::vector<int64_t> acc(static_cast<size_t>(n_tok), 0), acc2(static_cast<size_t>(n_tok), 0);
    for (int64_t cc = 0; cc < nb; cc += step) {
      const int64_t c = order == 1 ? ((nb - 1) / step) * step - cc : cc;
      for (int i = 0; i < step && c + i < nb; ++i) {
        const int64_t b = c + i;
        xd::decode_block(static_cast<int32_t>(t), w + rb * static_cast<uint64_t>(row), b,
                         static_cast<int>(std::min<int64_t>(32, n_in - b * 32)), sw[static_cast<size_t>(i)]);
        xd::pack_codes(sw[static_cast<size_t>(i)], swq.data() + i * xd::PACK_WORDS);
      }
      for (int64_t tok = 0; tok < n_tok; ++tok) {
        const int32_t m = mx[static_cast<size_t>(tok)];
        if (m == xd::EXP_ZERO || bounds[row] == xd::EXP_ZERO) continue;
        const int32_t g = xd::dot_grid(m, bounds[row], nb);
        for (int i = 0; i < step && c + i < nb; ++i) {
          const int64_t b = c + i;
          const int64_t k = tok * nb + b;
          const xd::wblock& wb = sw[static_cast<size_t>(i)];
          const int64_t term =
              int8 ? xd::dot_block_fixed8(pack.data() + k * xd::ACT_PACK_WORDS, exp[static_cast<size_t>(k)], wb,
                                          swq.data() + i * xd::PACK_WORDS, g)
                   : xd::dot_block_fixed(q.data() + k * 32, exp[static_cast<size_t>(k)], wb, g);
          (order == 2 && b % 2 ? acc2 : acc)[static_cast<size_t>(tok)] += term;
        }
      }
    }
    for (int64_t tok = 0; tok < n_tok; ++tok) {
      y[tok * n_out + row] = xd::dot_finish(acc[static_cast<size_t>(tok)] + acc2[static_cast<size_t>(tok)],
                                            mx[static_cast<size_t>(tok)], bounds[row], nb);
    }
  }
}

}  // namespace

namespace {

// The matmul twin, each decode step (8: the kernel's; 3), block order (forward, backward, two
// partial sums) and path (plain; int8 for the integer types), as backends of the op table
// (op_table_driver.h).
[[maybe_unused]] const bool cuda_matmul_twins_registered = [] {
  std::vector<test::op_backend> bs;
  for (bool int8 : {false, true}) {
    for (int step : {8, 3}) {
      for (int order : {0, 1, 2}) {
        test::op_backend b;
        b.name = std::string("cuda matmul twin, step ") + std::to_string(step) + ", order " + std::to_string(order) +
                 (int8 ? ", int8 path" : ", plain path");
        b.ops = {op_kind::matmul};
        b.skips = test::GPU_SKIPS;
        if (int8)
          b.leaves_out = [](const op_case& c) -> std::string { return is_float_type(c.type) ? "f32/f16/bf16 rows: no int8 path" : ""; };
        b.run = [int8, step, order](const op_case& c, const test::op_inputs& in) {
          std::vector<int32_t> bounds(static_cast<size_t>(c.n_out));
          kernels::cpu::weight_row_bounds(c.type, in.w.data(), c.n_in, 0, c.n_out, bounds.data());
          std::vector<float> got = test::output_buffer(c, in);
          matmul_twin(c.type, in.w.data(), c.n_in, c.n_out, bounds.data(), in.x.data(), c.n_tok, step, order, int8,
                      got.data() + test::GUARD);
          return got;
        };
        bs.push_back(std::move(b));
      }
    }
  }
  return test::op_backends_add(std::move(bs));
}();

}  // namespace

namespace {

// The host twin of rms_norm_kernel: `threads` strided partial maxima and sums, combined in
// thread order (`reverse`: the opposite order).
void rms_twin(const float* x, int64_t n, const float* w, float eps, int threads, bool reverse, float* out) {
  std::vector<int> maxe(static_cast<size_t>(threads), xd::EXP_ZERO);
  std::vector<int64_t> sum(static_cast<size_t>(threads), 0);
  for (int th = 0; th < threads; ++th)
    for (int64_t i = th; i < n; i += threads) maxe[static_cast<size_t>(th)] = std::max(maxe[static_cast<size_t>(th)], xd::rms_exp(x[i]));
  const int m = *std::max_element(maxe.begin(), maxe.end());
  const int g = m == xd::EXP_ZERO ? 0 : xd::rms_grid(m, n);
  if (m != xd::EXP_ZERO)
    for (int th = 0; th < threads; ++th)
      for (int64_t i = th; i < n; i += threads) sum[static_cast<size_t>(th)] += xd::rms_term(x[i], g);
  int64_t s = 0;
  for (int k = 0; k < threads; ++k) s += sum[static_cast<size_t>(reverse ? threads - 1 - k : k)];
  const float rr = xd::rms_scale(s, g, m, static_cast<float>(1.0 / static_cast<double>(n)), eps);
  for (int64_t i = 0; i < n; ++i) out[i] = xd::rms_out(x[i], rr, w, i);
}

// The twin of case c's element-wise op (rms_norm with `threads` partial sums, in thread order or
// reversed; swiglu backwards; add, add_bias forwards; rope's pair index backwards).
std::vector<float> elementwise_twin(const op_case& c, const test::op_inputs& in, int threads, bool reverse) {
  std::vector<float> out = test::output_buffer(c, in);
  float* y = out.data() + test::GUARD;
  switch (c.op) {
    case op_kind::rms_norm:
      for (int64_t s = 0; s < c.rows * c.cols; s += c.group)
        rms_twin(in.x.data() + s, c.group, c.weighted ? in.y.data() : nullptr, c.eps, threads, reverse, y + s);
      break;
    case op_kind::swiglu:
      for (int64_t i = c.cols - 1; i >= 0; --i) y[i] = xd::swiglu_one(in.x[static_cast<size_t>(i)], in.y[static_cast<size_t>(i)]);
      break;
    case op_kind::add:
      for (int64_t i = 0; i < c.cols; ++i) y[i] = xd::add_one(in.x[static_cast<size_t>(i)], in.y[static_cast<size_t>(i)]);
      break;
    case op_kind::geglu: case op_kind::swiglu_oai: case op_kind::softcap: case op_kind::scale: {
      const kernels::gpu::act k = test::gpu_act(c);
      const kernels::gpu::act_params p = test::gpu_act_params(c);
      float p0, p1;
      kernels::gpu::act_kernel_params(k, p, &p0, &p1);
      const bool binary = kernels::gpu::act_binary(k);
      for (int64_t i = c.cols - 1; i >= 0; --i)  // backwards, as swiglu's
        y[i] = xd::act_one(static_cast<int>(k), in.x[static_cast<size_t>(i)],
                           binary ? in.y[static_cast<size_t>(i)] : 0.0f, p0, p1);
      break;
    }
    case op_kind::add_bias:
      for (int64_t i = 0; i < c.rows * c.cols; ++i) y[i] = xd::bias_one(y[i], in.y[static_cast<size_t>(i % c.cols)]);
      break;
    case op_kind::rope: {
      const int64_t half = c.n_rot / 2;
      for (int64_t k = c.rows * c.n_head * half - 1; k >= 0; --k) {  // the kernel's pair index, backwards
        const int64_t i = k % half, rh = k / half, row = rh / c.n_head;
        float* xh = y + rh * c.head_dim;
        const float* tab = in.tables.data() + row * c.n_rot;
        xd::rope_pair(xh + (c.neox ? i : 2 * i), xh + (c.neox ? i + half : 2 * i + 1), tab[2 * i], tab[2 * i + 1]);
      }
      break;
    }
    default: break;
  }
  return out;
}

}  // namespace

namespace {

// The element-wise twins as backends of the op table: every op with 256 threads in thread order,
// and RMS norm's partial sums also with 3 threads and in reverse order.
[[maybe_unused]] const bool cuda_elementwise_twins_registered = [] {
  std::vector<test::op_backend> bs;
  for (int threads : {256, 3}) {
    for (bool reverse : {false, true}) {
      test::op_backend b;
      b.name = "cuda element-wise twin, " + std::to_string(threads) + " threads" + (reverse ? ", reversed" : "");
      b.ops = {op_kind::rms_norm};
      if (threads == 256 && !reverse)
        b.ops = {op_kind::rms_norm, op_kind::swiglu,     op_kind::add,     op_kind::add_bias, op_kind::rope,
                 op_kind::geglu,    op_kind::swiglu_oai, op_kind::softcap, op_kind::scale};
      b.skips = test::GPU_SKIPS;
      b.run = [threads, reverse](const op_case& c, const test::op_inputs& in) { return elementwise_twin(c, in, threads, reverse); };
      bs.push_back(std::move(b));
    }
  }
  return test::op_backends_add(std::move(bs));
}();

}  // namespace

namespace {

// The host twin of attention_kernel for one (query row, head) over a kv_head_view, `threads`
// strided threads; partial maxima and sums combined in reverse thread order. cap > 0: the scores
// capped; sink: the head's sink or null.
void attention_twin(const float* q, int64_t head_dim, const kernels::kv_head_view& k, const kernels::kv_head_view& v,
                    int64_t nkv, float kq_scale, float cap, const float* sink, int threads, float* out) {
  const float inv_cap = cap > 0.0f ? xd::recip_f32(cap) : 0.0f;
  const int64_t nb = (head_dim + 31) / 32;
  if (nkv == 0) {
    std::fill(out, out + head_dim, 0.0f);
    return;
  }
  std::vector<int16_t> sq(static_cast<size_t>(nb * 32));
  std::vector<int32_t> se(static_cast<size_t>(nb)), gv(static_cast<size_t>(nb));
  for (int64_t b = nb - 1; b >= 0; --b)
    se[static_cast<size_t>(b)] = xd::quantize_block(q + b * 32, static_cast<int>(std::min<int64_t>(32, head_dim - b * 32)), sq.data() + b * 32);
  const int32_t qmax = *std::max_element(se.begin(), se.end());
  std::vector<float> s(static_cast<size_t>(nkv)), lm(static_cast<size_t>(threads), from_bits(0xff800000u));
  for (int th = 0; th < threads; ++th) {
    for (int64_t t = th; t < nkv; t += threads) {
      s[static_cast<size_t>(t)] = xd::attention_capped(
          xd::attention_score(sq.data(), se.data(), qmax, k.q + t * k.q_stride, k.exp + t * k.exp_stride, nb, kq_scale), cap,
          inv_cap);
      lm[static_cast<size_t>(th)] = std::max(lm[static_cast<size_t>(th)], s[static_cast<size_t>(t)]);
    }
  }
  float m = lm[static_cast<size_t>(threads - 1)];
  for (int th = threads - 2; th >= 0; --th) m = lm[static_cast<size_t>(th)] > m ? lm[static_cast<size_t>(th)] : m;
  if (sink && xd::flush(*sink) > m) m = xd::flush(*sink);
  if (m == 0.0f) m = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t ev = xd::EXP_ZERO;
    for (int64_t t = 0; t < nkv; ++t) ev = std::max(ev, v.exp[t * v.exp_stride + b]);
    gv[static_cast<size_t>(b)] = xd::attention_value_grid(ev, nkv);
  }
  std::vector<int32_t> wt(static_cast<size_t>(nkv));
  int64_t total = sink ? xd::attention_weight(xd::flush(*sink), m) : 0;
  for (int64_t t = nkv - 1; t >= 0; --t) {
    wt[static_cast<size_t>(t)] = static_cast<int32_t>(xd::attention_weight(s[static_cast<size_t>(t)], m));
    total += wt[static_cast<size_t>(t)];
  }
  const float inv_s = xd::recip_f32(xd::fixed_to_f32(total, 0));
  for (int64_t d = 0; d < head_dim; ++d) {
    const int64_t b = d / 32;
    int64_t acc = 0;
    for (int64_t t = 0; t < nkv; ++t)
      acc += xd::attention_value_term(wt[static_cast<size_t>(t)], v.q[t * v.q_stride + d], v.exp[t * v.exp_stride + b], gv[static_cast<size_t>(b)]);
    out[d] = xd::attention_out(acc, gv[static_cast<size_t>(b)], inv_s);
  }
}

// The host twin of kv_quantize_kernel: the cells of `rows` positions.
std::vector<uint8_t> kv_twin(const float* k, const float* v, int64_t rows, int64_t n_kv_head, int64_t head_dim) {
  const int64_t nb = (head_dim + 31) / 32, per_kind = n_kv_head * nb;
  const int64_t cell_bytes = 2 * per_kind * (64 + 4);
  std::vector<uint8_t> cells(static_cast<size_t>(rows * cell_bytes), 0xee);
  for (int64_t i = rows * 2 * per_kind - 1; i >= 0; --i) {
    const int64_t hb = i % per_kind, kind = (i / per_kind) % 2, r = i / (2 * per_kind);
    const int64_t h = hb / nb, b = hb % nb;
    const float* src = (kind == 0 ? k : v) + r * n_kv_head * head_dim + h * head_dim + b * 32;
    int16_t q[32];
    const int32_t e = xd::quantize_block(src, static_cast<int>(std::min<int64_t>(32, head_dim - b * 32)), q);
    uint8_t* cell = cells.data() + r * cell_bytes;
    std::memcpy(cell + (kind * per_kind + hb) * 64, q, 64);
    std::memcpy(cell + 2 * per_kind * 64 + (kind * per_kind + hb) * 4, &e, 4);
  }
  return cells;
}

}  // namespace

namespace {

// The kv_quantize twin and the attention twin with 128 and 5 threads, as backends of the op table.
[[maybe_unused]] const bool cuda_attention_twins_registered = [] {
  std::vector<test::op_backend> bs;
  test::op_backend kv;
  kv.name = "cuda kv_quantize twin";
  kv.ops = {op_kind::kv_quantize};
  kv.skips = test::GPU_SKIPS;
  kv.run = [](const op_case& c, const test::op_inputs& in) {
    const std::vector<uint8_t> cells = kv_twin(in.x.data(), in.y.data(), c.rows, c.n_head_kv, c.head_dim);
    std::vector<float> got = test::output_buffer(c, in);
    std::memcpy(got.data() + test::GUARD, cells.data(), cells.size());
    return got;
  };
  bs.push_back(std::move(kv));
  for (int threads : {128, 5}) {
    test::op_backend b;
    b.name = "cuda attention twin, " + std::to_string(threads) + " threads";
    b.ops = {op_kind::attention};
    b.skips = test::GPU_SKIPS;
    b.run = [threads](const op_case& c, const test::op_inputs& in) {
      std::vector<float> got = test::output_buffer(c, in);
      for (size_t row = 0; row < c.n_kv.size(); ++row)
        for (int64_t h = 0; h < c.n_head; ++h) {
          const int64_t g = h / (c.n_head / c.n_head_kv), at = (static_cast<int64_t>(row) * c.n_head + h) * c.head_dim;
          attention_twin(in.q.data() + at, c.head_dim, test::cell_view(in.cells.data(), c.n_head_kv, c.head_dim, g, 0),
                         test::cell_view(in.cells.data(), c.n_head_kv, c.head_dim, g, 1), c.n_kv[row], c.kq_scale,
                         c.softcap, c.sinks.empty() ? nullptr : &c.sinks[static_cast<size_t>(h)], threads,
                         got.data() + test::GUARD + at);
        }
      return got;
    };
    bs.push_back(std::move(b));
  }
  return test::op_backends_add(std::move(bs));
}();

}  // namespace
