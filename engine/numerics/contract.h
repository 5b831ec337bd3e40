// The precision contract's constants (docs/precision-contract.md): the one place they are
// written. numerics, the CPU kernels, the CUDA kernels (nvcc includes this header) and the Vulkan
// shaders (kernels/vulkan/glsl_constants.cpp writes them into a generated GLSL header at build time) all
// read them from here.
//
// Non-goals: functions (numerics/exact_inline.h holds the arithmetic host and device share).
// Only plain constexpr values, so the header compiles as C++17 host or device code.
#pragma once

namespace detaudit::numerics {

// The version of docs/precision-contract.md this code implements; run records and `generate
// --json` carry it, so outputs of two contract versions are never taken for comparable.
constexpr const char* PRECISION_CONTRACT_VERSION = "1";

constexpr int QBLOCK = 32;        // elements per activation / KV block
constexpr int EXP_ZERO = -32768;  // exponent recorded for an all-zero block
constexpr int QMAX = 32767;       // int16 block values lie in [-QMAX, QMAX]

// The exact dot product (section 7): every block term T satisfies |T| < 2^DOT_TERM_BITS (proved
// per weight type), and the int64 accumulator's sum stays below 2^ACC_BITS.
constexpr int DOT_TERM_BITS = 44;
constexpr int ACC_BITS = 62;

// Attention (section 11): softmax weights on a 2^-ATT_WEIGHT_BITS grid (the largest is
// 2^ATT_WEIGHT_BITS), and |v| <= QMAX < 2^ATT_VALUE_BITS.
constexpr int ATT_WEIGHT_BITS = 30;
constexpr int ATT_VALUE_BITS = 15;

// The RMS norm (section 9): a square of a 24-bit significand has at most 2 * 24 bits.
constexpr int SQUARE_BITS = 48;

}  // namespace detaudit::numerics
