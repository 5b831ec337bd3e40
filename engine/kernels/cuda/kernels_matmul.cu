// Activation quantization and the exact matmul on CUDA (docs/precision-contract.md, sections 5
// and 7). The arithmetic is exact_device.h's; this file maps threads to it.
//
// Matmul: one thread per output (token, row). A thread block takes one weight row and up to 128
// tokens; its first threads decode 8 weight blocks into shared memory, then every thread adds
// those blocks' terms, rounded to its own grid (x.max_exp of its token, the row's bound), to its
// int64 sum. Integer sums: the block and token split cannot change a bit.
// Integer block types take the int8 path when the launcher is given a pack buffer: the activation
// blocks are split once into hi / lo bytes (pack_act), the decoding threads also pack their
// block's codes, and the products are dp4a (exact_device.h, "the int8 path"). F32/F16/BF16 rows
// (int16 codes) always take plain 32-bit products. Both give the same integers.
// Few tokens (generation, at most ROWS_MAX_TOK): one thread block per weight row instead, each
// thread decoding its own blocks of the row (b = thread, thread + ROWS_THREADS, ...) and adding
// their terms for every token to one int64 sum per token; the block's sums are added in shared
// memory. The same terms on the same grids, summed in another order: the same integers.
// Non-goals: tensor cores, split-K (the contract allows them; simplicity first).
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/exact_device.h"

namespace detaudit::kernels::cuda {
namespace {

constexpr int DECODE_BLOCKS = 8;   // weight blocks decoded into shared memory per step
constexpr int ROWS_MAX_TOK = 8;    // matmul_rows_kernel: the most tokens it takes
constexpr int ROWS_THREADS = 64;   // its threads per weight row
constexpr int64_t MAX_GRID_Y = 65535;
static_assert(MATMUL_PACK_WORDS == xd::ACT_PACK_WORDS, "pack scratch layout");

__global__ void quantize_blocks_kernel(const float* x, int64_t rows, int64_t n, int64_t nb, int16_t* q,
                                       int32_t* exp) {
  const int64_t total = rows * nb;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / nb, b = i % nb;
    const int64_t left = n - b * xd::QBLOCK;
    const int len = left < xd::QBLOCK ? static_cast<int>(left) : xd::QBLOCK;
    float v[xd::QBLOCK];
    for (int j = 0; j < len; ++j) v[j] = x[r * n + b * xd::QBLOCK + j];
    int16_t qq[xd::QBLOCK];
    exp[i] = xd::quantize_block(v, len, qq);
    for (int j = 0; j < xd::QBLOCK; ++j) q[i * xd::QBLOCK + j] = qq[j];
  }
}

__global__ void max_exp_kernel(const int32_t* exp, int64_t rows, int64_t nb, int32_t* max_exp) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    int32_t m = xd::EXP_ZERO;
    for (int64_t b = 0; b < nb; ++b) m = exp[r * nb + b] > m ? exp[r * nb + b] : m;
    max_exp[r] = m;
  }
}

__global__ void pack_act_kernel(const int16_t* q, int64_t n_blocks, uint32_t* pack) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_blocks;
       i += int64_t(gridDim.x) * blockDim.x) {
    xd::pack_act(q + i * xd::QBLOCK, pack + i * xd::ACT_PACK_WORDS);
  }
}

// INT8: xpack holds the packed activation blocks and t is an integer block type.
template <bool INT8>
__global__ void matmul_kernel(int32_t t, const uint8_t* w, uint64_t row_bytes, const int32_t* bounds,
                              int64_t n_in, int64_t n_out, const int16_t* xq, const uint32_t* xpack,
                              const int32_t* xexp, const int32_t* xmax, int64_t tok0, int64_t n_tok, float* y) {
  __shared__ xd::wblock sw[DECODE_BLOCKS];
  __shared__ uint32_t swq[DECODE_BLOCKS][xd::PACK_WORDS];
  const int64_t row = blockIdx.x;
  const int64_t tok = tok0 + int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const int64_t nb = (n_in + xd::QBLOCK - 1) / xd::QBLOCK;
  const uint8_t* wrow = w + static_cast<uint64_t>(row) * row_bytes;
  const int32_t bound = bounds[row];
  const int32_t mx = tok < n_tok ? xmax[tok] : xd::EXP_ZERO;
  const bool live = mx != xd::EXP_ZERO && bound != xd::EXP_ZERO;
  const int32_t g = live ? xd::dot_grid(mx, bound, nb) : 0;
  int64_t acc = 0;
  for (int64_t c = 0; c < nb; c += DECODE_BLOCKS) {
    if (threadIdx.x < DECODE_BLOCKS && c + threadIdx.x < nb) {
      const int64_t b = c + threadIdx.x;
      const int64_t left = n_in - b * xd::QBLOCK;
      xd::decode_block(t, wrow, b, left < xd::QBLOCK ? static_cast<int>(left) : xd::QBLOCK, sw[threadIdx.x]);
      if (INT8) xd::pack_codes(sw[threadIdx.x], swq[threadIdx.x]);
    }
    __syncthreads();
    if (live) {
      for (int i = 0; i < DECODE_BLOCKS && c + i < nb; ++i) {
        const int64_t k = tok * nb + c + i;
        acc += INT8 ? xd::dot_block_fixed8(xpack + k * xd::ACT_PACK_WORDS, xexp[k], sw[i], swq[i], g)
                    : xd::dot_block_fixed(xq + k * xd::QBLOCK, xexp[k], sw[i], g);
      }
    }
    __syncthreads();
  }
  if (tok < n_tok) y[tok * n_out + row] = xd::dot_finish(acc, mx, bound, nb);
}

