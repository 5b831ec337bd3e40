// RMS norm, SwiGLU, residual add, bias add, RoPE and the activations of gemma and gpt-oss on CUDA (docs/precision-contract.md,
// sections 8 to 10). The arithmetic is exact_device.h's; this file maps threads to it.
//
// RMS norm: one thread block per (row, group); the largest exponent and the integer sum of the
// squares are reduced in shared memory (a max and an int64 sum: any order gives the same value).
// The other ops: one thread per element (per rotated pair for RoPE), grid-stride loops.
// Non-goals: fusing ops.
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/exact_device.h"

namespace detaudit::kernels::cuda {
namespace {

constexpr int NORM_THREADS = 256;

__global__ void rms_norm_kernel(const float* x, int64_t cols, int64_t group, const float* w, float eps,
                                float inv_n, float* out) {
  __shared__ int s_maxe[NORM_THREADS];
  __shared__ long long s_sum[NORM_THREADS];
  const int64_t n_groups = cols / group;
  const int64_t base = (int64_t(blockIdx.x) / n_groups) * cols + (int64_t(blockIdx.x) % n_groups) * group;
  const float* xg = x + base;
  int maxe = xd::EXP_ZERO;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) {
    const int e = xd::rms_exp(xg[i]);
    maxe = e > maxe ? e : maxe;
  }
  s_maxe[threadIdx.x] = maxe;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < NORM_THREADS; ++i) maxe = s_maxe[i] > maxe ? s_maxe[i] : maxe;
    s_maxe[0] = maxe;
  }
  __syncthreads();
  maxe = s_maxe[0];
  const int g = maxe == xd::EXP_ZERO ? 0 : xd::rms_grid(maxe, group);
  long long sum = 0;
  if (maxe != xd::EXP_ZERO) {
    for (int64_t i = threadIdx.x; i < group; i += blockDim.x) sum += xd::rms_term(xg[i], g);
  }
  s_sum[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < NORM_THREADS; ++i) sum += s_sum[i];
    s_sum[0] = sum;
  }
  __syncthreads();
  const float r = xd::rms_scale(s_sum[0], g, maxe, inv_n, eps);
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) out[base + i] = xd::rms_out(xg[i], r, w, i);
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = xd::swiglu_one(gate[i], up[i]);
}

// b is read only by the binary activations (gpu::act_binary); it may be null otherwise.
__global__ void act_kernel(int kind, const float* a, const float* b, int64_t n, float p0, float p1, float* out) {
  const bool binary = kind == xd::ACT_GEGLU || kind == xd::ACT_SWIGLU_OAI;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = xd::act_one(kind, a[i], binary ? b[i] : 0.0f, p0, p1);
}

__global__ void add_kernel(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = xd::add_one(a[i], b[i]);
}

__global__ void add_bias_kernel(float* x, int64_t n, int64_t cols, const float* b) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = xd::bias_one(x[i], b[i % cols]);
}

__global__ void rope_kernel(float* x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                            const float* tables) {
  const int64_t half = n_rot / 2;
  const int64_t total = rows * n_head * half;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k % half;
    const int64_t rh = k / half;
    const int64_t r = rh / n_head;
    float* xh = x + rh * head_dim;
    const int64_t i0 = neox ? i : 2 * i;
    const int64_t i1 = neox ? i + half : 2 * i + 1;
    const float* tab = tables + r * n_rot;
    xd::rope_pair(xh + i0, xh + i1, tab[2 * i], tab[2 * i + 1]);
  }
}

// flag = 1 when some x[i] is NaN or infinite (every writer stores the same value).
__global__ void find_nonfinite_kernel(const float* x, int64_t n, int32_t* flag) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if ((xd::f2u(x[i]) & 0x7f800000u) == 0x7f800000u) *flag = 1;
  }
}

}  // namespace

void launch_find_nonfinite(const float* x, int64_t n, int32_t* flag) {
  if (n > 0) DETAUDIT_LAUNCH(find_nonfinite_kernel, grid_for(n, 256), 256)(x, n, flag);
}

void launch_rms_norm(const float* x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                     float inv_n, float* out) {
  const int64_t blocks = rows * (cols / group);
  if (blocks > 0) DETAUDIT_LAUNCH(rms_norm_kernel, static_cast<unsigned>(blocks), NORM_THREADS)(x, cols, group, w, eps, inv_n, out);
}

void launch_swiglu(const float* gate, const float* up, int64_t n, float* out) {
  DETAUDIT_LAUNCH(swiglu_kernel, grid_for(n, 256), 256)(gate, up, n, out);
}

void launch_activation(int kind, const float* a, const float* b, int64_t n, float p0, float p1, float* out) {
  if (n > 0) DETAUDIT_LAUNCH(act_kernel, grid_for(n, 256), 256)(kind, a, b, n, p0, p1, out);
}

void launch_add(const float* a, const float* b, int64_t n, float* out) {
  DETAUDIT_LAUNCH(add_kernel, grid_for(n, 256), 256)(a, b, n, out);
}

void launch_add_bias(float* x, int64_t rows, int64_t cols, const float* b) {
  DETAUDIT_LAUNCH(add_bias_kernel, grid_for(rows * cols, 256), 256)(x, rows * cols, cols, b);
}

void launch_rope(float* x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                 const float* tables) {
  if (n_rot < 2) return;
  DETAUDIT_LAUNCH(rope_kernel, grid_for(rows * n_head * (n_rot / 2), 256), 256)(x, rows, n_head, head_dim, n_rot, neox, tables);
}

}  // namespace detaudit::kernels::cuda
