// Quantize and dequantize rows of ggml block types, bit-compatible with llama.cpp's layouts.
//
// Goals: every type synth writes can be produced from float and read back; dequantization is
// the exact inverse of the on-disk layout (llama.cpp's quantizer and ours both decode here).
// Non-goals: speed; the exact engine's integer kernels (kernels/) read blocks directly.
#pragma once

#include <cstdint>

#include "gguf/dtype.h"

namespace detaudit::gguf {

// IEEE half / bfloat16 conversions, bit-exact, round-to-nearest-even, no hardware dependence.
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

// MXFP4's sixteen E2M1 values doubled to integers, by 4-bit code (bit 3 the sign): the one table
// the quantizer, the dequantizer, the exact integer form and the loader's checks read.
inline constexpr int8_t MXFP4_DOUBLED[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// True for the types quants_quantize_row can write: the weight types (gguf/weight_types.h) and
// Q8_K.
bool quants_can_quantize(dtype t);
// True for the types quants_dequantize_row can read: the above.
bool quants_can_dequantize(dtype t);

// Quantizes n floats (n a multiple of the block size) into dtype_row_bytes(t, n) bytes at dst.
// Throws input_error for an unsupported type or a bad n.
void quants_quantize_row(dtype t, const float* src, void* dst, int64_t n);

// Decodes dtype_row_bytes(t, n) bytes at src into n floats.
void quants_dequantize_row(dtype t, const void* src, float* dst, int64_t n);

}  // namespace detaudit::gguf
