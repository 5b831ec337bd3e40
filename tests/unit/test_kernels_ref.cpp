// The exact dot product and matmul (kernels/ref/ref.h): partition invariance by memcmp,
// accuracy against double-precision dots, odd lengths and every weight type.
#include <doctest/doctest.h>

#include "op_cases.h"
#include "test_util.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/quants.h"
#include "kernels/ref/ref.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::numerics;
using detaudit::kernels::dot_exact_ref;
using gguf::dtype;

namespace {

using rng = detaudit::test::test_rng;

std::string name_of(dtype t) { return gguf::dtype_get(t).name; }

// Activations: normal values whose scale changes from block to block (a realistic spread of
// block exponents), with an occasional all-zero block and outlier.
std::vector<float> make_act(rng& r, int64_t n, bool outliers = true) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t b = 0; b * 32 < n; ++b) {
    const int sc = static_cast<int>(r.range(-6, 6));
    const bool zero = r.range(0, 9) == 0;
    for (int64_t i = b * 32; i < std::min(n, b * 32 + 32); ++i) {
      x[static_cast<size_t>(i)] = zero ? 0.0f : std::ldexp(r.normal(), sc);
    }
  }
  if (outliers && n > 3 && r.range(0, 3) == 0) x[static_cast<size_t>(n / 2)] = 50.0f;
  return x;
}

std::vector<uint8_t> make_row(rng& r, dtype t, int64_t n, std::vector<float>* deq) {
  std::vector<float> w(static_cast<size_t>(n));
  for (auto& v : w) v = 0.05f * r.normal() + (r.range(0, 7) == 0 ? 0.02f : 0.0f);
  std::vector<uint8_t> bytes(gguf::dtype_row_bytes(t, n));
  gguf::quants_quantize_row(t, w.data(), bytes.data(), n);
  deq->resize(static_cast<size_t>(n));
  gguf::quants_dequantize_row(t, bytes.data(), deq->data(), n);
  return bytes;
}

int64_t row_multiple(dtype t) {
  const int64_t bs = gguf::dtype_get(t).block_size;
  return bs < 32 ? 1 : bs;
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

}  // namespace

TEST_CASE("dot_exact: any permutation and split of the block sum gives the same bits") {
  rng r{21};
  for (dtype t : test::WEIGHT_TYPES) {
    for (int trial = 0; trial < 20; ++trial) {
      const int64_t n = row_multiple(t) * r.range(1, 6) * (row_multiple(t) == 1 ? 97 : 1);
      std::vector<float> deq;
      const std::vector<uint8_t> row = make_row(r, t, n, &deq);
      const std::vector<float> x = make_act(r, n);
      qvec xq;
      quantize_act(x.data(), n, xq);
      const float ref = dot_exact_ref(xq, t, row.data(), n);
      const int64_t nb = xq.n_blocks();
      std::vector<wblock> w(static_cast<size_t>(nb));
      kernels::weight_decode_row(t, row.data(), n, w.data());
      if (xq.max_exp == EXP_ZERO || wblock_exp_bound(w.data(), nb) == EXP_ZERO) continue;
      const int32_t g = dot_grid(xq.max_exp, wblock_exp_bound(w.data(), nb), nb);
      std::vector<int64_t> terms(static_cast<size_t>(nb));
      for (int64_t b = 0; b < nb; ++b) {
        terms[static_cast<size_t>(b)] = dot_block_fixed(xq.q.data() + b * 32, xq.exp[static_cast<size_t>(b)], w[static_cast<size_t>(b)], g);
      }
      for (int rep = 0; rep < 10; ++rep) {
        // A random permutation, cut into random chunks (threads / split-K / tiles), each summed
        // on its own, the partial sums combined in another random order.
        std::vector<int64_t> perm = terms;
        for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[static_cast<size_t>(r.range(0, int64_t(i) - 1))]);
        std::vector<int64_t> partial;
        size_t i = 0;
        while (i < perm.size()) {
          const size_t len = static_cast<size_t>(r.range(1, std::max<int64_t>(1, nb / 2)));
          int64_t s = 0;
          for (size_t j = i; j < std::min(perm.size(), i + len); ++j) s += perm[j];
          partial.push_back(s);
          i += len;
        }
        std::reverse(partial.begin(), partial.end());
        int64_t total = 0;
        for (int64_t p : partial) total += p;
        const float got = fixed_to_f32(total, g);
        REQUIRE(std::memcmp(&got, &ref, sizeof got) == 0);
      }
    }
  }
}