// One thread block per weight row, for n_tok <= ROWS_MAX_TOK tokens (see the header).
template <bool INT8>
__global__ void matmul_rows_kernel(int32_t t, const uint8_t* w, uint64_t row_bytes, const int32_t* bounds,
                                   int64_t n_in, const int16_t* xq, const uint32_t* xpack, const int32_t* xexp,
                                   const int32_t* xmax, int64_t n_tok, int64_t n_out, float* y) {
  __shared__ long long s_acc[ROWS_MAX_TOK][ROWS_THREADS];
  const int64_t row = blockIdx.x;
  const int64_t nb = (n_in + xd::QBLOCK - 1) / xd::QBLOCK;
  const uint8_t* wrow = w + static_cast<uint64_t>(row) * row_bytes;
  const int32_t bound = bounds[row];
  int32_t g[ROWS_MAX_TOK];
  bool live[ROWS_MAX_TOK];  // token k has terms (as matmul_kernel's `live`)
  long long acc[ROWS_MAX_TOK];
  bool any = false;
  for (int k = 0; k < ROWS_MAX_TOK; ++k) {
    live[k] = k < n_tok && xmax[k] != xd::EXP_ZERO && bound != xd::EXP_ZERO;
    g[k] = live[k] ? xd::dot_grid(xmax[k], bound, nb) : 0;
    acc[k] = 0;
    any = any || live[k];
  }
  if (any) {
    xd::wblock wb;
    uint32_t wq[xd::PACK_WORDS];
    for (int64_t b = threadIdx.x; b < nb; b += ROWS_THREADS) {
      const int64_t left = n_in - b * xd::QBLOCK;
      xd::decode_block(t, wrow, b, left < xd::QBLOCK ? static_cast<int>(left) : xd::QBLOCK, wb);
      if (INT8) xd::pack_codes(wb, wq);
      for (int k = 0; k < ROWS_MAX_TOK; ++k) {
        if (!live[k]) continue;
        const int64_t i = k * nb + b;
        acc[k] += INT8 ? xd::dot_block_fixed8(xpack + i * xd::ACT_PACK_WORDS, xexp[i], wb, wq, g[k])
                       : xd::dot_block_fixed(xq + i * xd::QBLOCK, xexp[i], wb, g[k]);
      }
    }
  }
  for (int k = 0; k < ROWS_MAX_TOK; ++k) s_acc[k][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.x < n_tok) {
    const int k = static_cast<int>(threadIdx.x);
    long long sum = 0;
    for (int i = 0; i < ROWS_THREADS; ++i) sum += s_acc[k][i];
    y[k * n_out + row] = xd::dot_finish(sum, xmax[k], bound, nb);
  }
}

}  // namespace

void launch_quantize_rows(const float* x, int64_t rows, int64_t n, int16_t* q, int32_t* exp,
                          int32_t* max_exp) {
  const int64_t nb = (n + xd::QBLOCK - 1) / xd::QBLOCK;
  DETAUDIT_LAUNCH(quantize_blocks_kernel, grid_for(rows * nb, 128), 128)(x, rows, n, nb, q, exp);
  DETAUDIT_LAUNCH(max_exp_kernel, grid_for(rows, 128), 128)(exp, rows, nb, max_exp);
}

void launch_matmul(int32_t t, const uint8_t* w, uint64_t row_bytes, const int32_t* bounds, int64_t n_in,
                   int64_t n_out, const int16_t* xq, const int32_t* xexp, const int32_t* xmax,
                   int64_t n_tok, uint32_t* xpack, float* y) {
  const bool int8 = xpack != nullptr && xd::is_int8_type(t);
  const int64_t nb = (n_in + xd::QBLOCK - 1) / xd::QBLOCK;
  if (int8) DETAUDIT_LAUNCH(pack_act_kernel, grid_for(n_tok * nb, 128), 128)(xq, n_tok * nb, xpack);
  if (n_tok <= ROWS_MAX_TOK && n_out <= (int64_t{1} << 31) - 1) {
    if (n_tok < 1 || n_out < 1) return;
    if (int8) {
      DETAUDIT_LAUNCH(matmul_rows_kernel<true>, static_cast<unsigned>(n_out), ROWS_THREADS)(
          t, w, row_bytes, bounds, n_in, xq, xpack, xexp, xmax, n_tok, n_out, y);
    } else {
      DETAUDIT_LAUNCH(matmul_rows_kernel<false>, static_cast<unsigned>(n_out), ROWS_THREADS)(
          t, w, row_bytes, bounds, n_in, xq, xpack, xexp, xmax, n_tok, n_out, y);
    }
    return;
  }
  const int threads = n_tok <= 32 ? 32 : n_tok <= 64 ? 64 : 128;
  const int64_t per_launch = MAX_GRID_Y * threads;
  for (int64_t tok0 = 0; tok0 < n_tok; tok0 += per_launch) {
    const int64_t left = n_tok - tok0 < per_launch ? n_tok - tok0 : per_launch;
    const dim3 grid(static_cast<unsigned>(n_out), static_cast<unsigned>((left + threads - 1) / threads));
    if (int8) {
      DETAUDIT_LAUNCH(matmul_kernel<true>, grid, threads)(t, w, row_bytes, bounds, n_in, n_out, xq, xpack, xexp, xmax,
                                                          tok0, n_tok, y);
    } else {
      DETAUDIT_LAUNCH(matmul_kernel<false>, grid, threads)(t, w, row_bytes, bounds, n_in, n_out, xq, xpack, xexp,
                                                           xmax, tok0, n_tok, y);
    }
  }
}

}  // namespace detaudit::kernels::cuda
