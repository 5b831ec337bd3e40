// The numerics backends: which arithmetic evaluates the model's ops (exact, float, reference) and
// where (CPU, Vulkan, CUDA), and the factory that makes a model::ops for a choice.
//
// Goals: one layer below runtime/ that owns every implementation of model::ops, the KV cell bytes
// they write (kv_cache.h only stores them) and the thread pool they split work on. Backends differ
// only in arithmetic; activation storage is ops_storage.h, the exact cell layout exact_cell.h.
// Non-goals: sequences, batching, scheduling (runtime/), kernels themselves (kernels/).
#pragma once

#include <memory>
#include <string>

#include "model/forward.h"

namespace detaudit::backends {

class thread_pool;

enum numerics_mode {
  NUMERICS_EXACT,      // integer sums, order-independent: docs/precision-contract.md
  NUMERICS_FLOAT,      // an ordinary engine's float arithmetic (llama.cpp's rounding points)
  NUMERICS_REFERENCE,  // float64 throughout, scalar: the ground truth for fidelity
};

const char* numerics_name(numerics_mode m);  // "exact", "float", "reference"
// Parses "exact" / "float" / "reference"; throws input_error otherwise.
numerics_mode numerics_from_name(const std::string& name);

// Where the forward pass runs. GPU backends run --numerics exact only and give the CPU backend's
// bits (kernels/gpu/gpu.h); activations and the KV cache stay in host memory either way, so cache
// copies, truncation and save/restore do not depend on the backend.
enum backend_kind {
  BACKEND_CPU,
  BACKEND_VULKAN,
  BACKEND_CUDA,
};

const char* backend_name(backend_kind b);  // "cpu", "vulkan", "cuda"
// Parses "cpu" / "vulkan" / "cuda"; throws input_error otherwise.
backend_kind backend_from_name(const std::string& name);

// Load-time repacking of weights for the CPU kernels (exact numerics): the matrices whose type has a
// packed generation kernel on the CPU's instruction set (kernels/cpu/cpu.h, row_pack_kernel: q4_0,
// q4_K, q5_K and q6_K on AVX-512 and AVX2) become 16-row tiles, laid out for that set, that those
// kernels read. The bits never change; only the speed and the memory do.
struct repack_stats {
  int64_t tensors = 0;   // matrices this context reads repacked
  int64_t shared = 0;    // of those, packs another context of the process had made (not repacked again)
  uint64_t bytes = 0;    // memory they take beside the mapped file (shared packs counted once per context)
  double seconds = 0.0;  // time spent repacking (once, when the context is created)
};

// A CPU backend for `mode`. The model and pool must outlive it; pool may be null (one thread).
// repack: repack weights at creation where the kernels have a layout for them (exact numerics);
// stats (may be null) receives what was done.
std::unique_ptr<model::ops> ops_create(numerics_mode mode, const model::model& m, thread_pool* pool, bool repack = true,
                                       repack_stats* stats = nullptr);
// The exact ops on a GPU device (ops_gpu.cpp); `description` receives the device's description.
// Throws input_error when the backend is not built or the device is missing or refuses.
std::unique_ptr<model::ops> ops_gpu_create(backend_kind b, int device, const model::model& m, thread_pool* pool,
                                           std::string* description);
std::unique_ptr<model::ops> ops_exact_create(const model::model& m, thread_pool* pool, bool repack,
                                             repack_stats* stats);                        // ops_exact.cpp
std::unique_ptr<model::ops> ops_float_create(const model::model& m, thread_pool* pool);      // ops_float.cpp
std::unique_ptr<model::ops> ops_reference_create(const model::model& m, thread_pool* pool);  // ops_reference.cpp

}  // namespace detaudit::backends
