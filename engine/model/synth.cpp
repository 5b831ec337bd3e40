#include "model/synth.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/quants.h"
#include "gguf/weight_types.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace detaudit::model {
namespace {

const synth_preset PRESETS[] = {
    {"tiny", "n_embd 256, 2 layers, 4 heads (2 KV), n_ff 768: the shape of the synthetic fixtures", 256, 2, 4, 2, 768, 2048},
    {"small", "n_embd 512, 4 layers, 8 heads (4 KV), n_ff 1536", 512, 4, 8, 4, 1536, 4096},
    {"medium", "n_embd 1024, 8 layers, 16 heads (4 KV), n_ff 2816", 1024, 8, 16, 4, 2816, 4096},
    {"1b", "n_embd 2048, 22 layers, 32 heads (4 KV), n_ff 5632: a 1.1B TinyLlama shape, for benchmarks", 2048, 22, 32, 4,
     5632, 2048},
};

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Approximately standard normal: the sum of four 16-bit uniforms, centred and scaled to unit
// variance (tails end at about 3.5 sigma). Integer arithmetic and one rounding per value, so the
// same seed gives the same bits everywhere.
class normal_rng {
 public:
  explicit normal_rng(uint64_t seed) : state_(seed) {}
  float next() {
    uint64_t r = splitmix64(state_);
    int64_t sum = int64_t(r & 0xffff) + int64_t((r >> 16) & 0xffff) + int64_t((r >> 32) & 0xffff) + int64_t(r >> 48);
    // Four U(0, 65535) have mean 131070 and variance 4 * (65536^2 - 1) / 12.
    constexpr double SCALE = 1.0 / 37837.226;  // 1 / sqrt(4 * (65536^2 - 1) / 12)
    return static_cast<float>(static_cast<double>(sum - 131070) * SCALE);
  }

