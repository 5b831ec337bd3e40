#include "gguf/dtype.h"

#include <array>
#include <stdexcept>

#include "util/error.h"

namespace detaudit::gguf {

namespace {

// Block sizes and bytes per block follow the block structs of ggml-common.h.
constexpr std::array<dtype_traits, 32> TRAITS = {{
    {DTYPE_F32, "f32", 1, 4},
    {DTYPE_F16, "f16", 1, 2},
    {DTYPE_Q4_0, "q4_0", 32, 18},
    {DTYPE_Q4_1, "q4_1", 32, 20},
    {DTYPE_Q5_0, "q5_0", 32, 22},
    {DTYPE_Q5_1, "q5_1", 32, 24},
    {DTYPE_Q8_0, "q8_0", 32, 34},
    {DTYPE_Q8_1, "q8_1", 32, 36},
    {DTYPE_Q2_K, "q2_K", 256, 84},
    {DTYPE_Q3_K, "q3_K", 256, 110},
    {DTYPE_Q4_K, "q4_K", 256, 144},
    {DTYPE_Q5_K, "q5_K", 256, 176},
    {DTYPE_Q6_K, "q6_K", 256, 210},
    {DTYPE_Q8_K, "q8_K", 256, 292},
    {DTYPE_IQ2_XXS, "iq2_xxs", 256, 66},
    {DTYPE_IQ2_XS, "iq2_xs", 256, 74},
    {DTYPE_IQ3_XXS, "iq3_xxs", 256, 98},
    {DTYPE_IQ1_S, "iq1_s", 256, 50},
    {DTYPE_IQ4_NL, "iq4_nl", 32, 18},
    {DTYPE_IQ3_S, "iq3_s", 256, 110},
    {DTYPE_IQ2_S, "iq2_s", 256, 82},
    {DTYPE_IQ4_XS, "iq4_xs", 256, 136},
    {DTYPE_I8, "i8", 1, 1},
    {DTYPE_I16, "i16", 1, 2},
    {DTYPE_I32, "i32", 1, 4},
    {DTYPE_I64, "i64", 1, 8},
    {DTYPE_F64, "f64", 1, 8},
    {DTYPE_IQ1_M, "iq1_m", 256, 56},
    {DTYPE_BF16, "bf16", 1, 2},
    {DTYPE_TQ1_0, "tq1_0", 256, 54},
    {DTYPE_TQ2_0, "tq2_0", 256, 66},
    {DTYPE_MXFP4, "mxfp4", 32, 17},
}};

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

// TRAITS' index of each type id (-1: no such ggml type): the per-block decode checks look types up
// in constant time.
constexpr uint32_t MAX_ID = 64;
constexpr auto INDEX = [] {
  std::array<int8_t, MAX_ID> r{};
  r.fill(-1);
  for (size_t i = 0; i < TRAITS.size(); ++i) r[TRAITS[i].type] = static_cast<int8_t>(i);
  return r;
}();

}  // namespace

const dtype_traits* dtype_find(uint32_t id) { return id < MAX_ID && INDEX[id] >= 0 ? &TRAITS[INDEX[id]] : nullptr; }

const dtype_traits& dtype_get(dtype t) {
  const dtype_traits* tr = dtype_find(t);
  if (!tr) throw std::logic_error("dtype_get: unknown ggml type id " + std::to_string(static_cast<uint32_t>(t)));
  return *tr;
}

const dtype_traits* dtype_from_name(std::string_view name) {
  for (const dtype_traits& t : TRAITS) {
    if (iequals(t.name, name)) return &t;
  }
  return nullptr;
}

uint64_t dtype_row_bytes(dtype t, int64_t n) {
  const dtype_traits& tr = dtype_get(t);
  if (n < 0 || n % tr.block_size != 0) {
    throw input_error(std::string("row of ") + std::to_string(n) + " elements of type " + tr.name +
                      ": expected a non-negative multiple of the block size " + std::to_string(tr.block_size));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n / tr.block_size), tr.type_size, &bytes)) {
    throw input_error(std::string("row of ") + std::to_string(n) + " elements of type " + tr.name +
                      ": byte size overflows 64 bits");
  }
  return bytes;
}

}  // namespace detaudit::gguf
