// The CUDA backend's gpu::device: device enumeration, weight upload, the pointer form of each op
// (one synchronous call: inputs copied in, kernels of kernels_*.cu launched, results copied out)
// and its slot form (gpu.h): slots are device allocations, slot ops only launch kernels on the
// default stream, so a forward step's ops between two host reads run back to back without a copy
// or a synchronization. Constant host inputs of slot ops (norm weights, biases, RoPE tables) are
// uploaded when their bytes change and reused otherwise. The non-finite inputs that the pointer
// forms reject on the host are found on the device by a check kernel that sets a flag in mapped
// host memory, read after each synchronization (slot_read, kv_quantize_slot, finish).
//
// Goals: every call gives the bytes of its kernels/ref twin (the kernels' arithmetic is
// exact_device.h, tested on the host); bad input throws the same input_error the reference would,
// checked here on the host before anything runs; every CUDA error becomes a std::runtime_error
// naming the call that failed.
// Non-goals: the KV cache on the device, streams, graphs, multi-GPU.
//
// Environment: DETAUDIT_CUDA_DP4A=0 makes matmul take the plain 32-bit products for every weight
// type (read once per device); unset or any other value lets integer block types take the dp4a
// path. The two paths give the same bits; the switch exists to compare them.
// DETAUDIT_CUDA_PROFILE=1 makes the device count, per op, its calls and the wall time spent in host
// checks, copies to the device, kernels (launch to synchronize) and copies back, with the bytes
// copied, and print the table to stderr when the device is closed: where a forward step's time goes.
// Slot ops do not wait for their kernels: their time is the launch, and the kernels' time lands in
// the next call that synchronizes (slot_read, kv_quantize_slot, an upload).
// DETAUDIT_CUDA_RESIDENT=0 makes the slot forms keep their slots in host memory and call the
// pointer forms (gpu.h's defaults, a copy in and out per op): the two give the same bits; the
// switch exists to measure what the copies cost.
#include <cuda_runtime.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "gguf/dtype.h"
#include "gguf/weight_types.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/exact_device.h"
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

// DETAUDIT_CUDA_PROFILE: the phases of one op's calls. Calls are synchronous, so wall time between
// phase boundaries is the phase's time. The device is used by one thread at a time (gpu.h), and so
// is this record of its current op.
enum prof_phase { PH_CHECK, PH_TO_DEVICE, PH_KERNEL, PH_TO_HOST, PH_COUNT };
struct op_profile {
  uint64_t calls = 0;
  double seconds[PH_COUNT] = {};
  uint64_t bytes_in = 0, bytes_out = 0;
};
enum op_kind {
  OP_MATMUL, OP_RMS_NORM, OP_SWIGLU, OP_ADD, OP_ADD_BIAS, OP_ROPE, OP_KV_QUANTIZE, OP_ATTENTION,
  OP_ACTIVATION, OP_SLOT_WRITE, OP_SLOT_READ, OP_COUNT
};
const char* const op_names[OP_COUNT] = {"matmul", "rms_norm", "swiglu", "add", "add_bias", "rope",
                                        "kv_quantize", "attention", "activation", "slot_write", "slot_read"};