 private:
  uint64_t state_;
};

// Standard deviation and offset of each tensor's values (value = offset + std * N(0, 1)).
struct init_scale {
  double std;
  double offset;
};

// 1/sqrt(n) without libm: Newton iterations on a double, exact enough for a scale. The step
// y(1.5 - 0.5 n y^2) converges to +1/sqrt(n) only from n y^2 < 3 (at 3 it gives 0, above it the
// negative root or divergence), so y starts with n y^2 in [0.5, 2]: powers of two move it by 4x.
double inv_sqrt(double n) {
  double y = 1.0;
  while (y * y * n > 2.0) y *= 0.5;
  while (y * y * n < 0.5) y *= 2.0;
  for (int i = 0; i < 32; ++i) y = y * (1.5 - 0.5 * n * y * y);
  return y;
}

init_scale scale_for(const tensor_desc& d, const hparams& hp) {
  const std::string& n = d.name;
  auto ends = [&](const char* s) { return n.size() >= std::string(s).size() && n.compare(n.size() - std::string(s).size(), std::string::npos, s) == 0; };
  if (ends("norm.weight")) return {0.1, 1.0};
  if (ends(".bias")) return {0.1, 0.0};
  if (ends("attn_sinks.weight")) return {1.0, 0.0};  // scores' own scale: some heads' sinks take most weight
  if (n == "token_embd.weight") return {hp.tied_output ? 2.5 * inv_sqrt(double(hp.n_embd)) : 1.0, 0.0};
  if (n == "output.weight") return {2.5 * inv_sqrt(double(hp.n_embd)), 0.0};
  double fan_in = static_cast<double>(d.ne[0]);
  // Projections back into the residual stream are scaled down by sqrt(2 * n_layer), as in GPT-2,
  // so the stream stays O(1) however deep the model.
  bool to_residual = ends("attn_output.weight") || ends("ffn_down.weight") || ends("ffn_down_exps.weight");
  return {inv_sqrt(fan_in) * (to_residual ? inv_sqrt(2.0 * double(hp.n_layer)) : 1.0), 0.0};
}

// Threads that quantize a tensor's rows: `requested`, or the machine's; at most 16.
int64_t synth_threads(int64_t requested) {
  const unsigned n = std::thread::hardware_concurrency();
  const int64_t t = requested > 0 ? requested : n == 0 ? 1 : static_cast<int64_t>(n);
  return std::min<int64_t>(t, 16);
}

void add_random_tensor(gguf::writer& w, const tensor_desc& d, const hparams& hp, gguf::dtype type, uint64_t seed,
                       int64_t want_threads) {
  normal_rng rng(seed ^ fnv1a(d.name));
  init_scale sc = scale_for(d, hp);
  const int64_t row = d.ne[0];
  int64_t n_rows = 1;
  for (size_t i = 1; i < d.ne.size(); ++i) n_rows *= d.ne[i];
  const uint64_t row_bytes = gguf::dtype_row_bytes(type, row);
  std::vector<uint8_t> bytes(row_bytes * static_cast<uint64_t>(n_rows));
  // The values in one sequential stream, then the rows quantized on several threads: each row's
  // bytes depend on its values alone, so the file is the same for any thread count.
  std::vector<float> vals(static_cast<size_t>(row * n_rows));
  for (float& v : vals) v = static_cast<float>(sc.offset + sc.std * rng.next());
  std::vector<std::exception_ptr> errors(16);
  auto quantize_rows = [&](int64_t r0, int64_t r1, size_t slot) {
    try {
      for (int64_t r = r0; r < r1; ++r)
        gguf::quants_quantize_row(type, vals.data() + r * row, bytes.data() + row_bytes * static_cast<uint64_t>(r), row);
    } catch (...) {
      errors[slot] = std::current_exception();
    }
  };
  const bool slow = gguf::dtype_get(type).block_size > 1;  // float rows are a copy or a rounding
  const int64_t n_threads = slow ? std::min<int64_t>(synth_threads(want_threads), n_rows / 64 + 1) : 1;
  std::vector<std::thread> threads;
  for (int64_t i = 1; i < n_threads; ++i)
    threads.emplace_back(quantize_rows, n_rows * i / n_threads, n_rows * (i + 1) / n_threads, static_cast<size_t>(i));
  quantize_rows(0, n_rows / n_threads, 0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  w.add_tensor(d.name, type, d.ne, bytes.data(), bytes.size());
}

hparams hparams_of(const synth_options& o, int64_t n_vocab) {
  hparams hp;
  hp.arch = o.arch;
  hp.n_vocab = n_vocab;
  hp.n_embd = o.n_embd;
  hp.n_layer = o.n_layer;
  hp.n_head = o.n_head;
  hp.n_head_kv = o.n_head_kv;
  hp.n_ff = o.n_ff;
  hp.n_ctx_train = o.n_ctx;
  hp.head_dim = o.head_dim ? o.head_dim : o.n_embd / o.n_head;
  hp.n_rot = hp.head_dim;
  const bool llama_like = o.arch == ARCH_LLAMA || o.arch == ARCH_PHI3;  // Phi-3's values are Llama's
  hp.rope_freq_base = llama_like ? 10000.0 : 1000000.0;
  hp.rms_eps = llama_like ? 1e-5 : 1e-6;
  hp.tied_output = o.tied_output;
  if (o.arch == ARCH_PHI3) hp.n_swa = o.n_ctx;  // a window as long as the context: no position falls out of it
  if (arch_gemma_block(o.arch)) {
    // Gemma's values: RMS eps 1e-6; gemma2 RoPE base 10000 everywhere and soft caps 50 / 30;
    // gemma3 base 1e6 on the global layers and 10000 on the sliding ones, no caps.
    const bool g2 = o.arch == ARCH_GEMMA2;
    hp.rms_eps = 1e-6;
    hp.rope_freq_base = g2 ? 10000.0 : 1000000.0;
    hp.rope_freq_base_swa = 10000.0;
    hp.n_swa = o.sliding_window >= 0 ? o.sliding_window : std::min<int64_t>(g2 ? 4096 : 1024, o.n_ctx);
    hp.swa = hp.n_swa > 0;
    hp.swa_period = o.swa_period >= 0 ? o.swa_period : (g2 ? 2 : 6);
    hp.attn_softcap = g2 ? 50.0 : 0.0;
    hp.final_softcap = g2 ? 30.0 : 0.0;
    hp.tied_output = g2 || o.tied_output;
  }
  if (arch_oai_block(o.arch)) {
    // gpt-oss's values: RMS eps 1e-5, RoPE base 150000 under YaRN (factor 32 over 4096 positions),
    // a 128-position window on alternate layers.
    hp.rms_eps = 1e-5;
    hp.rope_freq_base = hp.rope_freq_base_swa = 150000.0;
    hp.rope_yarn = true;
    hp.rope_scale_linear = hp.rope_scale_linear_swa = 1.0 / 32.0;
    hp.n_ctx_orig_yarn = 4096;
    hp.n_swa = o.sliding_window >= 0 ? o.sliding_window : std::min<int64_t>(128, o.n_ctx);
    hp.swa = hp.n_swa > 0;
    hp.swa_period = o.swa_period >= 0 ? o.swa_period : 2;
  }
  if (arch_moe(o.arch)) {
    hp.n_expert = o.n_expert;
    hp.n_expert_used = o.n_expert_used;
    hp.n_ff_exp = o.n_ff_exp ? o.n_ff_exp : o.n_embd;
    hp.expert_weights_norm = true;
  }
  return hp;
}

// Where the vocabulary comes from: the built-in one, or the tokenizer.* keys of another GGUF.
struct vocab_source {
  std::optional<tokenizer::vocab> builtin;
  std::optional<gguf::file> file;
  int64_t n_vocab = 0;
};

vocab_source open_vocab(const synth_options& o) {
  vocab_source src;
  if (o.vocab_from.empty()) {
    src.builtin = tokenizer::vocab_builtin();
    src.n_vocab = static_cast<int64_t>(src.builtin->size());
    return src;
  }
  src.file = gguf::file::open(o.vocab_from);
  const gguf::value* tokens = src.file->find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != gguf::VALUE_ARRAY || tokens->arr.empty())
    throw input_error(o.vocab_from + ": --vocab-from needs a GGUF with a vocabulary (tokenizer.ggml.tokens)");
  src.n_vocab = static_cast<int64_t>(tokens->arr.size());
  return src;
}

bool vocab_has(const vocab_source& src, const std::string& text) {
  if (src.builtin) return src.builtin->find(text) != tokenizer::TOKEN_NONE;
  for (const gguf::value& t : src.file->find("tokenizer.ggml.tokens")->arr)
    if (t.s == text) return true;
  return false;
}

// llama.cpp gives Phi-3's special tokens their attributes when general.name contains "phi3" or
// "phi-3" (any case), looking each one up: a vocabulary without them makes it refuse the file.
void check_name_vocab(const synth_options& o, const vocab_source& src) {
  std::string lower = o.name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("phi3") == std::string::npos && lower.find("phi-3") == std::string::npos) return;
  for (const char* t : {"</s>", "<unk>", "<s>", "<|endoftext|>"})
    if (!vocab_has(src, t))
      throw input_error("synth: --name '" + o.name + "' contains 'phi3' or 'phi-3', so llama.cpp looks up Phi-3's token '" + t +
                        "', which this vocabulary lacks, and refuses the file; choose another name or --vocab-from a Phi-3 GGUF");
}

