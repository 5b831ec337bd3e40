// Quantized activation blocks (quantize_act.comp's int32-per-element q) repacked for
// matmul_dot8.comp: per block, the high bytes (a >> 8, signed) and the low bytes (a & 255,
// unsigned) four to a word, and the sums of elements 0..15 and 16..31. One invocation per
// (token, block).
#version 450
#include "exact.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer q_buf { int act_q[]; };     // (n_tok, nb * 32)
layout(std430, binding = 1) writeonly buffer h_buf { uint act_hi[]; };  // (n_tok, nb * 8)
layout(std430, binding = 2) writeonly buffer l_buf { uint act_lo[]; };  // (n_tok, nb * 8)
layout(std430, binding = 3) writeonly buffer s_buf { int act_hs[]; };   // (n_tok, nb * 2)

layout(push_constant) uniform push_t {
  uint n_blocks;  // n_tok * nb
} pc;

void main() {
  const uint blk = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (blk >= pc.n_blocks) return;
  for (uint h = 0u; h < 2u; ++h) {
    int sum = 0;
    for (uint k = 0u; k < 4u; ++k) {
      uint hi = 0u;
      uint lo = 0u;
      for (uint i = 0u; i < 4u; ++i) {
        const int a = act_q[blk * 32u + 16u * h + 4u * k + i];
        sum += a;
        hi |= uint((a >> 8) & 255) << (8u * i);
        lo |= uint(a & 255) << (8u * i);
      }
      act_hi[blk * 8u + 4u * h + k] = hi;
      act_lo[blk * 8u + 4u * h + k] = lo;
    }
    act_hs[blk * 2u + h] = sum;
  }
}
