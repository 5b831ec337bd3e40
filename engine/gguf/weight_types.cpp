#include "gguf/weight_types.h"

#include <array>
#include <cctype>
#include <iterator>

namespace detaudit::gguf {

namespace {

// Scale offsets from ggml's block structs: block_q4_1 {d, m, qs}, block_q5_1 {d, m, qh, qs},
// block_q2_K {scales, qs, d, dmin}, block_q3_K {hmask, qs, scales, d}, block_q4_K / block_q5_K
// {d, dmin, ...}, block_q6_K {ql, qh, scales, d}; the legacy types and q8_0 start with d.
constexpr weight_type TYPES[] = {
    // type       file_type  n  offsets    names             float  gpu
    {DTYPE_F32, 0, 0, {0, 0}, {"", ""}, true, true},
    {DTYPE_F16, 1, 0, {0, 0}, {"", ""}, true, true},
    {DTYPE_BF16, 32, 0, {0, 0}, {"", ""}, true, true},
    {DTYPE_Q4_0, 2, 1, {0, 0}, {"d", ""}, false, true},
    {DTYPE_Q4_1, 3, 2, {0, 2}, {"d", "m"}, false, true},
    {DTYPE_Q5_0, 8, 1, {0, 0}, {"d", ""}, false, true},
    {DTYPE_Q5_1, 9, 2, {0, 2}, {"d", "m"}, false, true},
    {DTYPE_Q8_0, 7, 1, {0, 0}, {"d", ""}, false, true},
    {DTYPE_Q2_K, 10, 2, {80, 82}, {"d", "dmin"}, false, true},
    {DTYPE_Q3_K, 11, 1, {108, 0}, {"d", ""}, false, true},
    {DTYPE_Q4_K, 14, 2, {0, 2}, {"d", "dmin"}, false, true},
    {DTYPE_Q5_K, 16, 2, {0, 2}, {"d", "dmin"}, false, true},
    {DTYPE_Q6_K, 18, 1, {208, 0}, {"d", ""}, false, true},
    {DTYPE_MXFP4, 38, 0, {0, 0}, {"", ""}, false, true},
};

// TYPES' row of each type id (-1: not computed), so that the per-block checks look a type up in
// constant time.
constexpr uint32_t MAX_ID = 64;
constexpr auto ROW_OF = [] {
  std::array<int8_t, MAX_ID> r{};
  r.fill(-1);
  for (size_t i = 0; i < std::size(TYPES); ++i) r[TYPES[i].type] = static_cast<int8_t>(i);
  return r;
}();

}  // namespace

const weight_type* weight_type_of(dtype t) {
  const uint32_t id = static_cast<uint32_t>(t);
  return id < MAX_ID && ROW_OF[id] >= 0 ? &TYPES[ROW_OF[id]] : nullptr;
}

std::span<const weight_type> weight_types() { return TYPES; }

std::string weight_type_names(const char* sep, bool lower, const char* last_sep) {
  std::string out;
  for (size_t i = 0; i < std::size(TYPES); ++i) {
    const weight_type& w = TYPES[i];
    if (i > 0) out += last_sep && i + 1 == std::size(TYPES) ? last_sep : sep;
    std::string name = dtype_get(w.type).name;
    if (lower)
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += name;
  }
  return out;
}

}  // namespace detaudit::gguf
