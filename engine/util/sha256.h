// SHA-256 (FIPS 180-4), for model file identity in records and `inspect --sha256`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace detaudit {

class sha256 {
 public:
  sha256();
  void update(const void* data, size_t n);
  // Returns the digest as 64 lower-case hex characters. The object must not be updated afterwards.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// Hashes a whole file. Throws input_error when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace detaudit
