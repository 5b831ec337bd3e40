// Architectures the engine knows: hyperparameters as GGUF stores them, and the tensor list of each
// architecture in one table.
//
// Goals: one place that says which tensors an architecture has, with which shapes, under which
// GGUF names and keys; read by the loader, by synth (which writes them) and by inspect.
// Non-goals: computing anything (the forward pass lives elsewhere).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace detaudit::model {

enum arch_id { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_PHI3, ARCH_GEMMA2, ARCH_GEMMA3, ARCH_QWEN3MOE, ARCH_GPT_OSS };

enum rope_kind {
  ROPE_NORM,  // adjacent pairs (x[2i], x[2i+1]) rotate: llama
  ROPE_NEOX,  // halves (x[i], x[i + d/2]) rotate: qwen2, qwen3, phi3, gemma2, gemma3, qwen3moe, gpt-oss
};

// Returns "llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen3moe", "gpt-oss".
const char* arch_name(arch_id a);
// Parses a general.architecture value; nullopt when the engine does not know it.
std::optional<arch_id> arch_from_name(const std::string& name);
rope_kind arch_rope_kind(arch_id a);
// Whether the architecture stores Q, K and V as one matrix (blk.N.attn_qkv.weight: the Q rows,
// then K's, then V's) and gate and up as one (blk.N.ffn_up.weight: the n_ff gate rows, then the
// n_ff up rows, no ffn_gate): phi3. The loader reads them as row ranges of the one tensor.
bool arch_fused_qkv_ffn(arch_id a);
// Gemma's block: the embeddings scaled by sqrt(n_embd), an RMS norm on the attention output and
// on the FFN output before each residual add (blk.N.post_attention_norm, blk.N.post_ffw_norm),
// and a GELU (tanh form) gate instead of SiLU: gemma2, gemma3.
bool arch_gemma_block(arch_id a);
// Whether the architecture's feed-forward is a mixture of experts (qwen3moe): a router
// (blk.N.ffn_gate_inp.weight, n_expert rows of n_embd) and n_expert SwiGLU experts stored as 3-D
// tensors blk.N.ffn_{gate,up,down}_exps.weight, of which each token uses the n_expert_used its
// router ranks highest. The loader reads each expert as a row range of the 3-D tensor.
bool arch_moe(arch_id a);
// gpt-oss's block (llama.cpp's "gpt-oss", its src/models/openai-moe.cpp): Q, K, V and attention
// output biases, per-head attention sinks (blk.N.attn_sinks.weight), the FFN norm stored as
// blk.N.post_attention_norm.weight, a router with a bias (ffn_gate_inp.bias), experts with biases
// (ffn_{gate,up,down}_exps.bias, one row per expert), the clamped SwiGLU (alpha 1.702, limit 7),
// and the routing weights a softmax over the chosen experts' logits. Sliding layers alternate
// (period 2) and every layer attends with its sinks.
bool arch_oai_block(arch_id a);
// The names of the supported architectures, comma-separated, for error messages.
std::string arch_names();

