// Fast CPU kernels of `--numerics exact`: the same results as kernels/ref, bit for bit, faster.
//
// Goals: each kernel here has a twin in kernels/ref with the same contract; the tests compare the
// two by memcmp on every supported instruction set, for every weight type and for inputs that
// exercise every rounding branch (docs/precision-contract.md is the specification of both). Each
// kernel has a portable scalar variant and SIMD variants chosen at run time (AVX2, AVX-512 with
// VNNI); the variant never changes a bit, only the speed, because every reduction is an integer
// sum and every remaining float operation is the same correctly rounded sequence.
// Non-goals: float numerics (backends/ops_float.cpp), GPUs (kernels/vulkan, kernels/cuda).
//
// Thread-safety: pure functions; concurrent calls may write disjoint outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/dtype.h"
#include "kernels/ref/ref.h"
#include "numerics/exact.h"

namespace detaudit::kernels::cpu {

// ---- instruction sets ----

enum class isa { scalar, avx2, avx512 };

const char* isa_name(isa i);          // "scalar", "avx2", "avx512"
bool isa_supported(isa i);            // compiled in and the CPU has it (avx512: F, BW, DQ, VL, VNNI)
// The fastest supported set, unless the environment variable DETAUDIT_CPU_ISA names another
// supported one (scalar, avx2, avx512). An unknown or unsupported name throws input_error.
isa isa_default();
// Every supported set, scalar first (for tests and benchmarks).
std::vector<isa> isa_all_supported();

// ---- activation blocks ----

// numerics::quantize_block, bit for bit (the same q and exponent), faster for full blocks: their
// AVX2 form wherever the CPU has AVX2, whatever isa_default() says (the integers are the same;
// matmul_internal.h has both forms for the tests), as in act_pack_build.
int32_t quantize_block_cpu(const float* x, int n, int16_t* q);

// ---- matmul ----

// True when matmul_exact_cpu has a fast path for weight type t (every integer block type:
// q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K mxfp4). Other types use matmul_exact_ref.
bool matmul_fast_type(gguf::dtype t);

// Per-row exponent bounds of a weight matrix: out[r] = wblock_exp_bound of row r (every block
// decoded), for r in [row_begin, row_end). A row's bound fixes its accumulator grid; it is a
// property of the weights alone, so callers compute it once per tensor and keep it.
void weight_row_bounds(gguf::dtype t, const uint8_t* w, int64_t n_in, int64_t row_begin,
                       int64_t row_end, int32_t* out);

// Activations prepared once per matmul input, shared read-only by every thread.
struct act_pack {
  int64_t n_tokens = 0;
  int64_t n_in = 0;
  int64_t n_blocks = 0;             // n_in / 32
  std::vector<int16_t> q;           // (n_tokens, n_blocks * 32) the quantized rows
  std::vector<int32_t> max_exp;     // (n_tokens) qvec::max_exp
  std::vector<int32_t> exp;         // (n_tokens, n_blocks) block exponents (EXP_ZERO: zero block)
  std::vector<int32_t> half_sum;    // (n_tokens, n_blocks, 2) sums of elements 0..15 and 16..31
  std::vector<int32_t> block_sum;   // (n_tokens, n_blocks) the two half sums added
  std::vector<int64_t> shift;       // (n_tokens, n_blocks) matmul_shift_const(n_blocks) + exp - max_exp
  // The same shifts as powers of two for the AVX2 kernels' epilogues (matmul_avx2_common.h, "rounding
  // through double"): 2^(shift - 51), the unit of the rounding binade [2, 4) taken in, or 0 for a
  // zero block or a shift below -971 (every term of such a block rounds to 0); the half sums and
  // the block sum times it (exact: integers below 2^21 times a power of two).
  std::vector<double> scale;         // (n_tokens, n_blocks)
  std::vector<double> half_scaled;   // (n_tokens, n_blocks, 2)
  std::vector<double> sum_scaled;    // (n_tokens, n_blocks)
  // For the AVX2 prompt kernels' bounded pass (matmul_avx2.cpp): the sum of the block's |q| times
  // scale (+inf where the block has a nonzero element but scale is 0, which refuses that pass),
  // and ROUND_MAGIC / scale (ROUND_MAGIC where scale is 0): the rounding constant moved to the
  // binade whose unit is the block's grid, so that the term's last product is the rounding.
  std::vector<double> abs_scaled;    // (n_tokens, n_blocks)
  std::vector<double> magic_div;     // (n_tokens, n_blocks)
  // Only when n_tokens <= GEMV_PACKED_MAX_TOKENS (the packed generation kernels' byte products):
  // each run of four elements q[4k .. 4k + 3] as its low bytes (unsigned) and its high bytes
  // (signed, q >> 8), so that q = 256 hi + lo.
  std::vector<uint32_t> bytes;      // (n_tokens, n_blocks, 8, 2) low bytes, high bytes of each four
  // Also only then, for the AVX2 generation kernels: each block's elements in the order 0, 2, ..,
  // 30, 1, 3, .., 31, so that the even and odd bytes of a 16-bit lane of codes pair with
  // consecutive activations (a block's sum does not depend on the order of its products).
  std::vector<int16_t> q_eo;        // (n_tokens, n_blocks * 32)
  // Also only then, for the AVX2 packed kernels (vpmaddubsw on one row per 16-bit lane): per run of
  // four, the byte pairs (lo0, lo1), (lo2, lo3), (hi0, hi1), (hi2, hi3) of `bytes`, each 16-bit
  // pair twice in its word, so that one 32-bit broadcast puts the pair in every 16-bit lane.
  std::vector<uint32_t> pairs;      // (n_tokens, n_blocks, 8, 4)
  // With them, the sums of the low bytes (unsigned) of elements 0..15 and 16..31 of each block.
  std::vector<int32_t> lo_half;     // (n_tokens, n_blocks, 2)
};

// Quantizes rows x (n_tokens, n_in) like numerics::quantize_act into p. n_in % 32 == 0.
void act_pack_build(const float* x, int64_t n_tokens, int64_t n_in, act_pack& p);
// The same in two steps, so that threads can quantize disjoint token ranges: act_pack_init sizes
// p, act_pack_rows fills tokens [t0, t1) from x (row t at x + t * n_in).
void act_pack_init(int64_t n_tokens, int64_t n_in, act_pack& p);
void act_pack_rows(const float* x, int64_t t0, int64_t t1, act_pack& p);

// y[tok * n_out + r] for r in [row_begin, row_end) and every token, bit-identical to
// matmul_exact_ref on the same activations. t must satisfy matmul_fast_type; row_bounds[r] is
// weight_row_bounds of row r (indexed by absolute row). Other entries of y are untouched.
void matmul_exact_cpu(isa i, const act_pack& x, gguf::dtype t, const uint8_t* w, int64_t n_out,
                      const int32_t* row_bounds, float* y, int64_t row_begin, int64_t row_end);

// ---- weights repacked at load time for generation ----

// q4_0, q4_K, q5_K and q6_K rows repacked into groups of 16 rows (the rows of one group interleaved, as in a
// panel), so that the generation kernel sums 16 rows per vector lane instead of reducing every
// block across lanes. The codes of a block come in eight runs of four elements (4k .. 4k + 3),
// laid out so that one 32-bit lane per row holds a run's four codes as bytes, the operand of a
// byte dot product (vpdpbusd; on AVX2, one 16-bit lane per row holds two of them for vpmaddubsw).
// Per group and super-block, one tile:
//   q4_K (2400 bytes, q4_K itself: 16 x 144 = 2304)
//     codes[8 blocks][8 runs][16 rows][2] u8  q[4k] | q[4k + 2] << 4, q[4k + 1] | q[4k + 3] << 4
//     sc[8][16], mn[8][16]                u8  the six-bit scale and min of each block
//     dm[16], mm[16]                      i16 d_mant and m_mant (= -dmin mantissa) of wblock
//     dsh[16], msh[16]                    i8  d_exp - bound and m_exp - bound (0 for a zero scale)
//   q5_K (2912 bytes, q5_K itself: 16 x 176 = 2816): q4_K's, with after the codes
//     fifth[8 blocks][8 runs]             u64 bit 4r + i: bit 4 of element 4k + i of row r
//   q6_K (3392 bytes, q6_K itself: 16 x 210 = 3360)
//     lo[8][8 runs][16 rows][2]           u8  the low nibbles, as q4_K's codes
//     hi[8 blocks][8 runs][2 planes]      u64 bit 4r + i of plane p: bit p of the high pair of
//                                             element 4k + i of row r
//     sc[8][2][16]                        i8  the sub-block scale of each half block
//     dm[16] i16, dsh[16] i8, 16 bytes of padding
//   q4_0 (2432 bytes per 16 rows x 8 blocks, q4_0 itself: 16 x 8 x 18 = 2304)
//     codes[8 blocks][8 runs][16 rows][2] u8  the nibbles u, as q4_K's (code = u - 8)
//     dm[8][16] i16, dsh[8][16] i8         each block's d_mant and d_exp - bound
// (q6_K's code is lo + 16 hi - 32; the kernel multiplies lo + 16 hi and takes 32 times the
// activation half sums off, the same integer.) Rows past n_rows are zero.
// A pack is made for one instruction set (row_pack::for_isa). AVX2 has no byte masks, so its q5_K
// and q6_K tiles hold the high bits in the byte order of the codes instead (same sizes and
// offsets; byte 2r + e of a 32-byte vector belongs to row r, e = 0 pairing with the low nibbles
// of a run's bytes, e = 1 with the high ones as laid out above: elements 4k + e and 4k + 2 + e):
//   q5_K fifth[8 blocks][2 groups of runs 4g .. 4g + 3][32] u8  bits 2m and 2m + 1 of byte 2r + e:
//                                       bit 4 of elements 4k + e and 4k + 2 + e, k = 4g + m
//   q6_K hi[8 blocks][4 pairs of runs 2p, 2p + 1][32] u8  bits 4m .. 4m + 3 of byte 2r + e: the
//                                       high pairs of elements 4k + e and 4k + 2 + e, k = 2p + m
// and their q4_0 tiles are smaller (2336 bytes, a multiple of 32 so that no code load splits a
// cache line), with each block's fp16 scale as it stands and the row's bound once:
//   q4_0 codes[8 blocks][8 runs][16 rows][2] u8 as above
//        d[8][16]                      fp16 each block's d (d_mant * 2^d_exp exactly)
//        nb[16]                        i8  -bound (0 where the row's bound is EXP_ZERO), 16 bytes
//                                          of padding
// (d * 2^-bound = d_mant * 2^(d_exp - bound), the other layout's term, exactly). q8_0 keeps its mapped
// rows: in its tiles (4480 bytes) generation measured 10% slower than the row kernel
// (docs/performance.md).
bool row_pack_type(gguf::dtype t);     // q4_0, q4_K, q5_K and q6_K (rows of whole 256s)
int64_t row_pack_tile_bytes(gguf::dtype t, isa i);  // the tile's bytes in a pack made for i

struct row_pack {
  gguf::dtype type = gguf::DTYPE_Q4_K;
  isa for_isa = isa::avx512;  // the kernels' instruction set (the layout of q5_K and q6_K high bits)
  int64_t n_rows = 0;
  int64_t n_in = 0;
  int64_t n_groups = 0;  // ceil(n_rows / 16)
  int64_t n_super = 0;   // n_in / 256 (q4_0: eight blocks per tile)
  int64_t tile_bytes = 0;
  uint8_t* data = nullptr;  // n_groups * n_super tiles, 64-byte aligned
  row_pack() = default;
  row_pack(const row_pack&) = delete;
  row_pack& operator=(const row_pack&) = delete;
  row_pack(row_pack&& o) noexcept;
  row_pack& operator=(row_pack&& o) noexcept;
  ~row_pack();
  uint64_t bytes() const { return static_cast<uint64_t>(n_groups * n_super * tile_bytes); }
};

// Sizes p for an (n_rows, n_in) matrix of type t (row_pack_type, n_in % 256 == 0) for the kernels
// of instruction set i (row_pack_kernel(t, i), else input_error) and repacks the
// row groups [g0, g1) of w; row_bounds are weight_row_bounds of every row. False when a block of
// those groups has a non-finite fp16 scale (the caller keeps the mapped layout; the matmul then
// reports it). Threads may fill disjoint group ranges after one row_pack_init.
void row_pack_init(gguf::dtype t, int64_t n_rows, int64_t n_in, isa i, row_pack& p);
bool row_pack_groups(const uint8_t* w, const int32_t* row_bounds, int64_t g0, int64_t g1, row_pack& p);

// True when matmul_exact_cpu_packed has a kernel for type t on instruction set i (supported here):
// every row_pack_type on avx512 and avx2; never on scalar.
bool row_pack_kernel(gguf::dtype t, isa i);

// matmul_exact_cpu for x.n_tokens <= GEMV_PACKED_MAX_TOKENS on a repacked matrix: rows
// [row_begin, row_end) (row_begin a multiple of 16), bit for bit the same y. Needs
// row_pack_kernel(w.type, i) and a pack made for i (w.for_isa); throws input_error otherwise.
constexpr int64_t GEMV_PACKED_MAX_TOKENS = 4;
void matmul_exact_cpu_packed(isa i, const act_pack& x, const row_pack& w, const int32_t* row_bounds, float* y,
                             int64_t row_begin, int64_t row_end);

// ---- attention ----

// attention_exact_ref, bit for bit: one query token, one head, over n_kv cached positions.
// softcap > 0: each score capped as attention_exact_ref does (softcap_f32_cpu over the scores).
// sink: the head's attention sink or null, as attention_exact_ref.
void attention_exact_cpu(isa i, const float* q, int64_t head_dim, const kv_head_view& k,
                         const kv_head_view& v, int64_t n_kv, float kq_scale, float* out,
                         float softcap = 0.0f, const float* sink = nullptr);

// The same for n_heads query heads that share one KV head (grouped-query attention): q and out
// are (n_heads, head_dim); head h's output is attention_exact_ref of q head h, bit for bit. The
// positions are visited in chunks for all heads at once, so each K and V line is read from the
// cache once per group instead of once per head. sinks: null, or the n_heads heads' sinks.
void attention_exact_cpu_heads(isa i, const float* q, int64_t n_heads, int64_t head_dim,
                               const kv_head_view& k, const kv_head_view& v, int64_t n_kv,
                               float kq_scale, float* out, float softcap = 0.0f, const float* sinks = nullptr);

// ---- element-wise ----

// rms_norm_f32_ref, swiglu_f32_ref and add_f32_ref (kernels/ref/ref.h), bit for bit, with the
// same errors (input_error from the reference for n < 1, eps not > 0, or a non-finite x in RMS
// norm, before anything is written). out may equal an input (w included) but not overlap it
// otherwise; w == nullptr means no weight. Throws input_error when i is not supported.
void rms_norm_f32_cpu(isa i, const float* x, const float* w, int64_t n, float eps, float* out);
void swiglu_f32_cpu(isa i, const float* gate, const float* up, int64_t n, float* out);
void add_f32_cpu(isa i, const float* a, const float* b, int64_t n, float* out);
// geglu_f32_ref, scale_f32_ref and softcap_f32_ref, bit for bit (softcap: the reference's error
// for a cap that is not a positive finite normal float). out may equal an input.
void geglu_f32_cpu(isa i, const float* gate, const float* up, int64_t n, float* out);
void scale_f32_cpu(isa i, const float* x, int64_t n, float s, float* out);
void softcap_f32_cpu(isa i, const float* x, int64_t n, float cap, float* out);
// swiglu_oai_f32_ref (gpt-oss's clamped SwiGLU), bit for bit. out may equal an input.
void swiglu_oai_f32_cpu(isa i, const float* gate, const float* up, int64_t n, float alpha, float limit, float* out);

}  // namespace detaudit::kernels::cpu
