// The CUDA backend's gpu::device: device enumeration, weight upload, and one synchronous call per
// op (inputs copied in, kernels of kernels_*.cu launched, results copied out).
//
// Goals: every call gives the bytes of its kernels/ref twin (the kernels' arithmetic is
// exact_device.h, tested on the host); bad input throws the same input_error the reference would,
// checked here on the host before anything runs; every CUDA error becomes a std::runtime_error
// naming the call that failed.
// Non-goals: keeping activations on the device between calls, streams, multi-GPU.
//
// Environment: DETAUDIT_CUDA_DP4A=0 makes matmul take the plain 32-bit products for every weight
// type (read once per device); unset or any other value lets integer block types take the dp4a
// path. The two paths give the same bits; the switch exists to compare them.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/dtype.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_internal.h"
#include "numerics/exact.h"
#include "numerics/wblock.h"
#include "util/error.h"

namespace detaudit::kernels::cuda {
namespace {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + call + " failed: " + cudaGetErrorString(e));
}

// After a batch of launches: a launch error, then an execution error.
void check_launch(const char* what) {
  check(cudaGetLastError(), what);
  check(cudaDeviceSynchronize(), what);
}

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

void require_finite(const float* x, int64_t n, const char* who) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &x[i], 4);
    if ((b & 0x7f800000u) == 0x7f800000u) {
      throw input_error(std::string(who) + ": non-finite value " + std::to_string(x[i]) + " at index " +
                        std::to_string(i) + " (expected a finite float)");
    }
  }
}

