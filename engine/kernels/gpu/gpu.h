// GPU devices for `--numerics exact`: one interface that the Vulkan (kernels/vulkan) and CUDA
// (kernels/cuda) backends implement, and that backends/ops_gpu.cpp drives.
//
// Goals: every op of the forward pass that does arithmetic runs on the device and gives the bytes
// of its kernels/ref twin (docs/precision-contract.md), whatever the device, driver or tiling; the
// per-op tests compare each call here with kernels/ref by memcmp. The device keeps the weights
// (uploaded once). Two forms of each op: the pointer form takes and returns host arrays and is
// synchronous (inputs copied in, results copied out per call); the slot form reads and writes
// activation slots, arrays that may live on the device between ops, so a run of slot ops moves
// no activation over the bus (the CUDA backend). The KV cache stays where the CPU backend keeps it
// (which makes cache copy, truncation and save/restore backend-independent).
// Non-goals: float or reference numerics on a GPU; the KV cache on the device.
//
// Thread-safety: a device is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/dtype.h"

namespace detaudit::kernels::gpu {

enum class api { vulkan, cuda };

const char* api_name(api a);          // "vulkan", "cuda"
bool api_compiled(api a);             // built with -DDETAUDIT_VULKAN=ON / -DDETAUDIT_CUDA=ON

struct device_desc {
  int index = 0;              // the N of --device N (order of the API's enumeration)
  std::string name;           // "llvmpipe (LLVM 15.0.6, 256 bits)", "NVIDIA H200"
  std::string kind;           // "cpu", "integrated", "discrete", "virtual", "other"
  std::string api_version;    // "1.3.230" (Vulkan) / "13.0" (CUDA runtime)
  std::string driver;         // driver name and version as the API reports them
  bool exact_ok = false;      // can run --numerics exact
  std::string features;       // optional paths it uses, e.g. "int8 dot product" ("" for none)
  std::string refusal;        // when !exact_ok: why, in one line ("no RTE rounding for float32")
};

// The devices of an API: empty when the API is compiled in but finds none (no loader, no driver,
// no GPU). Throws input_error when the API is not compiled into this build.
std::vector<device_desc> list_devices(api a);

// The activations of gemma (geglu, softcap, scale) and gpt-oss (swiglu_oai), element-wise: out[i] =
//   geglu       geglu_f32_ref:      flush(gelu_f32(a[i]) * flush(b[i]))
//   swiglu_oai  swiglu_oai_f32_ref: swiglu_oai_f32(a[i], b[i], alpha, limit)
//   softcap     softcap_f32_ref:    softcap_f32(a[i], cap)        (b unused, may be null)
//   scale       scale_f32_ref:      flush(flush(a[i]) * flush(factor))  (b unused, may be null)
enum class act { geglu, swiglu_oai, softcap, scale };
struct act_params {
  float alpha = 0.0f, limit = 0.0f;  // swiglu_oai
  float cap = 0.0f;                  // softcap: a positive normal float with a normal reciprocal
  float factor = 0.0f;               // scale
};
const char* act_name(act k);  // "geglu", "swiglu_oai", "softcap", "scale"
// Whether k reads b.
inline bool act_binary(act k) { return k == act::geglu || k == act::swiglu_oai; }
// Two floats every device kernel takes: swiglu_oai (alpha, limit), softcap (cap, recip_f32(cap)),
// scale (flush(factor), 0), geglu (0, 0). Throws input_error as softcap_f32_ref does for a cap it
// refuses.
void act_kernel_params(act k, const act_params& p, float* p0, float* p1);

// attention's variants beyond causal attention: attention_exact_ref's softcap and sink.
struct attention_extras {
  float softcap = 0.0f;          // > 0: each score capped as softcap_f32(s, softcap) (gemma2); 0: none
  const float* sinks = nullptr;  // n_head floats, query head h's sink (gpt-oss); null: none
};
// Checks x as attention_exact_ref does (a cap it refuses, a sink that is not finite) and returns
// recip_f32(softcap) (0 without a cap). Throws input_error.
float attention_extras_check(const attention_extras& x, int64_t n_head);

// A weight tensor resident on a device.
struct weight_handle {
  int32_t id = -1;
};

class device {
 public:
  virtual ~device() = default;
  virtual const device_desc& desc() const = 0;

  // Uploads n_out rows of dtype_row_bytes(t, n_in) bytes each (any type kernels/ref decodes:
  // F32/F16/BF16 and the ten integer block types) and computes its per-row exponent bounds.
  // The bytes are copied; `data` may be freed afterwards.
  virtual weight_handle upload_weight(gguf::dtype t, const uint8_t* data, int64_t n_in, int64_t n_out) = 0;

  // y(tok, r) = matmul_exact_ref of quantize_act(x row tok) with weight row r.
  // x: (n_tok, n_in) floats; y: (n_tok, n_out).
  virtual void matmul(weight_handle w, const float* x, int64_t n_tok, float* y) = 0;

