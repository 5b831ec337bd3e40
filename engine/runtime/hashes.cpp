#include "runtime/hashes.h"

#include <bit>
#include <cstring>
#include <xxhash.h>

namespace detaudit::runtime {

static_assert(std::endian::native == std::endian::little,
              "logit hashes are defined on little-endian bytes; a big-endian port must byte-swap first");

uint64_t logit_hash(std::span<const float> logits) {
  return XXH3_64bits(logits.data(), logits.size_bytes());
}

uint64_t logit_hash_chain(uint64_t prev_chain, uint64_t step_hash) {
  unsigned char bytes[8];
  std::memcpy(bytes, &step_hash, sizeof bytes);
  return XXH3_64bits_withSeed(bytes, sizeof bytes, prev_chain);
}

std::string hash_hex(uint64_t h) {
  static const char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) s[static_cast<size_t>(i)] = digits[h & 15];
  return s;
}

std::optional<uint64_t> hash_from_hex(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace detaudit::runtime