void write_vocab(gguf::writer& w, const vocab_source& src) {
  if (src.builtin) {
    tokenizer::vocab_write(w, *src.builtin);
    return;
  }
  for (const gguf::kv& e : src.file->metadata())
    if (e.key.rfind("tokenizer.", 0) == 0) w.set(e.key, e.val);
}

}  // namespace

const synth_preset* synth_find_preset(const std::string& name) {
  for (const synth_preset& p : PRESETS)
    if (name == p.name) return &p;
  return nullptr;
}

std::string synth_preset_names() {
  std::string s;
  for (const synth_preset& p : PRESETS) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

void synth_apply_preset(synth_options& o, const synth_preset& p) {
  o.n_embd = p.n_embd;
  o.n_layer = p.n_layer;
  o.n_head = p.n_head;
  o.n_head_kv = p.n_head_kv;
  o.n_ff = p.n_ff;
  o.n_ctx = p.n_ctx;
}

int64_t synth_file_type(gguf::dtype t) {
  const gguf::weight_type* w = gguf::weight_type_of(t);
  if (!w) throw input_error(std::string("synth cannot write weight type ") + gguf::dtype_get(t).name);
  return w->file_type;
}

const char* synth_mixture_names() { return "q4_k_m|q5_k_m|mxfp4_moe"; }

bool synth_apply_mixture(synth_options& o, const std::string& name) {
  if (name == "mxfp4_moe") {  // llama.cpp's MXFP4_MOE: the 3-D expert tensors mxfp4, the other matrices q8_0
    o.type = gguf::DTYPE_Q8_0;
    o.file_type = 38;
    o.mixture = name;
    std::vector<std::pair<std::string, gguf::dtype>> mix;
    if (arch_moe(o.arch))
      for (const char* t : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) mix.emplace_back(t, gguf::DTYPE_MXFP4);
    o.tensor_types.insert(o.tensor_types.begin(), mix.begin(), mix.end());
    return true;
  }
  gguf::dtype base;
  if (name == "q4_k_m") {
    base = gguf::DTYPE_Q4_K;
    o.file_type = 15;
  } else if (name == "q5_k_m") {
    base = gguf::DTYPE_Q5_K;
    o.file_type = 17;
  } else {
    return false;
  }
  o.type = base;
  o.mixture = name;
  const int64_t n = o.n_layer;
  auto more_bits = [n](int64_t i) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; };
  std::vector<std::pair<std::string, gguf::dtype>> mix;
  mix.emplace_back(o.tied_output ? "token_embd.weight" : "output.weight", gguf::DTYPE_Q6_K);
  // A fused attn_qkv (phi3) takes one step more than the base type in every layer, in place of
  // attn_v's Q6_K in the layers that get more bits.
  const bool fused = arch_fused_qkv_ffn(o.arch);
  if (fused) mix.emplace_back("attn_qkv.weight", name == "q4_k_m" ? gguf::DTYPE_Q5_K : gguf::DTYPE_Q6_K);
  for (int64_t i = 0; i < n; ++i) {
    if (!more_bits(i)) continue;
    if (!fused) mix.emplace_back("blk." + std::to_string(i) + ".attn_v.weight", gguf::DTYPE_Q6_K);
    // An expert tensor is an ffn_down to llama.cpp's quantizer (it matches the name by "ffn_down").
    mix.emplace_back("blk." + std::to_string(i) + (arch_moe(o.arch) ? ".ffn_down_exps.weight" : ".ffn_down.weight"), gguf::DTYPE_Q6_K);
  }
  o.tensor_types.insert(o.tensor_types.begin(), mix.begin(), mix.end());
  return true;
}

