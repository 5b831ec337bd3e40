// attention_exact_cpu and attention_exact_cpu_heads (kernels/cpu/cpu.h) against
// attention_exact_ref by memcmp, on every supported instruction set, over every attention case of
// the op table (tests/op_cases.h): head sizes 1 to 300 with and without a partial last block,
// position counts from 0 to 2000, grouped query heads, cache views strided like the runtime's KV
// cells (several KV heads per cell), K/V whose block magnitudes spread over 2^-60 .. 2^20 so that
// scores round and weights underflow, zero blocks, all-equal scores, one dominant score and
// negative zeros, and hand-made scores at the flush boundary 2^-126 and on rounding ties. The KV
// cells themselves, written with quantize_block_cpu as the CPU backend stores them, against the
// table's kv_quantize cases. Where the reference refuses its input the CPU must refuse it too.
// The score pass alone on every instruction set against the scalar one, on raw int16 K blocks at
// the int16 edges with exponents that force every shift.
#include <doctest/doctest.h>

#include "guard_pages.h"
#include "op_cases.h"
#include "op_table_driver.h"
#include "test_util.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::numerics;
using namespace detaudit::kernels;
using test::op_case;
using test::op_kind;
using cpu::attn_query;

namespace {

// Case c's attention at isa over its cells: per query head (attention_exact_cpu) or per group of
// query heads sharing a KV head (attention_exact_cpu_heads), into a guarded buffer.
std::vector<float> cpu_attention(const op_case& c, const test::op_inputs& in, cpu::isa isa, bool grouped) {
  std::vector<float> out = test::output_buffer(c, in);
  const int64_t hd = c.head_dim, per = c.n_head / c.n_head_kv;
  for (size_t row = 0; row < c.n_kv.size(); ++row) {
    for (int64_t g = 0; g < c.n_head_kv; ++g) {
      const kv_head_view k = test::cell_view(in.cells.data(), c.n_head_kv, hd, g, 0);
      const kv_head_view v = test::cell_view(in.cells.data(), c.n_head_kv, hd, g, 1);
      const int64_t at = (static_cast<int64_t>(row) * c.n_head + g * per) * hd;
      if (grouped) {
        cpu::attention_exact_cpu_heads(isa, in.q.data() + at, per, hd, k, v, c.n_kv[row], c.kq_scale,
                                       out.data() + test::GUARD + at, c.softcap,
                                       c.sinks.empty() ? nullptr : c.sinks.data() + g * per);
        continue;
      }
      for (int64_t h = 0; h < per; ++h)
        cpu::attention_exact_cpu(isa, in.q.data() + at + h * hd, hd, k, v, c.n_kv[row], c.kq_scale,
                                 out.data() + test::GUARD + at + h * hd, c.softcap,
                                 c.sinks.empty() ? nullptr : &c.sinks[static_cast<size_t>(g * per + h)]);
    }
  }
  return out;
}

// The kv_store of the CPU backend: each KV head of a position quantized block by block with
// quantize_block_cpu, into case c's guarded cell buffer.
std::vector<float> cpu_kv_cells(const op_case& c, const test::op_inputs& in) {
  std::vector<float> out = test::output_buffer(c, in);
  uint8_t* cells = reinterpret_cast<uint8_t*>(out.data() + test::GUARD);
  const int64_t nb = (c.head_dim + QBLOCK - 1) / QBLOCK, cb = test::kv_cell_bytes(c.n_head_kv, c.head_dim);
  for (int64_t t = 0; t < c.rows; ++t) {
    int16_t* q = reinterpret_cast<int16_t*>(cells + t * cb);
    int32_t* e = reinterpret_cast<int32_t*>(cells + t * cb + 2 * c.n_head_kv * nb * QBLOCK * 2);
    for (int kind = 0; kind < 2; ++kind) {
      const float* x = (kind ? in.y : in.x).data() + t * c.n_head_kv * c.head_dim;
      for (int64_t h = 0; h < c.n_head_kv; ++h)
        for (int64_t b = 0; b < nb; ++b) {
          const int64_t i0 = b * QBLOCK, blk = (kind * c.n_head_kv + h) * nb + b;
          e[blk] = cpu::quantize_block_cpu(x + h * c.head_dim + i0, static_cast<int>(std::min<int64_t>(QBLOCK, c.head_dim - i0)),
                                           q + blk * QBLOCK);
        }
    }
  }
  return out;
}

// attention_exact_cpu (one query head at a time) and attention_exact_cpu_heads (a group at once)
// at each instruction set, and the CPU backend's KV cells, as backends of the op table
// (op_table_driver.h).
[[maybe_unused]] const bool cpu_attention_registered = [] {
  std::vector<test::op_backend> bs;
  for (bool grouped : {false, true}) {
    for (cpu::isa isa : {cpu::isa::scalar, cpu::isa::avx2, cpu::isa::avx512}) {
      test::op_backend b;
      b.name = std::string(grouped ? "attention_exact_cpu_heads " : "attention_exact_cpu ") + cpu::isa_name(isa);
      b.ops = {op_kind::attention};
      b.leaves_out = [isa](const op_case&) -> std::string {
        return cpu::isa_supported(isa) ? "" : std::string("this CPU has no ") + cpu::isa_name(isa);
      };
      b.run = [isa, grouped](const op_case& c, const test::op_inputs& in) { return cpu_attention(c, in, isa, grouped); };
      bs.push_back(std::move(b));
    }
  }
  test::op_backend kv;
  kv.name = "kv cells by quantize_block_cpu";
  kv.ops = {op_kind::kv_quantize};
  kv.run = cpu_kv_cells;
  bs.push_back(std::move(kv));
  return test::op_backends_add(std::move(bs));
}();

}  // namespace

