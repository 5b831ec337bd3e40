#version 450
#include "exact.glsl"
// rope_f32_ref on each row of x (rows, n_head * head_dim), in place. One invocation per rotated
// pair (row, head, i < half): pairs (2i, 2i + 1), or (i, i + half) when neox != 0. Row r uses
// tables (rows, half, 2) = (cos, sin) (rope_table_row, already flushed). Grid-stride loop over
// n_pairs = rows * n_head * half.

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer T { float tables[]; };
layout(push_constant) uniform P { uint n_pairs; uint n_head; uint head_dim; uint half_rot; uint neox; } pc;

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint p = gl_GlobalInvocationID.x; p < pc.n_pairs; p += stride) {
    const uint i = p % pc.half_rot;
    const uint rh = p / pc.half_rot;  // row * n_head + head
    const uint r = rh / pc.n_head;
    const uint base = rh * pc.head_dim;
    const uint i0 = base + (pc.neox != 0u ? i : 2u * i);
    const uint i1 = base + (pc.neox != 0u ? i + pc.half_rot : 2u * i + 1u);
    const uint t = (r * pc.half_rot + i) * 2u;
    const float c = flush_f(tables[t]);
    const float s = flush_f(tables[t + 1u]);
    const float x0 = flush_f(x[i0]);
    const float x1 = flush_f(x[i1]);
    precise float x0c = x0 * c;
    precise float x1s = x1 * s;
    precise float x0s = x0 * s;
    precise float x1c = x1 * c;
    precise float y0 = flush_f(x0c) - flush_f(x1s);
    precise float y1 = flush_f(x0s) + flush_f(x1c);
    x[i0] = flush_f(y0);
    x[i1] = flush_f(y1);
  }
}
