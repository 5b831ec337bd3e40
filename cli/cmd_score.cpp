#include <iostream>
#include <memory>
#include <thread>

#include "commands.h"
#include "model/inspect.h"
#include "runtime/output.h"
#include "runtime/score.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

struct score_cmd_options {
  std::string model;
  std::string prompt_tokens;
  std::string tokens;
  std::string reference;
  int top_k = 10;
  std::string numerics = "exact";
  backend_options backend;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool no_repack = false;
  int64_t ubatch = 512;
  int64_t ctx_size = 0;
  bool json = false;
};

void run_score(const score_cmd_options& o) {
  std::vector<runtime::score_item> items;
  if (!o.reference.empty()) {
    items = runtime::score_read_reference(o.reference);
  } else {
    if (o.prompt_tokens.empty() || o.tokens.empty())
      throw input_error("score: give --prompt-tokens and --tokens, or --reference FILE.json");
    items.push_back({runtime::token_ids_parse(o.prompt_tokens, "--prompt-tokens"), runtime::token_ids_parse(o.tokens, "--tokens")});
  }
  runtime::context_params cp;
  cp.numerics = runtime::numerics_from_name(o.numerics);
  apply_backend_options(o.backend, cp);
  cp.n_threads = o.threads;
  cp.repack = !o.no_repack;
  cp.n_ubatch = o.ubatch;
  cp.n_ctx = o.ctx_size;
  runtime::context ctx(model::model::load(o.model), cp);
  std::vector<runtime::score_result> results;
  for (const runtime::score_item& it : items) results.push_back(runtime::score(ctx, it.prompt, it.tokens, o.top_k));
  if (o.json) std::cout << model::safe_dump(runtime::score_to_json(results)) << "\n";
  else std::cout << runtime::score_to_text(results);
}

}  // namespace

void setup_score(CLI::App& app) {
  auto opt = std::make_shared<score_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "score",
      "Teacher-forced scoring: evaluate given prompt and continuation tokens with the built-in engine and report,\n"
      "for each continuation token, its log-probability, the top-k log-probabilities and a hash of the logits.\n"
      "With --reference, score every item of a llama.cpp reference file on its own tokens, to measure fidelity.");
  sub->add_option("-m,--model", opt->model, "GGUF model file")->required()->check(CLI::ExistingFile)->type_name("FILE.gguf");
  CLI::Option* pt = sub->add_option("--prompt-tokens", opt->prompt_tokens, "Prompt token ids, comma- or space-separated (BOS included)")
                        ->type_name("IDS");
  CLI::Option* tk = sub->add_option("--tokens", opt->tokens, "Continuation token ids to score, comma- or space-separated")
                        ->type_name("IDS");
  CLI::Option* ref = sub->add_option("--reference", opt->reference,
                                     "A llama.cpp reference JSON ({\"items\": [{\"prompt_tokens\", \"tokens\"}, ...]}): "
                                     "score each item's tokens after its prompt tokens")
                         ->check(CLI::ExistingFile)->type_name("FILE.json");
  ref->excludes(pt)->excludes(tk);
  pt->needs(tk);
  tk->needs(pt);
  sub->add_option("--top-k", opt->top_k, "Top log-probabilities reported per step")->capture_default_str();
  sub->add_option("--numerics", opt->numerics, "exact, float or reference (see 'detaudit generate --help')")
      ->capture_default_str()->type_name("MODE");
  add_backend_options(sub, opt->backend);
  sub->add_option("-t,--threads", opt->threads, "Threads used by the engine")->capture_default_str();
  sub->add_flag("--no-repack", opt->no_repack,
                "Keep the weights in the mapped file's layout (no load-time repacking for the CPU kernels: less memory, "
                "slower generation, the same bits)");
  sub->add_option("--ubatch", opt->ubatch, "Most tokens evaluated in one forward step (-ub)")->capture_default_str();
  sub->add_option("-c,--ctx-size", opt->ctx_size, "Context length; 0: the model's trained context")->capture_default_str();
  sub->add_flag("--json", opt->json,
                "Print {\"items\": [{\"steps\": [{\"id\", \"logprob\", \"top\": [[id, logprob], ...], \"logit_hash\"}, ...], "
                "\"chained_hash\"}, ...]}");
  sub->footer(
      "Each item is evaluated alone, in one decode of prompt + continuation. Log-probabilities are of the raw logits\n"
      "(temperature 1), as llama.cpp's n_probs reports them.\n"
      "Examples:\n"
      "  detaudit score -m stories260K.gguf --prompt-tokens 1,403,407,261,378 --tokens 432,383,286\n"
      "  detaudit score -m stories260K.gguf --reference stories260K-llamacpp-greedy.json --json > scores.json\n"
      "  detaudit score -m model.gguf --reference ref.json --numerics float --top-k 5");
  sub->callback([opt] { run_score(*opt); });
}

}  // namespace detaudit::cli
