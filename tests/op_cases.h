// The op table of the kernel tests, after ggml's test-backend-ops but bit-exact: ONE table of op
// cases (op, weight type, shape, seed, magnitude profile) that every backend's test iterates,
// the inputs each case draws from its seed, and the kernels/ref output that every backend must
// give byte for byte. The backends and the files that iterate the table:
//   - kernels/cpu at each supported instruction set: tests/unit/test_kernels_cpu_{matmul,elem,attn}.cpp
//     (matmul on the integer block types, rms_norm, swiglu, add, kv cells, attention; add_bias and
//     rope have no kernels/cpu twin: the CPU backend calls kernels/ref for them),
//   - CUDA's per-thread arithmetic on the host: tests/unit/test_kernels_cuda_portable.cpp,
//   - CUDA's kernels on host threads: tests/slow/test_kernels_cuda_portable_emu.cpp,
//   - the Vulkan and CUDA devices: tests/backend/test_gpu_{matmul,elementwise,attention}.cpp,
//   - kernels/ref itself split into row ranges: tests/unit/test_kernels_ref.cpp.
// Each compares with first_difference: bits, never a tolerance; on a mismatch it names the first
// differing index, both values as floats and as bits, and their distance in ulps. Outputs carry
// GUARD sentinel words on each side, written by nobody and compared too.
//
// A case may be skipped by a backend only for a reason it states in its test's output: the GPU
// backends and the CUDA twins leave NaN payloads to the hardware (gpu.h), so they skip cases with
// non-finite inputs; backends without kernels/ref's input checks skip the cases kernels/ref
// refuses (attention scores that overflow); the thread emulation skips the gpu_scale cases (sized
// for a GPU's dispatch limits: millions of std::threads).
// Non-goals: the accuracy of kernels/ref itself (test_kernels_ref*.cpp compare it with long
// double) and each backend's own error paths (its test file checks its throws).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/quants.h"
#include "gguf/weight_types.h"
#include "kernels/gpu/gpu.h"
#include "kernels/ref/ref.h"
#include "numerics/exact.h"
#include "test_util.h"
#include "util/error.h"

namespace detaudit::test {

// ---- weight types ----

// The type lists of the tests, read from the engine's table (gguf/weight_types.h) in its order,
// so a type added there is tested everywhere its kind is.
inline std::vector<gguf::dtype> weight_types_where(bool (*keep)(const gguf::weight_type&)) {
  std::vector<gguf::dtype> out;
  for (const gguf::weight_type& w : gguf::weight_types())
    if (keep(w)) out.push_back(w.type);
  return out;
}
inline const std::vector<gguf::dtype> FLOAT_TYPES = weight_types_where([](const gguf::weight_type& w) { return w.float_rows; });
// 32-element blocks with fp16 scales (q4_0 q4_1 q5_0 q5_1 q8_0).
inline const std::vector<gguf::dtype> LEGACY_TYPES = weight_types_where([](const gguf::weight_type& w) {
  return !w.float_rows && w.n_scales > 0 && gguf::dtype_get(w.type).block_size == 32;
});
inline const std::vector<gguf::dtype> KQUANT_TYPES =
    weight_types_where([](const gguf::weight_type& w) { return gguf::dtype_get(w.type).block_size == 256; });
// The integer block types (kernels/cpu's fast matmul types).
inline const std::vector<gguf::dtype> QUANT_TYPES = weight_types_where([](const gguf::weight_type& w) { return !w.float_rows; });
// Every weight type every backend computes, the GPUs included (gguf/weight_types.h, column gpu).
inline const std::vector<gguf::dtype> WEIGHT_TYPES = weight_types_where([](const gguf::weight_type& w) { return w.gpu; });

inline bool is_float_type(gguf::dtype t) {
  const gguf::weight_type* w = gguf::weight_type_of(t);
  return w && w->float_rows;
}

inline std::string type_name(gguf::dtype t) { return gguf::dtype_get(t).name; }

// Offsets of the fp16 scale fields within one block (super-block) of t (gguf/weight_types.h;
// mxfp4 has none: its E8M0 byte is a finite scale at any value).
inline std::vector<int> fp16_fields(gguf::dtype t) {
  const gguf::weight_type* w = gguf::weight_type_of(t);
  if (!w) throw std::logic_error("fp16_fields: " + type_name(t) + " is not a weight type the engine computes");
  return std::vector<int>(w->scale_offset, w->scale_offset + w->n_scales);
}

// ---- the comparison ----

// The first element where two float arrays differ in their bits.
struct difference {
  size_t index = 0;
  float a = 0.0f;        // the first array's value (by convention the reference's)
  float b = 0.0f;        // the second's (the backend's)
  int64_t ulp = 0;       // |a - b| on the ordered line of float bit patterns (+0 and -0 coincide)
  size_t size_a = 0;     // set only when the arrays' lengths differ (index is then the shorter length)
  size_t size_b = 0;
  std::string where;     // where index lies in a guarded output ("" for plain arrays)

  std::string to_string() const {
    char buf[256];
    if (size_a != size_b) {
      std::snprintf(buf, sizeof buf, "lengths differ: ref %zu floats, backend %zu", size_a, size_b);
      return buf;
    }
    std::snprintf(buf, sizeof buf, "first difference at index %zu%s: ref %.9g (0x%08x), backend %.9g (0x%08x), %lld ulp",
                  index, where.c_str(), static_cast<double>(a), std::bit_cast<uint32_t>(a), static_cast<double>(b),
                  std::bit_cast<uint32_t>(b), static_cast<long long>(ulp));
    return buf;
  }
};

// Sentinel words on each side of every output of the table (output_buffer).
inline constexpr size_t GUARD = 4;

inline int64_t ordered_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return (u & 0x80000000u) ? -static_cast<int64_t>(u & 0x7fffffffu) : static_cast<int64_t>(u);
}

// nullopt when a and b hold the same n floats bit for bit (memcmp), else their first difference.
inline std::optional<difference> first_difference(const float* a, const float* b, size_t n) {
  if (n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0) return std::nullopt;
  for (size_t i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(a[i]) == std::bit_cast<uint32_t>(b[i])) continue;
    const int64_t d = ordered_bits(a[i]) - ordered_bits(b[i]);
    return difference{i, a[i], b[i], d < 0 ? -d : d, 0, 0, ""};
  }
  return std::nullopt;
}

// The same for two guarded outputs (GUARD sentinel words, the output, GUARD words): the
// message also says whether the index is an output element or in a guard.
inline std::optional<difference> first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    difference d;
    d.index = std::min(a.size(), b.size());
    d.size_a = a.size();
    d.size_b = b.size();
    return d;
  }
  std::optional<difference> d = first_difference(a.data(), b.data(), a.size());
  if (d && a.size() >= 2 * GUARD) {
    d->where = d->index < GUARD ? " (in the guard before the output)"
               : d->index >= a.size() - GUARD ? " (in the guard after the output)"
                                                : " (output element " + std::to_string(d->index - GUARD) + ")";
  }
  return d;
}

// ---- magnitude profiles: how an input's floats are drawn ----

// value = bias + normal() * 2^e, e uniform in [lo, hi], one e per 32 consecutive values
// (per_block) or per value; then some values or blocks replaced as the shares below say.
struct dist {
  const char* name = nullptr;  // the profile's name in case names (null: spelled out from the fields)
  int lo = 0;
  int hi = 0;
  bool per_block = true;
  float p_zero_block = 0.0f;   // per_block: blocks all zero (signed at random when p_neg_zero > 0)
  float p_neg_zero = 0.0f;     // values -0
  float p_special = 0.0f;      // values picked by hand (special_value)
  float p_subnormal = 0.0f;    // subnormal values
  float p_bits = 0.0f;         // random finite bit patterns (random_finite)
  float p_nonfinite = 0.0f;    // +-inf and NaN, quiet and signalling
  float p_far_block = 0.0f;    // per_block: blocks with e in [-60, 60] instead
  float bias = 0.0f;
  bool outlier = false;        // one row in four holds 50 in its middle
};

inline std::string dist_name(const dist& d) {
  if (d.name) return d.name;
  std::string s = "2^" + std::to_string(d.lo) + "..2^" + std::to_string(d.hi) + (d.per_block ? "/block" : "/value");
  if (d.bias != 0.0f) s = std::to_string(d.bias).substr(0, 4) + "+" + s;
  if (d.p_special > 0) s += "+specials";
  if (d.p_bits > 0) s += "+bits";
  if (d.p_nonfinite > 0) s += "+nonfinite";
  return s;
}

// Activations and other block-structured inputs. 1 in 12 blocks zero.
inline constexpr dist d_normal{.name = "normal", .lo = -2, .hi = 2, .p_zero_block = 1.0f / 12};
inline constexpr dist d_moderate{.name = "moderate", .lo = -8, .hi = 8, .p_zero_block = 1.0f / 12};
inline constexpr dist d_moderate4{.name = "moderate4", .lo = -4, .hi = 4, .p_zero_block = 1.0f / 12};
inline constexpr dist d_moderate12{.name = "moderate12", .lo = -12, .hi = 12, .p_zero_block = 1.0f / 12};
inline constexpr dist d_mixed{.name = "mixed", .lo = -40, .hi = 20, .p_zero_block = 1.0f / 12};
inline constexpr dist d_wide{.name = "wide", .lo = -100, .hi = 100, .p_zero_block = 1.0f / 12};
inline constexpr dist d_tiny{.name = "tiny", .lo = -120, .hi = -100, .p_zero_block = 1.0f / 12};  // near underflow
inline constexpr dist d_huge{.name = "huge", .lo = 90, .hi = 110, .p_zero_block = 1.0f / 12};
// Mostly 2^-6 .. 2^6, 1 in 12 blocks 2^-60 .. 2^60, zero blocks, subnormals and an outlier.
inline constexpr dist d_outliers{.name = "outliers", .lo = -6, .hi = 6, .p_zero_block = 0.1f, .p_subnormal = 0.03f,
                                 .p_far_block = 1.0f / 12, .outlier = true};
inline constexpr dist d_spread30{.name = "spread30", .lo = -30, .hi = 30};
inline constexpr dist d_spread4{.name = "spread4", .lo = -4, .hi = 4};
inline constexpr dist d_spread3{.name = "spread3", .lo = -3, .hi = 3};
inline constexpr dist d_spread2{.name = "spread2", .lo = -2, .hi = 2};
inline constexpr dist d_unit{.name = "unit", .lo = 0, .hi = 0};
// Element-wise inputs: one exponent per value, a fifth of the values hand-picked.
inline constexpr dist elem(int lo, int hi, bool special = true, bool nonfinite = false) {
  return dist{.lo = lo, .hi = hi, .per_block = false, .p_special = special ? 0.2f : 0.0f,
              .p_nonfinite = nonfinite ? 0.03f : 0.0f};
}
// Random finite bit patterns (a quarter of them subnormal or zero), the rest normal() * 2^e.
inline constexpr dist bits_dist(float share, int e) {
  return dist{.lo = e, .hi = e, .per_block = false, .p_bits = share};
}

// ---- seeded values ----

inline float float_of(uint32_t b) { return std::bit_cast<float>(b); }