struct profiler {
  bool on = false;
  op_profile ops[OP_COUNT];
  op_profile* cur = nullptr;
  std::chrono::steady_clock::time_point mark;
  // Starts op k's call: time from here to the next phase() is host checks.
  void begin(op_kind k) {
    if (!on) return;
    cur = &ops[k];
    ++cur->calls;
    mark = std::chrono::steady_clock::now();
  }
  // Ends the current phase, charged to p.
  void phase(prof_phase p) {
    if (!on || !cur) return;
    const auto now = std::chrono::steady_clock::now();
    cur->seconds[p] += std::chrono::duration<double>(now - mark).count();
    mark = now;
  }
  void print(const std::string& device) const {
    if (!on) return;
    std::fprintf(stderr, "cuda profile (%s): op, calls, ms in host checks / to device / kernels / to host, MB in / out\n",
                 device.c_str());
    double total[PH_COUNT] = {};
    for (int k = 0; k < OP_COUNT; ++k) {
      const op_profile& o = ops[k];
      if (!o.calls) continue;
      std::fprintf(stderr, "  %-12s %8" PRIu64 "  %9.1f %9.1f %9.1f %9.1f  %9.1f %9.1f\n", op_names[k], o.calls,
                   1e3 * o.seconds[PH_CHECK], 1e3 * o.seconds[PH_TO_DEVICE], 1e3 * o.seconds[PH_KERNEL],
                   1e3 * o.seconds[PH_TO_HOST], o.bytes_in / 1e6, o.bytes_out / 1e6);
      for (int p = 0; p < PH_COUNT; ++p) total[p] += o.seconds[p];
    }
    std::fprintf(stderr, "  %-12s %8s  %9.1f %9.1f %9.1f %9.1f\n", "total", "", 1e3 * total[PH_CHECK],
                 1e3 * total[PH_TO_DEVICE], 1e3 * total[PH_KERNEL], 1e3 * total[PH_TO_HOST]);
  }
};

