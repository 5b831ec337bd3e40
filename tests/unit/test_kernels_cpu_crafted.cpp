// Crafted cases for the AVX2 prompt ("panel") and generation ("gemv") kernels of
// kernels/cpu/matmul_avx2.cpp, each compared with kernels/ref (matmul_exact_ref) bit for bit
// (memcmp of the float outputs; the kernels' int64 sums compared exactly with the scalar panel
// kernel's where a kernel is called directly). Never a tolerance.
//  1. Panels of every integer weight type, 1..9, 13 and 17 tokens, with rows and activations
//     built so that some (panel, token) pairs have a block term of 2^51 or more (the double
//     epilogue's round_ok() fails and the pass is redone token by token, down to the integer
//     kernel) and some do not; the test computes each pair's largest term to prove both happen.
//  2. One token whose terms pass 2^51 in a pass of 3 (wide panels) or 4 (narrow) tokens, at every
//     position of the pass: the other tokens of that pass must still give the reference bits.
//  3. panel_kernel_avx2 against panel_kernel_scalar on the same panel with every panel and
//     activation array right before (and, separately, right after) a PROT_NONE page; the same
//     for two panels at once (panel_kernel2_avx2), the second of 4 rows, where their kinds pair.
//  4. mxfp4 blocks whose E8M0 scale bytes are 253 and 254 (the row kernels refuse them, the panel
//     kernel takes them even with <= 4 tokens): the reference's bits, or the reference's error.
//  5. q6_K half-block sums times scales at the int32 edge (|T * s| up to 2^31 - 65536) on the AVX2
//     row kernel, whose _mm256_mullo_epi32 products must neither overflow nor be added in int32.
//  6. Long q4_K and q5_K rows (8448 = 8192 + 256 elements) on the row kernel (1..4 tokens) and
//     the panel kernel (3, 5 and 8 tokens).
//  7. Neighbouring panels whose kinds differ (AVX2 reads two panels per pass only when both are
//     narrow with the same offset kind): q4_K with and without mins, q2_K with one offset per
//     block and with two, q6_K narrow and wide; the test decodes the panels to prove it.
//  8. The packed generation kernels' pairs of 16-row groups (one token) where only one group's
//     terms leave the rounding binade: the pair's int64 sums equal each group's alone, with the
//     pack next to a PROT_NONE page, and the driver's output the reference's bits.
//  9. The row kernels of the few-token path (every integer type, every instruction set, 1 to
//     GEMV_MAX_TOKENS tokens) on weights right before and right after a PROT_NONE page: their
//     prefetches ahead of the stream land in the guard page; the reference's bits.
// 10. finish16_avx2 (the drivers' int64 sums to floats) against fixed_to_f32_fast on sums of every
//     length, rounding ties with and without a sticky bit, the 2^52 switch, INT64_MIN, and
//     exponents that flush to zero or overflow.
// 11. The bounded pass of two narrow panels (no per-term check: panel::bound times
//     act_pack::abs_scaled below 1 - 2^-20) with terms just inside that limit, and passes just
//     outside it, which the checked pass takes: the scalar kernel's sums either way.
#include <doctest/doctest.h>

#include "op_cases.h"
#include "guard_pages.h"
#include "test_util.h"


#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gguf/dtype.h"
#include "gguf/quants.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/ref/ref.h"
#include "numerics/exact.h"
#include "numerics/wblock.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::kernels;
using gguf::dtype;

namespace {

using rng = detaudit::test::test_rng;

constexpr int ROWS = cpu::PANEL_ROWS;
constexpr double NEG_INF = -std::numeric_limits<double>::infinity();

const dtype INT_TYPES[] = {gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_1, gguf::DTYPE_Q5_0, gguf::DTYPE_Q5_1, gguf::DTYPE_Q8_0,
                           gguf::DTYPE_Q2_K, gguf::DTYPE_Q3_K, gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K,
                           gguf::DTYPE_MXFP4};

std::string tname(dtype t) { return gguf::dtype_get(t).name; }

bool have_avx2() { return cpu::isa_supported(cpu::isa::avx2); }

// doctest streams a const char* as a pointer.
std::string iname(cpu::isa i) { return cpu::isa_name(i); }

// ---- reference, driver and helpers ----

std::vector<float> ref_out(dtype t, const std::vector<uint8_t>& w, const std::vector<float>& x, int64_t n_in, int64_t n_out,
                           int64_t n_tok) {
  std::vector<numerics::qvec> xs(static_cast<size_t>(n_tok));
  for (int64_t k = 0; k < n_tok; ++k) numerics::quantize_act(x.data() + k * n_in, n_in, xs[static_cast<size_t>(k)]);
  std::vector<float> y(static_cast<size_t>(n_tok * n_out), -12345.0f);
  matmul_exact_ref(xs.data(), n_tok, t, w.data(), n_in, n_out, y.data(), 0, n_out);
  return y;
}

std::vector<int32_t> bounds_of(dtype t, const std::vector<uint8_t>& w, int64_t n_in, int64_t n_out) {
  std::vector<int32_t> b(static_cast<size_t>(n_out));
  cpu::weight_row_bounds(t, w.data(), n_in, 0, n_out, b.data());
  return b;
}

std::vector<float> cpu_out(cpu::isa isa, dtype t, const uint8_t* w, const cpu::act_pack& x, int64_t n_out,
                           const std::vector<int32_t>& bounds) {
  std::vector<float> y(static_cast<size_t>(x.n_tokens * n_out), -12345.0f);
  cpu::matmul_exact_cpu(isa, x, t, w, n_out, bounds.data(), y.data(), 0, n_out);
  return y;
}

// The first index where a and b differ in their bits; -1 when none, -2 when the sizes differ.
int64_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -2;
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) return -1;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<int64_t>(i);
  return -1;
}

std::string diff_text(const std::vector<float>& want, const std::vector<float>& got, int64_t i) {
  if (i < 0) return "sizes differ";
  uint32_t a, b;
  std::memcpy(&a, &want[static_cast<size_t>(i)], 4);
  std::memcpy(&b, &got[static_cast<size_t>(i)], 4);
  char buf[160];
  std::snprintf(buf, sizeof buf, "first difference at %lld: ref %.9g (0x%08x), got %.9g (0x%08x)", static_cast<long long>(i),
                static_cast<double>(want[static_cast<size_t>(i)]), a, static_cast<double>(got[static_cast<size_t>(i)]), b);
  return buf;
}

// matmul_exact_cpu on every supported instruction set against want (the reference), by bits;
// a differing set adds one to n_bad (the first ten reported).
void check_all_isas(const std::string& name, dtype t, const uint8_t* w, const cpu::act_pack& xp, int64_t n_out,
                    const std::vector<int32_t>& bounds, const std::vector<float>& want, int64_t& n_bad) {
  for (cpu::isa isa : cpu::isa_all_supported()) {
    const std::vector<float> y = cpu_out(isa, t, w, xp, n_out, bounds);
    const int64_t d = first_diff(want, y);
    if (d != -1) {
      ++n_bad;
      if (n_bad < 10) FAIL_CHECK(name << " matmul_exact_cpu " << iname(isa) << ": " << diff_text(want, y, d));
    }
  }
}

cpu::act_view view_of(const cpu::act_pack& p) {
  return cpu::act_view{p.n_blocks, p.q.data(), p.exp.data(), p.max_exp.data(), p.half_sum.data(), p.scale.data(),
                       p.half_scaled.data(), p.sum_scaled.data(), p.abs_scaled.data(), p.magic_div.data(),
                       p.q_eo.empty() ? nullptr : p.q_eo.data()};
}

// Rows [r0, r0 + n_rows) of w decoded into p as matmul_exact_cpu does on AVX2.
void decode_panel(dtype t, const std::vector<uint8_t>& w, int64_t n_in, int64_t r0, int n_rows,
                  const std::vector<int32_t>& bounds, cpu::panel& p) {
  const uint64_t rb = gguf::dtype_row_bytes(t, n_in);
  if (!cpu::panel_decode_fast(t, w.data(), rb, r0, n_rows, bounds.data() + r0, p))
    cpu::panel_decode_generic(t, w.data(), rb, r0, n_rows, bounds.data() + r0, p);
  cpu::panel_scales(p);
}

// A sum of the kernels' grid as matmul_exact_cpu stores it.
float finish(int64_t sum, int32_t xmax, int32_t bound, int64_t n_blocks) {
  if (xmax == numerics::EXP_ZERO || bound == numerics::EXP_ZERO) return 0.0f;
  return cpu::fixed_to_f32_fast(sum, xmax + bound - cpu::matmul_shift_const(n_blocks));
}