// Values picked by hand, either sign: zeros, subnormals, the smallest normals, the largest finite,
// values within 3 ulps of exp_f32's and recip's thresholds and of 1 and 2^-126, and mantissas
// 1 + 2^-j (ties in squares and products).
inline float special_value(test_rng& r) {
  const uint32_t sign = (r.next() & 1) ? 0x80000000u : 0u;
  switch (r.next() % 6) {
    case 0: return float_of(sign);
    case 1: return float_of(sign | static_cast<uint32_t>(1 + r.next() % 0x7fffff));
    case 2: return float_of(sign | (0x00800000u + static_cast<uint32_t>(r.next() % 4)));
    case 3: return float_of(sign | (0x7f7fffffu - static_cast<uint32_t>(r.next() % 4)));
    case 4: {
      const float t[] = {100.0f, 104.0f, 87.33654f, 88.72284f, 103.97208f, 0x1p-126f, 1.0f};
      const uint32_t b = std::bit_cast<uint32_t>(t[r.next() % 7]);
      return float_of(sign | static_cast<uint32_t>(static_cast<int64_t>(b) + r.range(-3, 3)));
    }
    default: {
      const float m = 1.0f + std::ldexp(1.0f, -static_cast<int>(r.range(0, 23)));
      return float_of(sign | std::bit_cast<uint32_t>(std::ldexp(m, static_cast<int>(r.range(-40, 2)))));
    }
  }
}

// A finite float from random bits, a quarter of them subnormal or zero.
inline float random_finite(test_rng& r) {
  uint32_t b = static_cast<uint32_t>(r.next());
  if ((b & 0x7f800000u) == 0x7f800000u) b &= 0xbfffffffu;
  if (r.range(0, 3) == 0) b &= 0x807fffffu;
  return float_of(b);
}

// +-inf, a quiet NaN or a signalling NaN with a random payload.
inline float nonfinite_value(test_rng& r) {
  const uint32_t sign = (r.next() & 1) ? 0x80000000u : 0u;
  switch (r.next() % 3) {
    case 0: return float_of(sign | 0x7f800000u);
    case 1: return float_of(sign | 0x7fc00000u | static_cast<uint32_t>(r.next() % 0x3fffff));
    default: return float_of(sign | 0x7f800000u | static_cast<uint32_t>(1 + r.next() % 0x3fffff));
  }
}

// n values of d; rows of row_len values for the outlier.
inline std::vector<float> draw(test_rng& r, const dist& d, int64_t n, int64_t row_len = 0) {
  std::vector<float> x(static_cast<size_t>(n));
  int e = 0;
  bool zero = false;
  for (int64_t i = 0; i < n; ++i) {
    if (d.per_block && i % numerics::QBLOCK == 0) {
      zero = r.uniform() < d.p_zero_block;
      e = r.uniform() < d.p_far_block ? static_cast<int>(r.range(-60, 60)) : static_cast<int>(r.range(d.lo, d.hi));
    }
    float& v = x[static_cast<size_t>(i)];
    if (zero) {
      v = (d.p_neg_zero > 0 && (r.next() & 1)) ? -0.0f : 0.0f;
      continue;
    }
    float u = r.uniform();
    if ((u -= d.p_nonfinite) < 0) {
      v = nonfinite_value(r);
    } else if ((u -= d.p_special) < 0) {
      v = special_value(r);
    } else if ((u -= d.p_subnormal) < 0) {
      v = float_of(static_cast<uint32_t>(r.next()) & 0x807fffffu);
    } else if ((u -= d.p_bits) < 0) {
      v = random_finite(r);
    } else if ((u -= d.p_neg_zero) < 0) {
      v = -0.0f;
    } else {
      v = d.bias + r.normal() * std::ldexp(1.0f, d.per_block ? e : static_cast<int>(r.range(d.lo, d.hi)));
    }
  }
  if (d.outlier && row_len > 3) {
    for (int64_t row = 0; row + row_len <= n; row += row_len)
      if (r.range(0, 3) == 0) x[static_cast<size_t>(row + row_len / 2)] = 50.0f;
  }
  return x;
}

// A finite fp16: zero (1 in 16), subnormal (1 in 16) or normal with exponent field 1..30 (narrow:
// 14..15, near 1); either sign.
inline uint16_t random_fp16(test_rng& r, bool narrow = false) {
  const uint16_t sign = r.range(0, 1) ? 0x8000 : 0;
  const int64_t kind = r.range(0, 15);
  if (kind == 0) return sign;
  const uint16_t frac = static_cast<uint16_t>(r.range(0, 1023));
  if (kind == 1) return static_cast<uint16_t>(sign | (frac | 1));
  const int64_t e = narrow ? r.range(14, 15) : r.range(1, 30);
  return static_cast<uint16_t>(sign | e << 10 | frac);
}

// A float of random sign with exponent 2^lo .. 2^hi (1 in 16 zero, 1 in 32 subnormal).
inline float random_float(test_rng& r, int lo, int hi) {
  const uint32_t sign = r.range(0, 1) ? 0x80000000u : 0u;
  const int64_t kind = r.range(0, 31);
  if (kind < 2) return 0.0f;
  uint32_t b = sign | (static_cast<uint32_t>(r.next()) & 0x007fffffu);
  if (kind > 2) b |= static_cast<uint32_t>(r.range(lo, hi) + 127) << 23;
  return float_of(b);
}

// How a matmul's weight rows are made.
enum class weights {
  quantized_real,       // 0.05 * normal (+0.02 on one value in eight) through quants_quantize_row
  quantized,            // values of the case's weight dist through quants_quantize_row
  random_bytes,         // integer types: random block bytes, fp16 scales zero, subnormal or of any
                        // exponent; float types: 2^-30 .. 2^14 (f16: 2^-24 ..), zeros, subnormals
  random_bytes_narrow,  // integer types: random block bytes, fp16 scale exponents near 1
  float_range,          // f32: floats with exponents over the weight dist's lo .. hi
};

inline const char* weights_name(weights w) {
  switch (w) {
    case weights::quantized_real: return "quantized";
    case weights::quantized: return "quantized-from";
    case weights::random_bytes: return "random-bytes";
    case weights::random_bytes_narrow: return "random-bytes-narrow";
    case weights::float_range: return "f32-range";
  }
  return "?";
}

// n_out rows of n_in elements of type t.
inline std::vector<uint8_t> weight_rows(test_rng& r, gguf::dtype t, int64_t n_in, int64_t n_out, weights k,
                                        const dist& d = d_normal) {
  const uint64_t row_bytes = gguf::dtype_row_bytes(t, n_in);
  std::vector<uint8_t> w(row_bytes * static_cast<uint64_t>(n_out));
  if (k == weights::float_range && t == gguf::DTYPE_F32) {
    for (size_t i = 0; i < w.size(); i += 4) {
      const float f = random_float(r, d.lo, d.hi);
      std::memcpy(&w[i], &f, 4);
    }
    return w;
  }
  const bool raw = (k == weights::random_bytes || k == weights::random_bytes_narrow) && !is_float_type(t);
  if (!raw) {
    std::vector<float> f(static_cast<size_t>(n_in));
    for (int64_t row = 0; row < n_out; ++row) {
      if (k == weights::quantized) {
        f = draw(r, d, n_in);
      } else if (k == weights::quantized_real) {
        for (auto& v : f) v = 0.05f * r.normal() + (r.range(0, 7) == 0 ? 0.02f : 0.0f);
      } else {
        for (auto& v : f) v = random_float(r, t == gguf::DTYPE_F16 ? -24 : k == weights::float_range ? d.lo : -30,
                                           k == weights::float_range ? d.hi : 14);
      }
      gguf::quants_quantize_row(t, f.data(), w.data() + static_cast<uint64_t>(row) * row_bytes, n_in);
    }
    if (t == gguf::DTYPE_F16 && k == weights::random_bytes) {
      for (size_t i = 0; i + 1 < w.size(); i += 8) {  // some raw fp16 subnormals
        const uint16_t h = static_cast<uint16_t>(r.range(1, 1023) | (r.range(0, 1) << 15));
        std::memcpy(&w[i], &h, 2);
      }
    }
    return w;
  }
  const gguf::dtype_traits& tr = gguf::dtype_get(t);
  for (auto& b : w) b = static_cast<uint8_t>(r.next());
  if (t == gguf::DTYPE_MXFP4)  // narrow: scales near 1 (2^-10 .. 2^7); else every scale whose values are finite floats
    for (uint64_t off = 0; off < w.size(); off += tr.type_size)
      w[off] = static_cast<uint8_t>(k == weights::random_bytes_narrow ? r.range(118, 135) : r.range(0, 252));
  for (uint64_t off = 0; off < w.size(); off += tr.type_size) {
    for (int f : fp16_fields(t)) {
      const uint16_t h = random_fp16(r, k == weights::random_bytes_narrow);
      std::memcpy(&w[off + static_cast<uint64_t>(f)], &h, 2);
    }
  }
  return w;
}

// ---- the op cases ----

enum class op_kind { matmul, rms_norm, swiglu, add, add_bias, rope, kv_quantize, attention, geglu, swiglu_oai, softcap, scale };

inline const char* op_name(op_kind k) {
  switch (k) {
    case op_kind::matmul: return "matmul";
    case op_kind::rms_norm: return "rms_norm";
    case op_kind::swiglu: return "swiglu";
    case op_kind::add: return "add";
    case op_kind::add_bias: return "add_bias";
    case op_kind::rope: return "rope";
    case op_kind::kv_quantize: return "kv_quantize";
    case op_kind::attention: return "attention";
    case op_kind::geglu: return "geglu";
    case op_kind::swiglu_oai: return "swiglu_oai";
    case op_kind::softcap: return "softcap";
    case op_kind::scale: return "scale";
  }
  return "?";
}

// Hand-made inputs that replace or amend the draws.
enum class pattern {
  none,
  edges,          // matmul: a zero row (quantized and raw), a zero token, a token of -0s, a token of subnormals
  ramp,           // add: 16.8 M elements, past 65535 groups of 256 invocations
  sentinels,      // add, swiglu, rms_norm, rope: listed values (rounding ties at 2^-126, overflow, zeros)
  silu_range,     // swiglu, geglu, swiglu_oai, softcap, up = 1: 1 M gates evenly over [-100, 100]
  silu_bits,      // the same, 1 M bit patterns striding through every finite float
  ties,           // rms_norm: mantissas 1 + 2^-j, whose squares land on rounding ties
  tie_pair,       // rms_norm: {1, (1 + 2^-10) 2^-20}: the second square exactly .5 on the grid
  sum_tie,        // rms_norm: a sum of squares halfway between two floats after a tied term
  rsqrt_sweep,    // rms_norm: 256 K pairs whose mean square spans every exponent of rsqrt
  zero_row,       // rms_norm: row 1 all zero
  zero_block,     // kv_quantize: the first 40 K values zero
  equal_scores,   // attention: every K the same vector
  dominant,       // attention: one position's K 2^20 times the others
  zero_queries,   // attention: q all -0 when the row attends an odd count, else head 0's
  value_shifts,   // attention: K near 1, V block exponents stepping over 80 values (every shift)
  scores_near_min_normal,  // attention: crafted scores on both sides of 2^-126
  score_ties,     // attention: crafted scores with frequent rounding ties
  zero_q_rows,    // attention: query rows 0 and 2 all zero, row 1 drawn
};

