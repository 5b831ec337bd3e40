// The exact matmul (docs/precision-contract.md section 7): y(tok, r) = the dot of token tok's
// quantized activation with weight row r, bit for bit matmul_exact_ref. The body of matmul.comp
// (plain 32-bit integer products, every weight type) and of matmul_dot8.comp (MATMUL_DOT8: 4x8-bit
// integer dot products, integer block types only), included after exact.glsl.
//
// One invocation per (row, tile of up to 8 tokens), 64 rows per workgroup: it walks the row's
// blocks, decodes each weight block once for the whole tile, and adds each block's two terms
// rounded to the token's grid G into an int64 sum per token (integer sums: any order or split
// gives the same total). Ew is the row's bound computed at upload, max_exp the token's. (A
// workgroup per row with its threads over the blocks and a shared-memory reduction gave the same
// bits but cost about 0.17 ms per workgroup on lavapipe, where barriers are expensive.)
//
// The int8 path: an int16 activation a is hi * 256 + lo with hi = a >> 8 in [-128, 127] (signed)
// and lo = a & 255 in [0, 255] (unsigned), so q . a = 256 * sdot(q, hi) + sudot(q, lo) exactly for
// int8 codes q (|q| <= 128 for every integer block type; a 16-element half stays below 2^26).
// act_pack8.comp packs hi and lo four to a word and the two half sums of each block beforehand.
// Non-goals: subgroup reductions.

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer w_buf { uint w_words[]; };  // (n_out) rows of row_bytes
layout(std430, binding = 1) readonly buffer b_buf { int row_bound[]; };  // (n_out) Ew
#ifdef MATMUL_DOT8
// OpSDotKHR / OpSUDotKHR on packed 4x8-bit vectors (packed format 0): the first operand signed,
// the second signed / unsigned.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot_4x8(uint a, uint b, spirv_literal int packed_format);
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int sudot_4x8(uint a, uint b, spirv_literal int packed_format);
layout(std430, binding = 2) readonly buffer q_buf { uint act_hi[]; };   // (n_tok, nb * 8) packed
layout(std430, binding = 6) readonly buffer l_buf { uint act_lo[]; };   // (n_tok, nb * 8) packed
layout(std430, binding = 7) readonly buffer s_buf { int act_hs[]; };    // (n_tok, nb * 2) half sums
#else
layout(std430, binding = 2) readonly buffer q_buf { int act_q[]; };      // (n_tok, nb * 32)
#endif
layout(std430, binding = 3) readonly buffer e_buf { int act_e[]; };      // (n_tok, nb)
layout(std430, binding = 4) readonly buffer m_buf { int act_max[]; };    // (n_tok)
layout(std430, binding = 5) writeonly buffer y_buf { float y[]; };       // (n_tok, n_out)

layout(push_constant) uniform push_t {
  int type;        // gguf dtype id
  uint n_in;
  uint nb;         // ceil(n_in / 32)
  uint row_bytes;
  uint n_out;
  uint n_tok;
  uint row0;       // first row of this dispatch
  uint tok0;       // first token of this dispatch
} pc;

uint wb_word(uint i) { return w_words[i]; }
#include "wblock.glsl"

const uint TILE = 8u;

// round_shift(t1, p1 - g) + round_shift(t2, p2 - g) of one block from its half sums: qa0, qa1 of
// q * a and sa0, sa1 of a over elements 0..15 and 16..31.
int64_t block_terms(wblock w, int64_t qa0, int64_t qa1, int sa0, int sa1, int e_a, int g) {
  const int64_t t1 = int64_t(w.d_mant) * (int64_t(w.scale[0]) * qa0 + int64_t(w.scale[1]) * qa1);
  const int64_t t2 = int64_t(w.m_mant) * (int64_t(w.mcoef[0]) * int64_t(sa0) + int64_t(w.mcoef[1]) * int64_t(sa1));
  int64_t r = 0;
  if (t1 != 0) r += round_shift(t1, e_a + w.d_exp - g);
  if (t2 != 0) r += round_shift(t2, e_a + w.m_exp - g);
  return r;
}

