// The weight types the engine computes, one row each: the one list that the model loader, the
// exact numerics, the kernels' dispatch, the GPU backends, synth, inspect, the CLI help and the
// tests' type lists all read.
//
// Goals: adding a weight type is a row here plus its arithmetic (gguf/quants*.cpp: quantize and
// dequantize; numerics/wblock_inline.h: the exact block decode; kernels/vulkan/shaders/wblock.glsl:
// the shaders' decode), and nothing else; fast paths (kernels/cpu) are optional per type.
// Non-goals: the layout of every ggml type (gguf/dtype.h knows those, computed or not), llama.cpp's
// file-type names for whole-model mixtures (model/inspect.cpp).
//
// Thread-safety: read-only data.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "gguf/dtype.h"

namespace detaudit::gguf {

struct weight_type {
  dtype type;
  // llama.cpp's general.file_type for a model all in this type (LLAMA_FTYPE_MOSTLY_*; mxfp4:
  // MOSTLY_MXFP4_MOE), which synth writes.
  int64_t file_type;
  // The block's fp16 scale fields: byte offsets within a block (a 256-element super-block for the
  // K-quants) and the names error messages give them ("d", "m", "dmin"). None for the float types
  // and mxfp4 (an E8M0 scale byte, any value of which the loader checks itself).
  int n_scales;
  int scale_offset[2];
  const char* scale_name[2];
  // F32 / F16 / BF16: rows converted like activations (int16 blocks). Every other type's codes
  // fit int8 (the CPU and GPU int8 dot paths rely on it; a type whose codes do not needs a
  // column here and a path of its own).
  bool float_rows;
  // Vulkan and CUDA decode it (kernels/vulkan/shaders/wblock.glsl, numerics/wblock_inline.h); a type
  // without is refused by the GPU backends when a model stored in it is loaded.
  bool gpu;
};

// Every computed type, in the order help texts and the tests list them: the float types, the
// legacy blocks (q8_0 last), the K-quants, mxfp4.
std::span<const weight_type> weight_types();

// The row of t; nullptr when the engine does not compute t.
const weight_type* weight_type_of(dtype t);

// The names of every computed type, lower case ("f32", "q4_k") or as llama.cpp prints them
// ("q4_K"), joined by sep, the last two by last_sep when given ("f32, f16, ... q6_K or mxfp4"):
// for help texts and error messages.
std::string weight_type_names(const char* sep, bool lower = false, const char* last_sep = nullptr);

}  // namespace detaudit::gguf
