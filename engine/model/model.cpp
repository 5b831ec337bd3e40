#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "numerics/wblock.h"

#include "gguf/quants.h"
#include "gguf/weight_types.h"
#include "util/error.h"
#include "util/sha256.h"

namespace detaudit::model {
namespace {

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// The tensor `name` checked against the expected shape; throws input_error with expected vs
// found. Returns nullptr only when `optional` and the tensor is absent.
const gguf::tensor_info* tensor_find(const gguf::file& f, const std::string& name, const std::vector<int64_t>& ne,
                                     bool optional = false) {
  const gguf::tensor_info* t = f.find_tensor(name);
  if (!t) {
    if (optional) return nullptr;
    throw input_error(f.path() + ": tensor '" + name + "' is missing");
  }
  if (t->ne != ne)
    throw input_error(f.path() + ": tensor '" + name + "': expected shape " + shape_str(ne) + ", found " +
                      shape_str(t->ne));
  return t;
}

// Tensor t as n_out rows of n_in elements, refusing a type the engine does not compute.
weight matrix_of(const gguf::file& f, const gguf::tensor_info* t, const std::string& name, int64_t n_in, int64_t n_out) {
  if (!model_type_supported(t->type))
    throw input_error(f.path() + ": tensor '" + name + "' has type " + gguf::dtype_get(t->type).name +
                      ", which the engine does not compute (supported: " + gguf::weight_type_names(" ") + ")");
  if (t->type == gguf::DTYPE_MXFP4) {  // E8M0 scales: refuse NaN and overflowing blocks here, naming them
    const uint8_t* d = f.tensor_data(*t);
    const uint64_t n_blocks = gguf::dtype_row_bytes(t->type, n_in) / 17 * static_cast<uint64_t>(n_out);
    for (uint64_t b = 0; b < n_blocks; ++b) {
      if (d[b * 17] < 253) continue;  // 12 * 2^(252 - 128) < 2^128: only the top three scales can fail
      int amax = 0;
      for (int j = 1; j < 17; ++j)
        for (int code : {d[b * 17 + j] & 0xf, d[b * 17 + j] >> 4}) amax = std::max(amax, std::abs(static_cast<int>(gguf::MXFP4_DOUBLED[code])));
      if (const char* why = numerics::mxfp4_block_problem(d[b * 17], amax))
        throw input_error(f.path() + ": tensor '" + name + "': block " + std::to_string(b) + " (row " +
                          std::to_string(b / (gguf::dtype_row_bytes(t->type, n_in) / 17)) + "): mxfp4 scale byte " +
                          std::to_string(d[b * 17]) + " " + why);
    }
  }
  weight w;
  w.name = name;
  w.type = t->type;
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = gguf::dtype_row_bytes(t->type, n_in);
  w.data = f.tensor_data(*t);
  return w;
}

// A weight matrix of n_out rows of n_in elements, as a view into the mapping. Throws input_error
// when the shape differs or the type is one the engine does not compute.
weight tensor_get_matrix(const gguf::file& f, const std::string& name, int64_t n_in, int64_t n_out) {
  return matrix_of(f, tensor_find(f, name, {n_in, n_out}), name, n_in, n_out);
}

// A 3-D expert tensor (ne = [n_in, n_rows, n_expert]) as one matrix of n_expert * n_rows rows
// (expert e's rows follow expert e-1's; weight_expert cuts one out). Throws input_error as
// tensor_get_matrix does.
weight tensor_get_experts(const gguf::file& f, const std::string& name, int64_t n_in, int64_t n_rows, int64_t n_expert) {
  const gguf::tensor_info* t = tensor_find(f, name, {n_in, n_rows, n_expert});
  return matrix_of(f, t, name, n_in, n_rows * n_expert);
}

// An F32 vector of n elements, copied. Empty when `optional` and absent.
std::vector<float> tensor_get_vector(const gguf::file& f, const std::string& name, int64_t n, bool optional = false) {
  const gguf::tensor_info* t = tensor_find(f, name, {n}, optional);
  if (!t) return {};
  if (t->type != gguf::DTYPE_F32)
    throw input_error(f.path() + ": tensor '" + name + "': expected type f32, found " + gguf::dtype_get(t->type).name);
  std::vector<float> v(static_cast<size_t>(n));
  gguf::quants_dequantize_row(gguf::DTYPE_F32, f.tensor_data(*t), v.data(), n);
  for (size_t i = 0; i < v.size(); ++i)  // a NaN norm weight would surface later, far from its cause
    if (!std::isfinite(v[i]))
      throw input_error(f.path() + ": tensor '" + name + "': element " + std::to_string(i) + " is " + std::to_string(v[i]) +
                        "; expected finite values");
  return v;
}

// An F32 matrix of rows of n elements (ne = [n, rows]), copied row by row, checked as
// tensor_get_vector.
std::vector<std::vector<float>> tensor_get_rows(const gguf::file& f, const std::string& name, int64_t n, int64_t rows) {
  const gguf::tensor_info* t = tensor_find(f, name, {n, rows});
  if (t->type != gguf::DTYPE_F32)
    throw input_error(f.path() + ": tensor '" + name + "': expected type f32, found " + gguf::dtype_get(t->type).name);
  std::vector<std::vector<float>> out(static_cast<size_t>(rows), std::vector<float>(static_cast<size_t>(n)));
  for (int64_t r = 0; r < rows; ++r) {
    gguf::quants_dequantize_row(gguf::DTYPE_F32, f.tensor_data(*t) + static_cast<uint64_t>(r * n) * 4, out[r].data(), n);
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(out[r][i]))
        throw input_error(f.path() + ": tensor '" + name + "': element " + std::to_string(r * n + i) + " is " +
                          std::to_string(out[r][i]) + "; expected finite values");
  }
  return out;
}

// The router and the experts of a mixture-of-experts block, each expert a view of its 3-D tensor.
void layer_get_experts(const gguf::file& f, const hparams& hp, const std::string& b, layer_weights& lw) {
  lw.router = tensor_get_matrix(f, b + "ffn_gate_inp.weight", hp.n_embd, hp.n_expert);
  const weight gate = tensor_get_experts(f, b + "ffn_gate_exps.weight", hp.n_embd, hp.n_ff_exp, hp.n_expert);
  const weight up = tensor_get_experts(f, b + "ffn_up_exps.weight", hp.n_embd, hp.n_ff_exp, hp.n_expert);
  const weight down = tensor_get_experts(f, b + "ffn_down_exps.weight", hp.n_ff_exp, hp.n_embd, hp.n_expert);
  for (int64_t e = 0; e < hp.n_expert; ++e) {
    lw.exp_gate.push_back(weight_expert(gate, e, hp.n_ff_exp));
    lw.exp_up.push_back(weight_expert(up, e, hp.n_ff_exp));
    lw.exp_down.push_back(weight_expert(down, e, hp.n_embd));
  }
  if (arch_oai_block(hp.arch)) {
    lw.router_b = tensor_get_vector(f, b + "ffn_gate_inp.bias", hp.n_expert);
    lw.exp_gate_b = tensor_get_rows(f, b + "ffn_gate_exps.bias", hp.n_ff_exp, hp.n_expert);
    lw.exp_up_b = tensor_get_rows(f, b + "ffn_up_exps.bias", hp.n_ff_exp, hp.n_expert);
    lw.exp_down_b = tensor_get_rows(f, b + "ffn_down_exps.bias", hp.n_embd, hp.n_expert);
  }
}

layer_weights layer_get(const gguf::file& f, const hparams& hp, int64_t l) {
  const std::string b = "blk." + std::to_string(l) + ".";
  const int64_t q_dim = hp.n_head * hp.head_dim, kv_dim = hp.n_head_kv * hp.head_dim;
  const bool fused = arch_fused_qkv_ffn(hp.arch);
  layer_weights lw;
  lw.attn_norm = tensor_get_vector(f, b + "attn_norm.weight", hp.n_embd);
  if (fused) {
    const weight qkv = tensor_get_matrix(f, b + "attn_qkv.weight", hp.n_embd, q_dim + 2 * kv_dim);
    lw.wq = weight_rows(qkv, 0, q_dim);
    lw.wk = weight_rows(qkv, q_dim, kv_dim);
    lw.wv = weight_rows(qkv, q_dim + kv_dim, kv_dim);
  } else {
    lw.wq = tensor_get_matrix(f, b + "attn_q.weight", hp.n_embd, q_dim);
    lw.wk = tensor_get_matrix(f, b + "attn_k.weight", hp.n_embd, kv_dim);
    lw.wv = tensor_get_matrix(f, b + "attn_v.weight", hp.n_embd, kv_dim);
  }
  lw.wo = tensor_get_matrix(f, b + "attn_output.weight", q_dim, hp.n_embd);
  if (hp.arch == ARCH_QWEN2 || arch_oai_block(hp.arch)) {
    lw.bq = tensor_get_vector(f, b + "attn_q.bias", q_dim);
    lw.bk = tensor_get_vector(f, b + "attn_k.bias", kv_dim);
    lw.bv = tensor_get_vector(f, b + "attn_v.bias", kv_dim);
  }
  if (hp.arch == ARCH_QWEN3 || hp.arch == ARCH_GEMMA3 || hp.arch == ARCH_QWEN3MOE) {
    lw.q_norm = tensor_get_vector(f, b + "attn_q_norm.weight", hp.head_dim);
    lw.k_norm = tensor_get_vector(f, b + "attn_k_norm.weight", hp.head_dim);
  }
  if (arch_gemma_block(hp.arch)) {
    lw.post_attn_norm = tensor_get_vector(f, b + "post_attention_norm.weight", hp.n_embd);
    lw.post_ffn_norm = tensor_get_vector(f, b + "post_ffw_norm.weight", hp.n_embd);
  }
  if (arch_oai_block(hp.arch)) {
    lw.bo = tensor_get_vector(f, b + "attn_output.bias", hp.n_embd);
    lw.sinks = tensor_get_vector(f, b + "attn_sinks.weight", hp.n_head);
  }
  lw.ffn_norm = tensor_get_vector(f, b + (arch_oai_block(hp.arch) ? "post_attention_norm.weight" : "ffn_norm.weight"), hp.n_embd);
  if (arch_moe(hp.arch)) {
    layer_get_experts(f, hp, b, lw);
    return lw;
  }
  if (fused) {
    const weight gate_up = tensor_get_matrix(f, b + "ffn_up.weight", hp.n_embd, 2 * hp.n_ff);
    lw.w_gate = weight_rows(gate_up, 0, hp.n_ff);
    lw.w_up = weight_rows(gate_up, hp.n_ff, hp.n_ff);
  } else {
    lw.w_gate = tensor_get_matrix(f, b + "ffn_gate.weight", hp.n_embd, hp.n_ff);
    lw.w_up = tensor_get_matrix(f, b + "ffn_up.weight", hp.n_embd, hp.n_ff);
  }
  lw.w_down = tensor_get_matrix(f, b + "ffn_down.weight", hp.n_ff, hp.n_embd);
  return lw;
}

}  // namespace