TEST_CASE("attention_exact_cpu runs and reports every supported instruction set") {
  const std::vector<cpu::isa> all = cpu::isa_all_supported();
  std::string names;
  for (cpu::isa i : all) names += std::string(names.empty() ? "" : ", ") + cpu::isa_name(i);
  MESSAGE("attention_exact_cpu variants compared with attention_exact_ref: ", names);
  REQUIRE(!all.empty());
  CHECK(all.front() == cpu::isa::scalar);
#if defined(__x86_64__)
  const bool has_avx2 = __builtin_cpu_supports("avx2");
  const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  CHECK(cpu::isa_supported(cpu::isa::avx2) == has_avx2);
  CHECK(cpu::isa_supported(cpu::isa::avx512) == has_avx512);
  if (!has_avx512) MESSAGE("this CPU lacks AVX-512 (F/BW/DQ/VL/VNNI): the avx512 variant is not compared here");
  if (!has_avx2) MESSAGE("this CPU lacks AVX2: the avx2 variant is not compared here");
#endif
}

TEST_CASE("attention_exact_cpu fails like attention_exact_ref on non-finite scores and bad sizes") {
  // Scores that overflow (q, K and V of 2^100 .. 2^110), an infinite kq_scale, a NaN query.
  op_case c = test::op_detail::attn(1, 1, 32, 9, {9}, attention_kq_scale(32), test::dist{.lo = 100, .hi = 110},
                                    test::dist{.lo = 100, .hi = 110}, test::dist{.lo = 100, .hi = 110});
  c.seed = 707;
  test::op_inputs in = test::make_inputs(c);
  // Either both give the same bits or both throw input_error.
  auto same_or_both_refuse = [&](const std::string& what) {
    CAPTURE(what);
    test::prepared_case p{in, {}, {}};
    try {
      p.want = test::reference_output(c, in);
    } catch (const input_error& e) {
      p.refused = e.what();
    }
    for (cpu::isa i : cpu::isa_all_supported()) {
      for (bool grouped : {false, true}) {
        const auto m = test::mismatch(p, [&] { return cpu_attention(c, in, i, grouped); });
        CHECK_MESSAGE(!m, std::string(cpu::isa_name(i)) << ": " << *m);
      }
    }
  };
  same_or_both_refuse("overflowing scores");
  c.kq_scale = std::bit_cast<float>(0x7f800000u);
  same_or_both_refuse("infinite kq_scale");
  c.kq_scale = 0.125f;
  in.q[3] = std::bit_cast<float>(0x7fc00000u);
  same_or_both_refuse("NaN query");
  const kv_head_view k = test::cell_view(in.cells.data(), 1, 32, 0, 0), v = test::cell_view(in.cells.data(), 1, 32, 0, 1);
  for (cpu::isa i : cpu::isa_all_supported()) {
    float out = 0;
    CHECK_THROWS_AS(cpu::attention_exact_cpu(i, in.q.data(), 0, k, v, 9, 0.125f, &out), input_error);
  }
}