inline const char* pattern_name(pattern p) {
  switch (p) {
    case pattern::none: return "";
    case pattern::edges: return "edges";
    case pattern::ramp: return "ramp";
    case pattern::sentinels: return "sentinels";
    case pattern::silu_range: return "silu-range";
    case pattern::silu_bits: return "silu-bits";
    case pattern::ties: return "ties";
    case pattern::tie_pair: return "tie-pair";
    case pattern::sum_tie: return "sum-tie";
    case pattern::rsqrt_sweep: return "rsqrt-sweep";
    case pattern::zero_row: return "zero-row";
    case pattern::zero_block: return "zero-block";
    case pattern::equal_scores: return "equal-scores";
    case pattern::dominant: return "dominant";
    case pattern::zero_queries: return "zero-queries";
    case pattern::value_shifts: return "value-shifts";
    case pattern::scores_near_min_normal: return "scores-near-2^-126";
    case pattern::score_ties: return "score-ties";
    case pattern::zero_q_rows: return "zero-q-rows";
  }
  return "?";
}

// One case of the table. The dists d0, d1, d2 are the magnitude profile of the op's inputs:
//   op           d0            d1                        d2
//   matmul       activations   weight values (weights::quantized, float_range)
//   rms_norm     x             weight (when weighted)
//   swiglu       gate          up
//   add          a             b
//   add_bias     x             bias
//   rope         x
//   kv_quantize  K             V
//   attention    q             K                         V
//   geglu        gate          up
//   swiglu_oai   gate          up
//   softcap      x
//   scale        x
struct op_case {
  std::string name{};  // unique; names the op, type, shape and profile
  op_kind op = op_kind::matmul;
  uint64_t seed = 0;  // of the inputs: a hash of the name
  pattern pat = pattern::none;
  // matmul: y (n_tok, n_out) = x (n_tok, n_in) times n_out weight rows of `type`
  gguf::dtype type = gguf::DTYPE_F32;
  int64_t n_in = 0, n_out = 0, n_tok = 0;
  weights wkind = weights::quantized_real;
  // element-wise: rows x cols (swiglu and add: one row of cols); rms_norm per group of columns
  int64_t rows = 1, cols = 0, group = 0;
  float eps = 1e-5f;
  bool weighted = false;
  // rope, kv_quantize (rows positions), attention (n_kv.size() query rows over n_cells positions)
  int64_t n_head = 1, n_head_kv = 1, head_dim = 0, n_rot = 0;
  bool neox = false;
  std::vector<int64_t> positions{};  // rope: one per row (empty: random in 0 .. 100000)
  int64_t n_cells = 0;
  std::vector<int64_t> n_kv{};
  float kq_scale = 0.0f;
  float softcap = 0.0f;  // attention: > 0 caps the scores (gemma2); softcap: the cap
  float alpha = 0.0f, limit = 0.0f;  // swiglu_oai (gpt-oss: 1.702, 7)
  float factor = 0.0f;   // scale: out = x * factor
  std::vector<float> sinks{};  // attention: one sink per query head (gpt-oss); empty: none
  dist d0{}, d1{}, d2{};
  bool gpu_scale = false;  // sized for a GPU's dispatch limits or dense sweeps
  bool nonfinite = false;  // an input holds inf or NaN
};

// An activation case's gpu::act (geglu, swiglu_oai, softcap, scale) and its parameters.
inline kernels::gpu::act gpu_act(const op_case& c) {
  return c.op == op_kind::geglu        ? kernels::gpu::act::geglu
         : c.op == op_kind::swiglu_oai ? kernels::gpu::act::swiglu_oai
         : c.op == op_kind::softcap    ? kernels::gpu::act::softcap
                                       : kernels::gpu::act::scale;
}
inline kernels::gpu::act_params gpu_act_params(const op_case& c) {
  kernels::gpu::act_params p;
  p.alpha = c.alpha;
  p.limit = c.limit;
  p.cap = c.softcap;
  p.factor = c.factor;
  return p;
}

// An attention case's soft cap and sinks as gpu::device::attention takes them.
inline kernels::gpu::attention_extras gpu_attention_extras(const op_case& c) {
  kernels::gpu::attention_extras x;
  x.softcap = c.softcap;
  x.sinks = c.sinks.empty() ? nullptr : c.sinks.data();
  return x;
}

// The cell of one position in gpu.h's exact KV layout, in bytes.
inline int64_t kv_cell_bytes(int64_t n_head_kv, int64_t head_dim) {
  const int64_t nb = (head_dim + numerics::QBLOCK - 1) / numerics::QBLOCK;
  return 2 * n_head_kv * nb * (numerics::QBLOCK * 2 + 4);
}

// Floats of an op's output (kv_quantize: its cells' bytes / 4).
inline int64_t output_size(const op_case& c) {
  switch (c.op) {
    case op_kind::matmul: return c.n_tok * c.n_out;
    case op_kind::rms_norm: case op_kind::add_bias: return c.rows * c.cols;
    case op_kind::swiglu: case op_kind::add: case op_kind::geglu: case op_kind::swiglu_oai:
    case op_kind::softcap: case op_kind::scale: return c.cols;
    case op_kind::rope: return c.rows * c.n_head * c.head_dim;
    case op_kind::kv_quantize: return c.rows * kv_cell_bytes(c.n_head_kv, c.head_dim) / 4;
    case op_kind::attention: return static_cast<int64_t>(c.n_kv.size()) * c.n_head * c.head_dim;
  }
  return 0;
}

