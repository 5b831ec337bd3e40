// The exact matmul (docs/precision-contract.md section 7): y(tok, r) = the dot of token tok's
// quantized activation with weight row r, bit for bit matmul_exact_ref.
//
// One workgroup per (row, tile of up to 8 tokens): its threads take the row's blocks in turn,
// decode each weight block once for the whole tile, add each block's two terms rounded to the
// token's grid G into int64 partial sums, and reduce them in shared memory (integer sums: any
// split gives the same total). Ew is the row's bound computed at upload, max_exp the token's.
// Non-goals: int8 dot units, subgroup reductions.
#version 450
#include "exact.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer w_buf { uint w_words[]; };  // (n_out) rows of row_bytes
layout(std430, binding = 1) readonly buffer b_buf { int row_bound[]; };  // (n_out) Ew
layout(std430, binding = 2) readonly buffer q_buf { int act_q[]; };      // (n_tok, nb * 32)
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
shared int64_t s_acc[TILE * 64u];

// round_shift(t1, p1 - g) + round_shift(t2, p2 - g) of activation block (tok, b) against w.
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
  const int64_t t1 = int64_t(w.d_mant) * (int64_t(w.scale[0]) * qa0 + int64_t(w.scale[1]) * qa1);
  const int64_t t2 = int64_t(w.m_mant) * (int64_t(w.mcoef[0]) * int64_t(sa0) + int64_t(w.mcoef[1]) * int64_t(sa1));
  int64_t r = 0;
  if (t1 != 0) r += round_shift(t1, e_a + w.d_exp - g);
  if (t2 != 0) r += round_shift(t2, e_a + w.m_exp - g);
  return r;
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint r = pc.row0 + gl_WorkGroupID.x;
  const uint t0 = pc.tok0 + gl_WorkGroupID.y * TILE;
  const uint nt = min(TILE, pc.n_tok - t0);
  const int ew = row_bound[r];
  const int shift_c = 44 + clog2(int64_t(2u * pc.nb)) - 62;
  int g[TILE];
  bool live[TILE];
  int64_t acc[TILE];
  for (uint j = 0u; j < TILE; ++j) {
    const int mx = j < nt ? act_max[t0 + j] : EXP_ZERO;
    live[j] = mx != EXP_ZERO && ew != EXP_ZERO;
    g[j] = live[j] ? mx + ew + shift_c : 0;
    acc[j] = 0;
  }
  for (uint b = lid; b < pc.nb; b += 64u) {
    wblock w;
    wblock_decode(pc.type, r * pc.row_bytes, b, int(min(32u, pc.n_in - 32u * b)), w);
    for (uint j = 0u; j < nt; ++j) {
      const int e_a = act_e[(t0 + j) * pc.nb + b];
      if (live[j] && e_a != EXP_ZERO) acc[j] += block_fixed(t0 + j, b, e_a, g[j], w);
    }
  }
  for (uint j = 0u; j < TILE; ++j) s_acc[j * 64u + lid] = acc[j];
  barrier();
  for (uint stride = 32u; stride > 0u; stride >>= 1u) {
    if (lid < stride) {
      for (uint j = 0u; j < TILE; ++j) s_acc[j * 64u + lid] += s_acc[j * 64u + lid + stride];
    }
    barrier();
  }
  if (lid < nt) {
    y[(t0 + lid) * pc.n_out + r] = live[lid] ? fixed_to_f32(s_acc[lid * 64u], g[lid]) : 0.0;
  }
}
