#include "backends/exact_cell.h"

#include <cmath>
#include <string>

#include "gguf/quants.h"
#include "util/error.h"

namespace detaudit::backends {

const float* rope_tables::row(const model::rope_params& p, int64_t pos) {
  set* s = nullptr;
  for (set& x : sets_)
    if (x.p == p) s = &x;
  if (!s) s = &sets_.emplace_back(set{p, {}});
  auto it = s->rows.find(pos);
  if (it != s->rows.end()) return it->second.data();
  const model::hparams& hp = m_.hp();
  std::vector<float> r(static_cast<size_t>(hp.n_rot));
  kernels::rope_table_row(pos, hp.n_rot, p.freq_base, p.freq_scale, m_.rope_factors.empty() ? nullptr : m_.rope_factors.data(),
                          r.data(), p.ext_factor, p.corr_low, p.corr_high, p.mscale);
  return s->rows.emplace(pos, std::move(r)).first->second.data();
}

void embed_row_exact(const model::weight& w, int32_t token, float* out) {
  gguf::quants_dequantize_row(w.type, w.row(token), out, w.n_in);
  for (int64_t i = 0; i < w.n_in; ++i) {
    if (!std::isfinite(out[i]))
      throw input_error("tensor '" + w.name + "': row " + std::to_string(token) + " holds a non-finite value (" +
                        std::to_string(out[i]) + ") at element " + std::to_string(i));
    out[i] = numerics::flush(out[i]);
  }
}

void moe_route_exact(const float* logits, int64_t rows, int64_t n_expert, int64_t n_used, bool norm,
                     std::vector<int32_t>& ids, std::vector<float>& weights) {
  ids.resize(static_cast<size_t>(rows * n_used));
  weights.resize(ids.size());
  for (int64_t t = 0; t < rows; ++t)
    kernels::moe_route_exact_ref(logits + t * n_expert, n_expert, n_used, norm, ids.data() + t * n_used,
                                 weights.data() + t * n_used);
}

}  // namespace detaudit::backends
