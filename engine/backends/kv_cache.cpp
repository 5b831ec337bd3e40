#include "backends/kv_cache.h"

#include <algorithm>
#include <stdexcept>

namespace detaudit::backends {

kv_cache::kv_cache(int64_t n_layer, uint64_t cell_bytes) : cell_bytes_(cell_bytes), layers_(static_cast<size_t>(n_layer)) {
  if (n_layer < 1 || cell_bytes == 0) throw std::logic_error("kv_cache: n_layer and cell_bytes must be positive");
}

void kv_cache::resize(int64_t n_pos) {
  if (n_pos < 0) throw std::logic_error("kv_cache::resize: negative size");
  const uint64_t bytes = cell_bytes_ * static_cast<uint64_t>(n_pos);
  for (std::vector<uint8_t>& l : layers_) {
    if (bytes > l.capacity()) l.reserve(std::max<uint64_t>(bytes, 2 * l.capacity()));
    l.resize(bytes);
  }
  n_pos_ = n_pos;
}

kv_cache kv_cache::prefix(int64_t n) const {
  if (n < 0 || n > n_pos_) throw std::logic_error("kv_cache::prefix: n out of range");
  kv_cache c(n_layer(), cell_bytes_);
  const uint64_t bytes = cell_bytes_ * static_cast<uint64_t>(n);
  for (size_t l = 0; l < layers_.size(); ++l) c.layers_[l].assign(layers_[l].begin(), layers_[l].begin() + bytes);
  c.n_pos_ = n;
  return c;
}

}  // namespace detaudit::backends
