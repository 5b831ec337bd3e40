// Mixture-of-experts routing and row scaling (docs/precision-contract.md, "Expert routing").
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/ref/ref.h"
#include "util/error.h"

namespace detaudit::kernels {

using numerics::flush;

void moe_route_exact_ref(const float* logits, int64_t n_expert, int64_t n_used, bool norm, int32_t* ids,
                         float* weights) {
  if (n_used < 1 || n_used > n_expert)
    throw input_error("moe_route: " + std::to_string(n_used) + " experts used of " + std::to_string(n_expert));
  std::vector<float> l(static_cast<size_t>(n_expert));
  float m = 0.0f;
  for (int64_t i = 0; i < n_expert; ++i) {
    const float v = logits[i];
    if (v != v || v - v != 0.0f)
      throw input_error("moe_route: router logit " + std::to_string(i) + " is " + std::to_string(v) + ", expected a finite value");
    l[static_cast<size_t>(i)] = flush(v);
    if (i == 0 || l[static_cast<size_t>(i)] > m) m = l[static_cast<size_t>(i)];
  }
  if (m == 0.0f) m = 0.0f;  // +0 whichever zero came first
  std::vector<int64_t> w(static_cast<size_t>(n_expert));
  int64_t all = 0;
  for (int64_t i = 0; i < n_expert; ++i) all += w[static_cast<size_t>(i)] = attention_weight_ref(l[static_cast<size_t>(i)], m);
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t i = 0; i < n_expert; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::partial_sort(order.begin(), order.begin() + n_used, order.end(), [&](int32_t a, int32_t b) {
    const float la = l[static_cast<size_t>(a)], lb = l[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  int64_t chosen = 0;
  for (int64_t k = 0; k < n_used; ++k) chosen += w[static_cast<size_t>(order[static_cast<size_t>(k)])];
  const float inv = numerics::recip_f32(numerics::fixed_to_f32(norm ? chosen : all, -30));
  for (int64_t k = 0; k < n_used; ++k) {
    ids[k] = order[static_cast<size_t>(k)];
    weights[k] = flush(numerics::fixed_to_f32(w[static_cast<size_t>(ids[k])], -30) * inv);
  }
}

}  // namespace detaudit::kernels
