// Host-callable launchers of the CUDA kernels (kernels_*.cu), used by device.cpp.
//
// Goals: keep every <<<...>>> launch in nvcc-compiled files, so that device.cpp is ordinary C++
// (compiled with the project's warnings) that talks to the runtime API only. All pointers are
// device pointers; launches go to the default stream and return without waiting (the caller
// checks cudaGetLastError and synchronizes). Shapes are valid (device.cpp checks them).
// Non-goals: error handling (device.cpp's), streams, graphs.
#pragma once

#include <cstdint>

// A kernel launch on the default stream: kernel<<<grid, block>>>(args). The host emulation of the
// kernels (tests/slow/test_kernels_cuda_portable_emu.cpp) defines it first, to run them on threads.
#ifndef DETAUDIT_LAUNCH
#define DETAUDIT_LAUNCH(kernel, grid, block) kernel<<<(grid), (block)>>>
#endif

namespace detaudit::kernels::cuda {

// Thread blocks for a grid-stride loop over n items: ceil(n / threads), at least 1, at most 2^20
// (the loops cover the rest).
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > (1 << 20) ? (1 << 20) : blocks);
}

// Quantizes rows of x (rows, n) like numerics::quantize_act: q (rows, nb * 32), exp (rows, nb),
// max_exp (rows), nb = ceil(n / 32).
void launch_quantize_rows(const float* x, int64_t rows, int64_t n, int16_t* q, int32_t* exp,
                          int32_t* max_exp);

// Words of launch_matmul's pack scratch per activation block (hi and lo bytes of 32 values).
constexpr int64_t MATMUL_PACK_WORDS = 16;

// y(tok, r) = the exact dot of activation row tok (from launch_quantize_rows) with weight row r
// of type t (row_bytes bytes each; bounds(r) = wblock_exp_bound of row r). xpack: nullptr for
// plain 32-bit products, else scratch of n_tok * nb * MATMUL_PACK_WORDS words that selects the
// dp4a path for integer block types (F32/F16/BF16 rows ignore it). Both paths give the same bits.
void launch_matmul(int32_t t, const uint8_t* w, uint64_t row_bytes, const int32_t* bounds, int64_t n_in,
                   int64_t n_out, const int16_t* xq, const int32_t* xexp, const int32_t* xmax,
                   int64_t n_tok, uint32_t* xpack, float* y);

// Sets *flag to 1 when any of the n floats of x is NaN or infinite; leaves it alone otherwise (the
// caller zeroes it and reads it after a synchronization: the slot ops' deferred non-finite check).
void launch_find_nonfinite(const float* x, int64_t n, int32_t* flag);

// rms_norm_f32_ref per (row, group); inv_n = (float)(1.0 / group) from the host.
void launch_rms_norm(const float* x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                     float inv_n, float* out);
void launch_swiglu(const float* gate, const float* up, int64_t n, float* out);
void launch_add(const float* a, const float* b, int64_t n, float* out);
// gpu::act k (exact_device.h's act_kind: the enum's order) with gpu::act_kernel_params' p0, p1.
void launch_activation(int kind, const float* a, const float* b, int64_t n, float p0, float p1, float* out);
void launch_add_bias(float* x, int64_t rows, int64_t cols, const float* b);
void launch_rope(float* x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                 const float* tables);

// The largest head_dim launch_attention takes (its query blocks live in shared memory).
constexpr int64_t ATTENTION_MAX_HEAD_DIM = 512;

void launch_kv_quantize(const float* k, const float* v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                        uint8_t* cells);
// scratch: (n_q * n_head * n_cells) int32.
// cap > 0: scores capped (inv_cap = recip_f32(cap)); sinks: n_head device floats or null.
void launch_attention(const float* q, int64_t n_q, const int64_t* n_kv, int64_t n_head, int64_t n_head_kv,
                      int64_t head_dim, const uint8_t* cells, int64_t n_cells, float kq_scale, float cap,
                      float inv_cap, const float* sinks, int32_t* scratch, float* out);

}  // namespace detaudit::kernels::cuda
