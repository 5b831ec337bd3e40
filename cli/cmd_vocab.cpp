#include <iostream>
#include <memory>

#include "commands.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab_import.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

struct vocab_import_options {
  std::string tiktoken;
  std::string encoder;
  std::string merges;
  std::string pre;
  std::string out;
};

void run_import(const vocab_import_options& o) {
  if (o.tiktoken.empty() && o.encoder.empty())
    throw input_error("vocab import: give --tiktoken FILE, or --encoder encoder.json with --merges vocab.bpe");
  const tokenizer::vocab v = o.tiktoken.empty() ? tokenizer::vocab_import_hf(o.encoder, o.merges, o.pre)
                                                : tokenizer::vocab_import_tiktoken(o.tiktoken, o.pre);
  tokenizer::vocab_write_vocab_only(o.out, v, "vocab-" + o.pre);
  std::cout << o.out << ": " << v.size() << " tokens, " << v.n_merges() << " merges, pre " << v.pre()
            << ", architecture " << tokenizer::vocab_architecture(v) << "\n";
}

void setup_import(CLI::App& group) {
  auto opt = std::make_shared<vocab_import_options>();
  CLI::App* sub = group.add_subcommand(
      "import", "Write a vocab-only GGUF from a tiktoken rank file or from encoder.json + vocab.bpe");
  CLI::Option* tik = sub->add_option("--tiktoken", opt->tiktoken, "tiktoken rank file: \"base64 rank\" per line")->type_name("FILE");
  CLI::Option* enc = sub->add_option("--encoder", opt->encoder, "encoder.json: token -> id (GPT-2 byte-level form)")->type_name("FILE");
  CLI::Option* mer = sub->add_option("--merges", opt->merges, "vocab.bpe: one \"left right\" merge per line, by rank")->type_name("FILE");
  tik->excludes(enc)->excludes(mer);
  enc->needs(mer);
  mer->needs(enc);
  sub->add_option("--pre", opt->pre, "Pre-tokenizer (tokenizer.ggml.pre), e.g. qwen2, llama-bpe, gpt-2")
      ->required()
      ->type_name("NAME")
      ->check([](const std::string& s) {
        return tokenizer::pre_tokenizer_find(s) ? std::string() : "unknown pre-tokenizer '" + s + "' (known: " +
                                                                     tokenizer::pre_tokenizer_names() + ")";
      });
  sub->add_option("-o,--output", opt->out, "Vocab-only GGUF to write")->required()->type_name("OUT.gguf");
  sub->footer(
      "The GGUF has no tensors; llama.cpp (vocab_only) and 'detaudit tokenize' load it. Merges of a tiktoken file\n"
      "are recovered from its ranks. For the qwen2 and llama3 pre-tokenizer families the family's special tokens are\n"
      "appended as control tokens (qwen2: <|endoftext|> <|im_start|> <|im_end|> ...; llama3: <|begin_of_text|> ...\n"
      "<|eot_id|> and the reserved tokens, 256 in all), and general.architecture is qwen2 / llama (else gpt2).\n"
      "Examples:\n"
      "  detaudit vocab import --tiktoken qwen.tiktoken --pre qwen2 -o qwen2-vocab.gguf\n"
      "  detaudit vocab import --encoder encoder.json --merges vocab.bpe --pre llama-bpe -o llama3-vocab.gguf\n"
      "  detaudit tokenize -m qwen2-vocab.gguf --text 'Hello world' --ids");
  sub->callback([opt] { run_import(*opt); });
}

}  // namespace

void setup_vocab(CLI::App& app) {
  CLI::App* group = app.add_subcommand("vocab", "Work with tokenizer vocabularies (see 'detaudit vocab import --help')");
  group->require_subcommand(1);
  group->footer("Example:\n  detaudit vocab import --tiktoken qwen.tiktoken --pre qwen2 -o qwen2-vocab.gguf");
  setup_import(*group);
}

}  // namespace detaudit::cli
