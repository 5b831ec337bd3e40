// Logit hashes: the step hash is XXH3-64 of the float32 bytes, the chain seeds each step's XXH3
// with the previous link, and hex is 16 lower-case digits. Expected values are computed here
// directly with libxxhash, not through runtime/hashes.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>
#include <xxhash.h>

#include "runtime/hashes.h"

using namespace detaudit::runtime;

TEST_CASE("hashes: the step hash is XXH3-64 of the logits' little-endian float32 bytes") {
  const unsigned char one_le[4] = {0x00, 0x00, 0x80, 0x3f};  // 1.0f
  CHECK(logit_hash(std::vector<float>{1.0f}) == XXH3_64bits(one_le, 4));
  std::vector<float> logits(512);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i) * -0.125f + 3.0f;
  CHECK(logit_hash(logits) == XXH3_64bits(logits.data(), logits.size() * 4));
  // Any bit matters: -0 and +0 hash differently.
  CHECK(logit_hash(std::vector<float>{0.0f}) != logit_hash(std::vector<float>{-0.0f}));
  // The published XXH3-64 of empty input.
  CHECK(logit_hash(std::vector<float>{}) == 0x2D06800538D394C2ull);
}

TEST_CASE("hashes: chain_i = XXH3_64bits_withSeed(step hash i, 8 bytes, chain_(i-1)) from chain_0 = 0") {
  const uint64_t steps[] = {0x0123456789abcdefull, 42, 0xffffffffffffffffull};
  uint64_t want = 0;
  hash_chain chain;
  CHECK(chain.value() == 0);
  for (uint64_t h : steps) {
    unsigned char le[8];
    for (int b = 0; b < 8; ++b) le[b] = static_cast<unsigned char>(h >> (8 * b));
    want = XXH3_64bits_withSeed(le, 8, want);
    CHECK(logit_hash_chain(chain.value(), h) == want);
    chain.add(h);
    CHECK(chain.value() == want);
  }
  // Order matters.
  hash_chain rev;
  for (int i = 2; i >= 0; --i) rev.add(steps[i]);
  CHECK(rev.value() != chain.value());
}

TEST_CASE("hashes: hex is 16 lower-case digits and parses back") {
  CHECK(hash_hex(0) == "0000000000000000");
  CHECK(hash_hex(0x0123456789abcdefull) == "0123456789abcdef");
  CHECK(hash_hex(0xFEDCBA9876543210ull) == "fedcba9876543210");
  CHECK(hash_from_hex("fedcba9876543210") == 0xFEDCBA9876543210ull);
  CHECK(hash_from_hex("FEDCBA9876543210") == 0xFEDCBA9876543210ull);
  CHECK_FALSE(hash_from_hex("fedcba987654321").has_value());
  CHECK_FALSE(hash_from_hex("fedcba98765432100").has_value());
  CHECK_FALSE(hash_from_hex("fedcba987654321g").has_value());
  CHECK_FALSE(hash_from_hex("").has_value());
}