// log2 of the largest |term| of token t against panel p, in the units the AVX2 epilogue rounds
// (x of "M + x * 2^-51": x = dm * T * 2^(C + e_a - max + dsh), likewise the offset term);
// -inf when there is none. The double pass is accepted only when every |x| stays below about 2^51.
double max_term_log2(const cpu::panel& p, const cpu::act_pack& x, int64_t t) {
  const int64_t nb = p.n_blocks, c = cpu::matmul_shift_const(nb);
  double best = NEG_INF;
  for (int64_t b = 0; b < nb; ++b) {
    const size_t ib = static_cast<size_t>(t * nb + b);
    const int32_t ea = x.exp[ib];
    if (ea == numerics::EXP_ZERO) continue;
    const int16_t* a = x.q.data() + ib * 32;
    const int32_t* hs = x.half_sum.data() + ib * 2;
    const int64_t s = c + ea - x.max_exp[static_cast<size_t>(t)];
    for (int r = 0; r < ROWS; ++r) {
      int64_t tsum = 0;
      for (int j = 0; j < 16; ++j) {
        const uint32_t pair = static_cast<uint32_t>(p.codes[(b * 16 + j) * ROWS + r]);
        tsum += static_cast<int64_t>(static_cast<int16_t>(pair & 0xffff)) * a[2 * j] +
                static_cast<int64_t>(static_cast<int16_t>(pair >> 16)) * a[2 * j + 1];
      }
      const int64_t i = b * ROWS + r;
      const int64_t t1 = p.dm[i] * tsum;
      if (t1 != 0) best = std::max(best, std::log2(std::fabs(static_cast<double>(t1))) + static_cast<double>(s + p.dsh[i]));
      if (p.has_min) {
        const int64_t t2 = p.mm0[i] * hs[0] + p.mm1[i] * hs[1];
        if (t2 != 0) best = std::max(best, std::log2(std::fabs(static_cast<double>(t2))) + static_cast<double>(s + p.msh[i]));
      }
    }
  }
  return best;
}

// The same for one row through the reference's decoding (the row kernels' terms).
double max_row_term_log2(dtype t, const uint8_t* row, int64_t n_in, const numerics::qvec& x) {
  const int64_t nb = n_in / 32;
  std::vector<numerics::wblock> w(static_cast<size_t>(nb));
  weight_decode_row(t, row, n_in, w.data());
  const int32_t bound = numerics::wblock_exp_bound(w.data(), nb);
  if (bound == numerics::EXP_ZERO || x.max_exp == numerics::EXP_ZERO) return NEG_INF;
  const int32_t g = numerics::dot_grid(x.max_exp, bound, nb);
  double best = NEG_INF;
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t ea = x.exp[static_cast<size_t>(b)];
    if (ea == numerics::EXP_ZERO) continue;
    const numerics::dot_terms d = numerics::dot_block_terms(x.q.data() + b * 32, ea, w[static_cast<size_t>(b)]);
    if (d.t1 != 0) best = std::max(best, std::log2(std::fabs(static_cast<double>(d.t1))) + (d.p1 - g));
    if (d.t2 != 0) best = std::max(best, std::log2(std::fabs(static_cast<double>(d.t2))) + (d.p2 - g));
  }
  return best;
}

// Margins around 2^51 within which a term is not counted as clearly on one side.
constexpr double FAILS_AT = 51.01, PASSES_BELOW = 50.99;

struct tally {
  int64_t fail = 0, pass = 0, edge = 0;
  void add(double l2) {
    if (l2 >= FAILS_AT) ++fail;
    else if (l2 <= PASSES_BELOW) ++pass;
    else ++edge;
  }
};

// Every 16-row panel of (t, w) on tokens [0, x.n_tokens) of x through panel_kernel_avx2 (in one
// call, and in two calls split at token `split` so that passes start elsewhere) and through
// panel_kernel_scalar: the int64 sums must be equal. Returns the outputs as matmul_exact_cpu
// stores them; term_log2[g * n_tok + k] receives max_term_log2 of panel g and token k.
std::vector<float> panel_outputs(dtype t, const std::vector<uint8_t>& w, int64_t n_in, int64_t n_out, const cpu::act_pack& x,
                                 const std::vector<int32_t>& bounds, int64_t split, std::vector<double>* term_log2,
                                 int64_t* n_sum_bad, const std::string& name) {
  const int64_t n_tok = x.n_tokens, nb = x.n_blocks, n_groups = (n_out + ROWS - 1) / ROWS;
  const cpu::act_view xv = view_of(x);
  std::vector<float> y(static_cast<size_t>(n_tok * n_out), -12345.0f);
  if (term_log2) term_log2->assign(static_cast<size_t>(n_groups * n_tok), NEG_INF);
  cpu::panel_buffer buf;
  for (int64_t g = 0; g < n_groups; ++g) {
    const int n_rows = static_cast<int>(std::min<int64_t>(ROWS, n_out - g * ROWS));
    cpu::panel p = buf.view(nb);
    decode_panel(t, w, n_in, g * ROWS, n_rows, bounds, p);
    std::vector<int64_t> sc(static_cast<size_t>(n_tok * ROWS), 0), av(sc.size(), 0), av2(sc.size(), 0);
    cpu::panel_kernel_scalar(p, xv, 0, n_tok, sc.data());
    cpu::panel_kernel_avx2(p, xv, 0, n_tok, av.data());
    const int64_t s = std::clamp<int64_t>(split, 0, n_tok);
    cpu::panel_kernel_avx2(p, xv, 0, s, av2.data());
    cpu::panel_kernel_avx2(p, xv, s, n_tok, av2.data() + s * ROWS);
    if (av != sc || av2 != sc) {
      ++*n_sum_bad;
      if (*n_sum_bad < 10) {
        for (size_t i = 0; i < sc.size(); ++i)
          if (av[i] != sc[i] || av2[i] != sc[i]) {
            FAIL_CHECK(name << " panel " << g << " (wide " << p.wide << ", min " << p.has_min << "/" << p.min_whole
                            << "): token " << i / ROWS << " row " << i % ROWS << ": scalar " << sc[i] << ", avx2 " << av[i]
                            << ", avx2 split at " << s << " " << av2[i]);
            break;
          }
      }
    }
    for (int64_t k = 0; k < n_tok; ++k) {
      if (term_log2) (*term_log2)[static_cast<size_t>(g * n_tok + k)] = max_term_log2(p, x, k);
      for (int r = 0; r < n_rows; ++r) {
        const int64_t row = g * ROWS + r;
        y[static_cast<size_t>(k * n_out + row)] =
            finish(av[static_cast<size_t>(k * ROWS + r)], x.max_exp[static_cast<size_t>(k)], bounds[static_cast<size_t>(row)], nb);
      }
    }
  }
  return y;
}

// ---- crafted weights ----

void put16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// The codes (scale * q) of slice 0 of one (super-)block.
std::vector<int32_t> slice0_codes(dtype t, const uint8_t* blk) {
  numerics::wblock wb;
  numerics::weight_decode_block(t, blk, 0, wb);
  std::vector<int32_t> c(32);
  for (int i = 0; i < 32; ++i) c[static_cast<size_t>(i)] = wb.scale[i / 16] * wb.q[i];
  return c;
}

// Makes one (super-)block "hot": every byte `fill`, the largest finite fp16 d (65504, mantissa
// 2047), the offset scale (if any) min_h; q6_K's sub-block scales -128, mxfp4's E8M0 byte 130.
void hot_block(dtype t, uint8_t* blk, uint8_t fill, uint16_t min_h) {
  std::memset(blk, fill, gguf::dtype_get(t).type_size);
  if (t == gguf::DTYPE_Q6_K) std::memset(blk + 192, 0x80, 16);
  if (t == gguf::DTYPE_MXFP4) blk[0] = 130;
  const std::vector<int> f = test::fp16_fields(t);
  if (!f.empty()) put16(blk + f[0], 0x7bff);
  if (f.size() > 1) put16(blk + f[1], min_h);
}

// The fill byte whose hot block has the largest sum of |code| over its first 32 elements.
uint8_t hot_fill(dtype t) {
  std::vector<uint8_t> blk(gguf::dtype_get(t).type_size);
  int64_t best = -1;
  uint8_t best_f = 0;
  for (int f = 0; f < 256; ++f) {
    hot_block(t, blk.data(), static_cast<uint8_t>(f), 0x3c00);
    int64_t s = 0;
    for (int32_t c : slice0_codes(t, blk.data())) s += std::abs(c);
    if (s > best) best = s, best_f = static_cast<uint8_t>(f);
  }
  return best_f;
}

enum class row_kind {
  hot_all,      // every (super-)block hot: terms as large as the type allows
  hot_first,    // the first (super-)block hot, the others random with scales near 1
  quiet_first,  // random with scales near 1, the first (super-)block's scales tiny (fp16 2^-24)
};