#ifdef MATMUL_DOT8
uint pack4(int a, int b, int c, int d) {
  return uint(a & 255) | (uint(b & 255) << 8) | (uint(c & 255) << 16) | (uint(d & 255) << 24);
}

// The weight codes of a block packed four to a word (int8).
void pack_codes(wblock w, out uint wq[8]) {
  for (uint k = 0u; k < 8u; ++k) wq[k] = pack4(w.q[4u * k], w.q[4u * k + 1u], w.q[4u * k + 2u], w.q[4u * k + 3u]);
}

// block_terms of activation block (tok, b) from packed codes and packed activation halves.
int64_t block_fixed8(uint tok, uint b, int e_a, int g, wblock w, uint wq[8]) {
  const uint base = (tok * pc.nb + b) * 8u;
  int qa[2];
  for (uint h = 0u; h < 2u; ++h) {
    int s_hi = 0;
    int s_lo = 0;
    for (uint k = 4u * h; k < 4u * h + 4u; ++k) {
      s_hi += sdot_4x8(wq[k], act_hi[base + k], 0);
      s_lo += sudot_4x8(wq[k], act_lo[base + k], 0);
    }
    qa[h] = s_hi * 256 + s_lo;
  }
  const int sa0 = act_hs[(tok * pc.nb + b) * 2u];
  const int sa1 = act_hs[(tok * pc.nb + b) * 2u + 1u];
  return block_terms(w, int64_t(qa[0]), int64_t(qa[1]), sa0, sa1, e_a, g);
}
#else
// block_terms of activation block (tok, b) against w.
int64_t block_fixed(uint tok, uint b, int e_a, int g, wblock w) {
  const uint base = (tok * pc.nb + b) * 32u;
  int64_t qa0 = 0;
  int64_t qa1 = 0;
  int sa0 = 0;
  int sa1 = 0;
  for (uint i = 0u; i < 16u; ++i) {
    const int a = act_q[base + i];
    qa0 += int64_t(w.q[i] * a);
    sa0 += a;
  }
  for (uint i = 16u; i < 32u; ++i) {
    const int a = act_q[base + i];
    qa1 += int64_t(w.q[i] * a);
    sa1 += a;
  }
  return block_terms(w, qa0, qa1, sa0, sa1, e_a, g);
}
#endif

void main() {
  const uint r = pc.row0 + gl_WorkGroupID.x * 64u + gl_LocalInvocationID.x;
  if (r >= pc.n_out) return;
  const uint t0 = pc.tok0 + gl_WorkGroupID.y * TILE;
  const uint nt = min(TILE, pc.n_tok - t0);
  const int ew = row_bound[r];
  const int shift_c = DOT_TERM_BITS + clog2(int64_t(2u * pc.nb)) - ACC_BITS;
  int g[TILE];
  bool live[TILE];
  int64_t acc[TILE];
  for (uint j = 0u; j < TILE; ++j) {
    const int mx = j < nt ? act_max[t0 + j] : EXP_ZERO;
    live[j] = mx != EXP_ZERO && ew != EXP_ZERO;
    g[j] = live[j] ? mx + ew + shift_c : 0;
    acc[j] = 0;
  }
  for (uint b = 0u; b < pc.nb; ++b) {
    wblock w;
    wblock_decode(pc.type, r * pc.row_bytes, b, int(min(32u, pc.n_in - 32u * b)), w);
#ifdef MATMUL_DOT8
    uint wq[8];
    pack_codes(w, wq);
#endif
    for (uint j = 0u; j < nt; ++j) {
      const int e_a = act_e[(t0 + j) * pc.nb + b];
#ifdef MATMUL_DOT8
      if (live[j] && e_a != EXP_ZERO) acc[j] += block_fixed8(t0 + j, b, e_a, g[j], w, wq);
#else
      if (live[j] && e_a != EXP_ZERO) acc[j] += block_fixed(t0 + j, b, e_a, g[j], w);
#endif
    }
  }
  for (uint j = 0u; j < nt; ++j) y[(t0 + j) * pc.n_out + r] = live[j] ? fixed_to_f32(acc[j], g[j]) : 0.0;
}
