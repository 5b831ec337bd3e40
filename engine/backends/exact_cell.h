// What the exact backends on every device share on the host: the KV cell layout, the RoPE table
// rows and the embedding row decode. ops_exact.cpp (CPU) and ops_gpu.cpp (Vulkan, CUDA) both use
// these, so a cache written on one backend restores on another and both embed and rope from the
// same bytes.
//
// Goals: one owner of the cell layout on the host (the GPU kernels write the same layout on the
// device: kernels/gpu/gpu.h kv_quantize).
// Non-goals: arithmetic on the cell (kernels/).
//
// Cell layout (one position, one layer), nb = ceil(head_dim / 32):
//   [K q: (n_head_kv, nb * 32) int16][V q: same][K exp: (n_head_kv, nb) int32][V exp: same]
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kernels/ref/ref.h"
#include "model/forward.h"
#include "model/model.h"
#include "numerics/exact.h"

namespace detaudit::backends {

struct exact_cell {
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t nb = 0;  // int16 blocks per head: ceil(head_dim / 32)

  explicit exact_cell(const model::hparams& hp)
      : n_head_kv(hp.n_head_kv), head_dim(hp.head_dim), nb((hp.head_dim + numerics::QBLOCK - 1) / numerics::QBLOCK) {}

  uint64_t q_elems() const { return static_cast<uint64_t>(n_head_kv * nb * numerics::QBLOCK); }  // int16 per K (or V)
  uint64_t exp_elems() const { return static_cast<uint64_t>(n_head_kv * nb); }                   // int32 per K (or V)
  uint64_t bytes() const { return 2 * q_elems() * sizeof(int16_t) + 2 * exp_elems() * sizeof(int32_t); }

  int16_t* k_q(uint8_t* cell) const { return reinterpret_cast<int16_t*>(cell); }
  int16_t* v_q(uint8_t* cell) const { return k_q(cell) + q_elems(); }
  int32_t* k_exp(uint8_t* cell) const { return reinterpret_cast<int32_t*>(cell + 2 * q_elems() * sizeof(int16_t)); }
  int32_t* v_exp(uint8_t* cell) const { return k_exp(cell) + exp_elems(); }

  // KV head h's K (or V) across consecutive cells starting at `first` (position 0 of a layer).
  kernels::kv_head_view k_view(const uint8_t* first, int64_t h) const { return view(first, h, 0); }
  kernels::kv_head_view v_view(const uint8_t* first, int64_t h) const { return view(first, h, 1); }

 private:
  kernels::kv_head_view view(const uint8_t* first, int64_t h, int64_t which) const {
    const auto* q = reinterpret_cast<const int16_t*>(first) + which * q_elems() + h * nb * numerics::QBLOCK;
    const auto* e = reinterpret_cast<const int32_t*>(first + 2 * q_elems() * sizeof(int16_t)) + which * exp_elems() + h * nb;
    return {q, e, static_cast<int64_t>(bytes() / sizeof(int16_t)), static_cast<int64_t>(bytes() / sizeof(int32_t))};
  }
};

// The RoPE (cos, sin) table row of each position and RoPE setting (gemma's sliding layers have
// their own base), computed on the host (in double, by the contract) once and kept.
class rope_tables {
 public:
  explicit rope_tables(const model::model& m) : m_(m) {}
  const float* row(const model::rope_params& p, int64_t pos);  // (n_rot) floats

 private:
  struct set {
    model::rope_params p;
    std::unordered_map<int64_t, std::vector<float>> rows;
  };
  const model::model& m_;
  std::vector<set> sets_;  // one per distinct setting (a model has one or two)
};

// Decodes row `token` of embedding tensor w into out (w.n_in floats) as the exact numerics take
// it: the exact dequantization, each value flushed to the contract's normal range. Throws
// input_error naming the tensor, row and element when a value is not finite.
void embed_row_exact(const model::weight& w, int32_t token, float* out);

// Routes each of the `rows` tokens by kernels::moe_route_exact_ref over its n_expert router
// logits (logits: (rows, n_expert) f32): ids and weights (rows, n_used), for the CPU and GPU exact
// backends alike.
void moe_route_exact(const float* logits, int64_t rows, int64_t n_expert, int64_t n_used, bool norm,
                     std::vector<int32_t>& ids, std::vector<float>& weights);

}  // namespace detaudit::backends
