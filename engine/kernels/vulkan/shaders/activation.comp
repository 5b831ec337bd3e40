#version 450
#include "exact.glsl"
// gpu::act's activations, element-wise over n (grid-stride loop); kind is gpu::act's value:
//   0 geglu       flush(gelu_f32(a[i]) * flush(b[i]))
//   1 swiglu_oai  swiglu_oai_f32(a[i], b[i], p0 = alpha, p1 = limit)
//   2 softcap     softcap_f32(a[i], p0 = cap, p1 = recip_f32(cap))
//   3 scale       flush(flush(a[i]) * p0), p0 the flushed factor
// b is bound for every kind and read only by the first two.

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; uint kind; float p0; float p1; } pc;

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
    float r;
    if (pc.kind == 0u) {
      precise float p = gelu_f32(a[i]) * flush_f(b[i]);
      r = flush_f(p);
    } else if (pc.kind == 1u) {
      r = swiglu_oai_f32(a[i], b[i], pc.p0, pc.p1);
    } else if (pc.kind == 2u) {
      r = softcap_f32(a[i], pc.p0, pc.p1);
    } else {
      precise float p = flush_f(a[i]) * pc.p0;
      r = flush_f(p);
    }
    o[i] = canon_nan_f(r);
  }
}