  // Per row of x (rows, cols), per group of `group` columns: rms_norm_f32_ref(x + g, w, group, eps).
  // w: (group) floats or null. out may equal x.
  virtual void rms_norm(const float* x, int64_t rows, int64_t cols, int64_t group, const float* w,
                        float eps, float* out) = 0;
  // swiglu_f32_ref / add_f32_ref over n elements; out may equal an input.
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  virtual void add(const float* a, const float* b, int64_t n, float* out) = 0;
  // x(r, i) = flush(x(r, i) + b(i)), x: (rows, cols), b: (cols).
  virtual void add_bias(float* x, int64_t rows, int64_t cols, const float* b) = 0;
  // The activation k over n elements (above); out may equal an input.
  virtual void activation(act k, const float* a, const float* b, int64_t n, const act_params& p, float* out) = 0;
  // rope_f32_ref on each row of x (rows, n_head * head_dim) in place; row r uses
  // tables + r * n_rot (rope_table_row of that row's position: n_rot / 2 (cos, sin) pairs).
  virtual void rope(float* x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                    const float* tables) = 0;

  // The KV cache cell of exact mode for one position and one layer, nb = ceil(head_dim / 32):
  //   [K q: (n_head_kv, nb * 32) int16][V q: same][K exp: (n_head_kv, nb) int32][V exp: same]
  // (cell_bytes = 2 * n_head_kv * nb * (32 * 2 + 4)). kv_quantize writes, for each row r of k and
  // v (rows, n_head_kv * head_dim), the cell at cells + r * cell_bytes: each head quantized with
  // numerics::quantize_block per 32 elements (the last block zero-padded).
  virtual void kv_quantize(const float* k, const float* v, int64_t rows, int64_t n_head_kv,
                           int64_t head_dim, uint8_t* cells) = 0;

  // Causal attention of the query rows of ONE sequence over its cache cells of one layer:
  // cells: n_cells consecutive cells (positions 0 .. n_cells - 1, layout above); q, out:
  // (n_q, n_head * head_dim); query row r attends positions [0, n_kv[r]) (n_kv[r] <= n_cells);
  // head h reads KV head h / (n_head / n_head_kv). Each head's result is attention_exact_ref's
  // with x.softcap and x.sinks[h]. A sliding window is the caller's: it passes the cells from the
  // window's first position (ops_gpu groups the rows that share it).
  virtual void attention(const float* q, int64_t n_q, const int64_t* n_kv, int64_t n_head,
                         int64_t n_head_kv, int64_t head_dim, const uint8_t* cells, int64_t n_cells,
                         float kq_scale, const attention_extras& x, float* out) = 0;

  // ---- activation slots ----
  // A slot is a float array named by a small non-negative integer the caller picks (ops_gpu: the
  // activation's id). slot_write(s, x, n) makes slot s hold the n floats of x; slot_read(s, x, n)
  // copies its first n floats out, and is where a slot op's deferred error surfaces (a non-finite
  // input found on the device throws input_error here or at finish(true), as the pointer form
  // throws at the op). A
  // slot op's output slot is resized to the op's output (its old contents are lost) unless it is
  // also an input, where the pointer form allows that; an input slot must hold the op's input.
  // Each slot op gives the bytes of its pointer form. Slot ops may run asynchronously: what they
  // leave is complete when slot_read, kv_quantize_slot or finish returns.
  //
  // These defaults keep the slots in host memory and call the pointer forms (the Vulkan backend);
  // the CUDA backend overrides them with device memory.
  virtual void slot_write(int32_t s, const float* x, int64_t n);
  virtual void slot_read(int32_t s, float* x, int64_t n);
  virtual void matmul_slot(weight_handle w, int32_t x, int64_t n_tok, int64_t n_in, int64_t n_out, int32_t y);
  virtual void rms_norm_slot(int32_t x, int64_t rows, int64_t cols, int64_t group, const float* w, float eps,
                             int32_t out);
  virtual void swiglu_slot(int32_t gate, int32_t up, int64_t n, int32_t out);
  virtual void add_slot(int32_t a, int32_t b, int64_t n, int32_t out);
  // b: ignored when k reads no second input.
  virtual void activation_slot(act k, int32_t a, int32_t b, int64_t n, const act_params& p, int32_t out);
  virtual void add_bias_slot(int32_t x, int64_t rows, int64_t cols, const float* b);
  virtual void rope_slot(int32_t x, int64_t rows, int64_t n_head, int64_t head_dim, int64_t n_rot, bool neox,
                         const float* tables);
  // kv_quantize of slots k and v; the cells are written to host memory (synchronous).
  virtual void kv_quantize_slot(int32_t k, int32_t v, int64_t rows, int64_t n_head_kv, int64_t head_dim,
                                uint8_t* cells);
  // Waits for every queued slot op. raise: throws the input_error that a slot op's check found
  // since the last read (the end of a step); otherwise forgets it (the start of the next step,
  // after one that threw for another reason). The default has nothing queued.
  virtual void finish(bool raise) { (void)raise; }

 private:
  std::vector<float>& host_slot(int32_t s);
  std::vector<std::vector<float>> host_slots_;  // the default slots
};

// Opens device `index` of an API for exact numerics. Throws input_error naming the problem: the
// API not compiled in ("this build has no Vulkan backend: configure with -DDETAUDIT_VULKAN=ON"),
// no such device (listing the ones there are), or a device that refuses exact mode (its refusal).
std::unique_ptr<device> open_device(api a, int index);

}  // namespace detaudit::kernels::gpu
