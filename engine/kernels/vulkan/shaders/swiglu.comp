#version 450
#include "exact.glsl"
// swiglu_f32_ref: o[i] = flush(silu_f32(gate[i]) * flush(up[i])), i < n. Grid-stride loop.

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer G { float gate[]; };
layout(std430, binding = 1) readonly buffer U { float up[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; } pc;

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
    precise float p = silu_f32(gate[i]) * flush_f(up[i]);
    o[i] = canon_nan_f(flush_f(p));
  }
}
