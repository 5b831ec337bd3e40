// The small synthetic model shape the engine tests share: n_embd 256, 2 layers, 4 heads (2 KV),
// n_ff 512 (every K-quant can pack it).
#pragma once

#include <cstdint>

#include "model/synth.h"

namespace detaudit::test {

inline model::synth_options small_model(model::arch_id a, gguf::dtype t, uint64_t seed = 7, int64_t n_ctx = 2048) {
  model::synth_options o;
  o.arch = a;
  o.type = t;
  o.n_embd = 256;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 512;
  o.n_ctx = n_ctx;
  o.seed = seed;
  return o;
}

}  // namespace detaudit::test
