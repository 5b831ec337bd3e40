// One sequence's KV cache: raw bytes per layer, one fixed-size cell per position.
//
// Goals: a storage that the runtime can grow, truncate, copy (prefix reuse) and write to disk
// without knowing what a cell holds; the numerics backend (backends/ops_*.cpp) decides the cell
// layout (int16 blocks + exponents in exact mode, f16 in float mode, f64 in reference mode) and
// is the only code that reads or writes cell contents.
// Non-goals: paging, sharing cells between sequences (a fork copies).
//
// Layout of layer l:  [cell(pos 0)][cell(pos 1)] ... [cell(pos n_pos-1)], each cell_bytes long.
#pragma once

#include <cstdint>
#include <vector>

namespace detaudit::backends {

class kv_cache {
 public:
  kv_cache(int64_t n_layer, uint64_t cell_bytes);

  int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
  uint64_t cell_bytes() const { return cell_bytes_; }
  int64_t n_pos() const { return n_pos_; }

  // Sets the number of positions held; cells below min(old, new) keep their bytes, new cells are
  // zero. Invalidates cell pointers.
  void resize(int64_t n_pos);
  uint8_t* cell(int64_t layer, int64_t pos) { return layers_[layer].data() + cell_bytes_ * static_cast<uint64_t>(pos); }
  const uint8_t* cell(int64_t layer, int64_t pos) const {
    return layers_[layer].data() + cell_bytes_ * static_cast<uint64_t>(pos);
  }
  // The bytes of positions [0, n_pos) of one layer (n_pos * cell_bytes long).
  const std::vector<uint8_t>& layer_bytes(int64_t layer) const { return layers_[layer]; }
  std::vector<uint8_t>& layer_bytes(int64_t layer) { return layers_[layer]; }

  // A copy of the first n positions (n <= n_pos()).
  kv_cache prefix(int64_t n) const;

 private:
  uint64_t cell_bytes_;
  int64_t n_pos_ = 0;
  std::vector<std::vector<uint8_t>> layers_;
};

}  // namespace detaudit::backends
