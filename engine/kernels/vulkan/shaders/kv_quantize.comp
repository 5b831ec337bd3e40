#version 450
#include "exact.glsl"
// The exact-mode KV cache cells of `rows` positions (kernels/gpu/gpu.h): each head of k and v
// (rows, n_head_kv * head_dim) quantized with numerics::quantize_block per 32 elements (the last
// block zero-padded). Cell layout in 32-bit words, nh = n_head_kv, per row r at r * cell_words:
//   [K q: nh * nb * 16 words (int16 pairs, little-endian)][V q: same][K exp: nh * nb][V exp: nh * nb]
// One invocation per block (row, tensor, head, block); grid-stride over n_blocks = rows * 2 * nh * nb.

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer K { float k[]; };
layout(std430, binding = 1) readonly buffer V { float v[]; };
layout(std430, binding = 2) writeonly buffer C { uint cells[]; };
layout(push_constant) uniform P { uint n_blocks; uint n_head_kv; uint head_dim; uint nb; } pc;

float load_elem(uint tensor, uint idx) { return tensor == 0u ? k[idx] : v[idx]; }

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint per_tensor = pc.n_head_kv * pc.nb;  // blocks of one tensor in one row
  const uint cell_words = 2u * per_tensor * 17u;
  for (uint id = gl_GlobalInvocationID.x; id < pc.n_blocks; id += stride) {
    const uint hb = id % per_tensor;  // head * nb + block
    const uint tensor = (id / per_tensor) % 2u;
    const uint r = id / (2u * per_tensor);
    const uint h = hb / pc.nb;
    const uint j0 = (hb % pc.nb) * 32u;
    const uint len = min(32u, pc.head_dim - j0);
    const uint src = (r * pc.n_head_kv + h) * pc.head_dim + j0;
    uint amax = 0u;
    for (uint j = 0u; j < len; ++j) amax = max(amax, amax_bits_of(load_elem(tensor, src + j)));
    const int bexp = block_exp_from_amax_bits(amax);
    const uint cell = r * cell_words;
    const uint qw = cell + (tensor * per_tensor + hb) * 16u;
    for (uint j = 0u; j < 32u; j += 2u) {
      const int q0 = (bexp == EXP_ZERO || j >= len) ? 0 : quantize_elem(load_elem(tensor, src + j), bexp);
      const int q1 = (bexp == EXP_ZERO || j + 1u >= len) ? 0 : quantize_elem(load_elem(tensor, src + j + 1u), bexp);
      cells[qw + j / 2u] = (uint(q0) & 0xffffu) | (uint(q1) << 16);
    }
    cells[cell + 2u * per_tensor * 16u + tensor * per_tensor + hb] = uint(bexp);
  }
}