namespace op_detail {

inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

inline std::string shape_of(const op_case& c) {
  auto s = [](int64_t v) { return std::to_string(v); };
  auto g = [](float v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", static_cast<double>(v));
    return std::string(b);
  };
  switch (c.op) {
    case op_kind::matmul:
      return type_name(c.type) + " n_in " + s(c.n_in) + " n_out " + s(c.n_out) + " n_tok " + s(c.n_tok) + " w " +
             weights_name(c.wkind) + (c.wkind == weights::quantized || c.wkind == weights::float_range
                                          ? "(" + dist_name(c.d1) + ")" : std::string()) +
             " x " + dist_name(c.d0);
    case op_kind::rms_norm: {
      char eps[32];
      std::snprintf(eps, sizeof eps, "%g", static_cast<double>(c.eps));
      return s(c.rows) + "x" + s(c.cols) + " group " + s(c.group) + " eps " + eps + " x " + dist_name(c.d0) +
             (c.weighted ? " w " + dist_name(c.d1) : std::string(" no weight"));
    }
    case op_kind::swiglu: case op_kind::add: case op_kind::geglu:
      return "n " + s(c.cols) + " " + dist_name(c.d0) + " / " + dist_name(c.d1);
    case op_kind::swiglu_oai:
      return "n " + s(c.cols) + " alpha " + g(c.alpha) + " limit " + g(c.limit) + " " + dist_name(c.d0) + " / " +
             dist_name(c.d1);
    case op_kind::softcap: return "n " + s(c.cols) + " cap " + g(c.softcap) + " " + dist_name(c.d0);
    case op_kind::scale: return "n " + s(c.cols) + " by " + g(c.factor) + " " + dist_name(c.d0);
    case op_kind::add_bias:
      return s(c.rows) + "x" + s(c.cols) + " x " + dist_name(c.d0) + " bias " + dist_name(c.d1);
    case op_kind::rope: {
      std::string p = c.positions.empty() ? "random" : "";
      for (size_t i = 0; i < c.positions.size() && i < 4; ++i) p += (i ? "," : "") + s(c.positions[i]);
      if (c.positions.size() > 4) p += ",...";
      return s(c.rows) + " rows " + s(c.n_head) + " heads head_dim " + s(c.head_dim) + " n_rot " + s(c.n_rot) +
             (c.neox ? " neox" : " normal") + " pos " + p + " x " + dist_name(c.d0);
    }
    case op_kind::kv_quantize:
      return s(c.rows) + " rows " + s(c.n_head_kv) + " kv heads head_dim " + s(c.head_dim) + " K " +
             dist_name(c.d0) + " V " + dist_name(c.d1);
    case op_kind::attention: {
      std::string kv;
      for (size_t i = 0; i < c.n_kv.size() && i < 6; ++i) kv += (i ? "," : "") + s(c.n_kv[i]);
      if (c.n_kv.size() > 6) kv += ",...";
      return s(c.n_head) + "/" + s(c.n_head_kv) + " heads head_dim " + s(c.head_dim) + " cells " + s(c.n_cells) +
             " n_kv " + kv + " q " + dist_name(c.d0) + " K " + dist_name(c.d1) + " V " + dist_name(c.d2);
    }
  }
  return "";
}

// Appends c to the table: its name from its fields, its seed from its name (attention: without
// its kq_scale, so that the cases of one cache under several scales share their inputs).
inline void add(std::vector<op_case>& t, op_case c) {
  c.name = std::string(op_name(c.op)) + " " + shape_of(c);
  if (c.pat != pattern::none) c.name += std::string(" ") + pattern_name(c.pat);
  c.nonfinite = c.d0.p_nonfinite > 0 || c.d1.p_nonfinite > 0 || c.d2.p_nonfinite > 0;
  const std::string inputs = c.name;
  if (c.op == op_kind::attention) {
    char sc[40];
    std::snprintf(sc, sizeof sc, " kq_scale %g", static_cast<double>(c.kq_scale));
    c.name += sc;
    if (c.softcap > 0) {
      std::snprintf(sc, sizeof sc, " softcap %g", static_cast<double>(c.softcap));
      c.name += sc;
    }
    if (!c.sinks.empty()) {
      std::snprintf(sc, sizeof sc, " sinks %g..", static_cast<double>(c.sinks[0]));
      c.name += sc;
    }
  }
  const std::string base = c.name;
  int k = 1;
  while (std::any_of(t.begin(), t.end(), [&](const op_case& o) { return o.name == c.name; }))
    c.name = base + " #" + std::to_string(++k);
  c.seed = fnv1a(k == 1 ? inputs : c.name);
  t.push_back(std::move(c));
}

inline op_case matmul(gguf::dtype t, int64_t n_in, int64_t n_out, int64_t n_tok, weights w, const dist& x,
                      const dist& wd = d_normal, pattern p = pattern::none) {
  return {.op = op_kind::matmul, .pat = p, .type = t, .n_in = n_in, .n_out = n_out, .n_tok = n_tok, .wkind = w,
          .d0 = x, .d1 = wd};
}

inline void matmul_cases(std::vector<op_case>& t) {
  // Every (n_out, n_tok) of {1, 7, 33} x {1, 3, 9} for short rows, two shapes of n_in 4096;
  // random block bytes, activations 2^-8 .. 2^8 (from tests/backend's first matmul tests).
  auto shapes = [&](gguf::dtype ty, std::initializer_list<int64_t> n_ins) {
    for (int64_t n_in : n_ins)
      for (int64_t n_out : {1, 7, 33})
        for (int64_t n_tok : {1, 3, 9}) {
          if (n_in >= 4096 && n_out * n_tok != 1 && n_out * n_tok != 33 * 9) continue;
          add(t, matmul(ty, n_in, n_out, n_tok, weights::random_bytes, d_moderate));
        }
  };
  for (gguf::dtype ty : LEGACY_TYPES) {
    shapes(ty, {32, 64, 256, 4096});
    add(t, matmul(ty, 256, 7, 3, weights::quantized_real, d_normal));
  }
  for (gguf::dtype ty : KQUANT_TYPES) {
    shapes(ty, {256, 4096});
    add(t, matmul(ty, 512, 7, 3, weights::quantized_real, d_normal));
  }
  for (gguf::dtype ty : FLOAT_TYPES) shapes(ty, {8, 33, 172, 32, 64, 256, 4096});
  // Activation exponents far apart, near underflow, near overflow.
  for (gguf::dtype ty : {gguf::DTYPE_Q4_0, gguf::DTYPE_Q5_1, gguf::DTYPE_Q8_0, gguf::DTYPE_Q2_K, gguf::DTYPE_Q4_K,
                         gguf::DTYPE_Q6_K, gguf::DTYPE_F32, gguf::DTYPE_BF16}) {
    add(t, matmul(ty, 512, 7, 3, weights::random_bytes, d_wide));
    add(t, matmul(ty, 512, 7, 3, weights::random_bytes, d_tiny));
    add(t, matmul(ty, 256, 5, 2, weights::random_bytes, d_huge));
  }
  // The same on the generation path (one and two tokens) for every integer type.
  for (gguf::dtype ty : QUANT_TYPES) {
    const int64_t n_in = gguf::dtype_get(ty).block_size == 256 ? 512 : 288;
    add(t, matmul(ty, n_in, 7, 1, weights::random_bytes, d_wide));
    add(t, matmul(ty, n_in, 5, 2, weights::random_bytes, d_huge));
    add(t, matmul(ty, n_in, 5, 1, weights::random_bytes, d_tiny));
  }
  // f32 weights near the ends of the float range.
  for (auto [lo, hi] : {std::pair<int, int>{100, 127}, {-126, -100}, {-126, 127}})
    add(t, matmul(gguf::DTYPE_F32, 200, 7, 3, weights::float_range, d_wide, dist{.lo = lo, .hi = hi}));
  // More rows than one dispatch's group count (65535 on most devices).
  op_case rows = matmul(gguf::DTYPE_Q4_0, 32, 65537 + 33, 2, weights::random_bytes, d_moderate4);
  rows.gpu_scale = true;
  add(t, rows);
  // Zero rows, zero tokens, tokens of -0 and of subnormals.
  for (gguf::dtype ty : {gguf::DTYPE_Q8_0, gguf::DTYPE_Q4_K, gguf::DTYPE_F16})
    add(t, matmul(ty, 256, 9, 4, weights::random_bytes, d_moderate4, d_normal, pattern::edges));
  add(t, matmul(gguf::DTYPE_Q8_0, 256, 18, 3, weights::random_bytes, d_mixed, d_normal, pattern::edges));
  // Shapes of the Vulkan int8 dot-product path: quantized rows and random bytes, by type.
  for (const std::vector<gguf::dtype>* types : {&LEGACY_TYPES, &KQUANT_TYPES}) {
    for (size_t k = 0; k < types->size(); ++k) {
      const int64_t n_in = types == &LEGACY_TYPES ? 96 : 512;
      for (auto [n_out, n_tok] : {std::pair<int64_t, int64_t>{7, 1}, {33, 9}, {5, 3}})
        add(t, matmul((*types)[k], n_in, n_out, n_tok, k % 2 == 0 ? weights::quantized_real : weights::random_bytes,
                      d_moderate12));
    }
  }
  // kernels/cpu's shapes: panels of 37 rows and 7 tokens with fp16 scales near 1 or of any
  // exponent; one to five tokens (the generation path); 70 tokens (two tiles of 64, groups of 4
  // and a rest) and 50 rows; quantized rows of a real scale.
  for (gguf::dtype ty : QUANT_TYPES) {
    const bool QUANT = gguf::dtype_get(ty).block_size == 256;
    add(t, matmul(ty, QUANT ? 768 : 352, 37, 7, weights::random_bytes_narrow, d_normal));
    add(t, matmul(ty, QUANT ? 768 : 352, 37, 7, weights::random_bytes, d_mixed));
    for (int64_t n_tok : {1, 2, 4, 5}) {
      add(t, matmul(ty, QUANT ? 1024 : 288, 21, n_tok,
                    n_tok % 2 ? weights::random_bytes : weights::random_bytes_narrow, n_tok % 2 ? d_mixed : d_normal));
    }
    add(t, matmul(ty, 1024, 20, 5, weights::quantized_real, d_normal));
  }
  for (gguf::dtype ty : {gguf::DTYPE_Q8_0, gguf::DTYPE_Q4_K, gguf::DTYPE_Q6_K})
    add(t, matmul(ty, 512, 50, 70, weights::random_bytes, d_mixed));
  // The CUDA twins' shapes: odd lengths of the float types, long rows, quantized rows and random
  // bytes, activations with outliers, a zero row and a zero token; the emulated kernels' token
  // counts (one warp, several, 130: two thread blocks).
  for (gguf::dtype ty : WEIGHT_TYPES) {
    const bool fl = is_float_type(ty);
    for (int64_t n_in : fl ? std::vector<int64_t>{33, 200, 512} : std::vector<int64_t>{256, 768, 2048}) {
      add(t, matmul(ty, n_in, 7, 5, weights::quantized_real, d_outliers, d_normal, pattern::edges));
      add(t, matmul(ty, n_in, 7, 5, weights::random_bytes, d_outliers, d_normal, pattern::edges));
    }
    const bool wide = ty == gguf::DTYPE_Q8_0 || ty == gguf::DTYPE_Q4_K || ty == gguf::DTYPE_F16;
    for (int64_t n_tok : {int64_t(1), int64_t(3), int64_t(wide ? 130 : 2)})
      add(t, matmul(ty, fl ? 300 : 512, 5, n_tok, weights::quantized, d_spread30, d_spread2, pattern::edges));
    // kernels/ref's split test: 37 rows, 3 tokens, one row of blocks (172 values for the float types).
    const int64_t bs = gguf::dtype_get(ty).block_size;
    add(t, matmul(ty, fl ? 172 : 2 * bs, 37, 3, weights::quantized_real, d_outliers));
  }
}

inline op_case elementwise(op_kind k, int64_t rows, int64_t cols, const dist& a, const dist& b,
                           pattern p = pattern::none) {
  return {.op = k, .pat = p, .rows = rows, .cols = cols, .d0 = a, .d1 = b};
}

inline op_case rms(int64_t rows, int64_t cols, int64_t group, float eps, const dist& x, const dist* w,
                   pattern p = pattern::none) {
  op_case c = elementwise(op_kind::rms_norm, rows, cols, x, w ? *w : dist{}, p);
  c.group = group;
  c.eps = eps;
  c.weighted = w != nullptr;
  return c;
}

inline constexpr int64_t LENGTHS[] = {1, 7, 16, 31, 32, 33, 100, 2048, 5632};  // around the vector widths

// geglu, swiglu_oai, softcap and scale (gemma's and gpt-oss's activations): kernels/cpu's lengths
// over spreads from the subnormal range to overflow (non-finite values among them), the devices'
// sizes, listed values around each function's thresholds, and dense sweeps of every exponent.
inline void activation_cases(std::vector<op_case>& t) {
  const dist spreads[] = {elem(-140, 120, true, true), elem(-3, 3, false), elem(-8, 8, true, true), elem(-130, -100),
                          elem(3, 7)};
  auto oai = [](op_case c, float alpha, float limit) {
    c.alpha = alpha;
    c.limit = limit;
    return c;
  };
  auto cap = [](op_case c, float v) {
    c.softcap = v;
    return c;
  };
  auto by = [](op_case c, float v) {
    c.factor = v;
    return c;
  };
  for (int64_t n : LENGTHS)
    for (size_t i = 0; i < 5; ++i) {
      const dist& a = spreads[i];
      const dist& b = spreads[(i + 2) % 5];
      add(t, elementwise(op_kind::geglu, 1, n, a, b));
      add(t, oai(elementwise(op_kind::swiglu_oai, 1, n, a, b), 1.702f, 7.0f));
      add(t, cap(elementwise(op_kind::softcap, 1, n, a, {}), i % 2 ? 50.0f : 30.0f));
      add(t, by(elementwise(op_kind::scale, 1, n, a, {}), i == 3 ? 1e-30f : i == 4 ? 3.0f : 0.125f));
    }
  for (int64_t n : {31, 4096, 100003}) {
    add(t, elementwise(op_kind::geglu, 1, n, elem(-7, 7), elem(-60, 60)));
    add(t, oai(elementwise(op_kind::swiglu_oai, 1, n, elem(-7, 7), elem(-60, 60)), 1.702f, 7.0f));
    add(t, oai(elementwise(op_kind::swiglu_oai, 1, n, elem(-3, 3), elem(-3, 3)), 0.5f, 1.0f));
    add(t, cap(elementwise(op_kind::softcap, 1, n, elem(-10, 10), {}), 30.0f));
    add(t, by(elementwise(op_kind::scale, 1, n, elem(-130, 127), {}), 0.0883883476f));
  }
  for (op_kind k : {op_kind::geglu, op_kind::swiglu_oai, op_kind::softcap, op_kind::scale}) {
    op_case c = elementwise(k, 1, 16, d_unit, d_unit, pattern::sentinels);
    if (k == op_kind::swiglu_oai) c = oai(c, 1.702f, 7.0f);
    if (k == op_kind::softcap) c = cap(c, 30.0f);
    if (k == op_kind::scale) c = by(c, 0x1p-10f);
    add(t, c);
  }
  for (pattern p : {pattern::silu_range, pattern::silu_bits}) {
    op_case g = elementwise(op_kind::geglu, 1, 1 << 20, d_unit, d_unit, p);
    op_case o = oai(elementwise(op_kind::swiglu_oai, 1, 1 << 20, d_unit, d_unit, p), 1.702f, 7.0f);
    op_case c = cap(elementwise(op_kind::softcap, 1, 1 << 20, d_unit, d_unit, p), 30.0f);
    for (op_case* x : {&g, &o, &c}) {
      x->gpu_scale = true;
      add(t, *x);
    }
  }
}

inline void elementwise_cases(std::vector<op_case>& t) {
  // add and swiglu: kernels/cpu's lengths, every pair of five spreads (non-finite values among
  // them; NaN never meets NaN in one element); the devices' sizes and spreads; listed values;
  // the CUDA twins' random bit patterns; the emulated kernels' blocks.
  const dist binary[] = {elem(-140, 120, true, true), elem(-3, 3, false), elem(-8, 8, true, true),
                         elem(-130, -100), elem(3, 7)};
  for (op_kind k : {op_kind::add, op_kind::swiglu}) {
    for (int64_t n : LENGTHS)
      for (const dist& a : binary)
        for (const dist& b : binary) add(t, elementwise(k, 1, n, a, b));
    for (int64_t n : {1, 31, 33, 100, 4096, 100003}) {
      for (int s = 0; s < 3; ++s) {
        if (k == op_kind::add) {
          const int lo = s == 0 ? -3 : s == 1 ? -135 : 100, hi = s == 0 ? 3 : s == 1 ? -110 : 127;
          add(t, elementwise(k, 1, n, elem(lo, hi), elem(lo, hi)));
        } else {
          const int lo = s == 0 ? -3 : s == 1 ? -130 : 2, hi = s == 0 ? 7 : s == 1 ? -100 : 127;
          add(t, elementwise(k, 1, n, elem(lo, hi), elem(-60, 60)));
        }
      }
    }
    add(t, elementwise(k, 1, k == op_kind::add ? 10 : 15, d_unit, d_unit, pattern::sentinels));
    add(t, elementwise(k, 1, 100000, bits_dist(2.0f / 3, 5), bits_dist(0.8f, 0)));
    add(t, elementwise(k, 1, 3000, dist{.name = "spread4x8", .lo = -1, .hi = 7}, d_spread4));
  }
  op_case ramp = elementwise(op_kind::add, 1, 65535 * 256 + 4097, d_unit, d_unit, pattern::ramp);
  ramp.gpu_scale = true;
  add(t, ramp);
  for (pattern p : {pattern::silu_range, pattern::silu_bits}) {
    op_case s = elementwise(op_kind::swiglu, 1, 1 << 20, d_unit, d_unit, p);
    s.gpu_scale = true;
    add(t, s);
  }
  activation_cases(t);
  // add_bias: rows 1, 4, 7 of the devices' odd widths; the twins' bit patterns; the emulation's.
  for (int64_t rows = 1; rows <= 7; rows += 3)
    for (int64_t cols : {1, 31, 33, 100, 4096}) add(t, elementwise(op_kind::add_bias, rows, cols, elem(-20, 20), elem(-20, 20)));
  add(t, elementwise(op_kind::add_bias, 1, 100000, bits_dist(2.0f / 3, 5), bits_dist(0.8f, 0)));
  add(t, elementwise(op_kind::add_bias, 30, 100, d_spread4, d_spread4));

  // rms_norm: kernels/cpu's lengths x five spreads x five eps, with and without a weight.
  const dist rms_x[] = {elem(-140, 120), elem(-3, 3, false), elem(-130, -100), elem(60, 120, false), elem(-20, 20)};
  const dist rms_w = elem(-4, 4), rms_w_nonfinite = elem(-4, 4, true, true);
  for (int64_t n : LENGTHS)
    for (const dist& x : rms_x)
      for (float eps : {1e-5f, 1e-6f, 1e30f, 1e-44f, INFINITY}) {
        add(t, rms(1, n, n, eps, x, nullptr));
        add(t, rms(1, n, n, eps, x, &rms_w));
      }
  // Tied squares, and weights with inf and NaN.
  add(t, rms(1, 2, 2, 1e-5f, d_unit, nullptr, pattern::tie_pair));
  for (int64_t n : LENGTHS) {
    add(t, rms(1, n, n, 1e-6f, d_unit, nullptr, pattern::ties));
    add(t, rms(1, n, n, 1e-6f, d_unit, &rms_w_nonfinite, pattern::ties));
  }
  // The devices' rows x cols with wide spreads and eps up to inf; per head groups.
  const int gpu_spreads[][2] = {{-3, 3}, {-140, 120}, {-130, -100}, {60, 120}};
  const float gpu_eps[] = {1e-5f, 1e-6f, 1e30f, INFINITY};
  for (int64_t rows = 1; rows <= 7; rows += 2)
    for (int64_t cols : {1, 31, 33, 100, 4096})
      for (size_t si = 0; si < 4; ++si) {
        const float e = gpu_eps[(static_cast<size_t>(rows) + si) % 4];
        const dist x = elem(gpu_spreads[si][0], gpu_spreads[si][1]);
        add(t, rms(rows, cols, cols, e, x, nullptr));
        add(t, rms(rows, cols, cols, e, x, &rms_w));
      }
  const dist group_w = elem(-2, 2);
  for (int64_t group : {8, 64, 128})
    for (int64_t n_head = 1; n_head <= 5; n_head += 2) {
      add(t, rms(1 + n_head, n_head * group, group, 1e-6f, elem(-30, 30), &group_w));
      add(t, rms(1 + n_head, n_head * group, group, 1e-5f, elem(-30, 30), nullptr));
    }
  add(t, rms(5, 2, 2, 1e-6f, d_unit, &d_unit, pattern::sentinels));
  add(t, rms(5, 2, 2, 1e30f, d_unit, nullptr, pattern::sentinels));
  add(t, rms(1, 8, 8, 0x1p-126f, d_unit, nullptr, pattern::sum_tie));
  op_case sweep = rms(1 << 18, 2, 2, 0x1p-126f, d_unit, nullptr, pattern::rsqrt_sweep);
  sweep.gpu_scale = true;
  add(t, sweep);
  // The twins' lengths with normal values, bit patterns, zeros and 1e-30 scales; the emulation's
  // rows with a zero row and two groups per row.
  const dist near_one{.name = "near1", .lo = -3, .hi = -3, .per_block = false, .bias = 1.0f};
  const dist twin_x[] = {dist{.name = "normal/value", .per_block = false}, bits_dist(1.0f, 0),
                         dist{.name = "zero", .p_zero_block = 1.0f}, dist{.name = "1e-30", .lo = -100, .hi = -100, .per_block = false}};
  for (int64_t n : {1, 7, 64, 255, 2048, 5000})
    for (const dist& x : twin_x) {
      add(t, rms(1, n, n, 1e-5f, x, &near_one));
      add(t, rms(1, n, n, 1e-5f, x, nullptr));
    }
  for (int64_t group : {300, 600}) {
    add(t, rms(3, 600, group, 1e-5f, d_spread30, &d_unit, pattern::zero_row));
    add(t, rms(3, 600, group, 1e-5f, d_spread30, nullptr, pattern::zero_row));
  }
}

inline op_case rope(int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox, std::vector<int64_t> pos,
                    const dist& x, pattern p = pattern::none) {
  return {.op = op_kind::rope, .pat = p, .rows = rows, .n_head = n_head, .head_dim = head_dim, .n_rot = n_rot,
          .neox = neox, .positions = std::move(pos), .d0 = x};
}

inline op_case kv(int64_t rows, int64_t n_head_kv, int64_t head_dim, const dist& k, const dist& v,
                  pattern p = pattern::none) {
  return {.op = op_kind::kv_quantize, .pat = p, .rows = rows, .n_head_kv = n_head_kv, .head_dim = head_dim, .d0 = k,
          .d1 = v};
}

inline void rope_kv_cases(std::vector<op_case>& t) {
  // RoPE: the devices' head sizes, full, half and minimal rotation, random positions; listed
  // values on the tie below 2^-126; the twins' far-apart positions; kernels/ref's partial rotation
  // of head_dim 80; the emulation's rows.
  for (bool neox : {false, true}) {
    for (int64_t head_dim : {8, 64, 128})
      for (int64_t rows = 1; rows <= 7; rows += 3) {
        add(t, rope(rows, 1 + rows % 3, head_dim, head_dim, neox, {}, elem(-30, 30)));
        add(t, rope(rows, 2, head_dim, head_dim / 2, neox, {}, elem(-30, 30)));
        add(t, rope(rows, 3, head_dim, 2, neox, {}, elem(-30, 30)));
      }
    for (int64_t pos : {0, 1, 17, 4095, 1000000})
      add(t, rope(1, 3, 64, 48, neox, {pos}, pos == 17 ? bits_dist(1.0f, 0) : dist{.name = "normal/value", .per_block = false}));
    add(t, rope(1, 3, 80, 64, neox, {77}, dist{.name = "normal/value", .per_block = false}));
    add(t, rope(4, 3, 64, 48, neox, {0, 37, 74, 111}, d_spread3));
  }
  add(t, rope(2, 1, 4, 4, false, {0, 0}, d_unit, pattern::sentinels));
  // kv_quantize: the devices' head sizes (partial blocks) and head counts, wide V; the twins' cache
  // shapes with outliers; the emulation's 150 positions.
  for (int64_t head_dim : {8, 33, 64, 100, 128})
    for (int64_t n_head_kv = 1; n_head_kv <= 3; ++n_head_kv)
      add(t, kv(1 + (head_dim + n_head_kv) % 5, n_head_kv, head_dim, elem(-40, 40), elem(-140, 120), pattern::zero_block));
  for (auto [n_head_kv, head_dim, rows] : {std::tuple<int64_t, int64_t, int64_t>{2, 64, 37}, {2, 40, 9}, {1, 128, 130},
                                           {1, 32, 1}, {2, 64, 700}})
    add(t, kv(rows, n_head_kv, head_dim, d_outliers, d_outliers));
  for (int64_t head_dim : {64, 40, 128}) add(t, kv(150, 2, head_dim, d_spread4, d_spread4));
}

inline op_case attn(int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t n_cells, std::vector<int64_t> n_kv,
                    float kq_scale, const dist& q, const dist& k, const dist& v, pattern p = pattern::none) {
  return {.op = op_kind::attention, .pat = p, .n_head = n_head, .n_head_kv = n_head_kv, .head_dim = head_dim,
          .n_cells = n_cells, .n_kv = std::move(n_kv), .kq_scale = kq_scale, .d0 = q, .d1 = k, .d2 = v};
}

inline void attention_cases(std::vector<op_case>& t) {
  // kernels/cpu's five modes: K and V blocks over 2^-60 .. 2^20 (scores round, weights
  // underflow), narrow (many nonzero weights), every score equal, one dominant score, mostly zero
  // blocks with zero queries; head sizes 1 .. 300, 0 .. 2000 positions, three kq_scales; three KV
  // heads per cell.
  const dist q_sp{.name = "q", .lo = -8, .hi = 8, .p_zero_block = 0.1f, .p_neg_zero = 0.05f};
  const dist wide{.name = "wide", .lo = -60, .hi = 20, .p_zero_block = 0.1f, .p_neg_zero = 0.05f};
  const dist narrow{.name = "narrow", .lo = -3, .hi = 3, .p_zero_block = 0.02f, .p_neg_zero = 0.05f};
  const dist narrow_v{.name = "narrow-v", .lo = -10, .hi = 10, .p_zero_block = 0.05f, .p_neg_zero = 0.05f};
  const dist sparse{.name = "sparse", .lo = -20, .hi = 10, .p_zero_block = 0.6f, .p_neg_zero = 0.2f};
  struct mode { dist k, v; pattern p; };
  const mode modes[] = {{wide, wide, pattern::none}, {narrow, narrow_v, pattern::none},
                        {narrow, wide, pattern::equal_scores}, {narrow, wide, pattern::dominant},
                        {sparse, sparse, pattern::zero_queries}};
  for (const mode& m : modes)
    for (int64_t head_dim : {1, 8, 32, 33, 48, 64, 100, 128, 256, 300})
      for (int64_t n_kv : {0, 1, 2, 7, 33, 300, 2000})
        for (float scale : {kernels::attention_kq_scale(head_dim), 8.0f, -0.25f})
          add(t, attn(3, 3, head_dim, std::max<int64_t>(n_kv, 1), {n_kv}, scale, q_sp, m.k, m.v, m.p));
  // Query heads grouped over one KV head: 1, 4 and 8 per group.
  for (int mi : {0, 1, 4})
    for (int64_t head_dim : {8, 48, 64})
      for (int64_t n_kv : {1, 7, 129, 300, 1000})
        for (int64_t per : {1, 4, 8})
          add(t, attn(3 * per, 3, head_dim, n_kv, {n_kv}, kernels::attention_kq_scale(head_dim), q_sp, modes[mi].k,
                      modes[mi].v, modes[mi].p));
  // Crafted scores and values (head_dim 64).
  const dist v4{.name = "spread4", .lo = -4, .hi = 4};
  for (float scale : {kernels::attention_kq_scale(64), 0.001f})
    add(t, attn(3, 3, 64, 140, {140}, scale, d_unit, d_unit, d_unit, pattern::value_shifts));
  for (float scale : {std::ldexp(1.0f, 126), std::ldexp(1.0f, 100), 1.0f})
    add(t, attn(3, 3, 64, 210, {210}, scale, d_unit, d_unit, v4, pattern::scores_near_min_normal));
  for (float scale : {1.0f, 1024.0f, 16384.0f})
    add(t, attn(3, 3, 64, 400, {400}, scale, d_unit, d_unit, v4, pattern::score_ties));
  // The devices' head sizes (80: not a multiple of 32), grouped-query layouts, position counts.
  auto ranges = [](const char* name, int q_lo, int q_hi, int kv_lo, int kv_hi, int zero_every) {
    const float pz = zero_every ? 1.0f / static_cast<float>(zero_every) : 0.0f;
    return std::pair<dist, dist>{dist{.name = name, .lo = q_lo, .hi = q_hi, .p_zero_block = pz},
                                 dist{.name = name, .lo = kv_lo, .hi = kv_hi, .p_zero_block = pz}};
  };
  const auto [gq, gkv] = ranges("gpu", -3, 3, -3, 3, 9);
  for (int64_t head_dim : {8, 64, 128, 80})
    for (auto [n_head, n_head_kv] : {std::pair<int64_t, int64_t>{1, 1}, {4, 2}, {8, 1}})
      for (int64_t n : {1, 2, 37, 300})
        add(t, attn(n_head, n_head_kv, head_dim, n, {n}, kernels::attention_kq_scale(head_dim), gq, gkv, gkv));
  // Rows attending different numbers of positions in one call; causal rows.
  for (int64_t head_dim : {64, 80}) {
    const float s = kernels::attention_kq_scale(head_dim);
    add(t, attn(4, 2, head_dim, 300, {1, 2, 37, 300, 0, 150}, s, gq, gkv, gkv));
    std::vector<int64_t> causal;
    for (int64_t i = 0; i < 9; ++i) causal.push_back(300 - 9 + i + 1);
    add(t, attn(4, 2, head_dim, 300, causal, s, gq, gkv, gkv));
  }
  // Sharp and flat softmax, V exponents far apart, long smooth sums, zero blocks, underflow.
  const float s80 = kernels::attention_kq_scale(80);
  for (const auto& [q, k] : {ranges("sharp", 6, 9, -2, 2, 9), ranges("flat", -40, -30, -2, 2, 9),
                             ranges("half-zero", -3, 3, -3, 3, 2), ranges("underflow", -120, -100, -20, -10, 9),
                             ranges("all-zero", -3, 3, -3, 3, 1)})
    add(t, attn(4, 2, 80, 37, {37, 20, 1}, s80, q, k, k));
  for (int64_t head_dim : {8, 80, 128}) {
    const float s = kernels::attention_kq_scale(head_dim);
    const auto [fq, fk] = ranges("v-far", -3, 3, -60, 40, 3);
    add(t, attn(4, 2, head_dim, 300, {300, 150, 37, 2}, s, fq, fk, fk));
    const auto [sq, sk] = ranges("smooth", -1, 1, -8, 8, 0);
    add(t, attn(4, 2, head_dim, 300, {300, 299}, s, sq, sk, sk));
  }
  add(t, attn(2, 1, 40, 5, {5, 0, 3}, kernels::attention_kq_scale(40), d_spread2, d_spread2, d_spread2,
              pattern::zero_q_rows));
  // The CUDA twins' cache shapes with outliers, 0 .. all positions; the emulation's four rows.
  for (auto [n_head, n_head_kv, head_dim, n_cells] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{4, 2, 64, 37},
                                                      {2, 2, 40, 9}, {3, 1, 128, 130}, {1, 1, 32, 1}, {8, 2, 64, 700}})
    for (int64_t n_kv : {int64_t(0), int64_t(1), n_cells / 2, n_cells})
      add(t, attn(n_head, n_head_kv, head_dim, n_cells, {n_kv}, kernels::attention_kq_scale(head_dim), d_outliers,
                  d_outliers, d_outliers));
  for (int64_t head_dim : {64, 40, 128})
    add(t, attn(6, 2, head_dim, 150, {150, 0, 1, 77}, kernels::attention_kq_scale(head_dim), d_spread4, d_spread4,
                d_spread4));
  // Soft-capped scores (gemma2's 50; 30; a cap of 1 that flattens everything): each mode, scores
  // from tiny to far past the cap (kq_scale 8), grouped heads, rows of different lengths.
  for (float cap : {50.0f, 30.0f, 1.0f})
    for (const mode& m : modes)
      for (int64_t head_dim : {64, 256})
        for (float scale : {kernels::attention_kq_scale(head_dim), 8.0f}) {
          op_case c = attn(4, 2, head_dim, 300, {300, 1, 77}, scale, q_sp, m.k, m.v, m.p);
          c.softcap = cap;
          add(t, c);
        }
  // Attention sinks (gpt-oss: one learned score per query head that joins the softmax with no value):
  // sinks far below, among and far above the scores, a zero, a negative zero, subnormals (flushed to
  // zero), per-head mixtures; each mode, grouped heads, rows of 0, 1 and many positions.
  const std::vector<std::vector<float>> sink_sets = {
      {0.0f, 0.0f, 0.0f, 0.0f},         {-0.0f, 1.5f, -2.25f, 3.0f},       {40.0f, 40.0f, 40.0f, 40.0f},
      {-80.0f, -80.0f, -80.0f, -80.0f}, {0x1p-130f, -0x1p-140f, 7.0f, -7.0f}, {88.0f, -88.0f, 0.5f, 1e-3f}};
  for (const std::vector<float>& sk : sink_sets)
    for (const mode& m : modes)
      for (int64_t head_dim : {64, 80}) {
        op_case c = attn(4, 2, head_dim, 200, {200, 0, 1, 77}, kernels::attention_kq_scale(head_dim), q_sp, m.k, m.v, m.p);
        c.sinks = sk;
        add(t, c);
      }
  {  // a sink with a soft cap (no architecture has both; the op takes both)
    op_case c = attn(4, 2, 64, 100, {100, 3}, 8.0f, q_sp, modes[0].k, modes[0].v, modes[0].p);
    c.softcap = 30.0f;
    c.sinks = {29.0f, -1.0f, 0.0f, 31.0f};
    add(t, c);
  }
}

}  // namespace op_detail

