#include "model/arch.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "util/error.h"

namespace detaudit::model {
namespace {

struct arch_row {
  arch_id id;
  const char* name;
  rope_kind rope;
  bool qkv_bias;   // blk.N.attn_{q,k,v}.bias
  bool qk_norm;    // blk.N.attn_{q,k}_norm.weight, over head_dim
  bool rope_freqs; // an optional rope_freqs.weight (Llama 3 frequency factors)
  bool fused;      // attn_qkv and a gate-up ffn_up instead of attn_{q,k,v} and ffn_{gate,up}
  bool gemma;      // embedding scale, post-attention and post-FFN norms, GELU gate
  bool oai;        // gpt-oss: biases, sinks, post_attention_norm as the FFN norm (arch_oai_block)
};

// The architectures, one row each.
const arch_row ARCHES[] = {
    {ARCH_LLAMA, "llama", ROPE_NORM, false, false, true, false, false, false},
    {ARCH_QWEN2, "qwen2", ROPE_NEOX, true, false, false, false, false, false},
    {ARCH_QWEN3, "qwen3", ROPE_NEOX, false, true, false, false, false, false},
    {ARCH_PHI3, "phi3", ROPE_NEOX, false, false, false, true, false, false},
    {ARCH_GEMMA2, "gemma2", ROPE_NEOX, false, false, false, false, true, false},
    {ARCH_GEMMA3, "gemma3", ROPE_NEOX, false, true, false, false, true, false},
    {ARCH_QWEN3MOE, "qwen3moe", ROPE_NEOX, false, true, false, false, false, false},
    {ARCH_GPT_OSS, "gpt-oss", ROPE_NEOX, true, false, false, false, false, true},
};

// The mixture-of-experts architectures (their attention is the row of ARCHES above).
const arch_id MOE_ARCHES[] = {ARCH_QWEN3MOE, ARCH_GPT_OSS};

const arch_row& row_of(arch_id a) {
  for (const arch_row& r : ARCHES)
    if (r.id == a) return r;
  throw std::logic_error("unknown arch id");
}

std::string key(const hparams& hp, const char* suffix) { return std::string(arch_name(hp.arch)) + "." + suffix; }

// Upper bounds far beyond any real model, so a corrupted count cannot drive a huge allocation.
constexpr int64_t MAX_COUNT = int64_t(1) << 27;
// Linear RoPE scaling divides positions by the factor; real files use 2 to 32.
constexpr double MIN_ROPE_FACTOR = 1.0 / 65536, MAX_ROPE_FACTOR = 65536;

int64_t positive(const gguf::file& f, const std::string& k, int64_t v, int64_t max = MAX_COUNT) {
  if (v <= 0 || v > max)
    throw input_error(f.path() + ": key '" + k + "': expected a count from 1 to " + std::to_string(max) + ", found " +
                      std::to_string(v));
  return v;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A float hyperparameter the kernels compute with as a 32-bit float: finite, within [lo, hi], and
// a normal float (an f64 5e-324 is 0 as a float; a subnormal is read as 0 by exact numerics).
// Checked here so a hostile value is refused naming the key, not met later as inf or NaN.
double float_key(const gguf::file& f, const std::string& k, double v, double lo, double hi, const char* expected) {
  constexpr double flt_max = std::numeric_limits<float>::max();
  if (!(v >= lo && v <= hi && v <= flt_max) || !std::isnormal(static_cast<float>(v)))
    throw input_error(f.path() + ": key '" + k + "': expected " + expected + ", found " + num(v));
  return v;
}

void check_consistency(const gguf::file& f, const hparams& hp) {
  auto bad = [&](const std::string& what) { throw input_error(f.path() + ": inconsistent hyperparameters: " + what); };
  if (hp.n_head_kv > hp.n_head || hp.n_head % hp.n_head_kv != 0)
    bad("head_count " + std::to_string(hp.n_head) + " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
  if (hp.head_dim % 2 != 0) bad("head dimension " + std::to_string(hp.head_dim) + " is odd (RoPE rotates pairs)");
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
    bad("rope.dimension_count " + std::to_string(hp.n_rot) + " must be even and at most the head dimension " +
        std::to_string(hp.head_dim));
}

// {arch}.attention.sliding_window_pattern (a period; `fallback` when absent) into hp.swa_period,
// refusing a per-layer array and a period under which no layer would slide (hp.swa set first).
void read_swa_period(const gguf::file& f, hparams& hp, int64_t fallback) {
  const std::string pk = key(hp, "attention.sliding_window_pattern");
  hp.swa_period = fallback;
  if (const gguf::value* v = f.find(pk)) {
    if (v->type == gguf::VALUE_ARRAY)
      throw input_error(f.path() + ": key '" + pk + "': a per-layer pattern (an array) is not supported; a period is");
    hp.swa_period = f.get_int(pk);
    if (hp.swa_period < 0 || hp.swa_period > 4096 || (hp.swa && hp.swa_period == 1))
      throw input_error(f.path() + ": key '" + pk + "': expected a period of 0 or 2 to 4096, found " + std::to_string(hp.swa_period) +
                        (hp.swa_period == 1 ? " (no layer would slide; llama.cpp refuses such a file)" : ""));
  }
}

// gemma2 / gemma3: sliding layers, their RoPE, soft caps and the attention scale, with
// llama.cpp's defaults (src/models/gemma2.cpp, gemma3.cpp).
void read_gemma(const gguf::file& f, hparams& hp) {
  const bool g2 = hp.arch == ARCH_GEMMA2;
  const char* positive_float = "a positive finite number, normal as a 32-bit float (the kernels' type)";
  if (g2 && hp.n_swa == 0)
    throw input_error(f.path() + ": key '" + key(hp, "attention.sliding_window") + "': gemma2 needs a window of at least 1");
  hp.swa = hp.n_swa > 0;
  for (const char* k : {"rope.dimension_count_swa", "attention.key_length_swa", "attention.value_length_swa"}) {
    const std::string sk = key(hp, k);
    const int64_t full = std::string(k).rfind("rope", 0) == 0 ? hp.n_rot : hp.head_dim;
    if (f.find(sk) && f.get_int(sk) != full)
      throw input_error(f.path() + ": key '" + sk + "' = " + std::to_string(f.get_int(sk)) + " differs from the full layers' " +
                        std::to_string(full) + ": per-layer head and RoPE sizes are not supported");
  }
  read_swa_period(f, hp, g2 ? 2 : 6);
  const std::string bk = key(hp, "rope.freq_base_swa");
  hp.rope_freq_base_swa = g2 ? hp.rope_freq_base : 10000.0;
  if (f.find(bk))
    hp.rope_freq_base_swa = float_key(f, bk, f.get_float(bk), 0, std::numeric_limits<double>::max(), positive_float);
  hp.rope_scale_linear_swa = g2 ? hp.rope_scale_linear : 1.0;
  const std::string ak = key(hp, "attn_logit_softcapping"), fk = key(hp, "final_logit_softcapping");
  // Caps up to 1000: softcap_f32's absolute error is about cap * 2^-23 (real models use 30 and 50).
  const char* cap_range = "a soft cap from 1e-30 to 1000 (the exact tanh's error grows with the cap)";
  if (g2) hp.attn_softcap = float_key(f, ak, f.get_float(ak, 50.0), 1e-30, 1000, cap_range);
  if (!g2 && f.find(ak))
    throw input_error(f.path() + ": key '" + ak + "': gemma3 has no attention soft-capping (llama.cpp ignores the key; "
                      "the engine refuses a file that states one)");
  const double final_default = g2 ? 30.0 : 0.0;
  const double fc = f.get_float(fk, final_default);
  if (fc != 0.0 || g2) hp.final_softcap = float_key(f, fk, fc, 1e-30, 1000, cap_range);  // gemma2 divides by it
  const bool big = (g2 && hp.n_layer == 46) || (!g2 && hp.n_layer == 62);  // llama.cpp's 27B
  if (big && hp.n_embd / hp.n_head < 1)
    throw input_error(f.path() + ": embedding_length " + std::to_string(hp.n_embd) + " / head_count " + std::to_string(hp.n_head) +
                      " is 0: the attention scale of a " + std::to_string(hp.n_layer) + "-layer " + arch_name(hp.arch) +
                      " (1/sqrt(n_embd / n_head), llama.cpp's 27B rule) would be infinite");
  if (big) hp.attn_scale_override = 1.0 / std::sqrt(static_cast<double>(static_cast<float>(hp.n_embd / hp.n_head)));
}

// The experts' hyperparameters (arch_moe). Refuses what llama.cpp's qwen3moe would compute
// differently from the engine: group-limited routing and shared experts.
void moe_hparams(const gguf::file& f, hparams& hp) {
  const std::string n_key = key(hp, "expert_count"), used_key = key(hp, "expert_used_count");
  hp.n_expert = positive(f, n_key, f.get_int(n_key, 0), 4096);
  hp.n_expert_used = positive(f, used_key, f.get_int(used_key, 0), hp.n_expert);
  const std::string ff_key = key(hp, "expert_feed_forward_length");
  hp.n_ff_exp = positive(f, ff_key, f.get_int(ff_key, hp.n_ff / hp.n_expert_used));
  hp.expert_weights_norm = true;
  const std::string groups_key = key(hp, "expert_group_count"), shared_key = key(hp, "expert_shared_count");
  if (f.get_int(groups_key, 0) > 1)
    throw input_error(f.path() + ": key '" + groups_key + "' = " + std::to_string(f.get_int(groups_key)) +
                      ": group-limited expert routing is not supported");
  if (f.get_int(shared_key, 0) > 0)
    throw input_error(f.path() + ": key '" + shared_key + "' = " + std::to_string(f.get_int(shared_key)) +
                      ": shared experts are not supported (" + arch_name(hp.arch) + " has none)");
}

// gpt-oss: alternating sliding layers (llama.cpp's openai-moe reads the window as required and
// the period with a default of 2) whose RoPE is the full layers' unless rope.freq_base_swa says.
void read_oai(const gguf::file& f, hparams& hp) {
  const std::string wk = key(hp, "attention.sliding_window");
  if (!f.find(wk)) throw input_error(f.path() + ": key '" + wk + "' is missing (gpt-oss needs its window)");
  hp.swa = hp.n_swa > 0;
  read_swa_period(f, hp, 2);
  hp.expert_softmax_chosen = true;
  if (hp.n_rot != hp.head_dim)
    throw input_error(f.path() + ": key '" + key(hp, "rope.dimension_count") + "' = " + std::to_string(hp.n_rot) +
                      " differs from the head dimension " + std::to_string(hp.head_dim) +
                      ": gpt-oss sizes Q, K and V by it (llama.cpp refuses such a file)");
  const std::string fk = key(hp, "expert_feed_forward_length");
  if (!f.find(fk)) throw input_error(f.path() + ": key '" + fk + "' is missing (gpt-oss states its expert width)");
  hp.rope_freq_base_swa = hp.rope_freq_base;
  hp.rope_scale_linear_swa = hp.rope_scale_linear;
  const std::string bk = key(hp, "rope.freq_base_swa");
  if (f.find(bk))
    hp.rope_freq_base_swa = float_key(f, bk, f.get_float(bk), 0, std::numeric_limits<double>::max(),
                                      "a positive finite number, normal as a 32-bit float (the kernels' type)");
}

}  // namespace

const char* arch_name(arch_id a) { return row_of(a).name; }

std::optional<arch_id> arch_from_name(const std::string& name) {
  for (const arch_row& r : ARCHES)
    if (name == r.name) return r.id;
  return std::nullopt;
}

rope_kind arch_rope_kind(arch_id a) { return row_of(a).rope; }

bool arch_fused_qkv_ffn(arch_id a) { return row_of(a).fused; }

bool arch_gemma_block(arch_id a) { return row_of(a).gemma; }

bool layer_swa(const hparams& hp, int64_t l) {
  if (!hp.swa) return false;
  return hp.swa_period == 0 || l % hp.swa_period < hp.swa_period - 1;
}

bool arch_oai_block(arch_id a) { return row_of(a).oai; }

bool arch_moe(arch_id a) {
  for (arch_id m : MOE_ARCHES)
    if (m == a) return true;
  return false;
}

std::string arch_names() {
  std::string s;
  for (const arch_row& r : ARCHES) s += std::string(s.empty() ? "" : ", ") + r.name;
  return s;
}

hparams hparams_from_gguf(const gguf::file& f) {
  std::string name = f.get_string("general.architecture");
  std::optional<arch_id> a = arch_from_name(name);
  if (!a) throw input_error(f.path() + ": general.architecture '" + gguf::printable(name) + "' is not supported (" + arch_names() + ")");
  hparams hp;
  hp.arch = *a;
  auto count = [&](const char* suffix) { return positive(f, key(hp, suffix), f.get_int(key(hp, suffix))); };
  hp.n_embd = count("embedding_length");
  hp.n_layer = positive(f, key(hp, "block_count"), f.get_int(key(hp, "block_count")), 4096);
  if (hp.n_layer > static_cast<int64_t>(f.tensors().size()))
    throw input_error(f.path() + ": block_count " + std::to_string(hp.n_layer) + " but the file holds only " +
                      std::to_string(f.tensors().size()) + " tensors");
  hp.n_head = positive(f, key(hp, "attention.head_count"), f.get_int(key(hp, "attention.head_count")), 4096);
  hp.n_head_kv = positive(f, key(hp, "attention.head_count_kv"), f.get_int(key(hp, "attention.head_count_kv"), hp.n_head));
  hp.n_ff = count("feed_forward_length");
  hp.n_ctx_train = count("context_length");
  if (hp.n_embd % hp.n_head != 0 && !f.find(key(hp, "attention.key_length")))
    throw input_error(f.path() + ": embedding_length " + std::to_string(hp.n_embd) + " is not a multiple of head_count " +
                      std::to_string(hp.n_head) + " and attention.key_length is absent");
  hp.head_dim = positive(f, key(hp, "attention.key_length"), f.get_int(key(hp, "attention.key_length"), hp.n_embd / hp.n_head));
  if (arch_fused_qkv_ffn(hp.arch) && hp.n_head * hp.head_dim != hp.n_embd)
    throw input_error(f.path() + ": attention.key_length " + std::to_string(hp.head_dim) + " x head_count " +
                      std::to_string(hp.n_head) + " differs from embedding_length " + std::to_string(hp.n_embd) + ": " +
                      arch_name(hp.arch) + "'s attn_qkv holds n_embd Q rows (llama.cpp refuses such a file)");
  int64_t v_len = f.get_int(key(hp, "attention.value_length"), hp.head_dim);
  if (v_len != hp.head_dim)
    throw input_error(f.path() + ": attention.value_length " + std::to_string(v_len) + " differs from key_length " +
                      std::to_string(hp.head_dim) + " (not supported)");
  hp.n_rot = positive(f, key(hp, "rope.dimension_count"), f.get_int(key(hp, "rope.dimension_count"), hp.head_dim));
  const char* positive_float = "a positive finite number, normal as a 32-bit float (the kernels' type)";
  hp.rope_freq_base = float_key(f, key(hp, "rope.freq_base"), f.get_float(key(hp, "rope.freq_base"), 10000.0), 0,
                                std::numeric_limits<double>::max(), positive_float);
  std::string scaling = f.get_string(key(hp, "rope.scaling.type"), "none");
  if (scaling == "linear" || scaling == "yarn") {
    const std::string k = key(hp, "rope.scaling.factor");
    hp.rope_scale_linear = 1.0 / float_key(f, k, f.get_float(k, 1.0), MIN_ROPE_FACTOR, MAX_ROPE_FACTOR,
                                           "a number from 1/65536 to 65536 (positions are divided by it)");
  } else if (scaling != "none") {
    throw input_error(f.path() + ": rope.scaling.type '" + gguf::printable(scaling) + "' is not supported (none, linear, yarn)");
  }
  hp.rope_yarn = scaling == "yarn";
  if (hp.rope_yarn && hp.rope_scale_linear > 1.0)
    throw input_error(f.path() + ": key '" + key(hp, "rope.scaling.factor") + "': YaRN needs a factor of at least 1, found " +
                      num(1.0 / hp.rope_scale_linear));
  const std::string orig_key = key(hp, "rope.scaling.original_context_length");
  hp.n_ctx_orig_yarn = positive(f, orig_key, f.get_int(orig_key, hp.n_ctx_train));
  const std::string af_key = key(hp, "rope.scaling.attn_factor");
  if (f.find(af_key)) hp.rope_attn_factor = float_key(f, af_key, f.get_float(af_key), 1.0 / 1024, 1024, "a factor from 1/1024 to 1024");
  const std::string eps_key = key(hp, "attention.layer_norm_rms_epsilon");
  hp.rms_eps = float_key(f, eps_key, f.get_float(eps_key), 0, std::numeric_limits<double>::max(), positive_float);
  const gguf::tensor_info* emb = f.find_tensor("token_embd.weight");
  if (!emb || emb->ne.size() != 2) throw input_error(f.path() + ": tensor 'token_embd.weight' is missing or not 2-D");
  hp.n_vocab = emb->ne[1];
  hp.tied_output = f.find_tensor("output.weight") == nullptr;
  const std::string swa_key = key(hp, "attention.sliding_window");
  if (hp.arch == ARCH_GEMMA2) hp.n_swa = 4096;  // llama.cpp's default for gemma2
  if (f.find(swa_key)) {
    hp.n_swa = f.get_int(swa_key);
    if (hp.n_swa < 0 || hp.n_swa > MAX_COUNT)
      throw input_error(f.path() + ": key '" + swa_key + "': expected a window from 0 to " + std::to_string(MAX_COUNT) +
                        ", found " + std::to_string(hp.n_swa));
  }
  if (arch_gemma_block(hp.arch)) read_gemma(f, hp);
  if (arch_moe(hp.arch)) moe_hparams(f, hp);
  if (arch_oai_block(hp.arch)) read_oai(f, hp);
  check_consistency(f, hp);
  return hp;
}

void hparams_write(gguf::writer& w, const hparams& hp) {
  auto u32 = [](int64_t v) { return gguf::value::of_u32(static_cast<uint32_t>(v)); };
  w.set("general.architecture", gguf::value::of_string(arch_name(hp.arch)));
  w.set(key(hp, "context_length"), u32(hp.n_ctx_train));
  w.set(key(hp, "embedding_length"), u32(hp.n_embd));
  w.set(key(hp, "block_count"), u32(hp.n_layer));
  w.set(key(hp, "feed_forward_length"), u32(hp.n_ff));
  w.set(key(hp, "attention.head_count"), u32(hp.n_head));
  w.set(key(hp, "attention.head_count_kv"), u32(hp.n_head_kv));
  if (hp.head_dim != hp.n_embd / hp.n_head || hp.arch == ARCH_QWEN3 || hp.arch == ARCH_QWEN3MOE) {
    w.set(key(hp, "attention.key_length"), u32(hp.head_dim));
    w.set(key(hp, "attention.value_length"), u32(hp.head_dim));
  }
  w.set(key(hp, "rope.dimension_count"), u32(hp.n_rot));
  w.set(key(hp, "rope.freq_base"), gguf::value::of_f32(static_cast<float>(hp.rope_freq_base)));
  w.set(key(hp, "attention.layer_norm_rms_epsilon"), gguf::value::of_f32(static_cast<float>(hp.rms_eps)));
  w.set(key(hp, "vocab_size"), u32(hp.n_vocab));
  // llama.cpp b4748 refuses a phi3 file without it; the current one reads it and disables it.
  if (hp.arch == ARCH_PHI3) w.set(key(hp, "attention.sliding_window"), u32(hp.n_swa));
  if (arch_gemma_block(hp.arch)) {
    if (hp.swa) {
      w.set(key(hp, "attention.sliding_window"), u32(hp.n_swa));
      w.set(key(hp, "attention.sliding_window_pattern"), u32(hp.swa_period));
      if (hp.arch == ARCH_GEMMA3) w.set(key(hp, "rope.freq_base_swa"), gguf::value::of_f32(static_cast<float>(hp.rope_freq_base_swa)));
    }
    if (hp.arch == ARCH_GEMMA2) w.set(key(hp, "attn_logit_softcapping"), gguf::value::of_f32(static_cast<float>(hp.attn_softcap)));
    if (hp.final_softcap > 0) w.set(key(hp, "final_logit_softcapping"), gguf::value::of_f32(static_cast<float>(hp.final_softcap)));
  }
  if (hp.rope_yarn) {
    w.set(key(hp, "rope.scaling.type"), gguf::value::of_string("yarn"));
    w.set(key(hp, "rope.scaling.factor"), gguf::value::of_f32(static_cast<float>(1.0 / hp.rope_scale_linear)));
    w.set(key(hp, "rope.scaling.original_context_length"), u32(hp.n_ctx_orig_yarn));
  }
  if (arch_oai_block(hp.arch)) {
    w.set(key(hp, "attention.sliding_window"), u32(hp.n_swa));
    if (hp.swa && hp.swa_period != 2) w.set(key(hp, "attention.sliding_window_pattern"), u32(hp.swa_period));
  }
  if (arch_moe(hp.arch)) {
    w.set(key(hp, "expert_count"), u32(hp.n_expert));
    w.set(key(hp, "expert_used_count"), u32(hp.n_expert_used));
    w.set(key(hp, "expert_feed_forward_length"), u32(hp.n_ff_exp));
  }
}

std::vector<tensor_desc> arch_tensors(const hparams& hp) {
  const arch_row& r = row_of(hp.arch);
  const int64_t q_dim = hp.n_head * hp.head_dim, kv_dim = hp.n_head_kv * hp.head_dim;
  std::vector<tensor_desc> out;
  auto add = [&](std::string name, std::vector<int64_t> ne, tensor_kind k, bool opt = false) {
    out.push_back({std::move(name), std::move(ne), k, opt});
  };
  add("token_embd.weight", {hp.n_embd, hp.n_vocab}, TENSOR_MATRIX);
  add("output_norm.weight", {hp.n_embd}, TENSOR_VECTOR);
  if (hp.arch != ARCH_GEMMA2)  // gemma2's output is always token_embd (llama.cpp has no output.weight for it)
    add("output.weight", {hp.n_embd, hp.n_vocab}, TENSOR_MATRIX, !r.oai);  // gpt-oss: llama.cpp requires it
  if (r.rope_freqs) add("rope_freqs.weight", {hp.n_rot / 2}, TENSOR_VECTOR, true);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {hp.n_embd}, TENSOR_VECTOR);
    if (r.fused) {
      add(b + "attn_qkv.weight", {hp.n_embd, q_dim + 2 * kv_dim}, TENSOR_MATRIX);
    } else {
      add(b + "attn_q.weight", {hp.n_embd, q_dim}, TENSOR_MATRIX);
      add(b + "attn_k.weight", {hp.n_embd, kv_dim}, TENSOR_MATRIX);
      add(b + "attn_v.weight", {hp.n_embd, kv_dim}, TENSOR_MATRIX);
    }
    if (r.qkv_bias) {
      add(b + "attn_q.bias", {q_dim}, TENSOR_VECTOR);
      add(b + "attn_k.bias", {kv_dim}, TENSOR_VECTOR);
      add(b + "attn_v.bias", {kv_dim}, TENSOR_VECTOR);
    }
    if (r.qk_norm) {
      add(b + "attn_q_norm.weight", {hp.head_dim}, TENSOR_VECTOR);
      add(b + "attn_k_norm.weight", {hp.head_dim}, TENSOR_VECTOR);
    }
    add(b + "attn_output.weight", {q_dim, hp.n_embd}, TENSOR_MATRIX);
    if (r.oai) {
      add(b + "attn_output.bias", {hp.n_embd}, TENSOR_VECTOR);
      add(b + "attn_sinks.weight", {hp.n_head}, TENSOR_VECTOR);
      add(b + "post_attention_norm.weight", {hp.n_embd}, TENSOR_VECTOR);  // the FFN's input norm
      add(b + "ffn_gate_inp.weight", {hp.n_embd, hp.n_expert}, TENSOR_MATRIX);
      add(b + "ffn_gate_inp.bias", {hp.n_expert}, TENSOR_VECTOR);
      add(b + "ffn_gate_exps.weight", {hp.n_embd, hp.n_ff_exp, hp.n_expert}, TENSOR_MATRIX);
      add(b + "ffn_gate_exps.bias", {hp.n_ff_exp, hp.n_expert}, TENSOR_VECTOR);
      add(b + "ffn_down_exps.weight", {hp.n_ff_exp, hp.n_embd, hp.n_expert}, TENSOR_MATRIX);
      add(b + "ffn_down_exps.bias", {hp.n_embd, hp.n_expert}, TENSOR_VECTOR);
      add(b + "ffn_up_exps.weight", {hp.n_embd, hp.n_ff_exp, hp.n_expert}, TENSOR_MATRIX);
      add(b + "ffn_up_exps.bias", {hp.n_ff_exp, hp.n_expert}, TENSOR_VECTOR);
      continue;
    }
    if (r.gemma) add(b + "post_attention_norm.weight", {hp.n_embd}, TENSOR_VECTOR);
    add(b + "ffn_norm.weight", {hp.n_embd}, TENSOR_VECTOR);
    if (arch_moe(hp.arch)) {
      add(b + "ffn_gate_inp.weight", {hp.n_embd, hp.n_expert}, TENSOR_MATRIX);
      add(b + "ffn_gate_exps.weight", {hp.n_embd, hp.n_ff_exp, hp.n_expert}, TENSOR_MATRIX);
      add(b + "ffn_down_exps.weight", {hp.n_ff_exp, hp.n_embd, hp.n_expert}, TENSOR_MATRIX);
      add(b + "ffn_up_exps.weight", {hp.n_embd, hp.n_ff_exp, hp.n_expert}, TENSOR_MATRIX);
    } else if (r.fused) {
      add(b + "ffn_down.weight", {hp.n_ff, hp.n_embd}, TENSOR_MATRIX);
      add(b + "ffn_up.weight", {hp.n_embd, 2 * hp.n_ff}, TENSOR_MATRIX);
    } else {
      add(b + "ffn_gate.weight", {hp.n_embd, hp.n_ff}, TENSOR_MATRIX);
      add(b + "ffn_down.weight", {hp.n_ff, hp.n_embd}, TENSOR_MATRIX);
      add(b + "ffn_up.weight", {hp.n_embd, hp.n_ff}, TENSOR_MATRIX);
    }
    if (r.gemma) add(b + "post_ffw_norm.weight", {hp.n_embd}, TENSOR_VECTOR);
  }
  return out;
}

void arch_check_tensors(const gguf::file& f, const hparams& hp) {
  std::set<std::string> expected;
  for (const tensor_desc& d : arch_tensors(hp)) {
    expected.insert(d.name);
    const gguf::tensor_info* t = f.find_tensor(d.name);
    if (!t) {
      if (d.optional) continue;
      throw input_error(f.path() + ": tensor '" + d.name + "' is missing (architecture " + arch_name(hp.arch) + ")");
    }
    if (t->ne != d.ne) {
      auto shape = [](const std::vector<int64_t>& ne) {
        std::string s = "[";
        for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
        return s + "]";
      };
      throw input_error(f.path() + ": tensor '" + d.name + "': expected shape " + shape(d.ne) + ", found " + shape(t->ne));
    }
    if (d.kind == TENSOR_VECTOR && t->type != gguf::DTYPE_F32)
      throw input_error(f.path() + ": tensor '" + d.name + "': expected f32, found " + gguf::dtype_get(t->type).name);
  }
  for (const gguf::tensor_info& t : f.tensors()) {
    if (!expected.count(t.name) && (t.name == "rope_factors_long.weight" || t.name == "rope_factors_short.weight"))
      throw input_error(f.path() + ": tensor '" + t.name + "': LongRoPE frequency factors (Phi-3 128k, Phi-3.5, Phi-4-mini) " +
                        "are not supported yet; files without them (Phi-3 4k, Phi-4) are");
    if (!expected.count(t.name) && arch_moe(hp.arch) && t.name.find("_shexp") != std::string::npos)
      throw input_error(f.path() + ": tensor '" + gguf::printable(t.name) + "': shared experts are not supported (" +
                        arch_name(hp.arch) + " has none)");
    if (!expected.count(t.name))
      throw input_error(f.path() + ": unexpected tensor '" + gguf::printable(t.name) + "' for architecture " + arch_name(hp.arch));
  }
}

}  // namespace detaudit::model
