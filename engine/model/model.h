// A loaded model: the mapped GGUF, its hyperparameters, vocabulary and weights by role.
//
// Goals: one load path for every architecture in model/arch.h, with every tensor checked for
// type and shape (tensor_get) before anything runs; weights stay in the mapping (no copies of
// matrices; norms and biases, which are small, are copied to f32 vectors).
// Non-goals: computing (model/forward.h), caches (runtime/).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "tokenizer/vocab.h"

namespace detaudit::model {

// A weight matrix in the mapping: n_out rows of n_in elements, in its GGUF block type.
struct weight {
  std::string name;
  gguf::dtype type = gguf::DTYPE_F32;
  int64_t n_in = 0;           // ne[0], the row length
  int64_t n_out = 0;          // ne[1], the number of rows
  uint64_t row_bytes = 0;
  const uint8_t* data = nullptr;
  const uint8_t* row(int64_t r) const { return data + row_bytes * static_cast<uint64_t>(r); }
};

// Rows [r0, r0 + n) of w as a matrix of its own (a view into the same mapping), named
// "NAME[r0:r0+n]": the Q, K and V of a fused attn_qkv, the gate and up of a fused ffn_up. Every
// backend computes a row from that row's bytes alone, so a view gives the fused matmul's rows.
weight weight_rows(const weight& w, int64_t r0, int64_t n);

// Expert e of a 3-D expert tensor read as n_expert * n_rows rows (ne = [n_in, n_rows, n_expert]):
// its rows [e * n_rows, (e + 1) * n_rows) as an ordinary matrix, named "NAME[expert E]".
weight weight_expert(const weight& all, int64_t e, int64_t n_rows);

struct layer_weights {
  std::vector<float> attn_norm;        // (n_embd)
  weight wq, wk, wv, wo;               // wq: (n_head*head_dim rows of n_embd) ... (phi3: views of attn_qkv)
  std::vector<float> bq, bk, bv;       // qwen2, gpt-oss, else empty
  std::vector<float> bo;               // gpt-oss: attn_output.bias (n_embd), else empty
  std::vector<float> sinks;            // gpt-oss: attn_sinks.weight (n_head), else empty
  std::vector<float> q_norm, k_norm;   // qwen3, gemma3 (head_dim), else empty
  std::vector<float> post_attn_norm;   // gemma2, gemma3 (n_embd): on the attention output, else empty
  std::vector<float> post_ffn_norm;    // gemma2, gemma3 (n_embd): on the FFN output, else empty
  std::vector<float> ffn_norm;         // (n_embd)
  weight w_gate, w_up, w_down;         // gate/up: (n_ff rows of n_embd); down: (n_embd rows of n_ff)
                                       // (phi3: gate and up are views of the fused ffn_up)
  // Mixture of experts (arch_moe), else empty, and w_gate, w_up and w_down are unset:
  weight router;                       // ffn_gate_inp: (n_expert rows of n_embd)
  std::vector<weight> exp_gate, exp_up;  // per expert: (n_ff_exp rows of n_embd), views of ffn_{gate,up}_exps
  std::vector<weight> exp_down;          // per expert: (n_embd rows of n_ff_exp), views of ffn_down_exps
  // gpt-oss, else empty: the router's bias (n_expert) and each expert's biases (ffn_*_exps.bias rows)
  std::vector<float> router_b;
  std::vector<std::vector<float>> exp_gate_b, exp_up_b, exp_down_b;
};

class model {
 public:
  // Loads and checks a GGUF model. Throws input_error naming the file and tensor on any problem:
  // an unsupported architecture, a missing or misshapen tensor, a weight type the engine does not
  // compute ("tensor 'blk.0.ffn_down.weight' has type iq2_xxs, which the engine does not compute").
  static std::shared_ptr<const model> load(const std::string& path);

  const std::string& path() const { return path_; }
  const hparams& hp() const { return hp_; }
  const tokenizer::vocab& vocab() const { return vocab_; }
  // tokenizer.chat_template, read once at load: family, options, size (chat_template_parse).
  const chat::chat_template_info& chat_template() const { return chat_template_; }
  const gguf::file& file() const { return file_; }
  // SHA-256 of the file, computed on first call (reads the whole file). Thread-safe.
  const std::string& sha256() const;

  weight tok_embd;                      // (n_vocab rows of n_embd)
  weight output;                        // = tok_embd when the output is tied
  std::vector<float> output_norm;       // (n_embd)
  std::vector<float> rope_factors;      // Llama 3 rope_freqs (n_rot/2), or empty
  std::vector<layer_weights> layers;

  explicit model(gguf::file f);  // use load()

 private:
  gguf::file file_;
  std::string path_;
  hparams hp_;
  tokenizer::vocab vocab_;
  chat::chat_template_info chat_template_;
  mutable std::string sha256_;
  mutable std::once_flag sha_once_;
};

// The weight types the engine computes with.
bool model_type_supported(gguf::dtype t);

}  // namespace detaudit::model