// n_out rows of random bytes (scales near 1), then each reshaped as kinds[r] says.
std::vector<uint8_t> crafted_rows(rng& r, dtype t, int64_t n_in, int64_t n_out, const std::vector<row_kind>& kinds) {
  std::vector<uint8_t> w = test::weight_rows(r, t, n_in, n_out, test::weights::random_bytes_narrow);
  const uint64_t rb = gguf::dtype_row_bytes(t, n_in);
  const int64_t ts = gguf::dtype_get(t).type_size, n_units = n_in / gguf::dtype_get(t).block_size;
  const uint8_t fill = hot_fill(t);
  for (int64_t row = 0; row < n_out; ++row) {
    uint8_t* p = w.data() + static_cast<uint64_t>(row) * rb;
    switch (kinds[static_cast<size_t>(row)]) {
      case row_kind::hot_all:
        for (int64_t u = 0; u < n_units; ++u) hot_block(t, p + u * ts, fill, test::random_fp16(r, true));
        break;
      case row_kind::hot_first: hot_block(t, p, fill, test::random_fp16(r, true)); break;
      case row_kind::quiet_first:
        for (int f : test::fp16_fields(t)) put16(p + f, 0x0001);
        if (t == gguf::DTYPE_MXFP4) p[0] = 90;
        break;
    }
  }
  return w;
}

// Activations of one token: values of `base` (near 1), then for a hot token block 0 set to
// sign(code) * 32767 * 16 element by element with `codes` (so every product adds); for a cold one
// the first `cold_len` elements normal values times 2^cold_exp.
void fill_token(rng& r, float* x, int64_t n_in, bool hot, const std::vector<int32_t>& codes, int cold_exp, int64_t cold_len,
                const test::dist& base_dist = test::d_normal) {
  const std::vector<float> base = test::draw(r, base_dist, n_in);
  std::copy(base.begin(), base.end(), x);
  if (hot) {
    for (int i = 0; i < 32; ++i) x[i] = (codes[static_cast<size_t>(i)] < 0 ? -1.0f : 1.0f) * 32767.0f * 16.0f;
  } else {
    for (int64_t i = 0; i < cold_len; ++i) x[i] = r.normal() * std::ldexp(1.0f, cold_exp);
  }
}

}  // namespace

// ---- 1 ----

TEST_CASE("cpu avx2 crafted: panel: every integer type, 1..9, 13 and 17 tokens, panels with and without the 2^51 fallback") {
  if (!have_avx2()) {
    MESSAGE("no AVX2 on this CPU: the AVX2 panel kernel cannot run here (skipped)");
    return;
  }
  rng r{0x5eed01};
  // Types whose largest term can reach 2^51 with these row lengths (the shortest: C = 17 for one
  // block, 14 for one super-block). q4_0 (8 * 32 * 32767 * 2047 * 2^17 < 2^51), q2_K and mxfp4
  // (d_mant 1) cannot: they still run every panel, with terms up to just below 2^51.
  const dtype reach[] = {gguf::DTYPE_Q4_1, gguf::DTYPE_Q5_0, gguf::DTYPE_Q5_1, gguf::DTYPE_Q8_0,
                         gguf::DTYPE_Q3_K, gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K};
  const int64_t n_toks[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17};
  int64_t n_cases = 0, n_bad = 0, n_sum_bad = 0;
  std::string summary;
  for (dtype t : INT_TYPES) {
    const bool k = gguf::dtype_get(t).block_size == 256;
    tally tl;
    for (int64_t n_in : k ? std::vector<int64_t>{256, 512} : std::vector<int64_t>{32, 128}) {
      // Panel 0: 12 hot rows and 4 quiet ones; panel 1: quiet rows; panel 2 (8 rows): 4 hot, 4 quiet.
      const int64_t n_out = 40;
      std::vector<row_kind> kinds(static_cast<size_t>(n_out), row_kind::quiet_first);
      for (int64_t row = 0; row < n_out; ++row)
        if (row < 12 || (row >= 32 && row < 36)) kinds[static_cast<size_t>(row)] = row_kind::hot_all;
      for (int64_t n_tok : n_toks) {
        const std::string name = tname(t) + " n_in " + std::to_string(n_in) + " n_tok " + std::to_string(n_tok);
        CAPTURE(name);
        const std::vector<uint8_t> w = crafted_rows(r, t, n_in, n_out, kinds);
        const std::vector<int32_t> codes = slice0_codes(t, w.data());
        std::vector<float> x(static_cast<size_t>(n_tok * n_in));
        for (int64_t tok = 0; tok < n_tok; ++tok)
          fill_token(r, x.data() + tok * n_in, n_in, (tok + n_tok) % 3 == 1, codes, 12, 32);
        cpu::act_pack xp;
        cpu::act_pack_build(x.data(), n_tok, n_in, xp);
        const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
        const std::vector<float> want = ref_out(t, w, x, n_in, n_out, n_tok);
        std::vector<double> terms;
        const std::vector<float> got =
            panel_outputs(t, w, n_in, n_out, xp, bounds, n_tok >= 5 ? 2 : 1, &terms, &n_sum_bad, name);
        for (double l2 : terms) tl.add(l2);
        int64_t d = first_diff(want, got);
        if (d != -1) {
          ++n_bad;
          if (n_bad < 10) FAIL_CHECK(name << " panel_kernel_avx2: " << diff_text(want, got, d));
        }
        check_all_isas(name, t, w.data(), xp, n_out, bounds, want, n_bad);
        ++n_cases;
      }
    }
    CAPTURE(tname(t));
    CHECK(tl.pass > 0);
    if (std::find(std::begin(reach), std::end(reach), t) != std::end(reach)) CHECK(tl.fail > 0);
    summary += " " + tname(t) + " " + std::to_string(tl.fail) + "/" + std::to_string(tl.pass) + "/" + std::to_string(tl.edge);
  }
  CHECK(n_bad == 0);
  CHECK(n_sum_bad == 0);
  MESSAGE(n_cases << " cases; (panel, token) pairs past 2^51 / below / within 2^+-0.01 of it:" << summary);
}

// ---- 2 ----

TEST_CASE("cpu avx2 crafted: panel: one token past 2^51 in a pass of 3 or 4 leaves the pass's other tokens exact") {
  if (!have_avx2()) {
    MESSAGE("no AVX2 on this CPU: the AVX2 panel kernel cannot run here (skipped)");
    return;
  }
  rng r{0x5eed02};
  // Every row's first (super-)block is hot (scale 65504, codes at their extreme); the other blocks
  // have scales near 1 (2^-15 of it). The hot token meets the hot block with aligned activations;
  // the cold tokens have their largest blocks elsewhere (the first block or super-block 2^-20 of
  // the rest, which has no zero block), so their terms stay far below 2^51 and their double pass
  // is valid on its own.
  struct shape {
    dtype t;
    int64_t n_in;
  };
  const shape shapes[] = {{gguf::DTYPE_Q8_0, 64}, {gguf::DTYPE_Q5_1, 64}, {gguf::DTYPE_Q4_K, 512},
                          {gguf::DTYPE_Q5_K, 512}, {gguf::DTYPE_Q6_K, 512}};
  int64_t n_cases = 0, n_bad = 0, n_sum_bad = 0;
  for (const shape& sh : shapes) {
    const dtype t = sh.t;
    const int64_t n_in = sh.n_in, n_out = 24, cold_len = gguf::dtype_get(t).block_size;
    for (int64_t n_tok : {3, 4, 6, 7, 8}) {
      for (int64_t hot = 0; hot < n_tok; ++hot) {
        const std::string name = tname(t) + " n_tok " + std::to_string(n_tok) + " hot token " + std::to_string(hot);
        CAPTURE(name);
        const std::vector<uint8_t> w = crafted_rows(r, t, n_in, n_out, std::vector<row_kind>(n_out, row_kind::hot_first));
        const std::vector<int32_t> codes = slice0_codes(t, w.data());
        std::vector<float> x(static_cast<size_t>(n_tok * n_in));
        for (int64_t tok = 0; tok < n_tok; ++tok) fill_token(r, x.data() + tok * n_in, n_in, tok == hot, codes, -20, cold_len, test::d_spread2);
        cpu::act_pack xp;
        cpu::act_pack_build(x.data(), n_tok, n_in, xp);
        const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
        const std::vector<float> want = ref_out(t, w, x, n_in, n_out, n_tok);
        std::vector<double> terms;
        const std::vector<float> got = panel_outputs(t, w, n_in, n_out, xp, bounds, 1, &terms, &n_sum_bad, name);
        // The premise: the hot token's pass must fall back, every other token's term stays below.
        double hot_max = NEG_INF, cold_max = NEG_INF;
        for (size_t i = 0; i < terms.size(); ++i) {
          double& m = static_cast<int64_t>(i) % n_tok == hot ? hot_max : cold_max;
          m = std::max(m, terms[i]);
        }
        REQUIRE(hot_max >= FAILS_AT);
        REQUIRE(cold_max <= PASSES_BELOW);
        int64_t d = first_diff(want, got);
        if (d != -1) {
          ++n_bad;
          if (n_bad < 10) FAIL_CHECK(name << " panel_kernel_avx2: " << diff_text(want, got, d) << " (token " << d / n_out << ")");
        }
        check_all_isas(name, t, w.data(), xp, n_out, bounds, want, n_bad);
        ++n_cases;
      }
    }
  }
  CHECK(n_bad == 0);
  CHECK(n_sum_bad == 0);
  MESSAGE(n_cases << " passes with one token past 2^51");
}

