// Logit hashes: a fingerprint of every step's logits, so two runs can be compared bit for bit and
// the first step whose logits drift is found before any token flips.
//
//   step hash   h_i     = XXH3_64bits(logits_i, n_vocab * 4)   (the float32 bytes, little-endian)
//   chained     chain_0 = 0
//               chain_i = XXH3_64bits_withSeed(&h_i, 8, chain_{i-1})   (h_i's 8 bytes, little-endian)
//
// Steps count from 1 in this formula; the chained hash of a run is chain_n after its last step
// (0 for a run of no steps). Hex form: 16 lower-case hex digits, most significant first.
// docs/generate.md documents the same.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace detaudit::runtime {

// XXH3-64 of the logits' bytes. Pure; thread-safe.
uint64_t logit_hash(std::span<const float> logits);

// chain_i from chain_{i-1} and h_i.
uint64_t logit_hash_chain(uint64_t prev_chain, uint64_t step_hash);

// Accumulates the chained hash of a run, step by step.
class hash_chain {
 public:
  void add(uint64_t step_hash) { value_ = logit_hash_chain(value_, step_hash); }
  uint64_t value() const { return value_; }

 private:
  uint64_t value_ = 0;
};

// "0123456789abcdef": 16 lower-case hex digits.
std::string hash_hex(uint64_t h);
// Parses exactly 16 hex digits (either case); nullopt otherwise.
std::optional<uint64_t> hash_from_hex(std::string_view s);

}  // namespace detaudit::runtime