// The table, built once per process.
inline const std::vector<op_case>& op_cases() {
  static const std::vector<op_case> table = [] {
    std::vector<op_case> t;
    op_detail::matmul_cases(t);
    op_detail::elementwise_cases(t);
    op_detail::rope_kv_cases(t);
    op_detail::attention_cases(t);
    return t;
  }();
  return table;
}

// ---- inputs ----

struct op_inputs {
  std::vector<uint8_t> w;     // matmul: n_out rows of dtype_row_bytes(type, n_in)
  std::vector<float> x;       // matmul (n_tok, n_in); rms_norm, add_bias, rope: x; swiglu gate; add a;
                              // kv_quantize and attention: K (rows or n_cells, n_head_kv * head_dim)
  std::vector<float> y;       // rms_norm weight (group; empty: none); swiglu up; add b; add_bias bias;
                              // kv_quantize and attention: V
  std::vector<float> q;       // attention: (n_q, n_head * head_dim)
  std::vector<float> tables;  // rope: (rows, n_rot)
  std::vector<uint8_t> cells; // attention: n_cells cells of gpu.h's layout, from K and V
};

// The cells of rows positions of K and V (rows, n_head_kv * head_dim) in gpu.h's layout:
// [K q (n_head_kv, nb * 32) int16][V q][K exp (n_head_kv, nb) int32][V exp], each head quantized
// with numerics::quantize_act.
inline std::vector<uint8_t> kv_cells(const float* k, const float* v, int64_t rows, int64_t n_head_kv, int64_t head_dim) {
  const int64_t nb = (head_dim + numerics::QBLOCK - 1) / numerics::QBLOCK, cb = kv_cell_bytes(n_head_kv, head_dim);
  std::vector<uint8_t> cells(static_cast<size_t>(rows * cb));
  for (int64_t p = 0; p < rows; ++p)
    for (int64_t kind = 0; kind < 2; ++kind)
      for (int64_t h = 0; h < n_head_kv; ++h) {
        numerics::qvec qv;
        numerics::quantize_act((kind ? v : k) + (p * n_head_kv + h) * head_dim, head_dim, qv);
        uint8_t* cell = cells.data() + p * cb;
        std::memcpy(cell + (kind * n_head_kv + h) * nb * 64, qv.q.data(), static_cast<size_t>(nb * 64));
        std::memcpy(cell + 2 * n_head_kv * nb * 64 + (kind * n_head_kv + h) * nb * 4, qv.exp.data(),
                    static_cast<size_t>(nb * 4));
      }
  return cells;
}