// The error against the float dot has three sources, bounded element by element: int16
// activations (half a step 2^(e_b - 1), a full step at the clamp), int16 float weights (the same
// on the weight's block grid; 0 for quantized types) and the accumulator grid (half a unit of
// 2^G per term) plus the final rounding. The test checks that bound on every row, and reports the
// error relative to sum |x w| on rows without outliers (the typical figure).
TEST_CASE("dot_exact: accuracy against a double-precision dot for every type") {
  rng r{22};
  for (dtype t : test::WEIGHT_TYPES) {
    double worst_q = 0;  // against the exact dot of the quantized operands, / sum |a w|
    double worst_f = 0;  // against double(float x, dequantized w), / sum |x w|, no outliers
    double worst_bound = 0;  // |error| / the element-wise bound, all rows
    for (int trial = 0; trial < 200; ++trial) {
      const int64_t n = row_multiple(t) == 1 ? r.range(1, 1100) : row_multiple(t) * r.range(1, 4);
      std::vector<float> deq;
      const std::vector<uint8_t> row = make_row(r, t, n, &deq);
      const bool outliers = trial % 2 == 0;
      const std::vector<float> x = make_act(r, n, outliers);
      qvec xq;
      quantize_act(x.data(), n, xq);
      const float got = dot_exact_ref(xq, t, row.data(), n);
      REQUIRE_FALSE(is_subnormal(got));
      std::vector<wblock> w(static_cast<size_t>(xq.n_blocks()));
      kernels::weight_decode_row(t, row.data(), n, w.data());
      long double exact_q = 0, exact_f = 0, mag_q = 0, mag_f = 0, bound = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int32_t ea = xq.exp[static_cast<size_t>(i / 32)];
        const wblock& wb = w[static_cast<size_t>(i / 32)];
        const long double a = ldexpl(xq.q[static_cast<size_t>(i)], ea == EXP_ZERO ? 0 : ea);
        const long double wq = wblock_value(wb, static_cast<int>(i % 32));
        const long double xf = x[static_cast<size_t>(i)], wf = deq[static_cast<size_t>(i)];
        exact_q += a * wq;
        mag_q += fabsl(a * wq);
        exact_f += xf * wf;
        mag_f += fabsl(xf * wf);
        if (ea != EXP_ZERO) bound += ldexpl(fabsl(wf) + fabsl(wq), ea);
        if (wb.m_mant == 0 && wb.d_mant == 1) bound += ldexpl(fabsl(xf) + fabsl(a), wb.d_exp);
      }
      if (mag_q > 0) worst_q = std::max(worst_q, static_cast<double>(fabsl(got - exact_q) / mag_q));
      if (mag_f > 0 && !outliers) worst_f = std::max(worst_f, static_cast<double>(fabsl(got - exact_f) / mag_f));
      const long double err = fabsl(got - exact_f);
      const long double lim = bound / 2 + mag_q * 0x1p-22L;
      if (err > 0) worst_bound = std::max(worst_bound, static_cast<double>(err / lim));
    }
    MESSAGE(name_of(t) << ": vs exact(quantized) " << worst_q << " of sum|a w|; vs double "
                       << worst_f << " of sum|x w| (no outliers); " << worst_bound
                       << " of the element-wise bound");
    CHECK(worst_q <= 0x1p-22);
    CHECK(worst_bound <= 1.0);
  }
}

