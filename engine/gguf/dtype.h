// ggml tensor types: ids as stored in GGUF files, block sizes and byte sizes.
//
// Goal: know the layout of every type a GGUF file may hold, so any file can be validated,
// including types the engine does not compute (the IQ types, ternary types, Q8_K).
// Non-goal: arithmetic. quants.h quantizes and dequantizes the types synth writes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace detaudit::gguf {

// Values are ggml's type ids; gaps are ids ggml has retired.
enum dtype : uint32_t {
  DTYPE_F32 = 0,
  DTYPE_F16 = 1,
  DTYPE_Q4_0 = 2,
  DTYPE_Q4_1 = 3,
  DTYPE_Q5_0 = 6,
  DTYPE_Q5_1 = 7,
  DTYPE_Q8_0 = 8,
  DTYPE_Q8_1 = 9,
  DTYPE_Q2_K = 10,
  DTYPE_Q3_K = 11,
  DTYPE_Q4_K = 12,
  DTYPE_Q5_K = 13,
  DTYPE_Q6_K = 14,
  DTYPE_Q8_K = 15,
  DTYPE_IQ2_XXS = 16,
  DTYPE_IQ2_XS = 17,
  DTYPE_IQ3_XXS = 18,
  DTYPE_IQ1_S = 19,
  DTYPE_IQ4_NL = 20,
  DTYPE_IQ3_S = 21,
  DTYPE_IQ2_S = 22,
  DTYPE_IQ4_XS = 23,
  DTYPE_I8 = 24,
  DTYPE_I16 = 25,
  DTYPE_I32 = 26,
  DTYPE_I64 = 27,
  DTYPE_F64 = 28,
  DTYPE_IQ1_M = 29,
  DTYPE_BF16 = 30,
  DTYPE_TQ1_0 = 34,
  DTYPE_TQ2_0 = 35,
  DTYPE_MXFP4 = 39,  // OCP microscaling FP4: 32 e2m1 codes under one power-of-two (E8M0) scale
};

struct dtype_traits {
  dtype type;
  const char* name;     // lower case as llama.cpp prints it: "f32", "q4_K", "iq2_xxs"
  int64_t block_size;   // elements per block (1 for plain types)
  uint64_t type_size;   // bytes per block
};

// Returns the traits of a type id, or nullptr when the id is not a known ggml type.
const dtype_traits* dtype_find(uint32_t id);

// Returns the traits of a known type. Throws std::logic_error for an unknown one.
const dtype_traits& dtype_get(dtype t);

// Parses a name such as "q4_k", "Q4_K" or "bf16" (case-insensitive). Returns nullptr when unknown.
const dtype_traits* dtype_from_name(std::string_view name);

// Bytes of a row of n elements. Throws input_error when n is not a multiple of the block size.
uint64_t dtype_row_bytes(dtype t, int64_t n);

}  // namespace detaudit::gguf