// ---- 3 ----

using test::guarded;  // tests/guard_pages.h

// Copies of a panel's arrays (nb blocks) and of an act_pack's, each next to a PROT_NONE page.
struct guarded_panel {
  size_t m;
  guarded<int32_t> codes;
  guarded<int64_t> dm, dsh, mm0, mm1, msh;
  guarded<double> wd, wm0, wm1, bound;
  cpu::panel gp;
  guarded_panel(const cpu::panel& p, int64_t nb, bool tail)
      : m(static_cast<size_t>(nb * ROWS)), codes(p.codes, static_cast<size_t>(nb * 16 * ROWS), tail), dm(p.dm, m, tail),
        dsh(p.dsh, m, tail), mm0(p.mm0, m, tail), mm1(p.mm1, m, tail), msh(p.msh, m, tail), wd(p.wd, m, tail),
        wm0(p.wm0, m, tail), wm1(p.wm1, m, tail), bound(p.bound, static_cast<size_t>(nb), tail), gp(p) {
    gp.codes = codes.p;
    gp.dm = dm.p, gp.dsh = dsh.p, gp.mm0 = mm0.p, gp.mm1 = mm1.p, gp.msh = msh.p;
    gp.wd = wd.p, gp.wm0 = wm0.p, gp.wm1 = wm1.p, gp.bound = bound.p;
    gp.stage = nullptr;
  }
};

struct guarded_act {
  guarded<int16_t> q, qe;
  guarded<int32_t> ex, mx, hs;
  guarded<double> sc, hsc, ssc, asc, mdv;
  cpu::act_view v;
  guarded_act(const cpu::act_pack& xp, bool tail)
      : q(xp.q.data(), xp.q.size(), tail), qe(xp.q_eo.data(), xp.q_eo.size(), tail), ex(xp.exp.data(), xp.exp.size(), tail),
        mx(xp.max_exp.data(), xp.max_exp.size(), tail), hs(xp.half_sum.data(), xp.half_sum.size(), tail),
        sc(xp.scale.data(), xp.scale.size(), tail), hsc(xp.half_scaled.data(), xp.half_scaled.size(), tail),
        ssc(xp.sum_scaled.data(), xp.sum_scaled.size(), tail), asc(xp.abs_scaled.data(), xp.abs_scaled.size(), tail),
        mdv(xp.magic_div.data(), xp.magic_div.size(), tail),
        v{xp.n_blocks, q.p, ex.p, mx.p, hs.p, sc.p, hsc.p, ssc.p, asc.p, mdv.p, xp.q_eo.empty() ? nullptr : qe.p} {}
};

TEST_CASE("cpu avx2 crafted: panel: panel_kernel_avx2 reads nothing outside the panel and activation arrays (guard pages)") {
  if (!have_avx2()) {
    MESSAGE("no AVX2 on this CPU: panel_kernel_avx2 cannot be called here (skipped)");
    return;
  }
  rng r{0x5eed03};
  int64_t n_cases = 0, n_bad = 0, n_pairs = 0;
  for (dtype t : INT_TYPES) {
    const bool k = gguf::dtype_get(t).block_size == 256;
    for (int64_t n_in : k ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 288}) {
      for (int64_t n_tok : {1, 2, 3, 4, 5, 7, 9}) {
        const int64_t n_out = 20;
        std::vector<row_kind> kinds(static_cast<size_t>(n_out), row_kind::quiet_first);
        for (int64_t row = 0; row < n_out; row += 2) kinds[static_cast<size_t>(row)] = row_kind::hot_all;
        const std::vector<uint8_t> w = crafted_rows(r, t, n_in, n_out, kinds);
        const std::vector<int32_t> codes = slice0_codes(t, w.data());
        std::vector<float> x(static_cast<size_t>(n_tok * n_in));
        for (int64_t tok = 0; tok < n_tok; ++tok) fill_token(r, x.data() + tok * n_in, n_in, tok % 2 == 0, codes, 12, 32);
        cpu::act_pack xp;
        cpu::act_pack_build(x.data(), n_tok, n_in, xp);
        const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
        const cpu::act_view xv = view_of(xp);
        const int64_t nb = xp.n_blocks;
        cpu::panel_buffer buf;
        for (int64_t g = 0; g * ROWS < n_out; ++g) {
          cpu::panel p = buf.view(nb);
          decode_panel(t, w, n_in, g * ROWS, static_cast<int>(std::min<int64_t>(ROWS, n_out - g * ROWS)), bounds, p);
          std::vector<int64_t> want(static_cast<size_t>(n_tok * ROWS), 0);
          cpu::panel_kernel_scalar(p, xv, 0, n_tok, want.data());
          for (bool tail : {true, false}) {
            CAPTURE(tname(t));
            CAPTURE(n_in);
            CAPTURE(n_tok);
            CAPTURE(tail);
            const guarded_panel g_p(p, nb, tail);
            const guarded_act g_x(xp, tail);
            const cpu::panel& gp = g_p.gp;
            const cpu::act_view& gx = g_x.v;
            std::vector<int64_t> got(want.size(), 0);
            cpu::panel_kernel_avx2(gp, gx, 0, n_tok, got.data());
            // The last tokens alone (a pass that ends at the arrays' end, a remainder).
            std::vector<int64_t> got_last(want.size(), 0);
            const int64_t t0 = n_tok / 2;
            cpu::panel_kernel_avx2(gp, gx, t0, n_tok, got_last.data() + t0 * ROWS);
            cpu::panel_kernel_avx2(gp, gx, 0, t0, got_last.data());
            if (got != want || got_last != want) {
              ++n_bad;
              if (n_bad < 10) FAIL_CHECK(tname(t) << " n_in " << n_in << " n_tok " << n_tok << " panel " << g << ": avx2 sums differ from scalar");
            }
            ++n_cases;
          }
        }
        // Panels 0 and 1 (16 and 4 rows) through panel_kernel2_avx2 where it takes them.
        cpu::panel_buffer buf0, buf1;
        cpu::panel p0 = buf0.view(nb), p1 = buf1.view(nb);
        decode_panel(t, w, n_in, 0, ROWS, bounds, p0);
        decode_panel(t, w, n_in, ROWS, static_cast<int>(n_out - ROWS), bounds, p1);
        std::vector<int64_t> want0(static_cast<size_t>(n_tok * ROWS), 0), want1(want0.size(), 0);
        cpu::panel_kernel_scalar(p0, xv, 0, n_tok, want0.data());
        cpu::panel_kernel_scalar(p1, xv, 0, n_tok, want1.data());
        for (bool tail : {true, false}) {
          const guarded_panel g0(p0, nb, tail), g1(p1, nb, tail);
          const guarded_act g_x(xp, tail);
          std::vector<int64_t> got0(want0.size(), 0), got1(want0.size(), 0), last0(want0.size(), 0), last1(want0.size(), 0);
          if (!cpu::panel_kernel2_avx2(g0.gp, g1.gp, g_x.v, 0, n_tok, got0.data(), got1.data())) break;  // kinds differ
          const int64_t t0 = n_tok / 2;
          REQUIRE(cpu::panel_kernel2_avx2(g0.gp, g1.gp, g_x.v, t0, n_tok, last0.data() + t0 * ROWS, last1.data() + t0 * ROWS));
          REQUIRE(cpu::panel_kernel2_avx2(g0.gp, g1.gp, g_x.v, 0, t0, last0.data(), last1.data()));
          if (got0 != want0 || got1 != want1 || last0 != want0 || last1 != want1) {
            ++n_bad;
            if (n_bad < 10) FAIL_CHECK(tname(t) << " n_in " << n_in << " n_tok " << n_tok << " tail " << tail << ": avx2 pair sums differ from scalar");
          }
          ++n_pairs;
        }
      }
    }
  }
  CHECK(n_bad == 0);
  CHECK(n_pairs >= 40);
  MESSAGE(n_cases << " guarded panels and " << n_pairs << " guarded pairs of panels (every array of the panels and the activations next to a PROT_NONE page)");
}

// ---- 4 ----

