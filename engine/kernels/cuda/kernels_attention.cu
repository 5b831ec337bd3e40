// KV cache quantization and causal attention on CUDA (docs/precision-contract.md, section 11).
// The arithmetic is exact_device.h's; this file maps threads to it.
//
// Cell layout (gpu.h): [K q (n_head_kv, nb * 32) int16][V q][K exp (n_head_kv, nb) int32][V exp].
// Attention: one thread block per (query row, head). Its threads quantize the query head into
// shared memory, compute the scores of strided positions (kept in a scratch row), reduce their
// maximum, turn them into integer weights W_t in place and reduce their int64 sum; one thread per
// value block takes the block's grid over all attended positions; then one thread per dimension
// sums its W_t * v terms in int64. Every grid is fixed before the sums it serves, as the contract
// requires; the maxima and integer sums do not depend on the thread split.
// Non-goals: split-KV across thread blocks, flash-attention style rescaling (not allowed).
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/exact_device.h"

namespace detaudit::kernels::cuda {
namespace {

constexpr int ATT_THREADS = 128;
constexpr int MAX_BLOCKS = static_cast<int>(ATTENTION_MAX_HEAD_DIM / xd::QBLOCK);

__global__ void kv_quantize_kernel(const float* k, const float* v, int64_t rows, int64_t n_head_kv,
                                   int64_t head_dim, uint8_t* cells) {
  const int64_t nb = (head_dim + xd::QBLOCK - 1) / xd::QBLOCK;
  const int64_t per_kind = n_head_kv * nb;
  const uint64_t cell_bytes = static_cast<uint64_t>(2 * per_kind * (xd::QBLOCK * 2 + 4));
  const int64_t total = rows * 2 * per_kind;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t hb = i % per_kind;
    const int64_t kind = (i / per_kind) % 2;
    const int64_t r = i / (2 * per_kind);
    const int64_t h = hb / nb, b = hb % nb;
    const float* src = (kind == 0 ? k : v) + r * n_head_kv * head_dim + h * head_dim + b * xd::QBLOCK;
    const int64_t left = head_dim - b * xd::QBLOCK;
    const int len = left < xd::QBLOCK ? static_cast<int>(left) : xd::QBLOCK;
    float x[xd::QBLOCK];
    for (int j = 0; j < len; ++j) x[j] = src[j];
    int16_t q[xd::QBLOCK];
    const int32_t e = xd::quantize_block(x, len, q);
    uint8_t* cell = cells + static_cast<uint64_t>(r) * cell_bytes;
    int16_t* dq = reinterpret_cast<int16_t*>(cell) + (kind * per_kind + hb) * xd::QBLOCK;
    for (int j = 0; j < xd::QBLOCK; ++j) dq[j] = q[j];
    int32_t* de = reinterpret_cast<int32_t*>(cell + 2 * per_kind * xd::QBLOCK * 2);
    de[kind * per_kind + hb] = e;
  }
}

struct cell_view {
  const uint8_t* cells;
  uint64_t cell_bytes;
  int64_t per_kind;  // n_head_kv * nb
  int64_t off;       // kv_head * nb
  __device__ const int16_t* kq(int64_t t) const {
    return reinterpret_cast<const int16_t*>(cells + t * cell_bytes) + off * xd::QBLOCK;
  }
  __device__ const int16_t* vq(int64_t t) const { return kq(t) + per_kind * xd::QBLOCK; }
  __device__ const int32_t* ke(int64_t t) const {
    return reinterpret_cast<const int32_t*>(cells + t * cell_bytes + 2 * per_kind * xd::QBLOCK * 2) + off;
  }
  __device__ const int32_t* ve(int64_t t) const { return ke(t) + per_kind; }
};

// Scores of this thread's positions into srow (capped when cap > 0); returns their maximum (-inf
// when none).
__device__ float scores_pass(const int16_t* sq, const int32_t* se, int32_t qmax, const cell_view& cv,
                             int64_t nb, int64_t nkv, float kq_scale, float cap, float inv_cap, float* srow) {
  float lm = xd::u2f(0xff800000u);
  for (int64_t t = threadIdx.x; t < nkv; t += blockDim.x) {
    const float s = xd::attention_capped(xd::attention_score(sq, se, qmax, cv.kq(t), cv.ke(t), nb, kq_scale), cap, inv_cap);
    srow[t] = s;
    lm = s > lm ? s : lm;
  }
  return lm;
}

__global__ void attention_kernel(const float* q, const int64_t* n_kv, int64_t n_head, int64_t n_head_kv,
                                 int64_t head_dim, const uint8_t* cells, int64_t n_cells, float kq_scale,
                                 float cap, float inv_cap, const float* sinks, int32_t* scratch, float* out) {
  __shared__ int16_t sq[MAX_BLOCKS * xd::QBLOCK];
  __shared__ int32_t se[MAX_BLOCKS];
  __shared__ int32_t sgv[MAX_BLOCKS];
  __shared__ float s_max[ATT_THREADS];
  __shared__ long long s_sum[ATT_THREADS];
  const int64_t r = blockIdx.x / n_head, h = blockIdx.x % n_head;
  const int64_t nb = (head_dim + xd::QBLOCK - 1) / xd::QBLOCK;
  const int64_t nkv = n_kv[r];
  float* orow = out + (r * n_head + h) * head_dim;
  if (nkv == 0) {
    for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) orow[d] = 0.0f;
    return;
  }
  const cell_view cv{cells, static_cast<uint64_t>(2 * n_head_kv * nb * (xd::QBLOCK * 2 + 4)), n_head_kv * nb,
                     (h / (n_head / n_head_kv)) * nb};
  const float* qh = q + (r * n_head + h) * head_dim;
  if (threadIdx.x < nb) {
    const int64_t b = threadIdx.x;
    const int64_t left = head_dim - b * xd::QBLOCK;
    const int len = left < xd::QBLOCK ? static_cast<int>(left) : xd::QBLOCK;
    float x[xd::QBLOCK];
    for (int j = 0; j < len; ++j) x[j] = qh[b * xd::QBLOCK + j];
    se[b] = xd::quantize_block(x, len, sq + b * xd::QBLOCK);
  }
  __syncthreads();
  int32_t qmax = xd::EXP_ZERO;
  for (int64_t b = 0; b < nb; ++b) qmax = se[b] > qmax ? se[b] : qmax;
  float* srow = reinterpret_cast<float*>(scratch + blockIdx.x * n_cells);
  s_max[threadIdx.x] = scores_pass(sq, se, qmax, cv, nb, nkv, kq_scale, cap, inv_cap, srow);
  if (threadIdx.x < nb) {
    int32_t ev = xd::EXP_ZERO;
    for (int64_t t = 0; t < nkv; ++t) ev = cv.ve(t)[threadIdx.x] > ev ? cv.ve(t)[threadIdx.x] : ev;
    sgv[threadIdx.x] = xd::attention_value_grid(ev, nkv);
  }
  __syncthreads();
  float m = s_max[0];
  for (int i = 1; i < ATT_THREADS; ++i) m = s_max[i] > m ? s_max[i] : m;
  const float sink = sinks ? xd::flush(sinks[h]) : 0.0f;
  if (sinks && sink > m) m = sink;
  if (m == 0.0f) m = 0.0f;
  long long wsum = 0;
  int32_t* wrow = scratch + blockIdx.x * n_cells;
  for (int64_t t = threadIdx.x; t < nkv; t += blockDim.x) {
    const int64_t w = xd::attention_weight(srow[t], m);
    wrow[t] = static_cast<int32_t>(w);
    wsum += w;
  }
  s_sum[threadIdx.x] = wsum;
  __syncthreads();
  long long total = sinks ? xd::attention_weight(sink, m) : 0;  // the sink's weight: in the sum only
  for (int i = 0; i < ATT_THREADS; ++i) total += s_sum[i];
  const float inv_s = xd::recip_f32(xd::fixed_to_f32(total, 0));
  for (int64_t d = threadIdx.x; d < head_dim; d += blockDim.x) {
    const int64_t b = d / xd::QBLOCK;
    int64_t acc = 0;
    for (int64_t t = 0; t < nkv; ++t) acc += xd::attention_value_term(wrow[t], cv.vq(t)[d], cv.ve(t)[b], sgv[b]);
    orow[d] = xd::attention_out(acc, sgv[b], inv_s);
  }
}

}  // namespace

void launch_kv_quantize(const float* k, const float* v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                        uint8_t* cells) {
  const int64_t nb = (head_dim + xd::QBLOCK - 1) / xd::QBLOCK;
  DETAUDIT_LAUNCH(kv_quantize_kernel, grid_for(rows * 2 * n_head_kv * nb, 128), 128)(k, v, rows, n_head_kv, head_dim, cells);
}

void launch_attention(const float* q, int64_t n_q, const int64_t* n_kv, int64_t n_head, int64_t n_head_kv,
                      int64_t head_dim, const uint8_t* cells, int64_t n_cells, float kq_scale, float cap,
                      float inv_cap, const float* sinks, int32_t* scratch, float* out) {
  if (n_q * n_head == 0) return;
  DETAUDIT_LAUNCH(attention_kernel, static_cast<unsigned>(n_q * n_head), ATT_THREADS)(
      q, n_kv, n_head, n_head_kv, head_dim, cells, n_cells, kq_scale, cap, inv_cap, sinks, scratch, out);
}

}  // namespace detaudit::kernels::cuda