weight weight_rows(const weight& w, int64_t r0, int64_t n) {
  if (r0 < 0 || n < 1 || r0 + n > w.n_out)
    throw std::logic_error("weight_rows: rows [" + std::to_string(r0) + ", " + std::to_string(r0 + n) + ") of " + w.name);
  weight v = w;
  v.name = w.name + "[" + std::to_string(r0) + ":" + std::to_string(r0 + n) + "]";
  v.n_out = n;
  v.data = w.data + w.row_bytes * static_cast<uint64_t>(r0);
  return v;
}

weight weight_expert(const weight& all, int64_t e, int64_t n_rows) {
  if (n_rows < 1 || all.n_out % n_rows != 0 || e < 0 || e >= all.n_out / n_rows)
    throw std::logic_error("weight_expert: expert " + std::to_string(e) + " of " + all.name);
  weight v = weight_rows(all, e * n_rows, n_rows);
  v.name = all.name + "[expert " + std::to_string(e) + "]";
  return v;
}

bool model_type_supported(gguf::dtype t) { return gguf::weight_type_of(t) != nullptr; }

model::model(gguf::file f) : file_(std::move(f)) {
  path_ = file_.path();
  hp_ = hparams_from_gguf(file_);
  arch_check_tensors(file_, hp_);
  vocab_ = tokenizer::vocab_load(file_);
  chat_template_ = chat::chat_template_parse(vocab_.chat_template());
  // One row per token, as llama.cpp checks it: the sampler may pick any row, so each must be a
  // token, and a token without a row could be in a prompt or a record but never embedded.
  if (vocab_.size() != hp_.n_vocab)
    throw input_error(path_ + ": key 'tokenizer.ggml.tokens' holds " + std::to_string(vocab_.size()) + " tokens, " +
                      (vocab_.size() < hp_.n_vocab ? "fewer" : "more") + " than the " + std::to_string(hp_.n_vocab) +
                      " rows of tensor 'token_embd.weight' (one row per token)");
  tok_embd = tensor_get_matrix(file_, "token_embd.weight", hp_.n_embd, hp_.n_vocab);
  output = hp_.tied_output ? tok_embd : tensor_get_matrix(file_, "output.weight", hp_.n_embd, hp_.n_vocab);
  output_norm = tensor_get_vector(file_, "output_norm.weight", hp_.n_embd);
  if (hp_.arch == ARCH_LLAMA) rope_factors = tensor_get_vector(file_, "rope_freqs.weight", hp_.n_rot / 2, true);
  layers.reserve(static_cast<size_t>(hp_.n_layer));
  for (int64_t l = 0; l < hp_.n_layer; ++l) layers.push_back(layer_get(file_, hp_, l));
}

std::shared_ptr<const model> model::load(const std::string& path) {
  return std::make_shared<const model>(gguf::file::open(path));
}

const std::string& model::sha256() const {
  std::call_once(sha_once_, [this] { sha256_ = sha256_file(path_); });
  return sha256_;
}

}  // namespace detaudit::model