// The queries are quantized by quantize_block_cpu (its AVX2 form where the CPU has AVX2), the
// reference's by numerics::quantize_act: a non-finite query value must be refused with the
// reference's error, its text included, wherever it lies (first, middle or last element; in a full
// block or in a partial last one; the first or last head of a group), for head sizes that are not
// multiples of 32 and for ones that are, per head and per group on every instruction set. The
// same queries made finite again (-0, a subnormal or a value whose 24 bits round up to 2^15 in
// the slot) give the reference's bits.
TEST_CASE("attention_exact_cpu refuses a non-finite query with the reference's error at every place, head size and set") {
  auto error_of = [](auto&& f) { return test::thrown_text<input_error>(f); };
  const uint32_t non_finite[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xff800001u, 0x7fbfffffu};
  int64_t n_checked = 0;
  for (int64_t hd : {1, 17, 31, 32, 33, 64, 80, 100, 128}) {
    const int64_t per = 4;
    op_case c = test::op_detail::attn(per, 1, hd, 7, {7}, attention_kq_scale(hd), test::dist{.lo = -3, .hi = 3},
                                      test::dist{.lo = -3, .hi = 3}, test::dist{.lo = -3, .hi = 3});
    c.seed = static_cast<uint64_t>(9000 + hd);
    test::op_inputs in = test::make_inputs(c);
    const kv_head_view k = test::cell_view(in.cells.data(), 1, hd, 0, 0), v = test::cell_view(in.cells.data(), 1, hd, 0, 1);
    std::vector<float> want(static_cast<size_t>(per * hd)), got(want.size());
    for (int64_t h : {int64_t{0}, per - 1})
      for (int64_t pos : {int64_t{0}, hd / 2, hd - 1})
        for (const uint32_t nf : non_finite) {
          CAPTURE(hd);
          CAPTURE(h);
          CAPTURE(pos);
          CAPTURE(nf);
          float& slot = in.q[static_cast<size_t>(h * hd + pos)];
          const float keep = slot;
          slot = std::bit_cast<float>(nf);
          const std::string refused =
              error_of([&] { attention_exact_ref(in.q.data() + h * hd, hd, k, v, 7, c.kq_scale, want.data()); });
          REQUIRE(refused != "(nothing thrown)");
          for (cpu::isa i : cpu::isa_all_supported()) {
            CHECK(error_of([&] { cpu::attention_exact_cpu(i, in.q.data() + h * hd, hd, k, v, 7, c.kq_scale, got.data()); }) == refused);
            CHECK(error_of([&] { cpu::attention_exact_cpu_heads(i, in.q.data(), per, hd, k, v, 7, c.kq_scale, got.data()); }) == refused);
            n_checked += 2;
          }
          // Finite again: -0, a subnormal, or 8 - 2^-21 (all mantissa bits set: rounds up to 2^15 when
          // it is its block's maximum).
          const uint32_t finite[] = {0x80000000u, 0x00000001u | (nf & 0x80000000u), 0x40ffffffu | (nf & 0x80000000u)};
          slot = std::bit_cast<float>(finite[n_checked % 3]);
          for (int64_t j = 0; j < per; ++j) attention_exact_ref(in.q.data() + j * hd, hd, k, v, 7, c.kq_scale, want.data() + j * hd);
          for (cpu::isa i : cpu::isa_all_supported()) {
            std::fill(got.begin(), got.end(), -1.0f);
            for (int64_t j = 0; j < per; ++j) cpu::attention_exact_cpu(i, in.q.data() + j * hd, hd, k, v, 7, c.kq_scale, got.data() + j * hd);
            CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
            std::fill(got.begin(), got.end(), -1.0f);
            cpu::attention_exact_cpu_heads(i, in.q.data(), per, hd, k, v, 7, c.kq_scale, got.data());
            CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
          }
          slot = keep;
        }
  }
  MESSAGE(n_checked << " refusals compared with attention_exact_ref's");
}