struct hparams {
  arch_id arch = ARCH_LLAMA;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  int64_t head_dim = 0;         // {arch}.attention.key_length, else n_embd / n_head
  int64_t n_rot = 0;            // {arch}.rope.dimension_count, else head_dim
  double rope_freq_base = 10000.0;
  double rope_scale_linear = 1.0;  // 1 / {arch}.rope.scaling.factor when scaling.type is "linear" or "yarn"
  // YaRN ({arch}.rope.scaling.type "yarn", gpt-oss): positions interpolated by the factor on the
  // low frequencies and kept on the high ones, ramped between the correction dimensions of
  // beta_fast = 32 and beta_slow = 1 rotations over original_context_length (llama.cpp's defaults;
  // it reads no other values for these architectures), and cos / sin scaled by 1 + 0.1 ln(factor).
  bool rope_yarn = false;
  int64_t n_ctx_orig_yarn = 0;     // {arch}.rope.scaling.original_context_length, else n_ctx_train
  double rope_attn_factor = 1.0;   // {arch}.rope.scaling.attn_factor: multiplies cos and sin
  double rms_eps = 1e-5;
  bool tied_output = false;     // no output.weight: the output projection reuses token_embd
  // {arch}.attention.sliding_window as the file states it (0 when absent). phi3: recorded and not
  // applied, as the current llama.cpp does (b4748 applied it to every layer; Phi-3 4k files say
  // 2047, so the two builds part only past 2047 positions). gemma2 (4096 when absent) and gemma3
  // (none when absent or 0): applied to the sliding layers, see layer_swa().
  int64_t n_swa = 0;
  // Whether sliding layers exist, and which: with swa_period p > 0, layer l slides when
  // l % p < p - 1 (gemma2: p = 2, layers 0, 2, 4, ...; gemma3: p = 6, five of every six); p = 0:
  // every layer. {arch}.attention.sliding_window_pattern.
  bool swa = false;
  int64_t swa_period = 0;
  // The RoPE of the sliding layers: {arch}.rope.freq_base_swa (gemma3: 10000 when absent; gemma2:
  // the global base) and no linear scaling for gemma3 (gemma2: the global scaling).
  double rope_freq_base_swa = 10000.0;
  double rope_scale_linear_swa = 1.0;
  // Soft caps (0: none): attention scores (gemma2: {arch}.attn_logit_softcapping, 50 when absent)
  // and logits (gemma2: {arch}.final_logit_softcapping, 30 when absent; gemma3: the key or none).
  double attn_softcap = 0;
  double final_softcap = 0;
  // The attention scale when it is not 1/sqrt(head_dim): gemma's 27B models (gemma2 with 46
  // layers, gemma3 with 62) scale by 1/sqrt(n_embd / n_head), as llama.cpp decides by layer count.
  // 0: 1/sqrt(head_dim).
  double attn_scale_override = 0;
  // Mixture of experts (arch_moe; all 0 otherwise): {arch}.expert_count, expert_used_count and
  // expert_feed_forward_length (absent: n_ff / n_expert_used, as llama.cpp reads it). qwen3moe
  // always renormalises the top-k softmax weights to sum to 1 (llama.cpp's qwen3moe does; the file
  // has no key for it).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  bool expert_weights_norm = false;
  // gpt-oss: the experts are the top k of the raw router logits and their weights a softmax over
  // the chosen logits (llama.cpp's SOFTMAX_WEIGHT gating). In exact and reference numerics this is
  // the renormalised softmax bit for bit / exactly; float numerics follow llama.cpp's order.
  bool expert_softmax_chosen = false;
};

// Whether layer l attends through the sliding window of n_swa positions.
bool layer_swa(const hparams& hp, int64_t l);

// Reads and checks hyperparameters. Throws input_error naming the file and key when a key is
// missing or inconsistent (e.g. n_embd not divisible by n_head, n_head not a multiple of n_head_kv).
hparams hparams_from_gguf(const gguf::file& f);

// Writes general.architecture and the {arch}.* keys.
void hparams_write(gguf::writer& w, const hparams& hp);

enum tensor_kind {
  TENSOR_MATRIX,  // a weight matrix: may be quantized
  TENSOR_VECTOR,  // a norm weight or bias: always F32
};

struct tensor_desc {
  std::string name;           // e.g. "blk.3.attn_q.weight"
  std::vector<int64_t> ne;    // ggml order: ne[0] is the row length (input dimension)
  tensor_kind kind;
  bool optional;              // may be absent from a file (output.weight when tied)
};

// Every tensor the architecture uses, in the order llama.cpp's converter writes them.
std::vector<tensor_desc> arch_tensors(const hparams& hp);

// Checks that every required tensor of the architecture is present with the right shape and
// no tensor is unexpected; throws input_error with expected vs found.
void arch_check_tensors(const gguf::file& f, const hparams& hp);

}  // namespace detaudit::model