// KV head g's K (which 0) or V (which 1) in consecutive cells of gpu.h's layout, as the backends
// read it (strided by whole cells).
inline kernels::kv_head_view cell_view(const uint8_t* cells, int64_t n_head_kv, int64_t head_dim, int64_t g, int which) {
  const int64_t nb = (head_dim + numerics::QBLOCK - 1) / numerics::QBLOCK, cb = kv_cell_bytes(n_head_kv, head_dim);
  return {reinterpret_cast<const int16_t*>(cells) + (which * n_head_kv + g) * nb * numerics::QBLOCK,
          reinterpret_cast<const int32_t*>(cells + 2 * n_head_kv * nb * 64) + (which * n_head_kv + g) * nb, cb / 2,
          cb / 4};
}

namespace op_detail {

// TIE_A * TIE_B = (2^24 - 1) * 2^-150 = 2^-126 (1 - 2^-24), halfway between the largest subnormal
// and 2^-126: IEEE gradual underflow rounds it (ties to even) to 2^-126. Both factors are normal.
inline constexpr float TIE_A = 0x1.fffffep-64f;
inline constexpr float TIE_B = 0x1p-63f;

inline void matmul_inputs(const op_case& c, test_rng& r, op_inputs& in) {
  in.w = weight_rows(r, c.type, c.n_in, c.n_out, c.wkind, c.d1);
  in.x = draw(r, c.d0, c.n_tok * c.n_in, c.n_in);
  if (c.pat != pattern::edges) return;
  const uint64_t rb = gguf::dtype_row_bytes(c.type, c.n_in);
  const std::vector<float> zero(static_cast<size_t>(c.n_in), 0.0f);
  if (c.n_out > 1) gguf::quants_quantize_row(c.type, zero.data(), in.w.data() + rb, c.n_in);  // row 1: quantized zeros
  if (c.n_out > 2) std::memset(in.w.data() + 2 * rb, 0, rb);                                  // row 2: zero bytes
  float* x = in.x.data();
  const int64_t n = c.n_in;
  if (c.n_tok > 1) std::fill(x + n, x + 2 * n, 0.0f);                   // token 1: zero
  if (c.n_tok > 2) for (int64_t i = 2 * n; i < 3 * n; i += 3) x[i] = -0.0f;  // token 2: some -0
  if (c.n_tok > 3)                                                      // token 3: subnormals among normals
    for (int64_t i = 3 * n; i < 4 * n; i += 2)
      x[i] = float_of(static_cast<uint32_t>(r.range(1, 0x7fffff)) | (i % 4 ? 0x80000000u : 0u));
}

inline void elementwise_inputs(const op_case& c, test_rng& r, op_inputs& in) {
  const int64_t n = c.rows * c.cols;
  switch (c.pat) {
    case pattern::ramp:
      in.x.resize(static_cast<size_t>(n));
      in.y.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        in.x[static_cast<size_t>(i)] = static_cast<float>(i % 8191) * 0.25f;
        in.y[static_cast<size_t>(i)] = static_cast<float>(i / 8191) - 1000.0f;
      }
      return;
    case pattern::sentinels:
      if (c.op == op_kind::add) {  // sums that cancel to +0, land below 2^-126, or overflow
        in.x = {0.0f, -0.0f, -0.0f, 0x1.8p-126f, -0x1.8p-126f, 0x1p-126f, 3e38f, -3e38f, 0x1p-149f, 1.0f};
        in.y = {-0.0f, -0.0f, 0.0f, -0x1.4p-126f, 0x1.4p-126f, -0x1p-126f, 3e38f, -3e38f, 0x1p-126f, 0x1p-24f};
      } else if (c.op == op_kind::swiglu) {
        // silu_f32(0x1.474972p+0) is 1 - 2^-24, so with up = +-2^-126 the product is the tie just
        // below 2^-126 (rounded up to 2^-126); its neighbours; gates around exp's thresholds.
        in.x = {0x1.474972p+0f, 0x1.474972p+0f, 0x1.474970p+0f, 0x1.474974p+0f, 87.33654f, -87.33654f, 88.72284f,
                -100.0f, 104.0f, -104.5f, 3e38f, -3e38f, 0.0f, -0.0f, 0x1p-140f};
        in.y = {0x1p-126f, -0x1p-126f, 0x1p-126f, 0x1p-126f, 0x1p-126f, 1.0f, 2.0f, 1e30f, -1.0f, 1e38f, 2.0f, 2.0f,
                1.0f, 1.0f, 1e30f};
      } else if (c.op == op_kind::geglu || c.op == op_kind::swiglu_oai || c.op == op_kind::softcap ||
                 c.op == op_kind::scale) {
        // Zeros of both signs, subnormals, exp's thresholds (-z near 87.3, 88.7, 100, -104), the
        // swiglu_oai clamps (7 and just past it), the soft cap's saturation, products near 2^-126
        // and overflow.
        in.x = {0.0f, -0.0f, 0x1p-140f, -0x1p-149f, 87.33654f, -87.33654f, 88.72284f, -100.0f, 104.0f, -104.5f,
                7.0f, 7.0000005f, -7.0000005f, 3e38f, -3e38f, 0x1p-117f};
        in.y = {1.0f, 1.0f, 1e30f, 1.0f, 0x1p-126f, -0x1p-126f, 2.0f, 1e30f, -1.0f, 1e38f, 7.0f, -8.0f, 6.9999995f,
                2.0f, 2.0f, 0x1p-10f};
      } else {  // rms_norm: ties in the squares; zero and subnormal-only groups; magnitudes near 2^-64
        in.x = {1.0f, std::ldexp(1.0f + std::ldexp(1.0f, -10), -20), 0.0f, -0.0f, 0x1p-140f, -0x1p-149f,
                TIE_A, TIE_A, -TIE_A, TIE_A};
        if (c.weighted) in.y = {1.0f, TIE_B};
      }
      return;
    case pattern::silu_range: case pattern::silu_bits:
      in.x.resize(static_cast<size_t>(n));
      in.y.assign(static_cast<size_t>(n), 1.0f);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t b = static_cast<uint32_t>(i) * 4093u;
        in.x[static_cast<size_t>(i)] = c.pat == pattern::silu_range
                                           ? -100.0f + 200.0f * static_cast<float>(i) / static_cast<float>(n)
                                           : (b & 0x7f800000u) == 0x7f800000u ? 0.0f : float_of(b);
      }
      return;
    case pattern::ties: case pattern::tie_pair:
      in.x.resize(static_cast<size_t>(n));
      for (float& v : in.x)
        v = std::ldexp(1.0f + std::ldexp(1.0f, -static_cast<int>(r.range(0, 23))), static_cast<int>(r.range(-30, 0)));
      if (c.pat == pattern::tie_pair) in.x = {1.0f, std::ldexp(1.0f + std::ldexp(1.0f, -10), -20)};
      if (c.weighted) in.y = draw(r, c.d1, c.group);
      return;
    case pattern::sum_tie:
      // Squares 2^57 + 2 m1^2 + o^2 / 2 on the grid of n = 8: the last term is a tie that rounds to
      // even, leaving the sum halfway between two floats (rounded to even: down).
      in.x = {1.0f, std::ldexp(8393718.0f, -28), std::ldexp(16109081.0f, -29), 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      return;
    case pattern::rsqrt_sweep:
      in.x.resize(static_cast<size_t>(n));
      for (int64_t s = 0; s < c.rows; ++s) {
        const int e = static_cast<int>(s % 254) - 126;
        in.x[static_cast<size_t>(2 * s)] = std::ldexp(1.0f + r.uniform(), e / 2) * (s & 1 ? -1.0f : 1.0f);
        in.x[static_cast<size_t>(2 * s + 1)] = std::ldexp(1.0f + r.uniform(), e / 2 - static_cast<int>(r.range(0, 30)));
      }
      return;
    default: break;
  }
  in.x = draw(r, c.d0, n);
  if (c.op == op_kind::softcap || c.op == op_kind::scale) return;  // one input
  if (c.op == op_kind::rms_norm) {
    if (c.weighted) in.y = draw(r, c.d1, c.group);
    if (c.pat == pattern::zero_row && c.rows > 1) std::fill(in.x.begin() + c.cols, in.x.begin() + 2 * c.cols, 0.0f);
    return;
  }
  in.y = draw(r, c.d1, c.op == op_kind::add_bias ? c.cols : n);
  // NaN never meets NaN in one element (which payload survives is the compiler's operand order).
  for (size_t i = 0; i < in.y.size() && c.op != op_kind::add_bias; ++i)
    if (in.y[i] != in.y[i]) in.x[i] = 1.5f;
}

