// Pre-tokenizers of byte-level BPE vocabularies: one row per `tokenizer.ggml.pre` family.
//
// Goals: split text into the pieces BPE merges within, exactly as llama.cpp does for the same
// `tokenizer.ggml.pre` value: each regex of a row is applied in turn to every piece the previous
// ones produced, and both the matches and the text between them become pieces
// (llama.cpp unicode_regex_split). The regex strings are the ones llama.cpp's llama-vocab.cpp
// uses per pre type (which in turn come from the models' tokenizer.json). PCRE2 runs them with
// full Unicode properties (PCRE2_UTF | PCRE2_UCP), JIT-compiled where available.
// Non-goals: pre-tokenizers llama.cpp does not know; SentencePiece (it needs none).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace detaudit::tokenizer {

// One family of pre-tokenizers. A row, not code: adding a family adds a row to the table.
struct pre_tokenizer_row {
  std::vector<std::string_view> names;   // tokenizer.ggml.pre values; names[0] is canonical
  std::vector<std::string_view> regexes;  // applied in order
  bool ignore_merges = false;  // a piece that is itself a token is emitted whole (llama3)
  bool add_bos = false;        // default of tokenizer.ggml.add_bos_token when the key is absent
  bool clean_spaces = true;    // llama.cpp's detokenizer clean-up default for this family
  bool has_bos = true;         // false: no BOS token by default (chatglm-bpe)
};

// The row for a tokenizer.ggml.pre value, or nullptr when no row names it.
const pre_tokenizer_row* pre_tokenizer_find(std::string_view name);
// Every known name, comma-separated (for error messages and --help).
std::string pre_tokenizer_names();

// The compiled regexes of one row. Immutable after construction; thread-safe: split() may be
// called concurrently (each call allocates its own match data).
class pre_splitter {
 public:
  // Throws std::runtime_error if a regex of the row does not compile (a bug in the table).
  explicit pre_splitter(const pre_tokenizer_row& row);
  ~pre_splitter();
  pre_splitter(const pre_splitter&) = delete;
  pre_splitter& operator=(const pre_splitter&) = delete;

  // Splits valid UTF-8 `text` into pieces; returns (offset, length) pairs covering it in order.
  std::vector<std::pair<size_t, size_t>> split(std::string_view text) const;

 private:
  struct compiled;
  std::vector<std::unique_ptr<compiled>> regexes_;
};

}  // namespace detaudit::tokenizer
