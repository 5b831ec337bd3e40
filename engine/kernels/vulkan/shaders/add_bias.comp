#version 450
#include "exact.glsl"
// x(r, c) = flush(flush(x(r, c)) + flush(b(c))) in place; x: (rows, cols), b: (cols);
// n = rows * cols. Grid-stride loop.

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(push_constant) uniform P { uint n; uint cols; } pc;

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
    precise float s = flush_f(x[i]) + flush_f(b[i % pc.cols]);
    x[i] = flush_f(s);
  }
}
