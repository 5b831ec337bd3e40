// The exact attention of one sequence's query rows over its KV cache cells
// (docs/precision-contract.md section 11), attention_exact_ref's bytes per row and head, in three
// passes selected by pc.pass (one dispatch each, so each pass sees all of the previous one):
//   0 scores:  per (row and head, position t < n_kv[row]) one invocation: s_t = flush(dot(qq, k_t)
//              * kq_scale), the dot on the matmul grid with k_t as unit-scale blocks,
//              G_t = qq.max_exp + Ek_t + 44 + clog2(2 nb) - 62; then softcap_f32(s_t, softcap)
//              when softcap > 0.
//   1 softmax: per (row and head) one workgroup: m = max_t s_t, and the head's sink when there are
//              sinks (+0 for a zero maximum, taken on an order-preserving integer key of the bits),
//              W_t = rne(exp_f32(flush(s_t - m)) * 2^30) written over s_t, S = sum_t W_t (int64,
//              reduced in shared memory) plus the sink's weight.
//   2 accum:   per (row and head, dimension d of value block b) one invocation:
//              Gv_b = max_t ev_{t,b} + 30 + 15 + clog2(n_kv) - 62, acc_d = sum_t round_shift(W_t
//              * v_{t,d}, ev_{t,b} - Gv_b) (int64), out_d = flush(fixed_to_f32(acc_d, Gv_b) *
//              recip_f32(fixed_to_f32(S, 0))); 0 when no attended V block b is nonzero.
// m and every Gv_b are maxima over exactly the positions the row attends, taken before anything
// is summed on their grids. Workgroup id: pass 0 and 2 (x: chunk of 64 positions / dimensions,
// y: row * n_head + head - rh0), pass 1 (x: row * n_head + head - rh0).
// Non-goals: split-KV parallelism inside one (row, head) for the sums (a thread walks all t).
#version 450
#include "exact.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer c_buf { uint cells[]; };       // (n_cells, cell words)
layout(std430, binding = 1) readonly buffer q_buf { int qq[]; };           // (n_q * n_head, nb * 32)
layout(std430, binding = 2) readonly buffer e_buf { int qe[]; };           // (n_q * n_head, nb)
layout(std430, binding = 3) readonly buffer m_buf { int qmax[]; };         // (n_q * n_head)
layout(std430, binding = 4) readonly buffer n_buf { int n_kv[]; };         // (n_q)
layout(std430, binding = 5) buffer s_buf { uint score[]; };                // (n_q * n_head, n_cells)
layout(std430, binding = 6) buffer t_buf { int64_t s_sum[]; };             // (n_q * n_head)
layout(std430, binding = 7) writeonly buffer o_buf { float out_v[]; };     // (n_q * n_head, head_dim)
layout(std430, binding = 8) readonly buffer k_buf { float sinks[]; };      // (n_head) when has_sinks

layout(push_constant) uniform push_t {
  uint pass;       // 0 scores, 1 softmax, 2 accum
  uint n_head;
  uint n_head_kv;
  uint head_dim;
  uint nb;         // ceil(head_dim / 32)
  uint n_cells;
  float kq_scale;  // flushed on the host
  uint rh0;        // first (row, head) of this dispatch
  float softcap;   // > 0: each score capped as softcap_f32(s, softcap) (gemma2)
  float inv_cap;   // recip_f32(softcap), from the host
  uint has_sinks;  // sinks[head] joins the softmax's maximum and sum, not the values (gpt-oss)
} pc;

// The cell layout of kernels/gpu/gpu.h read from 32-bit words: per position
//   [K q: (n_head_kv, nb * 32) int16][V q: same][K exp: (n_head_kv, nb) int32][V exp: same]
// so one cell is n_head_kv * nb * 34 words.

// Element i (< nb * 32) of KV head g at position t; v selects V (else K).
int cell_q(uint t, uint g, uint i, bool v, uint n_head_kv, uint nb) {
  const uint half_words = n_head_kv * nb * 16u;
  const uint idx = g * nb * 32u + i;
  const uint word = cells[t * n_head_kv * nb * 34u + (v ? half_words : 0u) + (idx >> 1u)];
  return (idx & 1u) != 0u ? int(word) >> 16 : int(word << 16u) >> 16;
}

// The exponent of block b of KV head g at position t (EXP_ZERO for an all-zero block).
int cell_exp(uint t, uint g, uint b, bool v, uint n_head_kv, uint nb) {
  const uint base = t * n_head_kv * nb * 34u + n_head_kv * nb * (v ? 33u : 32u);
  return int(cells[base + g * nb + b]);
}

shared uint s_key[64];
shared int64_t s_tot[64];

uint kv_head_of(uint rh) { return (rh % pc.n_head) / (pc.n_head / pc.n_head_kv); }

