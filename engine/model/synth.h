// Synthetic models: random weights in any supported architecture, size and weight type, written as
// GGUF that llama.cpp loads unchanged.
//
// Goals: test models that need no download; realistic scales so activations stay in the range of
// trained models (residual stream O(1), logits with a spread of a few nats); identical bytes for
// the same options on every machine (no libm, own RNG). Non-goal: weights that mean anything.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gguf/dtype.h"
#include "model/arch.h"

namespace detaudit::model {

struct synth_options {
  arch_id arch = ARCH_LLAMA;
  gguf::dtype type = gguf::DTYPE_F16;  // weight matrices; norms and biases are always F32
  // Per-tensor overrides of `type`, in order (a later match wins): a pattern names a weight matrix
  // whole ("output.weight", "blk.1.attn_v.weight") or by its name inside every block ("attn_v" or
  // "attn_v.weight" matches blk.N.attn_v.weight). Mixtures such as llama.cpp's Q4_K_M are written so.
  std::vector<std::pair<std::string, gguf::dtype>> tensor_types;
  int64_t n_embd = 256;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t n_ff = 768;
  int64_t n_ctx = 2048;
  int64_t head_dim = 0;            // 0: n_embd / n_head
  bool tied_output = false;        // omit output.weight (the output projection reuses token_embd); gemma2: always
  // gemma2 / gemma3 sliding layers: the window (-1: the family's own, 4096 for gemma2 and 1024 for
  // gemma3, at most n_ctx; gemma3 0: none) and the period (-1: 2 for gemma2, 6 for gemma3; layer l
  // slides when l % period < period - 1).
  int64_t sliding_window = -1;
  int64_t swa_period = -1;
  uint64_t seed = 7;
  std::string vocab_from;          // copy tokenizer.* from this GGUF; empty: the built-in vocabulary
  std::string name = "synthetic";  // general.name
  int64_t file_type = -1;          // general.file_type; -1: synth_file_type(type)
  std::string mixture;             // the mixture name synth_apply_mixture applied ("q4_k_m"), for messages
  // Mixture of experts (arch_moe only): experts, experts per token, expert feed-forward width
  // (0: n_embd). The router (ffn_gate_inp) is written in f32, as llama.cpp's converter and
  // quantizer keep it, unless a tensor_types entry names it.
  int64_t n_expert = 16;
  int64_t n_expert_used = 4;
  int64_t n_ff_exp = 0;
  // Threads that quantize a tensor's rows (0: the machine's, at most 16). The file is the same
  // bytes for any count: the values are drawn in one stream and a row's bytes depend on it alone.
  int64_t threads = 0;
};

// llama.cpp's "medium" K-quant mixtures (its llama-quant.cpp rules for a dense model): every matrix
// in the base type (q4_K for "q4_k_m", q5_K for "q5_k_m") except output.weight (token_embd when the
// output is tied), and attn_v and ffn_down of the layers llama.cpp gives more bits (the first and
// last eighth of the layers and every third one between), which are q6_K. Sets o.type,
// o.file_type (15 or 17, as llama.cpp writes) and puts the overrides before o.tensor_types, so
// entries already there still win. Call it after n_layer and tied_output are final. False when
// name is not a mixture.
bool synth_apply_mixture(synth_options& o, const std::string& name);
// "q4_k_m|q5_k_m", for help texts.
const char* synth_mixture_names();

struct synth_preset {
  const char* name;
  const char* description;
  int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
};

// The presets ("tiny", "small", "1b", ...). Returns nullptr for an unknown name.
const synth_preset* synth_find_preset(const std::string& name);
// A comma-separated list of preset names, for help texts and errors.
std::string synth_preset_names();
void synth_apply_preset(synth_options& o, const synth_preset& p);

// Checks the options (shapes divisible by the heads and by the type's block size). Throws
// input_error naming the flag to change.
void synth_validate(const synth_options& o);

// Generates the model and writes it to path. Returns the number of parameters written.
// Throws input_error for bad options or an unreadable --vocab-from file.
uint64_t synth_write(const synth_options& o, const std::string& path);

// The type synth writes the weight matrix `name` in: the last matching tensor_types entry, else type.
gguf::dtype synth_tensor_type(const synth_options& o, const std::string& name);

// llama.cpp's general.file_type for a file whose matrices are all of type t.
int64_t synth_file_type(gguf::dtype t);

}  // namespace detaudit::model
