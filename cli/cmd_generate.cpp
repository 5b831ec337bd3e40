#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "chat/chat_template.h"
#include "commands.h"
#include "model/inspect.h"
#include "runtime/generate.h"
#include "runtime/output.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

struct generate_cmd_options {
  std::string model;
  std::string prompt;
  std::string file;
  bool chat = false;
  std::string system;
  std::string chat_template;
  bool no_thinking = false;
  std::string numerics = "exact";
  backend_options backend;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool no_repack = false;
  int64_t ubatch = 512;
  int64_t ctx_size = 0;
  int batch_with = 0;
  runtime::generate_params gen;
  bool hashes = false;
  bool trace_hashes = false;
  bool json = false;
  bool verbose = false;
};

std::string read_prompt_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw input_error(path + ": is a folder, not a prompt file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(path + ": cannot open the prompt file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw input_error(path + ": cannot read the prompt file");
  return ss.str();
}

void run_generate(const generate_cmd_options& o) {
  runtime::context_params cp;
  cp.numerics = runtime::numerics_from_name(o.numerics);
  apply_backend_options(o.backend, cp);
  cp.n_threads = o.threads;
  cp.repack = !o.no_repack;
  cp.n_ubatch = o.ubatch;
  cp.n_ctx = o.ctx_size;
  cp.trace_hashes = o.trace_hashes;
  const std::string text = o.file.empty() ? o.prompt : read_prompt_file(o.file);
  auto m = model::model::load(o.model);
  runtime::context ctx(m, cp);
  runtime::generate_params gen = o.gen;
  gen.companions = runtime::generate_filler_prompts(m->vocab(), o.batch_with);
  std::string prompt_text = text;
  if (o.chat) {
    prompt_text = runtime::generate_render_chat(*m, {o.system, text, o.chat_template, !o.no_thinking});
    if (auto f = chat::chat_fallback_family(o.chat_template, m->chat_template()))
      std::cerr << "generate: " << o.model << " has no chat template; --chat renders the prompt with "
                << chat::template_family_name(*f) << ", as llama-server does\n";
  }
  const std::vector<int32_t> prompt = runtime::generate_tokenize(m->vocab(), prompt_text);
  if (o.verbose) std::cerr << "prompt: " << prompt.size() << " tokens\n";

  runtime::text_callback stream;
  if (!o.json) stream = [](std::string_view piece) { std::cout << piece << std::flush; };
  const runtime::generate_result r = runtime::generate(ctx, prompt, gen, stream);
  if (o.json) {
    std::cout << model::safe_dump(runtime::generate_to_json(r, *m, cp.numerics, o.gen)) << "\n";
  } else {
    if (r.text.empty() || r.text.back() != '\n') std::cout << "\n";
    if (o.hashes) std::cout << runtime::generate_hashes_text(r);
    if (o.trace_hashes) std::cout << runtime::generate_trace_text(r);
  }
  std::cout << std::flush;
  if (o.verbose) std::cerr << runtime::generate_summary_text(r);
}

}  // namespace