TEST_CASE("dot_exact: odd lengths partial blocks zero rows and bad input") {
  rng r{23};
  for (dtype t : {gguf::DTYPE_F32, gguf::DTYPE_F16, gguf::DTYPE_BF16}) {
    for (int64_t n : {1, 8, 31, 33, 172, 200, 257}) {
      std::vector<float> deq;
      const std::vector<uint8_t> row = make_row(r, t, n, &deq);
      const std::vector<float> x = make_act(r, n);
      qvec xq;
      quantize_act(x.data(), n, xq);
      const float got = dot_exact_ref(xq, t, row.data(), n);
      long double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += static_cast<long double>(x[static_cast<size_t>(i)]) * deq[static_cast<size_t>(i)];
        mag += fabsl(static_cast<long double>(x[static_cast<size_t>(i)]) * deq[static_cast<size_t>(i)]);
      }
      CHECK(fabsl(got - ref) <= mag * 0x1p-13L);
      // Bytes past the row's end are never read: the same row copied to the end of a buffer.
      std::vector<uint8_t> tight(row);
      CHECK(bits(dot_exact_ref(xq, t, tight.data(), n)) == bits(got));
    }
  }
  for (dtype t : test::WEIGHT_TYPES) {
    const int64_t n = row_multiple(t) == 1 ? 64 : row_multiple(t);
    std::vector<float> zero(static_cast<size_t>(n), 0.0f);
    std::vector<uint8_t> zrow(gguf::dtype_row_bytes(t, n));
    gguf::quants_quantize_row(t, zero.data(), zrow.data(), n);
    qvec xq;
    const std::vector<float> x = make_act(r, n);
    quantize_act(x.data(), n, xq);
    CHECK(bits(dot_exact_ref(xq, t, zrow.data(), n)) == 0u);  // a zero row gives +0
    std::vector<float> deq;
    const std::vector<uint8_t> row = make_row(r, t, n, &deq);
    qvec zq;
    quantize_act(zero.data(), n, zq);
    CHECK(bits(dot_exact_ref(zq, t, row.data(), n)) == 0u);  // a zero activation gives +0
    if (row_multiple(t) > 1) {
      qvec odd;
      quantize_act(x.data(), n - 1, odd);
      CHECK_THROWS_AS(dot_exact_ref(odd, t, row.data(), n - 1), input_error);
    }
    qvec shorter;
    quantize_act(x.data(), n / 2, shorter);
    CHECK_THROWS_AS(dot_exact_ref(shorter, t, row.data(), n), input_error);
  }
}

TEST_CASE("dot_exact: block terms stay below 2^44 at the extremes of every type") {
  // Byte patterns that reach each type's largest codes and scales (0x80: q8_0 -128 and q6_K
  // scale -128; 0xff: the largest unsigned codes and six-bit scales; 0x00: q3_K scale -32 with
  // code -4), with every fp16 scale field set to -65504 (|d_mant| = 2047, the largest), and
  // activations of +-32767 with the signs that make the sums largest.
  rng r{25};
  for (dtype t : test::WEIGHT_TYPES) {
    if (t == gguf::DTYPE_F32 || t == gguf::DTYPE_F16 || t == gguf::DTYPE_BF16) continue;
    const int64_t n = row_multiple(t);
    int64_t worst1 = 0, worst2 = 0;
    for (int pattern = 0; pattern < 64; ++pattern) {
      std::vector<uint8_t> row(gguf::dtype_row_bytes(t, n));
      const uint8_t fills[] = {0x00, 0xff, 0x80, 0x55, 0xaa, 0x7f};
      for (auto& b : row) b = pattern < 6 ? fills[pattern] : static_cast<uint8_t>(r.next());
      for (int off : test::fp16_fields(t)) {
        const uint16_t h = 0xfbff;
        std::memcpy(row.data() + off, &h, 2);
      }
      if (t == gguf::DTYPE_Q6_K) std::memset(row.data() + 192, 0x80, 16);  // scales -128
      // mxfp4: a block's E8M0 byte is its exponent alone (d_mant 1) and leaves the terms as they
      // are; 128 (2^0) is one the decode accepts, where 0xff is NaN in the MX format.
      if (t == gguf::DTYPE_MXFP4)
        for (int64_t b = 0; b < n / 32; ++b) row[static_cast<size_t>(b * 17)] = 128;
      std::vector<wblock> w(static_cast<size_t>(n / 32));
      kernels::weight_decode_row(t, row.data(), n, w.data());
      for (const wblock& b : w) {
        int16_t a[32];
        for (int i = 0; i < 32; ++i) {
          const int64_t s = int64_t(b.q[i]) * b.scale[i / 16] * b.d_mant;
          a[i] = static_cast<int16_t>(s < 0 ? -QMAX : QMAX);
        }
        worst1 = std::max<int64_t>(worst1, std::llabs(dot_block_terms(a, 0, b).t1));
        for (int i = 0; i < 32; ++i) a[i] = static_cast<int16_t>(int64_t(b.mcoef[i / 16]) * b.m_mant < 0 ? -QMAX : QMAX);
        worst2 = std::max<int64_t>(worst2, std::llabs(dot_block_terms(a, 0, b).t2));
      }
    }
    MESSAGE(name_of(t) << ": largest |T1| 2^" << std::log2(double(worst1)) << ", |T2| 2^"
                       << (worst2 ? std::log2(double(worst2)) : 0.0));
    CHECK(worst1 < (int64_t(1) << 44));
    CHECK(worst2 < (int64_t(1) << 44));
  }
  // A hand-made block beyond the bound is refused (the guard of the reference kernel).
  wblock bad{};
  bad.d_mant = 1 << 20;
  bad.scale[0] = bad.scale[1] = 1 << 10;
  for (auto& q : bad.q) q = QMAX;
  int16_t a[32];
  for (auto& v : a) v = QMAX;
  CHECK_THROWS_AS(dot_block_terms(a, 0, bad), std::logic_error);
}

