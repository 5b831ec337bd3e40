#include <cctype>
#include <iostream>
#include <memory>
#include <vector>

#include "commands.h"
#include "gguf/dtype.h"
#include "gguf/weight_types.h"
#include "model/synth.h"
#include "util/error.h"

namespace detaudit::cli {

struct synth_cmd_options {
  model::synth_options synth;
  std::string out;
  std::string arch = "llama";
  std::string type = "f16";
  std::string preset;
  std::vector<std::string> tensor_types;  // NAME=TYPE
};

namespace {

// Every weight type the engine computes (gguf/weight_types.h), as --type accepts them.
std::string types() { return gguf::weight_type_names("|", true); }

// The computed type called `name` (any case), or nullptr.
const gguf::dtype_traits* computed_type(const std::string& name) {
  const gguf::dtype_traits* t = gguf::dtype_from_name(name);
  return t && gguf::weight_type_of(t->type) ? t : nullptr;
}

// Applies --preset, then lets every shape flag given explicitly override it.
void resolve(CLI::App* sub, synth_cmd_options& o) {
  auto a = model::arch_from_name(o.arch);
  if (!a) throw input_error("synth: --arch '" + o.arch + "' is not one of " + model::arch_names());
  o.synth.arch = *a;
  if (*a == model::ARCH_GEMMA2) o.synth.tied_output = true;  // gemma2 has no output.weight
  std::string lower = o.type;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool mixture = lower == "q4_k_m" || lower == "q5_k_m" || lower == "mxfp4_moe";
  const gguf::dtype_traits* t = mixture ? nullptr : computed_type(o.type);
  if (!t && !mixture) throw input_error("synth: --type '" + o.type + "' is not one of " + types() + "|" + model::synth_mixture_names());
  if (t) o.synth.type = t->type;
  for (const std::string& nt : o.tensor_types) {
    const size_t eq = nt.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == nt.size())
      throw input_error("synth: --tensor-type '" + nt + "' is not NAME=TYPE (e.g. attn_v=q6_k)");
    const gguf::dtype_traits* tt = computed_type(nt.substr(eq + 1));
    if (!tt) throw input_error("synth: --tensor-type '" + nt + "': '" + nt.substr(eq + 1) + "' is not one of " + types());
    o.synth.tensor_types.emplace_back(nt.substr(0, eq), tt->type);
  }
  if (!o.preset.empty()) {
    const model::synth_preset* p = model::synth_find_preset(o.preset);
    if (!p) throw input_error("synth: --preset '" + o.preset + "' is not one of " + model::synth_preset_names());
    model::synth_options given = o.synth;
    model::synth_apply_preset(o.synth, *p);
    const std::pair<const char*, int64_t model::synth_options::*> shape_flags[] = {
        {"--n-embd", &model::synth_options::n_embd}, {"--n-layer", &model::synth_options::n_layer},
        {"--n-head", &model::synth_options::n_head}, {"--n-head-kv", &model::synth_options::n_head_kv},
        {"--n-ff", &model::synth_options::n_ff},     {"--n-ctx", &model::synth_options::n_ctx}};
    for (auto [flag, member] : shape_flags)
      if (sub->get_option(flag)->count() > 0) o.synth.*member = given.*member;
  }
  // The mixture's per-layer choices need the final layer count; --tensor-type entries still win.
  if (mixture) model::synth_apply_mixture(o.synth, lower);
}

}  // namespace

