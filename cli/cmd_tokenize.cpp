#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "commands.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

struct tokenize_cmd_options {
  std::string model;
  std::string text;
  std::string file;
  bool ids = false;
  bool pieces = false;
  bool no_bos = false;
  bool special = false;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(path + ": cannot open the text file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void run_tokenize(const tokenize_cmd_options& o) {
  const tokenizer::vocab v = tokenizer::vocab_load(gguf::file::open(o.model));
  const std::string text = o.file.empty() ? o.text : read_text_file(o.file);
  const std::vector<int32_t> ids = tokenizer::encode(v, text, !o.no_bos, o.special);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (o.ids) {
      out += (i ? " " : "") + std::to_string(ids[i]);
      continue;
    }
    const std::string piece = tokenizer::piece_escape(tokenizer::token_to_piece(v, ids[i]));
    out += o.pieces ? piece + "\n" : std::to_string(ids[i]) + "\t" + piece + "\n";
  }
  if (o.ids) out += "\n";
  std::cout << out;
}

}  // namespace

void setup_tokenize(CLI::App& app) {
  auto opt = std::make_shared<tokenize_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "tokenize",
      "Turn text into token ids with the vocabulary of a GGUF file, exactly as llama.cpp would.\n"
      "Works on any GGUF with a tokenizer.ggml vocabulary (SentencePiece \"llama\" or byte-level BPE \"gpt2\"),\n"
      "whatever its architecture, including vocab-only files.");
  sub->add_option("-m,--model", opt->model, "GGUF file whose vocabulary is used")->required()->type_name("FILE.gguf");
  CLI::Option_group* input = sub->add_option_group("input", "The text to tokenize (exactly one)");
  input->add_option("--text", opt->text, "The text itself")->type_name("T");
  input->add_option("--file", opt->file, "Read the text from this file (bytes as they are, no newline stripped)")->type_name("F");
  input->require_option(1);
  CLI::Option* ids = sub->add_flag("--ids", opt->ids, "Print only the ids, space-separated on one line");
  CLI::Option* pieces = sub->add_flag("--pieces", opt->pieces, "Print only the pieces, one per line");
  ids->excludes(pieces);
  sub->add_flag("--no-bos", opt->no_bos,
                "Add no BOS/EOS (by default they are added as the vocabulary's add_bos/add_eos say)");
  sub->add_flag("--special", opt->special,
                "Turn control tokens written in the text (e.g. <|im_start|>) into their ids; without it they are "
                "tokenized as plain text");
  sub->footer(
      "Output: one line per token, \"id<TAB>piece\"; pieces are escaped (\\n, \\t, \\\\, \\\", \\u00XX for control\n"
      "characters, \\xNN for bytes that are not UTF-8 on their own).\n"
      "Examples:\n"
      "  detaudit tokenize -m model.gguf --text 'Hello world'\n"
      "  detaudit tokenize -m model.gguf --file prompt.txt --ids --no-bos\n"
      "  detaudit tokenize -m qwen2.gguf --text '<|im_start|>user' --special --pieces");
  sub->callback([opt] { run_tokenize(*opt); });
}

}  // namespace detaudit::cli