TEST_CASE("cpu avx2 crafted: panel: mxfp4 E8M0 scales 253 and 254 with <= 4 tokens take the panel kernel and match the reference") {
  // weight_decode_block accepts a block when max|code| * 2^(e - 128) < 2^128 (doubled E2M1 codes
  // 0..12): e = 253 with codes up to 6, e = 254 with codes up to 3. Larger codes (and e = 255)
  // are refused with input_error by the reference and, through panel_decode_generic, by
  // matmul_exact_cpu, with the same message. The AVX2 row kernel refuses e >= 253 (returns false),
  // so even one token goes to the panel kernel.
  rng r{0x5eed04};
  const dtype t = gguf::DTYPE_MXFP4;
  const int ok253[] = {0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13};  // nibbles with |code| <= 6
  const int ok254[] = {0, 1, 2, 3, 8, 9, 10, 11};                // |code| <= 3
  const test::dist acts[] = {test::d_tiny, test::d_normal, test::dist{.name = "small", .lo = -60, .hi = -20}};
  int64_t n_ok = 0, n_refused = 0, n_bad = 0, n_finite = 0, n_values = 0;
  for (int64_t n_in : {32, 64, 256, 288}) {
    const int64_t nb = n_in / 32, n_out = 7;
    for (int64_t n_tok = 1; n_tok <= 5; ++n_tok) {
      for (int variant = 0; variant < 6; ++variant) {
        const std::string name = "mxfp4 n_in " + std::to_string(n_in) + " n_tok " + std::to_string(n_tok) + " variant " + std::to_string(variant);
        CAPTURE(name);
        std::vector<uint8_t> w = test::weight_rows(r, t, n_in, n_out, test::weights::random_bytes);
        for (int64_t row = 0; row < n_out; ++row)
          for (int64_t b = 0; b < nb; ++b) {
            uint8_t* blk = w.data() + (row * nb + b) * 17;
            const int64_t pick = (b == row % nb) ? r.range(0, 1) : r.range(0, 3);  // each row has a 253 or 254 block
            if (pick >= 2) continue;  // random scale 0..252 and codes
            const bool e254 = pick == 1;
            blk[0] = e254 ? 254 : 253;
            for (int j = 1; j < 17; ++j) {
              const int lo = e254 ? ok254[r.range(0, 7)] : ok253[r.range(0, 11)];
              const int hi = e254 ? ok254[r.range(0, 7)] : ok253[r.range(0, 11)];
              blk[j] = static_cast<uint8_t>(lo | hi << 4);
            }
          }
        // Variants 3..5: one block of one row that the reference refuses.
        if (variant >= 3) {
          uint8_t* blk = w.data() + (r.range(0, n_out - 1) * nb + r.range(0, nb - 1)) * 17;
          if (variant == 3) blk[0] = 253, blk[1 + r.range(0, 15)] = 0x06;       // code 8 at 2^125: 2^128
          if (variant == 4) blk[0] = 254, blk[1 + r.range(0, 15)] = 0xc0;       // code -4 at 2^126
          if (variant == 5) blk[0] = 255;                                       // NaN
        }
        const std::vector<float> x = test::draw(r, acts[variant % 3], n_tok * n_in, n_in);
        cpu::act_pack xp;
        cpu::act_pack_build(x.data(), n_tok, n_in, xp);
        const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
        if (have_avx2() && n_tok <= cpu::GEMV_MAX_TOKENS) {  // the routing: the row kernel declines
          std::vector<int64_t> acc(static_cast<size_t>(n_tok * n_out), 0);
          CHECK_FALSE(cpu::gemv_avx2(t, view_of(xp), n_tok, w.data(), gguf::dtype_row_bytes(t, n_in), bounds.data(), 0, n_out, acc.data()));
        }
        std::string ref_err;
        std::vector<float> want;
        try {
          want = ref_out(t, w, x, n_in, n_out, n_tok);
        } catch (const input_error& e) {
          ref_err = e.what();
        }
        CHECK((variant >= 3) == !ref_err.empty());
        for (float v : want) n_finite += std::isfinite(v) && v != 0.0f, ++n_values;
        for (cpu::isa isa : cpu::isa_all_supported()) {
          const std::string isa_s = iname(isa);
          CAPTURE(isa_s);
          std::string err;
          std::vector<float> y;
          try {
            y = cpu_out(isa, t, w.data(), xp, n_out, bounds);
          } catch (const input_error& e) {
            err = e.what();
          }
          CHECK(err == ref_err);
          if (ref_err.empty() && err.empty()) {
            const int64_t d = first_diff(want, y);
            if (d != -1) {
              ++n_bad;
              if (n_bad < 10) FAIL_CHECK(name << " " << iname(isa) << ": " << diff_text(want, y, d));
            }
          }
        }
        if (ref_err.empty() && have_avx2()) {  // the panel kernel itself, every token count
          int64_t n_sum_bad = 0;
          const std::vector<float> got = panel_outputs(t, w, n_in, n_out, xp, bounds, 1, nullptr, &n_sum_bad, name);
          CHECK(n_sum_bad == 0);
          const int64_t d = first_diff(want, got);
          if (d != -1) {
            ++n_bad;
            if (n_bad < 10) FAIL_CHECK(name << " panel_kernel_avx2: " << diff_text(want, got, d));
          }
        }
        (ref_err.empty() ? n_ok : n_refused) += 1;
      }
    }
  }
  CHECK(n_bad == 0);
  CHECK(n_finite * 4 > n_values);  // most outputs finite and nonzero: the 2^125 and 2^126 terms are not all lost to inf
  MESSAGE(n_ok << " mxfp4 cases with scales 253/254 computed (" << n_finite << " of " << n_values
              << " outputs finite and nonzero), " << n_refused << " refused alike by both");
}

// ---- 5 ----

TEST_CASE("cpu avx2 crafted: gemv: q6_K half-block sums times scales at the int32 edge give the reference bits") {
  // A q6_K half block of codes -32 against activations +-32767 sums to -+16776704; times the
  // sub-block scale -128 that is +-2147418112, 65536 below 2^31 (codes 31 with scale 127: 93% of
  // it). The AVX2 row kernel forms these products with _mm256_mullo_epi32 and adds the two halves
  // of a block in double. Scales are chosen so every term stays below 2^50 (the double epilogue is
  // kept, not the integer fallback): tiny subnormal d, or a row whose bound comes from another
  // super-block 2^15 larger, or a token whose largest block lies elsewhere.
  rng r{0x5eed05};
  const dtype t = gguf::DTYPE_Q6_K;
  int64_t n_cases = 0, n_bad = 0;
  for (int64_t n_in : {256, 512, 2048}) {
    const int64_t n_sb = n_in / 256, n_out = 6;
    for (int variant = 0; variant < 4; ++variant) {
      for (int64_t n_tok = 1; n_tok <= 5; ++n_tok) {
        const std::string name = "q6_K n_in " + std::to_string(n_in) + " variant " + std::to_string(variant) + " n_tok " + std::to_string(n_tok);
        CAPTURE(name);
        std::vector<uint8_t> w(static_cast<size_t>(n_out * n_sb * 210));
        for (int64_t row = 0; row < n_out; ++row)
          for (int64_t s = 0; s < n_sb; ++s) {
            uint8_t* sb = w.data() + (row * n_sb + s) * 210;
            const bool neg = variant == 1 ? false : variant == 0 ? true : r.range(0, 1) == 0;
            std::memset(sb, neg ? 0x00 : 0xff, 192);  // q = -32 or 31 everywhere
            for (int h = 0; h < 16; ++h)  // per half block: the extreme scale of either sign
              sb[192 + h] = static_cast<uint8_t>(variant <= 1 ? (neg ? 0x80 : 0x7f) : (r.range(0, 2) == 0 ? 0x7f : r.range(0, 1) ? 0x80 : 0x81));
            put16(sb + 208, static_cast<uint16_t>(variant == 3 && n_sb == 1 ? 0x0003 : variant == 3 ? 0x3c00 | r.range(0, 1023) : r.range(1, 7)));
          }
        if (variant == 3 && n_sb > 1)  // the row bound: a last super-block 2^15 larger, with zero codes (scales 0)
          for (int64_t row = 0; row < n_out; ++row) {
            uint8_t* sb = w.data() + (row * n_sb + n_sb - 1) * 210;
            std::memset(sb + 192, 0, 16);
            put16(sb + 208, 0x7bff);
          }
        std::vector<float> x(static_cast<size_t>(n_tok * n_in));
        for (int64_t tok = 0; tok < n_tok; ++tok)
          for (int64_t h = 0; h < n_in / 16; ++h) {  // one sign per half block
            const float v = r.range(0, 1) ? 32767.0f : -32767.0f;
            for (int64_t i = 0; i < 16; ++i) x[static_cast<size_t>(tok * n_in + h * 16 + i)] = v;
          }
        if (variant == 2)  // token 0's largest block elsewhere: block 1 at 2^12 of the others (same q)
          for (int64_t i = 32; i < 64; ++i) x[static_cast<size_t>(i)] *= 4096.0f;
        // The premise: every term below 2^50 (the double path holds).
        for (int64_t tok = 0; tok < n_tok; ++tok) {
          numerics::qvec q;
          numerics::quantize_act(x.data() + tok * n_in, n_in, q);
          for (int64_t row = 0; row < n_out; ++row) REQUIRE(max_row_term_log2(t, w.data() + row * n_sb * 210, n_in, q) < 50.0);
        }
        cpu::act_pack xp;
        cpu::act_pack_build(x.data(), n_tok, n_in, xp);
        const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
        const std::vector<float> want = ref_out(t, w, x, n_in, n_out, n_tok);
        check_all_isas(name, t, w.data(), xp, n_out, bounds, want, n_bad);
        if (have_avx2() && n_tok <= cpu::GEMV_MAX_TOKENS) {
          // The row kernel itself: it must take these rows, with the scalar panel kernel's sums.
          std::vector<int64_t> acc(static_cast<size_t>(n_tok * n_out), 0);
          REQUIRE(cpu::gemv_avx2(t, view_of(xp), n_tok, w.data(), 210 * static_cast<uint64_t>(n_sb), bounds.data(), 0, n_out, acc.data()));
          cpu::panel_buffer buf;
          cpu::panel p = buf.view(xp.n_blocks);
          decode_panel(t, w, n_in, 0, static_cast<int>(n_out), bounds, p);
          std::vector<int64_t> sc(static_cast<size_t>(n_tok * ROWS), 0);
          cpu::panel_kernel_scalar(p, view_of(xp), 0, n_tok, sc.data());
          for (int64_t tok = 0; tok < n_tok; ++tok)
            for (int64_t row = 0; row < n_out; ++row)
              CHECK_MESSAGE(acc[static_cast<size_t>(tok * n_out + row)] == sc[static_cast<size_t>(tok * ROWS + row)],
                            name << " token " << tok << " row " << row << ": gemv_avx2 sum differs from the scalar panel kernel's");
        }
        ++n_cases;
      }
    }
  }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " q6_K int32-edge cases");
}