TEST_CASE("attention scores: every instruction set's pass equals the scalar one on hostile raw K blocks") {
  // The score pass alone (attention_internal.h), on int16 K blocks and exponents written directly:
  // values at the int16 edges (-32768 included), exponents spread so that some block terms shift
  // right past every bit (rounding, ties, the 63 clamp) and some left, zero blocks among live ones
  // (some holding stray nonzero values under their EXP_ZERO),
  // positions whose every block is zero, head sizes below, at and past the AVX2 four-position
  // pass's limit (16 blocks), and position counts that leave 1..7 positions after the last group
  // of 8 (AVX-512) and 1..3 after the last group of 4 (AVX2).
  test::test_rng r{0xa77e5c0e};
  int64_t n_cases = 0, n_bad = 0;
  for (int64_t nb : {1, 2, 3, 4, 8, 16, 17}) {
    for (int64_t n_kv : {1, 6, 7, 8, 9, 10, 15, 16, 23, 37}) {
      for (int pattern = 0; pattern < 4; ++pattern) {
        const int64_t q_stride = nb * QBLOCK + 32 * (pattern % 2), e_stride = nb + 3 * (pattern % 2);
        std::vector<int16_t> kq(static_cast<size_t>(n_kv * q_stride));
        std::vector<int32_t> ke(static_cast<size_t>(n_kv * e_stride), EXP_ZERO);
        for (int64_t t = 0; t < n_kv; ++t) {
          const bool dead = r.range(0, 5) == 0;  // every block of this position zero
          for (int64_t b = 0; b < nb; ++b) {
            int16_t* blk = kq.data() + t * q_stride + b * QBLOCK;
            if (dead || r.range(0, 4) == 0) {
              // A zero block: EXP_ZERO, values 0; with patterns 2 and 3 the values are left
              // nonzero, which every pass must ignore as the scalar one does.
              if (pattern >= 2)
                for (int i = 0; i < QBLOCK; ++i) blk[i] = static_cast<int16_t>(r.range(-32768, 32767));
              continue;
            }
            for (int i = 0; i < QBLOCK; ++i) {
              const int64_t v = pattern >= 2 && r.range(0, 1) ? (r.range(0, 1) ? 32767 : -32768) : r.range(-32768, 32767);
              blk[i] = static_cast<int16_t>(v);
            }
            // Exponents near one another (left shifts) or far apart (right shifts by up to ~90).
            ke[static_cast<size_t>(t * e_stride + b)] = static_cast<int32_t>(pattern == 3 ? r.range(-140, 113) : r.range(-20, -10));
          }
        }
        attn_query q;
        std::vector<int16_t> qq(static_cast<size_t>(nb * QBLOCK));
        std::vector<int32_t> qe(static_cast<size_t>(nb));
        int32_t qmax = EXP_ZERO;
        for (int64_t b = 0; b < nb; ++b) {
          if (nb > 1 && r.range(0, 6) == 0) {
            qe[static_cast<size_t>(b)] = EXP_ZERO;
            continue;
          }
          for (int i = 0; i < QBLOCK; ++i) qq[static_cast<size_t>(b * QBLOCK + i)] = static_cast<int16_t>(r.range(-32767, 32767));
          qe[static_cast<size_t>(b)] = static_cast<int32_t>(pattern == 3 ? r.range(-140, 113) : r.range(-12, -2));
          qmax = std::max(qmax, qe[static_cast<size_t>(b)]);
        }
        if (qmax == EXP_ZERO) {  // attention_exact_cpu handles an all-zero query itself
          qe[0] = 0;
          qmax = 0;
        }
        q.q = qq.data();
        q.exp = qe.data();
        q.max_exp = qmax;
        q.n_blocks = nb;
        const kv_head_view k{kq.data(), ke.data(), q_stride, e_stride};
        const float scale = pattern == 1 ? -0.125f : 0.125f;
        std::vector<float> want(static_cast<size_t>(n_kv), -1.0f);
        cpu::attention_scores_scalar(q, k, n_kv, scale, want.data());
        for (cpu::isa i : cpu::isa_all_supported()) {
          std::vector<float> got(static_cast<size_t>(n_kv), -2.0f);
          if (i == cpu::isa::avx2) cpu::attention_scores_avx2(q, k, n_kv, scale, got.data());
          else if (i == cpu::isa::avx512) cpu::attention_scores_avx512(q, k, n_kv, scale, got.data());
          else continue;
          ++n_cases;
          if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) {
            ++n_bad;
            for (int64_t t = 0; t < n_kv && n_bad < 10; ++t)
              if (std::bit_cast<uint32_t>(want[static_cast<size_t>(t)]) != std::bit_cast<uint32_t>(got[static_cast<size_t>(t)])) {
                FAIL_CHECK(cpu::isa_name(i) << " nb " << nb << " n_kv " << n_kv << " pattern " << pattern << " position " << t << ": scalar "
                                            << want[static_cast<size_t>(t)] << ", got " << got[static_cast<size_t>(t)]);
                break;
              }
          }
        }
      }
    }
  }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " score passes against the scalar one");
}

