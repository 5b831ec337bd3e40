#version 450
#include "exact.glsl"
// add_f32_ref: o[i] = flush(flush(a[i]) + flush(b[i])), i < n. Grid-stride loop: any group count.

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; } pc;

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
    precise float s = flush_f(a[i]) + flush_f(b[i]);
    o[i] = flush_f(s);
  }
}