inline void rope_inputs(const op_case& c, test_rng& r, op_inputs& in) {
  const int64_t width = c.n_head * c.head_dim;
  if (c.pat == pattern::sentinels) {
    // x0 * c on the tie just below 2^-126 (either sign) with x1 = 0; huge values; signed zeros; a
    // subnormal input. The table rows are made by hand.
    in.x = {TIE_A, 0.0f, -TIE_A, -0.0f, 3e38f, -3e38f, -0.0f, 0x1p-130f};
    in.tables = {TIE_B, 1.0f, -TIE_B, 0.5f, TIE_B, 1.0f, -TIE_B, 0.5f};
    return;
  }
  in.tables.resize(static_cast<size_t>(c.rows * c.n_rot));
  for (int64_t row = 0; row < c.rows; ++row) {
    const int64_t pos = c.positions.empty() ? r.range(0, 100000) : c.positions[static_cast<size_t>(row)];
    kernels::rope_table_row(pos, c.n_rot, 10000.0, 1.0, nullptr, in.tables.data() + row * c.n_rot);
  }
  in.x = draw(r, c.d0, c.rows * width);
  for (int64_t i = 0; i < c.rows * width; ++i)  // dimensions >= n_rot pass through: no subnormal there
    if (i % c.head_dim >= c.n_rot) in.x[static_cast<size_t>(i)] = numerics::flush(in.x[static_cast<size_t>(i)]);
}

inline void kv_inputs(const op_case& c, test_rng& r, op_inputs& in) {
  const int64_t width = c.n_head_kv * c.head_dim;
  in.x = draw(r, c.d0, c.rows * width, c.head_dim);
  in.y = draw(r, c.d1, c.rows * width, c.head_dim);
  if (c.pat == pattern::zero_block) std::fill(in.x.begin(), in.x.begin() + std::min<int64_t>(width, 40), 0.0f);
}

// Score-crafting vectors of head_dim 64: block 0 of q and of k are orthogonal (q nonzero only at
// 0, k only at 1), so they fix the block exponents but add nothing; block 1 has q = (16384, 0,
// q2, 1, 0 ...) 2^eq and k = (0, 16384, k2, k3, 0 ...) 2^ek, so the score's integer is q2 k2 + k3.
inline void crafted_query(int e0q, int eq, int q2, float* q) {
  std::fill(q, q + 64, 0.0f);
  q[0] = std::ldexp(16384.0f, e0q);
  q[32] = std::ldexp(16384.0f, eq);
  q[34] = std::ldexp(static_cast<float>(q2), eq);
  q[35] = std::ldexp(1.0f, eq);
}

inline void crafted_key(int e0k, int ek, int k2, int k3, float* k) {
  std::fill(k, k + 64, 0.0f);
  k[1] = std::ldexp(16384.0f, e0k);
  k[33] = std::ldexp(16384.0f, ek);
  k[34] = std::ldexp(static_cast<float>(k2), ek);
  k[35] = std::ldexp(static_cast<float>(k3), ek);
}

inline void attention_inputs(const op_case& c, test_rng& r, op_inputs& in) {
  const int64_t hd = c.head_dim, n_q = static_cast<int64_t>(c.n_kv.size());
  const int64_t kvw = c.n_head_kv * hd;
  in.x.assign(static_cast<size_t>(c.n_cells * kvw), 0.0f);
  in.y = in.x;
  in.q.assign(static_cast<size_t>(n_q * c.n_head * hd), 0.0f);
  for (int64_t i = 0; i < n_q * c.n_head; ++i) {
    const std::vector<float> v = draw(r, c.d0, hd);
    std::copy(v.begin(), v.end(), in.q.begin() + i * hd);
  }
  const int64_t dominant_at = c.n_cells > 0 ? r.range(0, c.n_cells - 1) : 0;
  const std::vector<float> first = draw(r, c.d1, hd);
  for (int64_t t = 0; t < c.n_cells; ++t) {
    // crafted keys: the same for every head of a position
    std::vector<float> crafted(static_cast<size_t>(hd));
    if (c.pat == pattern::scores_near_min_normal) {
      // T = 2^24 + k3 or 2^25 + k3 shifted by -1 .. 1 bits onto grids 2^-153 .. 2^-149: scores on
      // both sides of 2^-126 ((2^25 - 1) 2^-151 rounds up to it), which kq_scale 2^126 turns into
      // weights that differ.
      const int e0k = -69 + static_cast<int>(t % 5), shift = static_cast<int>(t / 5 % 3) - 1;
      crafted_key(e0k, e0k - 8 + shift, t / 105 == 0 ? 8192 : 16384, static_cast<int>(t / 15 % 7) - 3, crafted.data());
    } else if (c.pat == pattern::score_ties) {
      // k2 = 1: T = q2 + k3 is small and shifted right by 1 .. 4 bits: ties are frequent.
      const int ek = -7 - static_cast<int>(r.range(0, 3));
      crafted_key(0, ek, 1, static_cast<int>(r.range(-40, 40)), crafted.data());
    }
    for (int64_t h = 0; h < c.n_head_kv; ++h) {
      float* k = in.x.data() + (t * c.n_head_kv + h) * hd;
      float* v = in.y.data() + (t * c.n_head_kv + h) * hd;
      std::vector<float> kd = draw(r, c.d1, hd);
      if (c.pat == pattern::equal_scores) kd = first;
      if (c.pat == pattern::dominant && t == dominant_at) kd = draw(r, dist{.lo = 20, .hi = 20}, hd);
      if (c.pat == pattern::scores_near_min_normal || c.pat == pattern::score_ties) kd = crafted;
      if (c.pat == pattern::value_shifts) for (float& e : kd) e = 1.0f + 0.01f * r.normal();
      std::copy(kd.begin(), kd.end(), k);
      std::vector<float> vd = draw(r, c.d2, hd);
      if (c.pat == pattern::value_shifts) {  // V exponents 20 .. -59: left shifts, every right shift, ties
        const int e0 = 20 - static_cast<int>(t % 80);
        for (float& e : vd) e = std::ldexp(static_cast<float>(r.range(-32767, 32767)), e0 - 15);
      }
      std::copy(vd.begin(), vd.end(), v);
    }
  }
  for (int64_t row = 0; row < n_q; ++row) {
    float* q = in.q.data() + row * c.n_head * hd;
    for (int64_t h = 0; h < c.n_head; ++h) {
      if (c.pat == pattern::value_shifts) for (int64_t i = 0; i < hd; ++i) q[h * hd + i] = r.normal();
      if (c.pat == pattern::scores_near_min_normal) crafted_query(-68, -76, 2048, q + h * hd);
      if (c.pat == pattern::score_ties) crafted_query(0, -10, 16, q + h * hd);
    }
    if (c.pat == pattern::zero_queries)
      std::fill(q, q + (c.n_kv[static_cast<size_t>(row)] % 2 ? c.n_head : 1) * hd, -0.0f);
    if (c.pat == pattern::zero_q_rows && row != 1) std::fill(q, q + c.n_head * hd, 0.0f);
  }
  in.cells = kv_cells(in.x.data(), in.y.data(), c.n_cells, c.n_head_kv, hd);
}

}  // namespace op_detail

