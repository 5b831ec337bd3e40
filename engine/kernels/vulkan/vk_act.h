// Activation helpers shared by the Vulkan ops that quantize rows on the device (ops_matmul.cpp,
// ops_attention.cpp).
#pragma once

#include <cstdint>

#include "kernels/vulkan/vk_internal.h"

namespace detaudit::kernels::vulkan {

// Throws input_error when x (n floats) holds a NaN or an infinity (what quantize_act throws for).
void act_check_finite(const float* x, int64_t n, const char* who);

// numerics::quantize_act of each of `rows` rows of n floats held in x (rows, n), by quantize_act.comp:
// q (rows, nb * 32) int32 values, e (rows, nb) block exponents, m (rows) max_exp; nb = ceil(n / 32).
void act_quantize_rows(vk_device& dev, const buffer& x, uint64_t rows, uint64_t n, const buffer& q,
                       const buffer& e, const buffer& m);

}  // namespace detaudit::kernels::vulkan