namespace {

bool pattern_matches(const std::string& pattern, const std::string& name) {
  const std::string full = pattern.ends_with(".weight") ? pattern : pattern + ".weight";
  if (name == full) return true;
  // "attn_v.weight" names blk.N.attn_v.weight: the name ends with "." + the pattern.
  return name.size() > full.size() && name.ends_with(full) && name[name.size() - full.size() - 1] == '.';
}

}  // namespace

gguf::dtype synth_tensor_type(const synth_options& o, const std::string& name) {
  gguf::dtype t = name.ends_with("ffn_gate_inp.weight") ? gguf::DTYPE_F32 : o.type;
  for (const auto& [pattern, type] : o.tensor_types)
    if (pattern_matches(pattern, name)) t = type;
  return t;
}

void synth_validate(const synth_options& o) {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw input_error("synth: " + msg);
  };
  need(o.n_embd > 0 && o.n_layer > 0 && o.n_head > 0 && o.n_head_kv > 0 && o.n_ff > 0 && o.n_ctx > 0,
       "--n-embd, --n-layer, --n-head, --n-head-kv, --n-ff and --n-ctx must be positive");
  need(o.n_embd <= (1 << 16) && o.n_ff <= (1 << 18) && o.n_layer <= 256 && o.n_head <= 1024,
       "shape too large (n_embd <= 65536, n_ff <= 262144, n_layer <= 256, n_head <= 1024)");
  need(o.head_dim > 0 || o.n_embd % o.n_head == 0,
       "--n-embd " + std::to_string(o.n_embd) + " is not a multiple of --n-head " + std::to_string(o.n_head));
  need(o.n_head % o.n_head_kv == 0,
       "--n-head " + std::to_string(o.n_head) + " is not a multiple of --n-head-kv " + std::to_string(o.n_head_kv));
  int64_t hd = o.head_dim ? o.head_dim : o.n_embd / o.n_head;
  need(!arch_fused_qkv_ffn(o.arch) || hd * o.n_head == o.n_embd,
       std::string("--arch ") + arch_name(o.arch) + " needs --n-head x head dimension = --n-embd (llama.cpp reads attn_qkv's Q as n_embd rows); " +
           std::to_string(o.n_head) + " x " + std::to_string(hd) + " != " + std::to_string(o.n_embd));
  need(hd % 2 == 0, "the head dimension " + std::to_string(hd) + " must be even (RoPE rotates pairs)");
  need(o.arch != ARCH_GEMMA2 || o.tied_output, "--arch gemma2 needs --tied-output (its output projection is token_embd)");
  need(o.arch != ARCH_GEMMA2 || o.sliding_window != 0, "--arch gemma2 needs a --sliding-window of at least 1");
  need((o.sliding_window < 0 && o.swa_period < 0) || arch_gemma_block(o.arch) || arch_oai_block(o.arch),
       std::string("--sliding-window and --swa-period apply to gemma2, gemma3 and gpt-oss, not --arch ") + arch_name(o.arch));
  need(!arch_oai_block(o.arch) || !o.tied_output, "--arch gpt-oss has its own output.weight (llama.cpp requires it): drop --tied-output");
  need(!(arch_oai_block(o.arch) && o.sliding_window == 0 && o.swa_period >= 0),
       "--swa-period has no effect with --sliding-window 0 (no sliding layers)");
  need(o.sliding_window <= o.n_ctx, "--sliding-window " + std::to_string(o.sliding_window) + " is longer than --n-ctx " +
                                        std::to_string(o.n_ctx));
  need(o.swa_period <= 4096, "--swa-period " + std::to_string(o.swa_period) + " is above 4096");
  need(o.sliding_window >= -1 && o.swa_period >= -1, "--sliding-window and --swa-period must not be negative");
  need(o.swa_period != 1, "--swa-period 1 makes no layer slide, a file llama.cpp refuses (use --sliding-window 0 for none)");
  need(!(o.arch == ARCH_GEMMA3 && o.sliding_window == 0 && o.swa_period >= 0),
       "--swa-period has no effect with --sliding-window 0 (no sliding layers)");
  synth_file_type(o.type);
  const gguf::dtype_traits& t = gguf::dtype_get(o.type);
  if (arch_moe(o.arch)) {
    need(o.n_expert >= 1 && o.n_expert <= 256 && o.n_expert_used >= 1 && o.n_expert_used <= o.n_expert,
         "--n-expert must be from 1 to 256 and --n-expert-used from 1 to --n-expert; found " + std::to_string(o.n_expert) +
             " and " + std::to_string(o.n_expert_used));
    const int64_t ff = o.n_ff_exp ? o.n_ff_exp : o.n_embd;
    need(ff > 0 && ff <= (1 << 16), "--n-ff-exp must be from 1 to 65536, found " + std::to_string(ff));
    need(ff % t.block_size == 0, "--type " + std::string(t.name) + " packs rows in blocks of " + std::to_string(t.block_size) +
                                     "; the expert width (--n-ff-exp, default --n-embd) = " + std::to_string(ff) +
                                     " is not a multiple of it");
  }
  const std::pair<const char*, int64_t> rows[] = {{"--n-embd", o.n_embd}, {"--n-ff", o.n_ff}, {"--n-head x head_dim", o.n_head * hd}};
  for (auto [flag, n] : rows)
    need(n % t.block_size == 0, "--type " + (o.mixture.empty() ? std::string(t.name) : o.mixture + " (" + t.name + ")") +
                                    " packs rows in blocks of " + std::to_string(t.block_size) +
                                    "; " + flag + " = " + std::to_string(n) + " is not a multiple of it");
  if (o.tensor_types.empty()) return;
  hparams hp = hparams_of(o, 1);
  std::vector<tensor_desc> tensors = arch_tensors(hp);
  for (const auto& [pattern, type] : o.tensor_types) {
    synth_file_type(type);
    bool matched = false;
    for (const tensor_desc& d : tensors) {
      if (d.kind != TENSOR_MATRIX || !pattern_matches(pattern, d.name)) continue;
      if (d.optional && (d.name != "output.weight" || o.tied_output)) continue;
      matched = true;
      const gguf::dtype_traits& tt = gguf::dtype_get(type);
      need(d.ne[0] % tt.block_size == 0, "--tensor-type " + pattern + "=" + tt.name + ": " + d.name + " has rows of " +
                                             std::to_string(d.ne[0]) + ", not a multiple of the type's block of " +
                                             std::to_string(tt.block_size));
    }
    need(matched, "--tensor-type '" + pattern + "' names no weight matrix of this model (examples: output.weight, attn_v, blk.1.ffn_down)");
  }
}