// ---- 6 ----

TEST_CASE("cpu avx2 crafted: gemv and panel: long q4_K and q5_K rows (8192 + 256) give the reference bits") {
  rng r{0x5eed06};
  const int64_t n_in = 8192 + 256, n_out = 20;
  int64_t n_cases = 0, n_bad = 0, n_sum_bad = 0;
  for (dtype t : {gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K}) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<uint8_t> w;
      if (variant == 0) w = test::weight_rows(r, t, n_in, n_out, test::weights::random_bytes);
      if (variant == 1) w = test::weight_rows(r, t, n_in, n_out, test::weights::quantized_real);
      if (variant == 2) w = crafted_rows(r, t, n_in, n_out, std::vector<row_kind>(n_out, row_kind::hot_all));
      for (int64_t n_tok : {1, 2, 3, 4, 5, 8}) {
        const std::string name = tname(t) + " variant " + std::to_string(variant) + " n_tok " + std::to_string(n_tok);
        CAPTURE(name);
        std::vector<float> x;
        if (variant == 2) {  // every block at +-32767 with the codes' signs: the largest sums a long row can have
          const std::vector<int32_t> codes = slice0_codes(t, w.data());
          x.assign(static_cast<size_t>(n_tok * n_in), 0.0f);
          for (size_t i = 0; i < x.size(); ++i) x[i] = codes[i % 32] < 0 ? -32767.0f : 32767.0f;
          for (int64_t tok = 1; tok < n_tok; ++tok) x[static_cast<size_t>(tok * n_in + tok * 97)] *= -1.0f;
        } else {
          x = test::draw(r, variant == 0 ? test::d_outliers : test::d_mixed, n_tok * n_in, n_in);
        }
        cpu::act_pack xp;
        cpu::act_pack_build(x.data(), n_tok, n_in, xp);
        const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
        const std::vector<float> want = ref_out(t, w, x, n_in, n_out, n_tok);
        check_all_isas(name, t, w.data(), xp, n_out, bounds, want, n_bad);
        if (!have_avx2()) continue;
        if (n_tok <= cpu::GEMV_MAX_TOKENS) {  // the fused row kernel took the rows
          std::vector<int64_t> acc(static_cast<size_t>(n_tok * n_out), 0);
          REQUIRE(cpu::gemv_avx2(t, view_of(xp), n_tok, w.data(), gguf::dtype_row_bytes(t, n_in), bounds.data(), 0, n_out, acc.data()));
          std::vector<float> y(static_cast<size_t>(n_tok * n_out));
          for (int64_t tok = 0; tok < n_tok; ++tok)
            for (int64_t row = 0; row < n_out; ++row)
              y[static_cast<size_t>(tok * n_out + row)] =
                  finish(acc[static_cast<size_t>(tok * n_out + row)], xp.max_exp[static_cast<size_t>(tok)], bounds[static_cast<size_t>(row)], xp.n_blocks);
          const int64_t d = first_diff(want, y);
          if (d != -1) {
            ++n_bad;
            if (n_bad < 10) FAIL_CHECK(name << " gemv_avx2: " << diff_text(want, y, d));
          }
        }
        if (n_tok >= 3) {  // the panel kernel (the prompt path)
          const std::vector<float> got = panel_outputs(t, w, n_in, n_out, xp, bounds, 1, nullptr, &n_sum_bad, name);
          const int64_t d = first_diff(want, got);
          if (d != -1) {
            ++n_bad;
            if (n_bad < 10) FAIL_CHECK(name << " panel_kernel_avx2: " << diff_text(want, got, d));
          }
        }
        ++n_cases;
      }
    }
  }
  CHECK(n_bad == 0);
  CHECK(n_sum_bad == 0);
  MESSAGE(n_cases << " long-row cases");
}

// ---- 7 ----

TEST_CASE("cpu avx2 crafted: panel: neighbouring panels of different kinds give the reference bits") {
  rng r{0x5eed07};
  const int64_t n_in = 512, n_out = 48;  // panels 0 and 1 differ; panel 2 is alone
  int64_t n_cases = 0, n_bad = 0;
  for (dtype t : {gguf::DTYPE_Q4_K, gguf::DTYPE_Q2_K, gguf::DTYPE_Q6_K}) {
    for (int order = 0; order < 2; ++order) {  // the crafted panel first, then second
      // q6_K: every other row as hot as the type allows, so that a wide panel taken as narrow would
      // overflow its int32 sums (with the activations below).
      std::vector<uint8_t> w = t == gguf::DTYPE_Q6_K ? crafted_rows(r, t, n_in, n_out, std::vector<row_kind>(n_out, row_kind::hot_all))
                                                     : test::weight_rows(r, t, n_in, n_out, test::weights::quantized_real);
      const uint64_t rb = gguf::dtype_row_bytes(t, n_in);
      const int64_t crafted0 = order == 0 ? 0 : ROWS;
      for (int64_t row = crafted0; row < crafted0 + ROWS; ++row)
        for (int64_t sb = 0; sb < n_in / 256; ++sb) {
          uint8_t* blk = w.data() + row * rb + sb * gguf::dtype_get(t).type_size;
          if (t == gguf::DTYPE_Q4_K) {
            std::memset(blk + 2, 0, 2);  // dmin = 0: no offset term
          } else if (t == gguf::DTYPE_Q2_K) {
            for (int s2 = 0; s2 < 16; s2 += 2)  // each 32-block's two sub-blocks share their min
              blk[s2 + 1] = static_cast<uint8_t>((blk[s2 + 1] & 0x0f) | (blk[s2] & 0xf0));
          } else {
            for (int i = 0; i < 16; ++i) blk[192 + i] = static_cast<uint8_t>(static_cast<int8_t>(r.range(-60, 60)));  // |code| <= 60 x 32
          }
        }
      const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
      // The panels do differ in the property that pairs them.
      cpu::panel_buffer b0, b1;
      cpu::panel p0 = b0.view(n_in / 32), p1 = b1.view(n_in / 32);
      decode_panel(t, w, n_in, 0, ROWS, bounds, p0);
      decode_panel(t, w, n_in, ROWS, ROWS, bounds, p1);
      const std::string name = tname(t) + (order == 0 ? " crafted panel first" : " crafted panel second");
      CAPTURE(name);
      if (t == gguf::DTYPE_Q4_K) CHECK(p0.has_min != p1.has_min);
      if (t == gguf::DTYPE_Q2_K) CHECK((p0.min_whole != p1.min_whole && p0.has_min && p1.has_min));
      if (t == gguf::DTYPE_Q6_K) CHECK(p0.wide != p1.wide);
      for (int64_t n_tok : {5, 8, 9}) {
        std::vector<float> x = test::draw(r, test::d_mixed, n_tok * n_in, n_in);
        if (t == gguf::DTYPE_Q6_K) {  // every element +-32767 with the sign of a hot row's code
          const std::vector<int32_t> codes = slice0_codes(t, w.data() + (order == 0 ? ROWS : 0) * rb);
          for (size_t i = 0; i < x.size(); ++i) x[i] = codes[i % 32] < 0 ? -32767.0f : 32767.0f;
        }
        cpu::act_pack xp;
        cpu::act_pack_build(x.data(), n_tok, n_in, xp);
        check_all_isas(name + " n_tok " + std::to_string(n_tok), t, w.data(), xp, n_out, bounds, ref_out(t, w, x, n_in, n_out, n_tok), n_bad);
        ++n_cases;
      }
    }
  }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " cases of neighbouring panels of different kinds");
}

// ---- 8 ----