TEST_CASE("attention scores: the largest block products, left-shifted the most, on every instruction set") {
  // Query and K blocks at the int16 extremes with signs that line up (|T| = 32 * 32767 * 32768 or
  // 32 * 32767^2, just below 2^35) and equal exponents, so that the one-block head's term is
  // shifted left by 17 to just below 2^52, where a double's spacing is 1 (and 2 in the AVX2
  // pass's rounding sum); two-block heads shift by 16. Signs mixed across positions, a position
  // count that leaves a tail after the last group of four and of eight.
  int64_t n_cases = 0;
  for (int64_t nb : {1, 2}) {
    for (int32_t e : {-20, 0, 7}) {
      const int64_t n_kv = 11;
      std::vector<int16_t> kq(static_cast<size_t>(n_kv * nb * QBLOCK));
      std::vector<int32_t> ke(static_cast<size_t>(n_kv * nb), e);
      std::vector<int16_t> qq(static_cast<size_t>(nb * QBLOCK));
      std::vector<int32_t> qe(static_cast<size_t>(nb), e);
      for (size_t i = 0; i < qq.size(); ++i) qq[i] = static_cast<int16_t>(i % 3 == 0 ? -32767 : 32767);
      for (int64_t t = 0; t < n_kv; ++t)
        for (int64_t i = 0; i < nb * QBLOCK; ++i) {
          const int16_t qi = qq[static_cast<size_t>(i)];
          const bool agree = (t % 3) != 1, wide = (t % 2) == 0;  // T positive or negative, 32768 or 32767
          const int16_t kmag = wide ? (agree == (qi > 0) ? int16_t{32767} : int16_t{-32768}) : static_cast<int16_t>(agree ? qi : -qi);
          kq[static_cast<size_t>(t * nb * QBLOCK + i)] = kmag;
        }
      const attn_query q{qq.data(), qe.data(), e, nb};
      const kv_head_view k{kq.data(), ke.data(), nb * QBLOCK, nb};
      std::vector<float> want(static_cast<size_t>(n_kv), -1.0f);
      cpu::attention_scores_scalar(q, k, n_kv, 1.0f, want.data());
      for (cpu::isa i : cpu::isa_all_supported()) {
        std::vector<float> got(static_cast<size_t>(n_kv), -2.0f);
        if (i == cpu::isa::avx2) cpu::attention_scores_avx2(q, k, n_kv, 1.0f, got.data());
        else if (i == cpu::isa::avx512) cpu::attention_scores_avx512(q, k, n_kv, 1.0f, got.data());
        else continue;
        ++n_cases;
        for (int64_t t = 0; t < n_kv; ++t)
          CHECK_MESSAGE(std::bit_cast<uint32_t>(want[static_cast<size_t>(t)]) == std::bit_cast<uint32_t>(got[static_cast<size_t>(t)]),
                        cpu::isa_name(i) << " nb " << nb << " e " << e << " position " << t);
      }
    }
  }
  MESSAGE(n_cases << " extreme score passes against the scalar one");
}

