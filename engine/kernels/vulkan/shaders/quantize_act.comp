// numerics::quantize_act of rows of floats: int16 blocks (stored one per int32), block exponents
// and each row's max_exp, bit for bit.
//
// One workgroup per row; its threads take blocks in turn and reduce the row's max_exp in shared
// memory. The host has checked that every input is finite.
#version 450
#include "exact.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer xs_buf { uint x_bits[]; };  // (rows, n) floats
layout(std430, binding = 1) writeonly buffer q_buf { int q_out[]; };    // (rows, nb * 32)
layout(std430, binding = 2) writeonly buffer e_buf { int e_out[]; };    // (rows, nb)
layout(std430, binding = 3) writeonly buffer m_buf { int max_out[]; };  // (rows)

layout(push_constant) uniform push_t {
  uint n;     // row length
  uint nb;    // ceil(n / 32)
  uint row0;  // first row of this dispatch
} pc;

shared int s_max[64];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint row = pc.row0 + gl_WorkGroupID.x;
  int mx = EXP_ZERO;
  for (uint b = lid; b < pc.nb; b += 64u) {
    const uint len = min(32u, pc.n - 32u * b);
    const uint base = row * pc.n + 32u * b;
    uint amax = 0u;
    for (uint i = 0u; i < len; ++i) {
      const uint a = x_bits[base + i] & 0x7fffffffu;
      if (a >= 0x00800000u && a > amax) amax = a;
    }
    const int be = block_exp_from_amax_bits(amax);
    const uint qbase = (row * pc.nb + b) * 32u;
    for (uint i = 0u; i < 32u; ++i) {
      const bool live = i < len && be != EXP_ZERO;
      q_out[qbase + i] = live ? quantize_elem(uintBitsToFloat(x_bits[base + i]), be) : 0;
    }
    e_out[row * pc.nb + b] = be;
    mx = max(mx, be);
  }
  s_max[lid] = mx;
  barrier();
  for (uint stride = 32u; stride > 0u; stride >>= 1u) {
    if (lid < stride) s_max[lid] = max(s_max[lid], s_max[lid + stride]);
    barrier();
  }
  if (lid == 0u) max_out[row] = s_max[0];
}
