#version 450
#include "exact.glsl"
// rms_norm_f32_ref per segment of `group` floats: x, o (n_seg * group), w (group) when has_w != 0.
// One workgroup per segment (grid-stride over segments): the largest exponent and then the int64
// sum of squares on the grid G = 2 * maxe + 48 + clog2(group) - 62 are reduced in shared memory
// (integer max and sum: any order gives the same result), then every invocation scales its
// elements by r = rsqrt_f32(flush(flush(ss * inv_n) + eps)). inv_n = (float)(1.0 / group) (host).

#define WG 64
layout(local_size_x = WG) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n_seg; uint group_; uint has_w; float eps; float inv_n; } pc;

shared int s_maxe[WG];
shared int64_t s_sum[WG];
shared float s_r;

int reduce_max(uint tid, int v) {
  s_maxe[tid] = v;
  barrier();
  for (uint h = WG / 2; h > 0u; h >>= 1) {
    if (tid < h) s_maxe[tid] = max(s_maxe[tid], s_maxe[tid + h]);
    barrier();
  }
  const int r = s_maxe[0];
  barrier();
  return r;
}

int64_t reduce_sum(uint tid, int64_t v) {
  s_sum[tid] = v;
  barrier();
  for (uint h = WG / 2; h > 0u; h >>= 1) {
    if (tid < h) s_sum[tid] = s_sum[tid] + s_sum[tid + h];
    barrier();
  }
  const int64_t r = s_sum[0];
  barrier();
  return r;
}

// The segment's rsqrt factor from its sum of squares S on grid G (all zero: ss = 0).
float norm_factor(int64_t s, int g, bool all_zero) {
  const float ss = all_zero ? 0.0 : fixed_to_f32(s, g);
  precise float mean = ss * pc.inv_n;
  precise float d = flush_f(mean) + pc.eps;
  return rsqrt_f32(flush_f(d));
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint n = pc.group_;
  for (uint seg = gl_WorkGroupID.x; seg < pc.n_seg; seg += gl_NumWorkGroups.x) {
    const uint base = seg * n;
    int maxe = EXP_ZERO;
    for (uint i = tid; i < n; i += WG) {
      int m;
      int e;
      f32_decompose(flush_f(x[base + i]), m, e);
      if (m != 0 && e > maxe) maxe = e;
    }
    maxe = reduce_max(tid, maxe);
    const int g = 2 * maxe + SQUARE_BITS + clog2(int64_t(n)) - ACC_BITS;
    int64_t acc = 0l;
    if (maxe != EXP_ZERO) {
      for (uint i = tid; i < n; i += WG) {
        int m;
        int e;
        f32_decompose(flush_f(x[base + i]), m, e);
        if (m != 0) acc += round_shift(int64_t(m) * int64_t(m), 2 * e - g);
      }
    }
    acc = reduce_sum(tid, acc);
    if (tid == 0u) s_r = norm_factor(acc, g, maxe == EXP_ZERO);
    barrier();
    const float r = s_r;
    for (uint i = tid; i < n; i += WG) {
      precise float v = flush_f(x[base + i]) * r;
      const float fv = flush_f(v);
      precise float vw = fv * flush_f(w[i]);
      o[base + i] = canon_nan_f(pc.has_w != 0u ? flush_f(vw) : fv);
    }
    barrier();
  }
}
