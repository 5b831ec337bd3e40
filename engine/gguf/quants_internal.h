// Private to quants.cpp, quants_legacy.cpp and quants_k.cpp: the per-family entry points.
#pragma once

#include <cstdint>

#include "gguf/quants.h"

namespace detaudit::gguf {

// Shared by quants.cpp, quants_legacy.cpp and quants_k.cpp; not for other callers.
namespace quants_detail {

// Block families. Each works on whole blocks (n_blocks of the type's block size) and returns
// false, touching nothing, when t is not one of its types.
bool legacy_quantize(dtype t, const float* src, uint8_t* dst, int64_t n_blocks);
bool legacy_dequantize(dtype t, const uint8_t* src, float* dst, int64_t n_blocks);
bool k_quantize(dtype t, const float* src, uint8_t* dst, int64_t n_blocks);
bool k_dequantize(dtype t, const uint8_t* src, float* dst, int64_t n_blocks);

// Nearest integer to v (ties to even), clamped to [lo, hi]; NaN gives lo.
int round_clamp(float v, int lo, int hi);

// f32_to_fp16 for a block scale: saturates to +-65504 instead of overflowing to inf, so that a
// huge input gives a huge (finite) block rather than inf * 0 = NaN on decode.
uint16_t fp16_scale(float d);

}  // namespace quants_detail

}  // namespace detaudit::gguf