TEST_CASE("cpu avx2 crafted: packed pairs of groups where one group's terms leave the binade, next to guard pages") {
  if (!have_avx2()) {
    MESSAGE("no AVX2 on this CPU: the AVX2 packed kernels cannot be called here (skipped)");
    return;
  }
  rng r{0x5eed08};
  const int64_t n_in = 256, n_out = 32;  // one super-block: short rows, large terms
  int64_t n_cases = 0;
  for (dtype t : {gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K, gguf::DTYPE_Q4_0}) {
    for (int hot = 0; hot < 2; ++hot) {
      const std::string name = tname(t) + (hot == 0 ? " hot group first" : " hot group second");
      CAPTURE(name);
      std::vector<row_kind> kinds(static_cast<size_t>(n_out), row_kind::quiet_first);
      for (int64_t row = hot * ROWS; row < (hot + 1) * ROWS; ++row) kinds[static_cast<size_t>(row)] = row_kind::hot_all;
      const std::vector<uint8_t> w = crafted_rows(r, t, n_in, n_out, kinds);
      const uint64_t rb = gguf::dtype_row_bytes(t, n_in);
      const std::vector<int32_t> codes = slice0_codes(t, w.data() + hot * ROWS * rb);
      std::vector<float> x(static_cast<size_t>(n_in));
      fill_token(r, x.data(), n_in, true, codes, 12, 32);
      cpu::act_pack xp;
      cpu::act_pack_build(x.data(), 1, n_in, xp);
      const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
      // Evidence from the panels (the same terms): the hot group's pass fails, the other's does not.
      cpu::panel_buffer b0, b1;
      cpu::panel p0 = b0.view(xp.n_blocks), p1 = b1.view(xp.n_blocks);
      decode_panel(t, w, n_in, 0, ROWS, bounds, p0);
      decode_panel(t, w, n_in, ROWS, ROWS, bounds, p1);
      const double lh = max_term_log2(hot == 0 ? p0 : p1, xp, 0), lq = max_term_log2(hot == 0 ? p1 : p0, xp, 0);
      // (q4_0 cannot get there in a whole tile: |T| < 2^34 and a shift of at most 62 - 44 - 4; its
      // pair is still checked against the single groups.)
      if (t != gguf::DTYPE_Q4_0) CHECK(lh >= 51.5);
      CHECK(lq < 50.0);
      cpu::row_pack pk;
      cpu::row_pack_init(t, n_out, n_in, cpu::isa::avx2, pk);
      REQUIRE(cpu::row_pack_groups(w.data(), bounds.data(), 0, 2, pk));
      const cpu::packed_act xa{xp.bytes.data(), xp.q.data(), xp.shift.data(), xp.half_sum.data(), xp.block_sum.data(), xp.n_blocks,
                               1, xp.pairs.data(), xp.scale.data(), xp.sum_scaled.data(), xp.lo_half.data()};
      // Each group alone, then the pair on copies of the pack that end at (or start after) a
      // PROT_NONE page: the same int64 sums.
      std::vector<int64_t> want(2 * ROWS, 0);
      for (int g = 0; g < 2; ++g) {
        const uint8_t* tiles = pk.data + g * pk.n_super * pk.tile_bytes;
        int64_t* a = want.data() + g * ROWS;
        if (t == gguf::DTYPE_Q4_K) cpu::gemv_q4k_packed_avx2(tiles, pk.n_super, xa, a);
        if (t == gguf::DTYPE_Q5_K) cpu::gemv_q5k_packed_avx2(tiles, pk.n_super, xa, a);
        if (t == gguf::DTYPE_Q6_K) cpu::gemv_q6k_packed_avx2(tiles, pk.n_super, xa, a);
        if (t == gguf::DTYPE_Q4_0) cpu::gemv_q40_packed_avx2(tiles, pk.n_super, xa, a);
      }
      for (bool tail : {true, false}) {
        const guarded<uint8_t> data(pk.data, static_cast<size_t>(pk.bytes()), tail);
        std::vector<int64_t> got(2 * ROWS, 0);
        REQUIRE(cpu::gemv_packed_pair_avx2(t, data.p, pk.n_super, xa, got.data()));
        CHECK_MESSAGE(got == want, name << " (tail " << tail << "): the pair's sums differ from each group's alone");
        ++n_cases;
      }
      // And through the driver, against the reference.
      std::vector<float> y(static_cast<size_t>(n_out), -12345.0f);
      cpu::matmul_exact_cpu_packed(cpu::isa::avx2, xp, pk, bounds.data(), y.data(), 0, n_out);
      const std::vector<float> ref = ref_out(t, w, x, n_in, n_out, 1);
      const int64_t d = first_diff(ref, y);
      CHECK_MESSAGE(d == -1, name << ": " << diff_text(ref, y, d));
    }
  }
  MESSAGE(n_cases << " packed pairs with one group past the rounding binade (q4_0: its largest terms)");
}

// ---- 9 ----

TEST_CASE("cpu crafted: gemv: row kernels on weights that end at (or start after) a PROT_NONE page give the reference bits") {
  // The few-token row kernels fetch each row ROW_PREFETCH_BYTES (4 KiB) ahead of what they read,
  // so at the matrix's last rows their prefetches land in the guard page and past it: they must
  // neither fault nor change a bit, and no read may leave the matrix either way.
  rng r{0x5eed09};
  int64_t n_cases = 0, n_bad = 0;
  for (dtype t : INT_TYPES) {
    for (int64_t n_in : {256, 2048 + 256}) {
      const int64_t n_out = 7;
      const std::vector<uint8_t> w = test::weight_rows(r, t, n_in, n_out, test::weights::quantized_real);
      const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
      for (int64_t n_tok = 1; n_tok <= cpu::GEMV_MAX_TOKENS; ++n_tok) {
        const std::vector<float> x = test::draw(r, test::d_mixed, n_tok * n_in, n_in);
        cpu::act_pack xp;
        cpu::act_pack_build(x.data(), n_tok, n_in, xp);
        const std::vector<float> want = ref_out(t, w, x, n_in, n_out, n_tok);
        for (bool tail : {true, false}) {
          const guarded<uint8_t> g(w.data(), w.size(), tail);
          const std::string name = tname(t) + " n_in " + std::to_string(n_in) + " n_tok " + std::to_string(n_tok) +
                                   (tail ? " guard after" : " guard before");
          check_all_isas(name, t, g.p, xp, n_out, bounds, want, n_bad);
          n_cases += static_cast<int64_t>(cpu::isa_all_supported().size());
        }
      }
    }
  }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " guarded row-kernel cases");
}

// ---- 10 ----