uint64_t synth_write(const synth_options& o, const std::string& path) {
  synth_validate(o);
  vocab_source vocab = open_vocab(o);
  check_name_vocab(o, vocab);
  hparams hp = hparams_of(o, vocab.n_vocab);
  gguf::writer w;
  hparams_write(w, hp);
  w.set("general.name", gguf::value::of_string(o.name));
  const int64_t file_type = o.file_type >= 0 ? o.file_type : synth_file_type(o.type);
  w.set("general.file_type", gguf::value::of_u32(static_cast<uint32_t>(file_type)));
  bool quantized = gguf::dtype_get(o.type).block_size > 1;
  for (const auto& tt : o.tensor_types) quantized = quantized || gguf::dtype_get(tt.second).block_size > 1;
  if (quantized) w.set("general.quantization_version", gguf::value::of_u32(2));
  w.set("detaudit.synth.seed", gguf::value::of_u64(o.seed));
  write_vocab(w, vocab);
  uint64_t n_params = 0;
  for (const tensor_desc& d : arch_tensors(hp)) {
    if (d.optional && (d.name != "output.weight" || hp.tied_output)) continue;
    add_random_tensor(w, d, hp, d.kind == TENSOR_MATRIX ? synth_tensor_type(o, d.name) : gguf::DTYPE_F32, o.seed,
                      o.threads);
    uint64_t n = 1;
    for (int64_t e : d.ne) n *= static_cast<uint64_t>(e);
    n_params += n;
  }
  w.write(path);
  return n_params;
}

}  // namespace detaudit::model