// A device allocation that only grows.
class dbuf {
 public:
  dbuf() = default;
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  ~dbuf() { if (p_) cudaFree(p_); }
  template <typename T>
  T* get(size_t count) {
    const size_t bytes = count * sizeof(T) > 0 ? count * sizeof(T) : 4;
    if (bytes > cap_) {
      if (p_) check(cudaFree(p_), "cudaFree");
      p_ = nullptr;
      cap_ = 0;
      check(cudaMalloc(&p_, bytes), "cudaMalloc");
      cap_ = bytes;
    }
    return static_cast<T*>(p_);
  }
 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

template <typename T>
void to_device(T* dst, const T* src, size_t count) {
  if (count) check(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy (to device)");
}

template <typename T>
void to_host(T* dst, const T* src, size_t count) {
  if (count) check(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
}

struct weight_entry {
  gguf::dtype type;
  int64_t n_in = 0;
  int64_t n_out = 0;
  uint64_t row_bytes = 0;
  dbuf data;
  dbuf bounds;
};

size_t sz(int64_t v) { return static_cast<size_t>(v); }

bool int8_enabled() {
  const char* v = std::getenv("DETAUDIT_CUDA_DP4A");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

class cuda_device final : public gpu::device {
 public:
  cuda_device(int index, gpu::device_desc desc) : index_(index), desc_(std::move(desc)), int8_(int8_enabled()) {
    select();
  }
  ~cuda_device() override { cudaSetDevice(index_); }

  const gpu::device_desc& desc() const override { return desc_; }

  gpu::weight_handle upload_weight(gguf::dtype t, const uint8_t* data, int64_t n_in, int64_t n_out) override;
  void matmul(gpu::weight_handle w, const float* x, int64_t n_tok, float* y) override;
  void rms_norm(const float* x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;
  void add_bias(float* x, int64_t rows, int64_t cols, const float* b) override;
  void rope(float* x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
            const float* tables) override;
  void kv_quantize(const float* k, const float* v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                   uint8_t* cells) override;
  void attention(const float* q, int64_t n_q, const int64_t* n_kv, int64_t n_head, int64_t n_head_kv,
                 int64_t head_dim, const uint8_t* cells, int64_t n_cells, float kq_scale, float* out) override;

 private:
  void select() { check(cudaSetDevice(index_), "cudaSetDevice"); }
  // out = launch(a, b) element-wise over n floats (swiglu, add): copies in, launch, copy out.
  void binary_op(const char* what, void (*launch)(const float*, const float*, int64_t, float*), const float* a,
                 const float* b, int64_t n, float* out);

  int index_;
  gpu::device_desc desc_;
  bool int8_;  // matmul may take the dp4a path (DETAUDIT_CUDA_DP4A)
  std::vector<std::unique_ptr<weight_entry>> weights_;
  dbuf in_a_, in_b_, out_, q_, exp_, max_, pack_, cells_, nkv_, scratch_, small_;
};

gpu::weight_handle cuda_device::upload_weight(gguf::dtype t, const uint8_t* data, int64_t n_in, int64_t n_out) {
  numerics::weight_check_type(t);
  if (t == gguf::DTYPE_MXFP4)  // its E8M0 scale is not the fp16 the shaders decode
    throw input_error("cuda upload_weight: mxfp4 weights are not computed on the GPU yet; use --backend cpu");
  if (n_in < 0 || n_out < 0)
    throw input_error("upload_weight: negative shape (" + std::to_string(n_out) + ", " + std::to_string(n_in) + ")");
  const uint64_t row_bytes = gguf::dtype_row_bytes(t, n_in);
  std::vector<int32_t> bounds(sz(n_out));
  cpu::weight_row_bounds(t, data, n_in, 0, n_out, bounds.data());
  select();
  auto e = std::make_unique<weight_entry>();
  e->type = t;
  e->n_in = n_in;
  e->n_out = n_out;
  e->row_bytes = row_bytes;
  to_device(e->data.get<uint8_t>(row_bytes * static_cast<uint64_t>(n_out)), data, row_bytes * static_cast<uint64_t>(n_out));
  to_device(e->bounds.get<int32_t>(sz(n_out)), bounds.data(), sz(n_out));
  weights_.push_back(std::move(e));
  return gpu::weight_handle{static_cast<int32_t>(weights_.size() - 1)};
}

void cuda_device::matmul(gpu::weight_handle w, const float* x, int64_t n_tok, float* y) {
  if (w.id < 0 || w.id >= static_cast<int32_t>(weights_.size()))
    throw std::logic_error("cuda matmul: unknown weight handle " + std::to_string(w.id));
  weight_entry& e = *weights_[sz(w.id)];
  if (n_tok < 1 || e.n_out == 0) return;
  require_finite(x, n_tok * e.n_in, "cuda matmul");
  select();
  const int64_t nb = (e.n_in + numerics::QBLOCK - 1) / numerics::QBLOCK;
  float* dx = in_a_.get<float>(sz(n_tok * e.n_in));
  int16_t* dq = q_.get<int16_t>(sz(n_tok * nb * numerics::QBLOCK));
  int32_t* dexp = exp_.get<int32_t>(sz(n_tok * nb));
  int32_t* dmax = max_.get<int32_t>(sz(n_tok));
  float* dy = out_.get<float>(sz(n_tok * e.n_out));
  const bool float_rows = e.type == gguf::DTYPE_F32 || e.type == gguf::DTYPE_F16 || e.type == gguf::DTYPE_BF16;
  uint32_t* dpack = int8_ && !float_rows ? pack_.get<uint32_t>(sz(n_tok * nb * MATMUL_PACK_WORDS)) : nullptr;
  to_device(dx, x, sz(n_tok * e.n_in));
  launch_quantize_rows(dx, n_tok, e.n_in, dq, dexp, dmax);
  launch_matmul(static_cast<int32_t>(e.type), e.data.get<uint8_t>(0), e.row_bytes, e.bounds.get<int32_t>(0), e.n_in,
                e.n_out, dq, dexp, dmax, n_tok, dpack, dy);
  check_launch("matmul kernels");
  to_host(y, dy, sz(n_tok * e.n_out));
}

void cuda_device::rms_norm(const float* x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                           float* out) {
  if (group < 1 || cols % group != 0)
    throw input_error("cuda rms_norm: group " + std::to_string(group) + " does not divide cols " + std::to_string(cols));
  if (!(eps > 0.0f)) throw input_error("cuda rms_norm: eps " + std::to_string(eps) + " is not > 0");
  if (rows < 1 || cols < 1) return;
  require_finite(x, rows * cols, "cuda rms_norm");
  select();
  const size_t n = sz(rows * cols);
  float* dx = in_a_.get<float>(n);
  float* dw = nullptr;
  to_device(dx, x, n);
  if (w) {
    dw = small_.get<float>(sz(group));
    to_device(dw, w, sz(group));
  }
  const float inv_n = static_cast<float>(1.0 / static_cast<double>(group));
  float* dout = out_.get<float>(n);
  launch_rms_norm(dx, rows, cols, group, dw, eps, inv_n, dout);
  check_launch("rms_norm kernel");
  to_host(out, dout, n);
}

void cuda_device::binary_op(const char* what, void (*launch)(const float*, const float*, int64_t, float*),
                            const float* a, const float* b, int64_t n, float* out) {
  if (n < 1) return;
  select();
  float* da = in_a_.get<float>(sz(n));
  float* db = in_b_.get<float>(sz(n));
  float* dout = out_.get<float>(sz(n));
  to_device(da, a, sz(n));
  to_device(db, b, sz(n));
  launch(da, db, n, dout);
  check_launch(what);
  to_host(out, dout, sz(n));
}

void cuda_device::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  binary_op("swiglu kernel", launch_swiglu, gate, up, n, out);
}

void cuda_device::add(const float* a, const float* b, int64_t n, float* out) {
  binary_op("add kernel", launch_add, a, b, n, out);
}

void cuda_device::add_bias(float* x, int64_t rows, int64_t cols, const float* b) {
  if (rows < 1 || cols < 1) return;
  select();
  float* dx = in_a_.get<float>(sz(rows * cols));
  float* db = in_b_.get<float>(sz(cols));
  to_device(dx, x, sz(rows * cols));
  to_device(db, b, sz(cols));
  launch_add_bias(dx, rows, cols, db);
  check_launch("add_bias kernel");
  to_host(x, dx, sz(rows * cols));
}

void cuda_device::rope(float* x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                       const float* tables) {
  if (n_rot < 0 || n_rot % 2 != 0 || n_rot > head_dim)
    throw input_error("cuda rope: n_rot " + std::to_string(n_rot) + " must be even and <= head_dim " +
                      std::to_string(head_dim));
  if (rows < 1 || n_head < 1 || n_rot == 0) return;
  select();
  const size_t n = sz(rows * n_head * head_dim);
  float* dx = in_a_.get<float>(n);
  float* dt = in_b_.get<float>(sz(rows * n_rot));
  to_device(dx, x, n);
  to_device(dt, tables, sz(rows * n_rot));
  launch_rope(dx, rows, n_head, head_dim, n_rot, neox, dt);
  check_launch("rope kernel");
  to_host(x, dx, n);
}

void cuda_device::kv_quantize(const float* k, const float* v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                              uint8_t* cells) {
  if (rows < 1 || n_head_kv < 1 || head_dim < 1) return;
  const size_t n = sz(rows * n_head_kv * head_dim);
  require_finite(k, rows * n_head_kv * head_dim, "cuda kv_quantize (K)");
  require_finite(v, rows * n_head_kv * head_dim, "cuda kv_quantize (V)");
  select();
  const int64_t nb = (head_dim + numerics::QBLOCK - 1) / numerics::QBLOCK;
  const size_t cell_bytes = sz(2 * n_head_kv * nb * (numerics::QBLOCK * 2 + 4));
  float* dk = in_a_.get<float>(n);
  float* dv = in_b_.get<float>(n);
  uint8_t* dc = cells_.get<uint8_t>(cell_bytes * sz(rows));
  to_device(dk, k, n);
  to_device(dv, v, n);
  launch_kv_quantize(dk, dv, rows, n_head_kv, head_dim, dc);
  check_launch("kv_quantize kernel");
  to_host(cells, dc, cell_bytes * sz(rows));
}

void cuda_device::attention(const float* q, int64_t n_q, const int64_t* n_kv, int64_t n_head, int64_t n_head_kv,
                            int64_t head_dim, const uint8_t* cells, int64_t n_cells, float kq_scale, float* out) {
  if (head_dim < 1 || head_dim > ATTENTION_MAX_HEAD_DIM)
    throw input_error("cuda attention: head_dim " + std::to_string(head_dim) + " not in 1.." +
                      std::to_string(ATTENTION_MAX_HEAD_DIM));
  if (n_head_kv < 1 || n_head % n_head_kv != 0)
    throw input_error("cuda attention: n_head " + std::to_string(n_head) + " is not a multiple of n_head_kv " +
                      std::to_string(n_head_kv));
  for (int64_t r = 0; r < n_q; ++r) {
    if (n_kv[r] < 0 || n_kv[r] > n_cells)
      throw input_error("cuda attention: query " + std::to_string(r) + " attends " + std::to_string(n_kv[r]) +
                        " positions of " + std::to_string(n_cells));
  }
  if (n_q < 1 || n_head < 1) return;
  for (int64_t r = 0; r < n_q; ++r) {  // a row that attends nothing is never read (as in the reference)
    if (n_kv[r] > 0) require_finite(q + r * n_head * head_dim, n_head * head_dim, "cuda attention");
  }
  select();
  const int64_t nb = (head_dim + numerics::QBLOCK - 1) / numerics::QBLOCK;
  const size_t cell_bytes = sz(2 * n_head_kv * nb * (numerics::QBLOCK * 2 + 4));
  const size_t nq = sz(n_q * n_head * head_dim);
  float* dq = in_a_.get<float>(nq);
  uint8_t* dc = cells_.get<uint8_t>(cell_bytes * sz(n_cells));
  int64_t* dn = nkv_.get<int64_t>(sz(n_q));
  int32_t* ds = scratch_.get<int32_t>(sz(n_q * n_head * (n_cells > 0 ? n_cells : 1)));
  float* dout = out_.get<float>(nq);
  to_device(dq, q, nq);
  to_device(dc, cells, cell_bytes * sz(n_cells));
  to_device(dn, n_kv, sz(n_q));
  launch_attention(dq, n_q, dn, n_head, n_head_kv, head_dim, dc, n_cells, kq_scale, ds, dout);
  check_launch("attention kernel");
  to_host(out, dout, nq);
}

}  // namespace

std::vector<gpu::device_desc> list_devices() {
  std::vector<gpu::device_desc> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return out;
  }
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    gpu::device_desc d;
    d.index = i;
    d.name = prop.name;
    d.kind = "discrete";
    d.api_version = version_string(runtime);
    d.driver = "NVIDIA CUDA driver " + version_string(driver) + ", compute capability " +
               std::to_string(prop.major) + "." + std::to_string(prop.minor);
    d.exact_ok = prop.major >= 8;
    if (!d.exact_ok) {
      d.refusal = "compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                  " is below 8.0 (the CUDA kernels are built for sm_80 and newer)";
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::unique_ptr<gpu::device> open_device(int index) {
  const std::vector<gpu::device_desc> devs = list_devices();
  if (index < 0 || index >= static_cast<int>(devs.size()))
    throw input_error("CUDA device " + std::to_string(index) + " does not exist");
  return std::make_unique<cuda_device>(index, devs[sz(index)]);
}

}  // namespace detaudit::kernels::cuda
