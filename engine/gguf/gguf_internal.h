// Private to engine/gguf: the parsed image shared by the reader, the file accessors and the writer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf.h"

namespace detaudit::gguf::detail {

inline constexpr uint64_t DEFAULT_ALIGNMENT = 32;
inline constexpr uint64_t MAX_KEY_BYTES = 64 * 1024;
inline constexpr int MAX_ARRAY_DEPTH = 8;  // an array of arrays is depth 2
inline constexpr uint32_t MAX_DIMS = 4;
inline constexpr char ALIGNMENT_KEY[] = "general.alignment";

struct string_hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using string_index = std::unordered_map<std::string, size_t, string_hash, std::equal_to<>>;

// A validated GGUF image. `base` points at `size` readable bytes owned elsewhere.
struct image {
  std::string name;
  const uint8_t* base = nullptr;
  uint64_t size = 0;
  uint32_t version = 0;
  uint64_t alignment = DEFAULT_ALIGNMENT;
  uint64_t data_offset = 0;
  std::vector<kv> kvs;
  std::vector<tensor_info> tensors;
  string_index kv_index;
  string_index tensor_index;
};

// Parses and validates img.base[0, img.size) into img. Throws input_error on any malformation.
void gguf_parse(image& img);

// Smallest number of bytes one value of type t can occupy on disk; 0 for an unknown type.
uint64_t gguf_value_min_bytes(uint32_t t);

// Rounds x up to a multiple of the power of two a; returns false on overflow.
inline bool gguf_align_up(uint64_t x, uint64_t a, uint64_t* out) {
  uint64_t sum = 0;
  if (__builtin_add_overflow(x, a - 1, &sum)) return false;
  *out = sum & ~(a - 1);
  return true;
}

}  // namespace detaudit::gguf::detail