void setup_generate(CLI::App& app) {
  auto opt = std::make_shared<generate_cmd_options>();
  runtime::sampling_params& s = opt->gen.sampling;
  CLI::App* sub = app.add_subcommand(
      "generate",
      "Generate text with the built-in engine, reporting per step the token, the top log-probabilities and a hash\n"
      "of the logits. In --numerics exact (the default) the same request gives the same bits whatever the thread\n"
      "count, --ubatch or machine; compare two runs with --hashes and cmp.");
  sub->add_option("-m,--model", opt->model, "GGUF model file")->required()->check(CLI::ExistingFile)->type_name("FILE.gguf");
  CLI::Option_group* input = sub->add_option_group("prompt", "The prompt (exactly one)");
  input->add_option("-p,--prompt", opt->prompt, "The prompt text")->type_name("TEXT");
  input->add_option("-f,--file", opt->file, "Read the prompt from this file (bytes as they are)")->type_name("FILE");
  input->require_option(1);
  sub->add_option("-n,--n-predict", opt->gen.n_predict, "Most tokens to generate; -1: until end of generation or a full context")
      ->capture_default_str();
  CLI::Option* chat = sub->add_flag("--chat", opt->chat,
                                    "Wrap the prompt as a user turn in the model's chat template (chatml when the file "
                                    "has none, as llama-server does)");
  sub->add_option("--system", opt->system, "System message (with --chat)")->needs(chat)->type_name("TEXT");
  sub->add_option("--chat-template", opt->chat_template,
                  "Chat template family, instead of the one detected in the file: chatml, qwen3, deepseek-r1, llama3, "
                  "llama2, phi3, gemma, gpt-oss (with --chat; gpt-oss writes the date: DETAUDIT_CHAT_DATE=YYYY-MM-DD pins it)")
      ->needs(chat)->type_name("NAME");
  sub->add_flag("--no-thinking", opt->no_thinking, "qwen3: close an empty <think> block (enable_thinking=false)")->needs(chat);
  sub->add_option("--numerics", opt->numerics,
                  "exact: integer sums, bit-identical under any batching/threads/ubatch; float: an ordinary engine's "
                  "arithmetic; reference: float64 ground truth (slow)")
      ->capture_default_str()->type_name("MODE");
  add_backend_options(sub, opt->backend);
  sub->add_option("-t,--threads", opt->threads, "Threads used by the engine")->capture_default_str();
  sub->add_flag("--no-repack", opt->no_repack,
                "Keep the weights in the mapped file's layout (no load-time repacking for the CPU kernels: less memory, "
                "slower generation, the same bits)");
  sub->add_option("--ubatch", opt->ubatch, "Most tokens evaluated in one forward step (-ub)")->capture_default_str();
  sub->add_option("-c,--ctx-size", opt->ctx_size, "Context length; 0: the model's trained context")->capture_default_str();
  sub->add_option("--temp", s.temp, "Temperature; 0 is greedy (ties go to the lowest token id)")->capture_default_str();
  // As the server reads "seed": 0 to 2^63-1, and -1 is seed 0 (llama.cpp's -1 draws a random one).
  // Read here, not by CLI11, which takes 99999999999999999999 for the largest int64.
  sub->add_option_function<std::string>(
         "-s,--seed",
         [&s](const std::string& text) {
           int64_t v = 0;
           const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
           if (ec != std::errc() || end != text.data() + text.size() || v < -1)
             throw CLI::ValidationError("-s", "expected an integer from -1 to 9223372036854775807, found '" + text + "'");
           s.seed = runtime::seed_from_signed(v);
         },
         "Seed of the sampler, 0 to 2^63-1 (-1: 0, as the server reads it); a seeded request samples the same tokens "
         "however it is batched (default 0)")
      ->type_name("N");
  sub->add_option("--top-k", s.top_k, "Keep the K most probable tokens; 0: off")->capture_default_str();
  sub->add_option("--top-p", s.top_p, "Keep the most probable tokens up to this total probability; 1: off")->capture_default_str();
  sub->add_option("--min-p", s.min_p, "Keep tokens at least this fraction as probable as the best; 0: off")->capture_default_str();
  sub->add_option("--repeat-penalty", s.repeat_penalty, "Penalise tokens among the last --repeat-last-n; 1: off")
      ->capture_default_str();
  sub->add_option("--repeat-last-n", s.penalty_last_n, "Tokens of history the penalties look at; -1: all, 0: none")
      ->capture_default_str();
  sub->add_option("--presence-penalty", s.presence_penalty, "Subtracted from the logit of every token seen; 0: off")
      ->capture_default_str();
  sub->add_option("--frequency-penalty", s.frequency_penalty, "Subtracted once per occurrence of a token; 0: off")
      ->capture_default_str();
  sub->add_option("--stop", opt->gen.stop, "Stop when the text contains this string (repeatable); the text ends before it")
      ->type_name("TEXT");
  sub->add_option("--top-logprobs", opt->gen.n_top_logprobs, "Log-probabilities reported per step (--json)")->capture_default_str();
  sub->add_flag("--hashes", opt->hashes,
                "After the text, print 'step token_id logit_hash' per step and 'chained HASH': identical runs give "
                "identical output (ignored with --json, which always has the hashes)");
  sub->add_option("--batch-with", opt->batch_with,
                  "Evaluate the request in the same forward steps as N other sequences (built-in filler prompts, "
                  "continued greedily): the 'beside N others' condition")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  sub->add_flag("--trace-hashes", opt->trace_hashes,
                "After the text, print 'trace POS LAYER HASH' for every position of the request and every layer "
                "(xxh3-64 of its f32 output), and for mixture-of-experts models 'route POS LAYER E0,E1,...' (the experts "
                "used, best first): diff two runs to find the first layer where they part, or their route lines to find "
                "the first layer where routing differs");
  sub->add_flag("--json", opt->json, "Print exactly one JSON object (tokens, top log-probs, hashes, timings) and nothing else");
  sub->add_flag("-v,--verbose", opt->verbose, "Prompt size, timings and the finish reason on stderr");
  sub->footer(
      "Sampling (temp > 0): penalties, then temperature, top-k, top-p, min-p on integer weights, then a draw keyed by\n"
      "(seed, step) alone: no libm, no dependence on the batch. Pre-sampling top log-probs are of the raw logits.\n"
      "Examples:\n"
      "  detaudit generate -m stories260K.gguf -p 'Once upon a time' -n 64\n"
      "  detaudit generate -m model.gguf -p 'Once upon a time' -n 64 --hashes -t 1 > a.txt\n"
      "  detaudit generate -m model.gguf -p 'Once upon a time' -n 64 --hashes -t 8 -ub 1 > b.txt && cmp a.txt b.txt\n"
      "  detaudit generate -m model.gguf -p 'Once upon a time' -n 64 --hashes --batch-with 7 > c.txt && cmp a.txt c.txt\n"
      "  detaudit generate -m qwen.gguf --chat --system 'Be brief.' -p 'What is 7*8?' --json | jq .tokens[0]\n"
      "  detaudit generate -m model.gguf -f prompt.txt --temp 0.7 --seed 42 --stop $'\\n\\n'");
  sub->callback([opt] { run_generate(*opt); });
}

}  // namespace detaudit::cli