namespace {

// The value pass of instruction set i (attention_internal.h) for one head.
void values_of(cpu::isa i, const int32_t* w, const kv_head_view& v, int64_t n_kv, const int32_t* gv, int64_t nb, int64_t* acc) {
  if (i == cpu::isa::avx2) cpu::attention_values_avx2(w, v, n_kv, gv, nb, acc);
  else if (i == cpu::isa::avx512) cpu::attention_values_avx512(w, v, n_kv, gv, nb, acc);
  else cpu::attention_values_scalar(w, v, n_kv, gv, nb, acc);
}

}  // namespace

TEST_CASE("attention values: every instruction set's pass equals the scalar one on hostile raw V blocks") {
  // The value pass alone on int16 V blocks and exponents written directly, with the grids of
  // attention_value_grids_ref: values at the int16 edges, weights 0, 1, 2^30 and random,
  // exponents that shift terms left by up to 17 and right past every bit, zero blocks (some with
  // stray values under EXP_ZERO), position counts around multiples of 64, strided views,
  // accumulators that start nonzero. Then the largest sums: every weight 2^30 and every value at
  // one edge, all but one position shifted right by one bit (terms of 2^44, one sign, sums past
  // 2^51). The AVX2 pass for several heads at once (skipping some) against one head at a time.
  test::test_rng r{0x7a1e5};
  int64_t n_cases = 0, n_bad = 0;
  auto check = [&](const char* what, const std::vector<int32_t>& w, const kv_head_view& v, int64_t n_kv, int64_t nb) {
    std::vector<int32_t> gv(static_cast<size_t>(nb));
    attention_value_grids_ref(v, n_kv, nb, gv.data());
    std::vector<int64_t> want(static_cast<size_t>(nb * QBLOCK));
    for (size_t j = 0; j < want.size(); ++j) want[j] = static_cast<int64_t>(j) * 1000003 - 7;
    std::vector<int64_t> start = want;
    cpu::attention_values_scalar(w.data(), v, n_kv, gv.data(), nb, want.data());
    for (cpu::isa i : cpu::isa_all_supported()) {
      if (i == cpu::isa::scalar) continue;
      std::vector<int64_t> got = start;
      values_of(i, w.data(), v, n_kv, gv.data(), nb, got.data());
      ++n_cases;
      if (got != want) {
        ++n_bad;
        FAIL_CHECK(cpu::isa_name(i) << " " << what << " nb " << nb << " n_kv " << n_kv);
      }
    }
  };
  for (int64_t nb : {1, 2, 3}) {
    for (int64_t n_kv : {1, 5, 63, 64, 65, 129, 200}) {
      for (int pattern = 0; pattern < 4; ++pattern) {
        const int64_t q_stride = nb * QBLOCK + 32 * (pattern % 2), e_stride = nb + 3 * (pattern % 2);
        std::vector<int16_t> vq(static_cast<size_t>(n_kv * q_stride));
        std::vector<int32_t> ve(static_cast<size_t>(n_kv * e_stride), EXP_ZERO);
        std::vector<int32_t> w(static_cast<size_t>(n_kv));
        for (int64_t t = 0; t < n_kv; ++t) {
          const int64_t k = r.range(0, 5);
          w[static_cast<size_t>(t)] = static_cast<int32_t>(k == 0 ? 0 : k == 1 ? 1 : k == 2 ? (1 << 30) : r.range(0, 1 << 30));
          for (int64_t b = 0; b < nb; ++b) {
            int16_t* blk = vq.data() + t * q_stride + b * QBLOCK;
            const bool zero = r.range(0, 5) == 0;
            for (int i = 0; i < QBLOCK; ++i)
              blk[i] = static_cast<int16_t>(zero && pattern < 2 ? 0 : pattern >= 2 && r.range(0, 1) ? (r.range(0, 1) ? 32767 : -32768) : r.range(-32768, 32767));
            if (!zero) ve[static_cast<size_t>(t * e_stride + b)] = static_cast<int32_t>(pattern == 3 ? r.range(-140, 113) : r.range(-30, -10));
          }
        }
        check("random", w, kv_head_view{vq.data(), ve.data(), q_stride, e_stride}, n_kv, nb);
      }
      // The largest sums of one sign.
      for (int sign : {1, -1}) {
        std::vector<int16_t> vq(static_cast<size_t>(n_kv * nb * QBLOCK), static_cast<int16_t>(sign > 0 ? 32767 : -32768));
        std::vector<int32_t> ve(static_cast<size_t>(n_kv * nb));
        const int32_t top = 5, low = top + numerics::ceil_log2(n_kv) - 18;  // right by one bit
        for (int64_t t = 0; t < n_kv; ++t)
          for (int64_t b = 0; b < nb; ++b) ve[static_cast<size_t>(t * nb + b)] = t == n_kv / 2 ? top : std::min(low, top);
        check("largest", std::vector<int32_t>(static_cast<size_t>(n_kv), 1 << 30), kv_head_view{vq.data(), ve.data(), nb * QBLOCK, nb}, n_kv, nb);
      }
    }
  }
  // Several heads at once (the AVX2 pass attention_exact_cpu_heads calls, each V block widened
  // once for all heads) against one head at a time, skipped heads untouched.
  if (cpu::isa_supported(cpu::isa::avx2)) {
    const int64_t nb = 2, n_kv = 150, n_heads = 5;
    std::vector<int16_t> vq(static_cast<size_t>(n_kv * nb * QBLOCK));
    std::vector<int32_t> ve(static_cast<size_t>(n_kv * nb));
    for (auto& x : vq) x = static_cast<int16_t>(r.range(-32768, 32767));
    for (auto& e : ve) e = r.range(0, 7) == 0 ? EXP_ZERO : static_cast<int32_t>(r.range(-40, -10));
    const kv_head_view v{vq.data(), ve.data(), nb * QBLOCK, nb};
    std::vector<int32_t> w(static_cast<size_t>(n_heads * n_kv));
    for (auto& x : w) x = static_cast<int32_t>(r.range(0, 3) == 0 ? 0 : r.range(0, 1 << 30));
    std::vector<int32_t> gv(static_cast<size_t>(nb));
    attention_value_grids_ref(v, n_kv, nb, gv.data());
    const std::vector<char> skip{0, 1, 0, 0, 1};
    std::vector<int64_t> want(static_cast<size_t>(n_heads * nb * QBLOCK), 3), got = want;
    for (int64_t h = 0; h < n_heads; ++h)
      if (!skip[static_cast<size_t>(h)]) cpu::attention_values_scalar(w.data() + h * n_kv, v, n_kv, gv.data(), nb, want.data() + h * nb * QBLOCK);
    cpu::attention_values_heads_avx2(w.data(), n_kv, n_heads, skip.data(), v, n_kv, gv.data(), nb, got.data());
    ++n_cases;
    CHECK(got == want);
  }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " value passes against the scalar one");
}