void pass_scores(uint rh, uint t) {
  if (t >= uint(n_kv[rh / pc.n_head])) return;
  const uint g = kv_head_of(rh);
  int ek_max = EXP_ZERO;
  for (uint b = 0u; b < pc.nb; ++b) ek_max = max(ek_max, cell_exp(t, g, b, false, pc.n_head_kv, pc.nb));
  const int mx = qmax[rh];
  float dot = 0.0;
  if (mx != EXP_ZERO && ek_max != EXP_ZERO) {
    const int grid = mx + ek_max + DOT_TERM_BITS + clog2(int64_t(2u * pc.nb)) - ACC_BITS;
    int64_t acc = 0;
    for (uint b = 0u; b < pc.nb; ++b) {
      const int eq = qe[rh * pc.nb + b];
      const int ek = cell_exp(t, g, b, false, pc.n_head_kv, pc.nb);
      if (eq == EXP_ZERO || ek == EXP_ZERO) continue;
      int64_t t1 = 0;
      for (uint i = 0u; i < 32u; ++i) {
        t1 += int64_t(qq[(rh * pc.nb + b) * 32u + i] * cell_q(t, g, b * 32u + i, false, pc.n_head_kv, pc.nb));
      }
      acc += round_shift(t1, eq + ek - grid);
    }
    dot = fixed_to_f32(acc, grid);
  }
  precise float s = dot * pc.kq_scale;
  float sc = flush_f(s);
  if (pc.softcap > 0.0) sc = softcap_f32(sc, pc.softcap, pc.inv_cap);
  score[rh * pc.n_cells + t] = floatBitsToUint(sc);
}

// Unsigned keys ordered like the finite floats (-0 just below +0), and back.
uint order_key(uint bits) { return (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u; }
uint key_bits(uint key) { return (key & 0x80000000u) != 0u ? key & 0x7fffffffu : ~key; }

void pass_softmax(uint rh, uint lid) {
  const uint n = uint(n_kv[rh / pc.n_head]);
  const uint base = rh * pc.n_cells;
  uint k = 0u;
  for (uint t = lid; t < n; t += 64u) k = max(k, order_key(score[base + t]));
  const float sink = pc.has_sinks != 0u ? flush_f(sinks[rh % pc.n_head]) : 0.0;
  if (pc.has_sinks != 0u && n > 0u) k = max(k, order_key(floatBitsToUint(sink)));
  s_key[lid] = k;
  barrier();
  for (uint stride = 32u; stride > 0u; stride >>= 1u) {
    if (lid < stride) s_key[lid] = max(s_key[lid], s_key[lid + stride]);
    barrier();
  }
  uint m_bits = key_bits(s_key[0]);
  if (m_bits == 0x80000000u) m_bits = 0u;
  const float m = uintBitsToFloat(m_bits);
  int64_t tot = 0;
  for (uint t = lid; t < n; t += 64u) {
    precise float d = uintBitsToFloat(score[base + t]) - m;
    int mw;
    int ew;
    f32_decompose(exp_f32(flush_f(d)), mw, ew);
    const int64_t w = round_shift(int64_t(mw), ew + ATT_WEIGHT_BITS);
    score[base + t] = uint(w);
    tot += w;
  }
  s_tot[lid] = tot;
  barrier();
  for (uint stride = 32u; stride > 0u; stride >>= 1u) {
    if (lid < stride) s_tot[lid] += s_tot[lid + stride];
    barrier();
  }
  if (lid == 0u) {
    int64_t w_sink = 0;
    if (pc.has_sinks != 0u && n > 0u) {  // the sink's weight joins the sum only
      precise float d = sink - m;
      int mw;
      int ew;
      f32_decompose(exp_f32(flush_f(d)), mw, ew);
      w_sink = round_shift(int64_t(mw), ew + ATT_WEIGHT_BITS);
    }
    s_sum[rh] = s_tot[0] + w_sink;
  }
}

void pass_accum(uint rh, uint d) {
  if (d >= pc.head_dim) return;
  const uint n = uint(n_kv[rh / pc.n_head]);
  const uint g = kv_head_of(rh);
  const uint b = d / 32u;
  int ev_max = EXP_ZERO;
  for (uint t = 0u; t < n; ++t) ev_max = max(ev_max, cell_exp(t, g, b, true, pc.n_head_kv, pc.nb));
  float o = 0.0;
  if (ev_max != EXP_ZERO) {
    const int gv = ev_max + ATT_WEIGHT_BITS + ATT_VALUE_BITS + clog2(int64_t(n)) - ACC_BITS;
    int64_t acc = 0;
    for (uint t = 0u; t < n; ++t) {
      const int64_t w = int64_t(score[rh * pc.n_cells + t]);
      const int ev = cell_exp(t, g, b, true, pc.n_head_kv, pc.nb);
      if (w == 0 || ev == EXP_ZERO) continue;
      acc += round_shift(w * int64_t(cell_q(t, g, d, true, pc.n_head_kv, pc.nb)), ev - gv);
    }
    precise float p = fixed_to_f32(acc, gv) * recip_f32(fixed_to_f32(s_sum[rh], 0));
    o = flush_f(p);
  }
  out_v[rh * pc.head_dim + d] = o;
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  if (pc.pass == 1u) {
    pass_softmax(pc.rh0 + gl_WorkGroupID.x, lid);
  } else if (pc.pass == 0u) {
    pass_scores(pc.rh0 + gl_WorkGroupID.y, gl_WorkGroupID.x * 64u + lid);
  } else {
    pass_accum(pc.rh0 + gl_WorkGroupID.y, gl_WorkGroupID.x * 64u + lid);
  }
}