// The inputs of case c, drawn from its seed.
inline op_inputs make_inputs(const op_case& c) {
  test_rng r{c.seed};
  op_inputs in;
  switch (c.op) {
    case op_kind::matmul: op_detail::matmul_inputs(c, r, in); break;
    case op_kind::rope: op_detail::rope_inputs(c, r, in); break;
    case op_kind::kv_quantize: op_detail::kv_inputs(c, r, in); break;
    case op_kind::attention: op_detail::attention_inputs(c, r, in); break;
    default: op_detail::elementwise_inputs(c, r, in); break;
  }
  return in;
}

// ---- outputs ----

inline constexpr uint32_t SENTINEL = 0x7fc0dead;

// An output buffer of case c: GUARD sentinels, the payload, GUARD sentinels. The payload is
// sentinels too, or a copy of the input for the ops that work in place (add_bias, rope).
inline std::vector<float> output_buffer(const op_case& c, const op_inputs& in) {
  std::vector<float> out(static_cast<size_t>(output_size(c)) + 2 * GUARD, float_of(SENTINEL));
  if (c.op == op_kind::add_bias || c.op == op_kind::rope) std::copy(in.x.begin(), in.x.end(), out.begin() + GUARD);
  return out;
}

// The same buffer with its payload set to `payload` (an input an op runs in place on).
inline std::vector<float> output_buffer_with(const std::vector<float>& payload) {
  std::vector<float> out(payload.size() + 2 * GUARD, float_of(SENTINEL));
  std::copy(payload.begin(), payload.end(), out.begin() + GUARD);
  return out;
}

// kernels/ref's output of case c, guarded (throws what kernels/ref throws).
inline std::vector<float> reference_output(const op_case& c, const op_inputs& in) {
  std::vector<float> out = output_buffer(c, in);
  float* y = out.data() + GUARD;
  switch (c.op) {
    case op_kind::matmul: {
      std::vector<numerics::qvec> xs(static_cast<size_t>(c.n_tok));
      for (int64_t k = 0; k < c.n_tok; ++k) numerics::quantize_act(in.x.data() + k * c.n_in, c.n_in, xs[static_cast<size_t>(k)]);
      kernels::matmul_exact_ref(xs.data(), c.n_tok, c.type, in.w.data(), c.n_in, c.n_out, y, 0, c.n_out);
      break;
    }
    case op_kind::rms_norm:
      for (int64_t s = 0; s < c.rows * c.cols; s += c.group)
        kernels::rms_norm_f32_ref(in.x.data() + s, c.weighted ? in.y.data() : nullptr, c.group, c.eps, y + s);
      break;
    case op_kind::swiglu: kernels::swiglu_f32_ref(in.x.data(), in.y.data(), c.cols, y); break;
    case op_kind::geglu: kernels::geglu_f32_ref(in.x.data(), in.y.data(), c.cols, y); break;
    case op_kind::swiglu_oai:
      kernels::swiglu_oai_f32_ref(in.x.data(), in.y.data(), c.cols, c.alpha, c.limit, y);
      break;
    case op_kind::softcap: kernels::softcap_f32_ref(in.x.data(), c.cols, c.softcap, y); break;
    case op_kind::scale: kernels::scale_f32_ref(in.x.data(), c.cols, c.factor, y); break;
    case op_kind::add: kernels::add_f32_ref(in.x.data(), in.y.data(), c.cols, y); break;
    case op_kind::add_bias:
      for (int64_t r = 0; r < c.rows; ++r) kernels::add_f32_ref(y + r * c.cols, in.y.data(), c.cols, y + r * c.cols);
      break;
    case op_kind::rope:
      for (int64_t r = 0; r < c.rows; ++r)
        kernels::rope_f32_ref(y + r * c.n_head * c.head_dim, c.n_head, c.head_dim, c.n_rot,
                              c.positions.empty() ? 0 : c.positions[static_cast<size_t>(r)], c.neox,
                              in.tables.data() + r * c.n_rot);
      break;
    case op_kind::kv_quantize: {
      const std::vector<uint8_t> cells = kv_cells(in.x.data(), in.y.data(), c.rows, c.n_head_kv, c.head_dim);
      std::memcpy(y, cells.data(), cells.size());
      break;
    }
    case op_kind::attention: {
      // From K and V quantized block by block into arrays of their own (not the cells the
      // backends read), so that a misreading of the cell layout cannot cancel out.
      const int64_t hd = c.head_dim, nb = (hd + numerics::QBLOCK - 1) / numerics::QBLOCK;
      const int64_t kv_q = c.n_head_kv * nb * numerics::QBLOCK, kv_e = c.n_head_kv * nb;
      std::vector<int16_t> kq(static_cast<size_t>(c.n_cells * kv_q)), vq(kq.size());
      std::vector<int32_t> ke(static_cast<size_t>(c.n_cells * kv_e)), ve(ke.size());
      for (int64_t t = 0; t < c.n_cells; ++t)
        for (int64_t g = 0; g < c.n_head_kv; ++g)
          for (int64_t b = 0; b < nb; ++b) {
            const int64_t src = (t * c.n_head_kv + g) * hd + b * numerics::QBLOCK;
            const int n = static_cast<int>(std::min<int64_t>(numerics::QBLOCK, hd - b * numerics::QBLOCK));
            const int64_t qa = t * kv_q + (g * nb + b) * numerics::QBLOCK, ea = t * kv_e + g * nb + b;
            ke[static_cast<size_t>(ea)] = numerics::quantize_block(in.x.data() + src, n, kq.data() + qa);
            ve[static_cast<size_t>(ea)] = numerics::quantize_block(in.y.data() + src, n, vq.data() + qa);
          }
      for (size_t row = 0; row < c.n_kv.size(); ++row)
        for (int64_t h = 0; h < c.n_head; ++h) {
          const int64_t g = h / (c.n_head / c.n_head_kv);
          const kernels::kv_head_view kv{kq.data() + g * nb * numerics::QBLOCK, ke.data() + g * nb, kv_q, kv_e};
          const kernels::kv_head_view vv{vq.data() + g * nb * numerics::QBLOCK, ve.data() + g * nb, kv_q, kv_e};
          const int64_t at = (static_cast<int64_t>(row) * c.n_head + h) * hd;
          kernels::attention_exact_ref(in.q.data() + at, hd, kv, vv, c.n_kv[row], c.kq_scale, y + at, c.softcap,
                                       c.sinks.empty() ? nullptr : &c.sinks[static_cast<size_t>(h)]);
        }
      break;
    }
  }
  return out;
}

// A case ready to run: its inputs and kernels/ref's guarded output, or, where kernels/ref refuses
// the inputs (input_error), why; a backend must then refuse them too, or skip the case saying so.
struct prepared_case {
  op_inputs in;
  std::vector<float> want;
  std::string refused;
};

inline prepared_case prepare(const op_case& c) {
  // The table's consecutive cases of one attention cache under several kq_scales share their
  // inputs (their seed): drawn once.
  static thread_local uint64_t last_seed = 0;
  static thread_local op_inputs last;
  prepared_case p;
  if (c.op == op_kind::attention && c.seed == last_seed) {
    p.in = last;
  } else {
    p.in = make_inputs(c);
    if (c.op == op_kind::attention) {
      last_seed = c.seed;
      last = p.in;
    }
  }
  try {
    p.want = reference_output(c, p.in);
  } catch (const input_error& e) {
    p.refused = e.what();
  }
  return p;
}

// For a backend that mirrors kernels/ref's input checks (kernels/cpu): nullopt when run() gives
// the reference's bits, or refuses (input_error) what kernels/ref refused; else what differs.
template <typename F>
std::optional<std::string> mismatch(const prepared_case& p, F&& run) {
  if (!p.refused.empty()) {
    try {
      run();
    } catch (const input_error&) {
      return std::nullopt;
    }
    return "kernels/ref refuses the inputs (" + p.refused + "), the backend does not";
  }
  const std::optional<difference> d = first_difference(p.want, run());
  if (!d) return std::nullopt;
  return d->to_string();
}

// What a backend's run over the table compared and skipped, for its test's closing MESSAGE (a
// skip is always said, with its reason).
struct table_tally {
  int64_t compared = 0;
  std::map<std::string, int64_t> skipped;  // reason -> cases

  void skip(const std::string& why) { ++skipped[why]; }
  std::string to_string(const std::string& what) const {
    std::string s = what + ": " + std::to_string(compared) + " cases of the op table compared";
    for (const auto& [why, n] : skipped) s += "; " + std::to_string(n) + " skipped (" + why + ")";
    return s;
  }
};

// The cases a backend leaves out of the table, each skip tallied with its reason.
enum skips : unsigned {
  skips_none = 0,
  skips_nonfinite = 1,  // NaN payloads are the hardware's (gpu.h): the GPU backends and CUDA's twins
  skips_refused = 2,    // no input checks of kernels/ref's: the devices and CUDA's twins
  skips_gpu_scale = 4,  // one std::thread per CUDA thread: the thread emulation
  skips_gpu_types = 16,  // weight types whose row in gguf/weight_types.h says the GPUs do not decode them
};
inline constexpr unsigned GPU_SKIPS = skips_nonfinite | skips_refused | skips_gpu_types;

// Why a backend with `skip` leaves case c out before its inputs are drawn; "" when it does not.
inline std::string skip_reason(const op_case& c, unsigned skip) {
  if ((skip & skips_gpu_scale) && c.gpu_scale) return "sized for a GPU: millions of std::threads here";
  if ((skip & skips_gpu_types) && c.op == op_kind::matmul && !(gguf::weight_type_of(c.type) && gguf::weight_type_of(c.type)->gpu))
    return type_name(c.type) + " weights: not decoded by the devices (gguf/weight_types.h; upload_weight refuses them)";
  if ((skip & skips_nonfinite) && c.nonfinite) return "non-finite inputs: NaN payloads are the hardware's (gpu.h)";
  return "";
}

inline constexpr const char* SKIP_REFUSED = "kernels/ref refuses the inputs, and this backend has no such check";

// Case c prepared for a backend that runs the ops `ops` (counted as compared), or nullopt where c
// is of another op or the backend skips it. A backend that does not skip refused cases gets them
// with `refused` set: it must refuse them too.
inline std::optional<prepared_case> prepare_for(const op_case& c, std::initializer_list<op_kind> ops, unsigned skip,
                                                table_tally& tally) {
  if (std::find(ops.begin(), ops.end(), c.op) == ops.end()) return std::nullopt;
  if (const std::string why = skip_reason(c, skip); !why.empty()) {
    tally.skip(why);
    return std::nullopt;
  }
  prepared_case p = prepare(c);
  if ((skip & skips_refused) && !p.refused.empty()) {
    tally.skip(SKIP_REFUSED);
    return std::nullopt;
  }
  ++tally.compared;
  return p;
}

}  // namespace detaudit::test