TEST_CASE("attention score and value passes read nothing outside their arrays") {
  // Every array of the passes (query, K/V values and exponents, weights, grids, accumulators) in
  // a mapping of its own, right before a PROT_NONE page and, separately, right after one: a read
  // one element outside faults. Position counts around the AVX2 groups of four and chunks of 64.
  test::test_rng r{0x6a4d};
  for (bool tail : {true, false}) {
    for (int64_t nb : {1, 2, 17}) {
      for (int64_t n_kv : {1, 4, 5, 64, 65}) {
        const size_t nq = static_cast<size_t>(n_kv * nb * QBLOCK), ne = static_cast<size_t>(n_kv * nb);
        std::vector<int16_t> kq(nq), vq(nq), qq(static_cast<size_t>(nb * QBLOCK));
        std::vector<int32_t> ke(ne), ve(ne), qe(static_cast<size_t>(nb)), w(static_cast<size_t>(n_kv));
        for (auto& x : kq) x = static_cast<int16_t>(r.range(-32767, 32767));
        for (auto& x : vq) x = static_cast<int16_t>(r.range(-32767, 32767));
        for (auto& x : qq) x = static_cast<int16_t>(r.range(-32767, 32767));
        for (auto& e : ke) e = r.range(0, 6) == 0 ? EXP_ZERO : static_cast<int32_t>(r.range(-30, -10));
        for (auto& e : ve) e = r.range(0, 6) == 0 ? EXP_ZERO : static_cast<int32_t>(r.range(-30, -10));
        int32_t qmax = EXP_ZERO;
        for (auto& e : qe) qmax = std::max(qmax, e = static_cast<int32_t>(r.range(-12, -2)));
        for (auto& x : w) x = static_cast<int32_t>(r.range(0, 1 << 30));
        const test::guarded<int16_t> gkq(kq.data(), nq, tail), gvq(vq.data(), nq, tail), gqq(qq.data(), qq.size(), tail);
        const test::guarded<int32_t> gke(ke.data(), ne, tail), gve(ve.data(), ne, tail), gqe(qe.data(), qe.size(), tail);
        const test::guarded<int32_t> gw(w.data(), w.size(), tail);
        const attn_query q{gqq.p, gqe.p, qmax, nb};
        const kv_head_view k{gkq.p, gke.p, nb * QBLOCK, nb}, v{gvq.p, gve.p, nb * QBLOCK, nb};
        std::vector<float> want(static_cast<size_t>(n_kv));
        cpu::attention_scores_scalar(q, k, n_kv, 0.125f, want.data());
        std::vector<int32_t> gv(static_cast<size_t>(nb));
        attention_value_grids_ref(v, n_kv, nb, gv.data());
        const test::guarded<int32_t> ggv(gv.data(), gv.size(), tail);
        std::vector<int64_t> acc_want(static_cast<size_t>(nb * QBLOCK), 0);
        cpu::attention_values_scalar(gw.p, v, n_kv, ggv.p, nb, acc_want.data());
        for (cpu::isa i : cpu::isa_all_supported()) {
          if (i == cpu::isa::scalar) continue;
          test::guarded<float> got(static_cast<size_t>(n_kv), tail);
          if (i == cpu::isa::avx2) cpu::attention_scores_avx2(q, k, n_kv, 0.125f, got.p);
          else cpu::attention_scores_avx512(q, k, n_kv, 0.125f, got.p);
          CHECK_MESSAGE(std::memcmp(got.p, want.data(), want.size() * sizeof(float)) == 0, cpu::isa_name(i) << " scores nb " << nb << " n_kv " << n_kv);
          test::guarded<int64_t> acc(static_cast<size_t>(nb * QBLOCK), tail);
          values_of(i, gw.p, v, n_kv, ggv.p, nb, acc.p);
          CHECK_MESSAGE(std::memcmp(acc.p, acc_want.data(), acc_want.size() * sizeof(int64_t)) == 0, cpu::isa_name(i) << " values nb " << nb << " n_kv " << n_kv);
        }
      }
    }
  }
}