void setup_synth(CLI::App& app) {
  auto opt = std::make_shared<synth_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "synth", "Write a model with random weights (seeded, realistic scales) as a GGUF file llama.cpp can load");
  model::synth_options& s = opt->synth;
  sub->add_option("-o,--output", opt->out, "Output GGUF file")->required();
  sub->add_option("--arch", opt->arch,
                  "Architecture: llama, qwen2 (q/k/v biases), qwen3 (q/k norms), phi3 (fused attn_qkv and gate-up ffn_up), "
                  "gemma2 (GELU gate, post-norms, soft caps, alternate sliding-window layers, tied output), gemma3 (gemma2's "
                  "block with q/k norms, five sliding layers in six with their own RoPE base, no caps), "
                  "qwen3moe (qwen3 attention, mixture-of-experts feed-forward), gpt-oss (biased attention with per-head "
                  "sinks, YaRN RoPE, alternate 128-position sliding layers, biased experts with the clamped SwiGLU)")
      ->capture_default_str();
  sub->add_option("--type", opt->type,
                  "Weight matrix type: " + types() + ", or llama.cpp's mixture " + model::synth_mixture_names() +
                      " (q4_K/q5_K, with q6_K in output.weight and in attn_v and ffn_down of the layers llama.cpp gives more bits;"
                      " phi3's fused attn_qkv one step up in every layer; qwen3moe's ffn_down_exps as ffn_down, its router f32;"
                      " mxfp4_moe: the expert tensors mxfp4 and every other matrix q8_0, the router f32, as gpt-oss ships)")
      ->capture_default_str();
  sub->add_option("--tensor-type", opt->tensor_types,
                  "NAME=TYPE: write the matrices NAME names in TYPE instead (repeatable; a later one wins). NAME is a "
                  "whole tensor name (output.weight, blk.1.attn_v.weight) or a name inside every block (attn_v)");
  sub->add_option("--preset", opt->preset, "Shape preset: " + model::synth_preset_names() + " (shape flags override it)");
  sub->add_option("--n-embd", s.n_embd, "Embedding width")->capture_default_str();
  sub->add_option("--n-layer", s.n_layer, "Number of transformer blocks")->capture_default_str();
  sub->add_option("--n-head", s.n_head, "Attention heads")->capture_default_str();
  sub->add_option("--n-head-kv", s.n_head_kv, "Key/value heads (grouped-query attention when fewer)")->capture_default_str();
  sub->add_option("--n-ff", s.n_ff, "Feed-forward width")->capture_default_str();
  sub->add_option("--n-ctx", s.n_ctx, "Trained context length recorded in the file")->capture_default_str();
  sub->add_option("--head-dim", s.head_dim, "Head dimension (default n_embd / n_head)");
  sub->add_option("--n-expert", s.n_expert, "qwen3moe, gpt-oss: experts per layer")->capture_default_str();
  sub->add_option("--n-expert-used", s.n_expert_used, "qwen3moe, gpt-oss: experts each token uses")->capture_default_str();
  sub->add_option("--n-ff-exp", s.n_ff_exp, "qwen3moe, gpt-oss: feed-forward width of each expert (default n_embd)");
  sub->add_flag("--tied-output", s.tied_output, "Omit output.weight; the output projection reuses token_embd (gemma2: always)");
  sub->add_option("--sliding-window", s.sliding_window,
                  "gemma2/gemma3/gpt-oss: positions a sliding layer sees (default: 4096 for gemma2, 1024 for gemma3, 128 "
                  "for gpt-oss, at most --n-ctx; gemma3 and gpt-oss 0: no sliding layers)");
  sub->add_option("--swa-period", s.swa_period,
                  "gemma2/gemma3/gpt-oss: layer l slides when l % P < P - 1 (default: 2 for gemma2 and gpt-oss, 6 for "
                  "gemma3; 0: every layer)");
  sub->add_option("--vocab-from", s.vocab_from, "Copy the vocabulary (tokenizer.*) from this GGUF instead of the built-in one")
      ->check(CLI::ExistingFile);
  sub->add_option("--seed", s.seed, "Random seed; the same options and seed give the same bytes")->capture_default_str();
  sub->add_option("--name", s.name, "general.name written to the file")->capture_default_str();
  sub->footer(
      "Norms and biases are always f32. K-quant types (q2_k..q6_k) need n_embd, n_ff and n_head x head_dim\n"
      "to be multiples of 256.\n"
      "Examples:\n"
      "  detaudit synth -o tiny.gguf --preset tiny --type q8_0\n"
      "  detaudit synth -o q.gguf --arch qwen2 --type q4_k --n-embd 512 --n-ff 1536\n"
      "  detaudit synth -o 1b.gguf --preset 1b --type q4_k --vocab-from ggml-vocab-llama-spm.gguf\n"
      "  detaudit synth -o m.gguf --preset 1b --type q4_k_m     (llama.cpp's Q4_K_M mixture)\n"
      "  detaudit synth -o moe.gguf --arch qwen3moe --type q8_0 --n-expert 16 --n-expert-used 4\n"
      "  detaudit synth -o m.gguf --type q4_k --tensor-type output.weight=q6_k --tensor-type blk.1.attn_v=q6_k\n"
      "  detaudit synth -o g.gguf --arch gemma3 --preset tiny --sliding-window 16 --swa-period 2\n"
      "  detaudit synth -o oss.gguf --arch gpt-oss --type mxfp4_moe --sliding-window 16   (experts in mxfp4)");
  sub->callback([sub, opt] {
    resolve(sub, *opt);
    uint64_t n = model::synth_write(opt->synth, opt->out);
    std::cout << "wrote " << opt->out << ": " << model::arch_name(opt->synth.arch) << ", "
              << (opt->synth.file_type >= 0 ? opt->type : gguf::dtype_get(opt->synth.type).name) << ", " << n << " parameters\n";
  });
}

}  // namespace detaudit::cli