bool profile_enabled() {
  const char* v = std::getenv("DETAUDIT_CUDA_PROFILE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

profiler* g_prof = nullptr;  // the profile of the device whose call is running (null: none)

// One op call's span in the profile: weight uploads and calls outside a span are not counted.
class op_scope {
 public:
  op_scope(profiler& p, op_kind k) {
    if (!p.on) return;
    g_prof = &p;
    p.begin(k);
  }
  ~op_scope() {  // what follows the last copy (a slot op's launches) counts as kernel time
    if (g_prof) {
      g_prof->phase(PH_KERNEL);
      g_prof->cur = nullptr;
    }
    g_prof = nullptr;
  }
  op_scope(const op_scope&) = delete;
  op_scope& operator=(const op_scope&) = delete;
};

template <typename T>
void to_device(T* dst, const T* src, size_t count) {
  if (g_prof) g_prof->phase(PH_CHECK);
  if (count) check(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy (to device)");
  if (g_prof && g_prof->cur) {
    g_prof->cur->bytes_in += count * sizeof(T);
    g_prof->phase(PH_TO_DEVICE);
  }
}

template <typename T>
void to_host(T* dst, const T* src, size_t count) {
  if (g_prof) g_prof->phase(PH_KERNEL);
  if (count) check(cudaMemcpy(dst, src, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
  if (g_prof && g_prof->cur) {
    g_prof->cur->bytes_out += count * sizeof(T);
    g_prof->phase(PH_TO_HOST);
  }
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

// The shape errors the reference throws, shared by an op's pointer and slot forms.
void check_rms_norm_args(int64_t cols, int64_t group, float eps) {
  if (group < 1 || cols % group != 0)
    throw input_error("cuda rms_norm: group " + std::to_string(group) + " does not divide cols " + std::to_string(cols));
  if (!(eps > 0.0f)) throw input_error("cuda rms_norm: eps " + std::to_string(eps) + " is not > 0");
}

void check_rope_args(int64_t head_dim, int64_t n_rot) {
  if (n_rot < 0 || n_rot % 2 != 0 || n_rot > head_dim)
    throw input_error("cuda rope: n_rot " + std::to_string(n_rot) + " must be even and <= head_dim " +
                      std::to_string(head_dim));
}

bool resident_enabled() {
  const char* v = std::getenv("DETAUDIT_CUDA_RESIDENT");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// A 4-byte flag in mapped, page-locked host memory: kernels write it through its device address
// and the host reads it after a synchronization, with no copy.
class mapped_flag {
 public:
  mapped_flag() = default;
  mapped_flag(const mapped_flag&) = delete;
  mapped_flag& operator=(const mapped_flag&) = delete;
  ~mapped_flag() { if (host_) cudaFreeHost(const_cast<int32_t*>(host_)); }
  int32_t* device() {
    if (!host_) {
      void* h = nullptr;
      check(cudaHostAlloc(&h, sizeof(int32_t), cudaHostAllocMapped), "cudaHostAlloc (mapped flag)");
      host_ = static_cast<volatile int32_t*>(h);
      *host_ = 0;
      void* d = nullptr;
      check(cudaHostGetDevicePointer(&d, h, 0), "cudaHostGetDevicePointer");
      dev_ = static_cast<int32_t*>(d);
    }
    return dev_;
  }
  // The flag's value (after a synchronization), then zero.
  bool take() {
    if (!host_ || *host_ == 0) return false;
    *host_ = 0;
    return true;
  }
 private:
  volatile int32_t* host_ = nullptr;
  int32_t* dev_ = nullptr;
};

// A constant host array of a slot op (norm weight, bias, RoPE tables) on the device, uploaded
// again only when its bytes differ from the last upload from the same address.
struct const_entry {
  std::vector<float> host;
  dbuf dev;
};

bool int8_enabled() {
  const char* v = std::getenv("DETAUDIT_CUDA_DP4A");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

class cuda_device final : public gpu::device {
 public:
  cuda_device(int index, gpu::device_desc desc)
      : index_(index), desc_(std::move(desc)), int8_(int8_enabled()), resident_(resident_enabled()) {
    prof_.on = profile_enabled();
    select();
  }
  ~cuda_device() override {
    prof_.print(desc_.name);
    cudaSetDevice(index_);
  }

  const gpu::device_desc& desc() const override { return desc_; }

  gpu::weight_handle upload_weight(gguf::dtype t, const uint8_t* data, int64_t n_in, int64_t n_out) override;
  void matmul(gpu::weight_handle w, const float* x, int64_t n_tok, float* y) override;
  void rms_norm(const float* x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;
  void add_bias(float* x, int64_t rows, int64_t cols, const float* b) override;
  void activation(gpu::act k, const float* a, const float* b, int64_t n, const gpu::act_params& p,
                  float* out) override;
  void rope(float* x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
            const float* tables) override;
  void kv_quantize(const float* k, const float* v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                   uint8_t* cells) override;
  void attention(const float* q, int64_t n_q, const int64_t* n_kv, int64_t n_head, int64_t n_head_kv,
                 int64_t head_dim, const uint8_t* cells, int64_t n_cells, float kq_scale,
                 const gpu::attention_extras& x, float* out) override;

  void slot_write(int32_t s, const float* x, int64_t n) override;
  void slot_read(int32_t s, float* x, int64_t n) override;
  void matmul_slot(gpu::weight_handle w, int32_t x, int64_t n_tok, int64_t n_in, int64_t n_out, int32_t y) override;
  void rms_norm_slot(int32_t x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                     int32_t out) override;
  void swiglu_slot(int32_t gate, int32_t up, int64_t n, int32_t out) override;
  void add_slot(int32_t a, int32_t b, int64_t n, int32_t out) override;
  void add_bias_slot(int32_t x, int64_t rows, int64_t cols, const float* b) override;
  void activation_slot(gpu::act k, int32_t a, int32_t b, int64_t n, const gpu::act_params& p, int32_t out) override;
  void rope_slot(int32_t x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                 const float* tables) override;
  void kv_quantize_slot(int32_t k, int32_t v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                        uint8_t* cells) override;
  void finish(bool raise) override;

 private:
  struct slot_entry {
    dbuf buf;
    int64_t n = 0;  // floats it holds
  };
  slot_entry& slot(int32_t s);
  // Slot s's device array, which must hold n floats.
  float* slot_held(int32_t s, int64_t n);
  // Slot s resized to n floats (contents lost), for an op's output that is not one of its inputs.
  float* slot_sized(int32_t s, int64_t n);
  // The device copy of n constant floats at host address x (see const_entry).
  const float* constant(const float* x, int64_t n);
  // Queues the check of n device floats: a NaN or infinity sets nonfinite_.
  void check_finite(const float* d, int64_t n);
  // After a synchronization: throws input_error naming `who` when a queued check found a non-finite value.
  void raise_nonfinite(const char* who);
  gpu::weight_handle valid(gpu::weight_handle w, const char* who) const;
  // out = launch(a, b) element-wise over n floats of slots (swiglu_slot, add_slot).
  void binary_slot(op_kind k, const char* what, void (*launch)(const float*, const float*, int64_t, float*),
                   int32_t a, int32_t b, int64_t n, int32_t out);
  void select() { check(cudaSetDevice(index_), "cudaSetDevice"); }
  // out = launch(a, b) element-wise over n floats (swiglu, add): copies in, launch, copy out.
  void binary_op(const char* what, void (*launch)(const float*, const float*, int64_t, float*), const float* a,
                 const float* b, int64_t n, float* out);

  int index_;
  gpu::device_desc desc_;
  bool int8_;  // matmul may take the dp4a path (DETAUDIT_CUDA_DP4A)
  profiler prof_;  // DETAUDIT_CUDA_PROFILE
  bool resident_;  // slots in device memory (DETAUDIT_CUDA_RESIDENT)
  std::vector<std::unique_ptr<slot_entry>> slots_;
  std::unordered_map<const float*, std::unique_ptr<const_entry>> constants_;
  mapped_flag nonfinite_;
  std::vector<std::unique_ptr<weight_entry>> weights_;
  dbuf in_a_, in_b_, out_, q_, exp_, max_, pack_, cells_, nkv_, scratch_, small_, sinks_;
};

gpu::weight_handle cuda_device::upload_weight(gguf::dtype t, const uint8_t* data, int64_t n_in, int64_t n_out) {
  numerics::weight_check_type(t);
  if (!gguf::weight_type_of(t)->gpu)  // gguf/weight_types.h, column gpu: a type the kernels do not decode
    throw input_error(std::string("cuda upload_weight: ") + gguf::dtype_get(t).name +
                      " weights are not computed on the GPU yet; use --backend cpu");
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
  const op_scope scope(prof_, OP_MATMUL);
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
  const bool float_rows = gguf::weight_type_of(e.type)->float_rows;
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
  const op_scope scope(prof_, OP_RMS_NORM);
  check_rms_norm_args(cols, group, eps);
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
  const op_scope scope(prof_, OP_SWIGLU);
  binary_op("swiglu kernel", launch_swiglu, gate, up, n, out);
}

// launch_activation's kind is the gpu::act value.
static_assert(static_cast<int>(gpu::act::geglu) == xd::ACT_GEGLU && static_cast<int>(gpu::act::swiglu_oai) == xd::ACT_SWIGLU_OAI &&
              static_cast<int>(gpu::act::softcap) == xd::ACT_SOFTCAP && static_cast<int>(gpu::act::scale) == xd::ACT_SCALE);

void cuda_device::activation(gpu::act k, const float* a, const float* b, int64_t n, const gpu::act_params& p,
                             float* out) {
  const op_scope scope(prof_, OP_ACTIVATION);
  float p0, p1;
  gpu::act_kernel_params(k, p, &p0, &p1);  // a cap softcap_f32_ref refuses is refused here
  if (n < 1) return;
  select();
  float* da = in_a_.get<float>(sz(n));
  float* db = nullptr;
  float* dout = out_.get<float>(sz(n));
  to_device(da, a, sz(n));
  if (gpu::act_binary(k)) {
    db = in_b_.get<float>(sz(n));
    to_device(db, b, sz(n));
  }
  launch_activation(static_cast<int>(k), da, db, n, p0, p1, dout);
  check_launch("activation kernel");
  to_host(out, dout, sz(n));
}

void cuda_device::add(const float* a, const float* b, int64_t n, float* out) {
  const op_scope scope(prof_, OP_ADD);
  binary_op("add kernel", launch_add, a, b, n, out);
}

void cuda_device::add_bias(float* x, int64_t rows, int64_t cols, const float* b) {
  const op_scope scope(prof_, OP_ADD_BIAS);
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
  const op_scope scope(prof_, OP_ROPE);
  check_rope_args(head_dim, n_rot);
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
  const op_scope scope(prof_, OP_KV_QUANTIZE);
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
                            int64_t head_dim, const uint8_t* cells, int64_t n_cells, float kq_scale,
                            const gpu::attention_extras& x, float* out) {
  const op_scope scope(prof_, OP_ATTENTION);
  const float inv_cap = gpu::attention_extras_check(x, n_head);
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
  float* dsink = nullptr;
  if (x.sinks) {
    dsink = sinks_.get<float>(sz(n_head));
    to_device(dsink, x.sinks, sz(n_head));
  }
  launch_attention(dq, n_q, dn, n_head, n_head_kv, head_dim, dc, n_cells, kq_scale, x.softcap, inv_cap, dsink, ds, dout);
  check_launch("attention kernel");
  to_host(out, dout, nq);
}


// ---- slots ----

cuda_device::slot_entry& cuda_device::slot(int32_t s) {
  if (s < 0) throw std::logic_error("cuda slot " + std::to_string(s) + " is negative");
  while (slots_.size() <= sz(s)) slots_.push_back(std::make_unique<slot_entry>());
  return *slots_[sz(s)];
}

float* cuda_device::slot_held(int32_t s, int64_t n) {
  slot_entry& e = slot(s);
  if (n < 0 || n > e.n)
    throw std::logic_error("cuda slot " + std::to_string(s) + " holds " + std::to_string(e.n) + " floats, not " +
                           std::to_string(n));
  return e.buf.get<float>(sz(e.n));
}

float* cuda_device::slot_sized(int32_t s, int64_t n) {
  slot_entry& e = slot(s);
  e.n = 0;  // holds nothing until the allocation below has succeeded
  float* p = e.buf.get<float>(sz(n));
  e.n = n;
  return p;
}

const float* cuda_device::constant(const float* x, int64_t n) {
  std::unique_ptr<const_entry>& e = constants_[x];
  if (!e) e = std::make_unique<const_entry>();
  if (e->host.size() != sz(n) || std::memcmp(e->host.data(), x, sz(n) * sizeof(float)) != 0) {
    e->host.assign(x, x + n);
    to_device(e->dev.get<float>(sz(n)), x, sz(n));
  }
  return e->dev.get<float>(sz(n));
}

void cuda_device::check_finite(const float* d, int64_t n) {
  launch_find_nonfinite(d, n, nonfinite_.device());
}

void cuda_device::raise_nonfinite(const char* who) {
  if (nonfinite_.take())
    throw input_error(std::string(who) + ": a non-finite value in an activation on the device (expected finite floats)");
}

gpu::weight_handle cuda_device::valid(gpu::weight_handle w, const char* who) const {
  if (w.id < 0 || w.id >= static_cast<int32_t>(weights_.size()))
    throw std::logic_error(std::string(who) + ": unknown weight handle " + std::to_string(w.id));
  return w;
}

void cuda_device::slot_write(int32_t s, const float* x, int64_t n) {
  if (!resident_) return gpu::device::slot_write(s, x, n);
  const op_scope scope(prof_, OP_SLOT_WRITE);
  select();
  to_device(slot_sized(s, n), x, sz(n));
}

void cuda_device::slot_read(int32_t s, float* x, int64_t n) {
  if (!resident_) return gpu::device::slot_read(s, x, n);
  const op_scope scope(prof_, OP_SLOT_READ);
  select();
  const float* d = slot_held(s, n);
  check(cudaGetLastError(), "slot kernels");
  if (n > 0) to_host(x, d, sz(n));  // waits for every queued kernel
  else check(cudaDeviceSynchronize(), "slot kernels");
  raise_nonfinite("cuda slot_read");
}

void cuda_device::finish(bool raise) {
  if (!resident_) return;
  select();
  check(cudaDeviceSynchronize(), "slot kernels");
  if (raise) raise_nonfinite("cuda");
  else nonfinite_.take();
}

void cuda_device::matmul_slot(gpu::weight_handle w, int32_t x, int64_t n_tok, int64_t n_in, int64_t n_out, int32_t y) {
  if (!resident_) return gpu::device::matmul_slot(w, x, n_tok, n_in, n_out, y);
  const op_scope scope(prof_, OP_MATMUL);
  weight_entry& e = *weights_[sz(valid(w, "cuda matmul_slot").id)];
  if (n_in != e.n_in || n_out != e.n_out)
    throw std::logic_error("cuda matmul_slot: shape (" + std::to_string(n_out) + ", " + std::to_string(n_in) +
                           ") is not the weight's (" + std::to_string(e.n_out) + ", " + std::to_string(e.n_in) + ")");
  if (y == x) throw std::logic_error("cuda matmul_slot: the output slot is the input slot");
  if (n_tok < 1) return;
  select();
  const float* dx = slot_held(x, n_tok * e.n_in);
  float* dy = slot_sized(y, n_tok * e.n_out);
  if (e.n_out == 0) return;
  const int64_t nb = (e.n_in + numerics::QBLOCK - 1) / numerics::QBLOCK;
  int16_t* dq = q_.get<int16_t>(sz(n_tok * nb * numerics::QBLOCK));
  int32_t* dexp = exp_.get<int32_t>(sz(n_tok * nb));
  int32_t* dmax = max_.get<int32_t>(sz(n_tok));
  const bool float_rows = gguf::weight_type_of(e.type)->float_rows;
  uint32_t* dpack = int8_ && !float_rows ? pack_.get<uint32_t>(sz(n_tok * nb * MATMUL_PACK_WORDS)) : nullptr;
  check_finite(dx, n_tok * e.n_in);
  launch_quantize_rows(dx, n_tok, e.n_in, dq, dexp, dmax);
  launch_matmul(static_cast<int32_t>(e.type), e.data.get<uint8_t>(0), e.row_bytes, e.bounds.get<int32_t>(0), e.n_in,
                e.n_out, dq, dexp, dmax, n_tok, dpack, dy);
  check(cudaGetLastError(), "matmul kernels");
}

void cuda_device::rms_norm_slot(int32_t x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                                int32_t out) {
  if (!resident_) return gpu::device::rms_norm_slot(x, rows, cols, group, w, eps, out);
  const op_scope scope(prof_, OP_RMS_NORM);
  check_rms_norm_args(cols, group, eps);
  if (rows < 1 || cols < 1) return;
  select();
  const int64_t n = rows * cols;
  const float* dx = slot_held(x, n);
  const float* dw = w ? constant(w, group) : nullptr;
  float* dout = out == x ? slot_held(out, n) : slot_sized(out, n);
  check_finite(dx, n);
  const float inv_n = static_cast<float>(1.0 / static_cast<double>(group));
  launch_rms_norm(dx, rows, cols, group, dw, eps, inv_n, dout);
  check(cudaGetLastError(), "rms_norm kernel");
}

void cuda_device::binary_slot(op_kind k, const char* what, void (*launch)(const float*, const float*, int64_t, float*),
                              int32_t a, int32_t b, int64_t n, int32_t out) {
  const op_scope scope(prof_, k);
  if (n < 1) return;
  select();
  const float* da = slot_held(a, n);
  const float* db = slot_held(b, n);
  float* dout = out == a || out == b ? slot_held(out, n) : slot_sized(out, n);
  launch(da, db, n, dout);
  check(cudaGetLastError(), what);
}

void cuda_device::swiglu_slot(int32_t gate, int32_t up, int64_t n, int32_t out) {
  if (!resident_) return gpu::device::swiglu_slot(gate, up, n, out);
  binary_slot(OP_SWIGLU, "swiglu kernel", launch_swiglu, gate, up, n, out);
}

void cuda_device::activation_slot(gpu::act k, int32_t a, int32_t b, int64_t n, const gpu::act_params& p,
                                  int32_t out) {
  if (!resident_) return gpu::device::activation_slot(k, a, b, n, p, out);
  const op_scope scope(prof_, OP_ACTIVATION);
  float p0, p1;
  gpu::act_kernel_params(k, p, &p0, &p1);
  if (n < 1) return;
  select();
  const bool binary = gpu::act_binary(k);
  const float* da = slot_held(a, n);
  const float* db = binary ? slot_held(b, n) : nullptr;
  float* dout = out == a || (binary && out == b) ? slot_held(out, n) : slot_sized(out, n);
  launch_activation(static_cast<int>(k), da, db, n, p0, p1, dout);
  check(cudaGetLastError(), "activation kernel");
}

void cuda_device::add_slot(int32_t a, int32_t b, int64_t n, int32_t out) {
  if (!resident_) return gpu::device::add_slot(a, b, n, out);
  binary_slot(OP_ADD, "add kernel", launch_add, a, b, n, out);
}

void cuda_device::add_bias_slot(int32_t x, int64_t rows, int64_t cols, const float* b) {
  if (!resident_) return gpu::device::add_bias_slot(x, rows, cols, b);
  const op_scope scope(prof_, OP_ADD_BIAS);
  if (rows < 1 || cols < 1) return;
  select();
  float* dx = slot_held(x, rows * cols);
  launch_add_bias(dx, rows, cols, constant(b, cols));
  check(cudaGetLastError(), "add_bias kernel");
}

void cuda_device::rope_slot(int32_t x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                            const float* tables) {
  if (!resident_) return gpu::device::rope_slot(x, rows, n_head, head_dim, n_rot, neox, tables);
  const op_scope scope(prof_, OP_ROPE);
  check_rope_args(head_dim, n_rot);
  if (rows < 1 || n_head < 1 || n_rot == 0) return;
  select();
  float* dx = slot_held(x, rows * n_head * head_dim);
  launch_rope(dx, rows, n_head, head_dim, n_rot, neox, constant(tables, rows * n_rot));
  check(cudaGetLastError(), "rope kernel");
}

void cuda_device::kv_quantize_slot(int32_t k, int32_t v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                                   uint8_t* cells) {
  if (!resident_) return gpu::device::kv_quantize_slot(k, v, rows, n_head_kv, head_dim, cells);
  const op_scope scope(prof_, OP_KV_QUANTIZE);
  if (rows < 1 || n_head_kv < 1 || head_dim < 1) return;
  select();
  const int64_t n = rows * n_head_kv * head_dim;
  const float* dk = slot_held(k, n);
  const float* dv = slot_held(v, n);
  const int64_t nb = (head_dim + numerics::QBLOCK - 1) / numerics::QBLOCK;
  const size_t cell_bytes = sz(2 * n_head_kv * nb * (numerics::QBLOCK * 2 + 4));
  uint8_t* dc = cells_.get<uint8_t>(cell_bytes * sz(rows));
  check_finite(dk, n);
  check_finite(dv, n);
  launch_kv_quantize(dk, dv, rows, n_head_kv, head_dim, dc);
  check(cudaGetLastError(), "kv_quantize kernel");
  to_host(cells, dc, cell_bytes * sz(rows));  // waits for every queued kernel
  raise_nonfinite("cuda kv_quantize");
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