TEST_CASE("matmul_exact: any split of the rows gives identical bits with sentinels intact") {
  // Every matmul case of the op table: all rows at once, in three splits (the threads of the CPU
  // backend), each output the single dot of its row, and a batch of one token the same bits as
  // that token in the batch.
  int64_t n = 0;
  for (const test::op_case& c : test::op_cases()) {
    if (c.op != test::op_kind::matmul) continue;
    CAPTURE(c.name);
    const test::prepared_case p = test::prepare(c);
    REQUIRE(p.refused.empty());
    std::vector<qvec> xs(static_cast<size_t>(c.n_tok));
    for (int64_t k = 0; k < c.n_tok; ++k) quantize_act(p.in.x.data() + k * c.n_in, c.n_in, xs[static_cast<size_t>(k)]);
    std::vector<int64_t> each;
    for (int64_t o = 0; o <= c.n_out; ++o) each.push_back(o);
    for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, std::min<int64_t>(5, c.n_out), c.n_out}, each,
                                             std::vector<int64_t>{0, 0, c.n_out / 2, c.n_out / 2 + 1, c.n_out}}) {
      std::vector<float> y = test::output_buffer(c, p.in);
      for (size_t k = 0; k + 1 < cuts.size(); ++k)
        kernels::matmul_exact_ref(xs.data(), c.n_tok, c.type, p.in.w.data(), c.n_in, c.n_out, y.data() + test::GUARD,
                                  cuts[k], cuts[k + 1]);
      const auto diff = test::first_difference(p.want, y);
      CHECK_MESSAGE(!diff, (cuts.size() - 1) << " parts: " << diff->to_string());
    }
    if (c.gpu_scale) continue;
    bool dots = true;
    for (int64_t tok = 0; tok < c.n_tok; ++tok)
      for (int64_t o = 0; o < c.n_out; ++o) {
        const float d = dot_exact_ref(xs[static_cast<size_t>(tok)], c.type, p.in.w.data() + o * gguf::dtype_row_bytes(c.type, c.n_in), c.n_in);
        dots = dots && bits(d) == bits(p.want[test::GUARD + static_cast<size_t>(tok * c.n_out + o)]);
      }
    CHECK(dots);
    std::vector<float> y1(static_cast<size_t>(c.n_out));
    const int64_t tok = c.n_tok - 1;
    kernels::matmul_exact_ref(xs.data() + tok, 1, c.type, p.in.w.data(), c.n_in, c.n_out, y1.data(), 0, c.n_out);
    CHECK(!test::first_difference(y1.data(), p.want.data() + test::GUARD + tok * c.n_out, y1.size()));
    ++n;
  }
  MESSAGE(n << " matmul cases of the op table");
  // Rows past the end are refused.
  rng r{24};
  std::vector<float> deq;
  const std::vector<uint8_t> w = make_row(r, gguf::DTYPE_Q8_0, 64, &deq);
  std::vector<qvec> xs(1);
  const std::vector<float> x = make_act(r, 64);
  quantize_act(x.data(), 64, xs[0]);
  std::vector<float> y(2);
  CHECK_THROWS_AS(kernels::matmul_exact_ref(xs.data(), 1, gguf::DTYPE_Q8_0, w.data(), 64, 1, y.data(), 0, 2), input_error);
}