TEST_CASE("cpu avx2 crafted: finish16_avx2 converts sums to floats as fixed_to_f32_fast does, bit for bit") {
  if (!have_avx2()) {
    MESSAGE("no AVX2 on this CPU: finish16_avx2 cannot be called here (skipped)");
    return;
  }
  // Sums of every length (0 to 63 bits, both signs, INT64_MIN), at the 2^52 switch of the
  // conversion, on float rounding ties with and without bits below (the sticky bit), and one
  // below a carry into the next power of two; exponents that flush to zero, reach infinity, or
  // land in between; rows and tokens whose bound is EXP_ZERO.
  rng r{0x5eed0a};
  std::vector<int64_t> special = {0, 1, -1, INT64_MIN, INT64_MAX, INT64_MIN + 1, (int64_t{1} << 52), (int64_t{1} << 52) - 1,
                                  -(int64_t{1} << 52), (int64_t{1} << 53) + 1, (int64_t{1} << 24) - 1, (int64_t{1} << 24) + 1};
  for (int k = 25; k < 63; ++k) {
    const int64_t base = (int64_t{1} << k) | (int64_t{1} << (k - 23));  // 24 bits, the last one set
    const int64_t half = int64_t{1} << (k - 24);                         // half a unit in the last place
    const int64_t next_pow2 = static_cast<int64_t>((uint64_t{1} << (k + 1)) - static_cast<uint64_t>(half));  // 2^(k+1) - half, no overflow at k = 62
    for (int64_t v : {base + half, base - half, base + half + 1, base + half - 1, next_pow2, next_pow2 - 1, (base & ~(half * 2 - 1)) + half,
                      // an even last bit: a tie rounds down, anything below the half (bit 0, bit
                      // 11: the last one a 12-bit shift drops) up
                      (int64_t{1} << k) + half, (int64_t{1} << k) + half + 1, (int64_t{1} << k) + half + (k >= 37 ? int64_t{1} << 11 : 0)})
      for (int64_t s : {int64_t{1}, int64_t{-1}}) special.push_back(v * s);
  }
  int64_t n_vec = 0, n_bad = 0;
  for (int round = 0; round < 4000; ++round) {
    alignas(32) int64_t a[16];
    int32_t bounds[16];
    for (int j = 0; j < 16; ++j) {
      const int pick = static_cast<int>(r.range(0, 3));
      if (pick == 0) {
        a[j] = special[static_cast<size_t>(r.range(0, static_cast<int64_t>(special.size()) - 1))];
      } else {
        const int bits = static_cast<int>(r.range(0, 63));
        const uint64_t u = r.next();
        a[j] = bits == 0 ? 0 : static_cast<int64_t>(u >> (64 - bits));  // below 2^bits
        if (r.range(0, 1)) a[j] = -a[j];
      }
      bounds[j] = r.range(0, 30) == 0 ? numerics::EXP_ZERO : static_cast<int32_t>(r.range(-80, 80));
    }
    const int32_t xmax = round % 97 == 0 ? numerics::EXP_ZERO : static_cast<int32_t>(r.range(-120, 120));
    const int32_t c = static_cast<int32_t>(r.range(-10, 70));
    float got[16], want[16];
    REQUIRE(cpu::finish16_avx2(a, xmax, bounds, c, got));
    for (int j = 0; j < 16; ++j)
      want[j] = xmax == numerics::EXP_ZERO || bounds[j] == numerics::EXP_ZERO ? 0.0f : numerics::inl::fixed_to_f32_fast(a[j], xmax + bounds[j] - c);
    ++n_vec;
    if (std::memcmp(got, want, sizeof got) != 0) {
      ++n_bad;
      for (int j = 0; j < 16 && n_bad < 10; ++j)
        if (std::memcmp(&got[j], &want[j], 4) != 0) {
          FAIL_CHECK("sum " << a[j] << " at e " << (xmax + bounds[j] - c) << ": want " << want[j] << ", got " << got[j]);
          break;
        }
    }
  }
  // Every crafted sum at every exponent from -200 to 130 (xmax 0, c 0, the exponent in the bound):
  // biased exponents below 0, exactly 0, 1, 254, 255 and above, both signs.
  for (size_t i0 = 0; i0 < special.size(); i0 += 16) {
    alignas(32) int64_t a[16];
    for (int j = 0; j < 16; ++j) a[j] = special[(i0 + static_cast<size_t>(j)) % special.size()];
    for (int32_t e = -200; e <= 130; ++e) {
      int32_t bounds[16];
      std::fill(bounds, bounds + 16, e);
      float got[16], want[16];
      REQUIRE(cpu::finish16_avx2(a, 0, bounds, 0, got));
      for (int j = 0; j < 16; ++j) want[j] = numerics::inl::fixed_to_f32_fast(a[j], e);
      ++n_vec;
      if (std::memcmp(got, want, sizeof got) != 0 && ++n_bad < 10) FAIL_CHECK("crafted sums from " << i0 << " at e " << e << " differ");
    }
  }
  CHECK(n_bad == 0);
  MESSAGE(n_vec << " vectors of 16 sums (" << special.size() << " crafted sums among the random ones, then each at every exponent)");
}

// ---- 11 ----

TEST_CASE("cpu avx2 crafted: panel: the bounded pass just inside its limit and the checked pass just outside give the scalar sums") {
  if (!have_avx2()) {
    MESSAGE("no AVX2 on this CPU: panel_kernel2_avx2 cannot be called here (skipped)");
    return;
  }
  // Two hot panels (every code as large as the type allows) and tokens whose block 0 has the sign
  // of each code, so that T = sum |a| * max |code| and panel::bound * act_pack::abs_scaled is the
  // largest term itself, not just a bound on it. The rows' fp16 d sweeps a whole octave of
  // mantissas and block 0's magnitudes vary per token, so the bound lands on both sides of the
  // bounded pass's limit (1 - 2^-20 of the rounding binade): just inside, the pass runs without a
  // per-term check with terms of nearly 2^51; just outside, the checked pass (or the integer
  // kernel) takes over. Both must give the scalar kernel's int64 sums exactly; the test counts
  // each side within 1/16 of the limit and requires both.
  rng r{0x5eed0b};
  constexpr double LIMIT = 1.0 - 0x1p-20;
  int64_t n_cases = 0, n_bad = 0;
  std::string summary;
  for (dtype t : {gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q8_0, gguf::DTYPE_Q6_K}) {
    // Row lengths that put the largest terms within a factor 2 of the limit (the grid's constant C
    // falls by one each time the row doubles): q4_K 2048, q5_K 4096, q8_0 256, q6_K 8192.
    const int64_t n_in = t == gguf::DTYPE_Q4_K ? 2048 : t == gguf::DTYPE_Q5_K ? 4096 : t == gguf::DTYPE_Q8_0 ? 256 : 8192;
    const int64_t nb = n_in / 32, n_out = 2 * ROWS, n_tok = 9;
    const uint64_t rb = gguf::dtype_row_bytes(t, n_in);
    const int64_t ts = gguf::dtype_get(t).type_size;
    int64_t inside = 0, outside = 0;
    double lo_w = 1e300, hi_w = 0;
    for (int j = 0; j < 64; ++j) {
      std::vector<uint8_t> w = crafted_rows(r, t, n_in, n_out, std::vector<row_kind>(static_cast<size_t>(n_out), row_kind::hot_all));
      const uint16_t d = static_cast<uint16_t>(0x7bff - 16 * j - r.range(0, 15));  // mantissas 2047 down to 1024
      for (int64_t row = 0; row < n_out; ++row)
        for (int64_t u = 0; u < n_in / gguf::dtype_get(t).block_size; ++u) put16(w.data() + row * rb + u * ts + test::fp16_fields(t)[0], d);
      const std::vector<int32_t> codes = slice0_codes(t, w.data());
      std::vector<float> x(static_cast<size_t>(n_tok * n_in));
      for (int64_t tok = 0; tok < n_tok; ++tok) {
        fill_token(r, x.data() + tok * n_in, n_in, true, codes, 0, 0);
        const int64_t n_full = r.range(20, 32);  // the others at 1/2 to 1 of the largest
        for (int64_t i = n_full; i < 32; ++i) x[static_cast<size_t>(tok * n_in + i)] *= static_cast<float>(0.5 + 0.5 * r.uniform());
      }
      cpu::act_pack xp;
      cpu::act_pack_build(x.data(), n_tok, n_in, xp);
      const std::vector<int32_t> bounds = bounds_of(t, w, n_in, n_out);
      cpu::panel_buffer b0, b1;
      cpu::panel p0 = b0.view(nb), p1 = b1.view(nb);
      decode_panel(t, w, n_in, 0, ROWS, bounds, p0);
      decode_panel(t, w, n_in, ROWS, ROWS, bounds, p1);
      for (int64_t tok = 0; tok < n_tok; ++tok) {
        double worst = 0.0;
        for (int64_t b = 0; b < nb; ++b) worst = std::max(worst, std::max(p0.bound[b], p1.bound[b]) * xp.abs_scaled[static_cast<size_t>(tok * nb + b)]);
        lo_w = std::min(lo_w, worst), hi_w = std::max(hi_w, worst);
        if (worst < LIMIT && worst >= LIMIT - 1.0 / 16) ++inside;
        if (worst >= LIMIT && worst < LIMIT + 1.0 / 16) ++outside;
      }
      const cpu::act_view xv = view_of(xp);
      std::vector<int64_t> want0(static_cast<size_t>(n_tok * ROWS), 0), want1(want0.size(), 0), got0(want0.size(), 0), got1(want0.size(), 0);
      cpu::panel_kernel_scalar(p0, xv, 0, n_tok, want0.data());
      cpu::panel_kernel_scalar(p1, xv, 0, n_tok, want1.data());
      // Two panels at once where they pair (narrow ones: not q6_K's hot, wide panels), and each alone.
      CHECK(cpu::panel_kernel2_avx2(p0, p1, xv, 0, n_tok, got0.data(), got1.data()) == (t != gguf::DTYPE_Q6_K));
      if (t != gguf::DTYPE_Q6_K && (got0 != want0 || got1 != want1)) {
        ++n_bad;
        if (n_bad < 10) FAIL_CHECK(tname(t) << " d " << d << ": panel_kernel2_avx2 sums differ from the scalar kernel's");
      }
      std::fill(got0.begin(), got0.end(), 0);
      std::fill(got1.begin(), got1.end(), 0);
      cpu::panel_kernel_avx2(p0, xv, 0, n_tok, got0.data());
      cpu::panel_kernel_avx2(p1, xv, 0, n_tok, got1.data());
      if (got0 != want0 || got1 != want1) {
        ++n_bad;
        if (n_bad < 10) FAIL_CHECK(tname(t) << " d " << d << ": panel_kernel_avx2 sums differ from the scalar kernel's");
      }
      ++n_cases;
    }
    CAPTURE(tname(t));
    CHECK(inside > 0);
    CHECK(outside > 0);
    summary += " " + tname(t) + " " + std::to_string(inside) + "/" + std::to_string(outside) + " [" + std::to_string(lo_w) + ", " + std::to_string(hi_w) + "]";
  }
  CHECK(n_bad == 0);
  MESSAGE(n_cases << " pairs of panels; tokens within 1/16 inside / outside the bounded pass's limit:" << summary);
}
