// Tokenizer vocabularies and encode / decode, compatible with llama.cpp.
//
// Goals: the token ids llama.cpp produces for the same GGUF vocabulary and text (SentencePiece
// "llama" and byte-level BPE "gpt2" vocabularies, with llama.cpp's pre-tokenizers, special-token
// partitioning and BOS/EOS rules), detokenization as llama.cpp does it, and writing a vocabulary
// back as the tokenizer.ggml.* keys llama.cpp loads.
// Non-goals: WordPiece, Unigram (T5) and RWKV vocabularies; chat templates (only carried along).
//
// Design: a `vocab` is immutable and cheap to copy (it shares its tables); every encode() call
// runs its own session (llama.cpp llm_tokenizer_*_session), so one vocab serves many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace detaudit::gguf {
class file;
class writer;
}  // namespace detaudit::gguf

namespace detaudit::tokenizer {

constexpr int32_t TOKEN_NONE = -1;

enum vocab_kind { VOCAB_SPM, VOCAB_BPE };  // tokenizer.ggml.model "llama" / "gpt2"

// tokenizer.ggml.token_type values (llama.cpp llama_token_type).
enum token_type : int32_t {
  TOKEN_TYPE_UNDEFINED = 0,
  TOKEN_TYPE_NORMAL = 1,
  TOKEN_TYPE_UNKNOWN = 2,
  TOKEN_TYPE_CONTROL = 3,
  TOKEN_TYPE_USER_DEFINED = 4,
  TOKEN_TYPE_UNUSED = 5,
  TOKEN_TYPE_BYTE = 6,
};

// Special token ids; TOKEN_NONE where the vocabulary has none.
struct special_ids {
  int32_t bos = TOKEN_NONE;
  int32_t eos = TOKEN_NONE;
  int32_t unk = TOKEN_NONE;
  int32_t sep = TOKEN_NONE;
  int32_t pad = TOKEN_NONE;
  int32_t eot = TOKEN_NONE;
  int32_t eom = TOKEN_NONE;
};

// Everything a vocabulary is made of, as the tokenizer.ggml.* keys store it. Tokens of "gpt2"
// vocabularies are in GPT-2's byte-to-unicode form, except special tokens (plain text).
struct vocab_spec {
  vocab_kind kind = VOCAB_BPE;
  std::string pre;                  // tokenizer.ggml.pre; "" = absent ("default")
  std::vector<std::string> tokens;  // (n_tokens)
  std::vector<float> scores;        // (n_tokens) or empty
  std::vector<int32_t> types;       // (n_tokens) token_type values, or empty (all NORMAL)
  std::vector<std::string> merges;  // BPE: "left right", rank = index
  special_ids ids;
  std::optional<bool> add_bos;           // absent: llama.cpp's default for the kind / pre
  std::optional<bool> add_eos;           // absent: false
  std::optional<bool> add_space_prefix;  // absent: true for SPM, false for BPE
  std::string chat_template;             // tokenizer.chat_template, "" = none
  std::string model_name;                // general.name (phi-3 vocabularies strip spaces after specials)
};

struct vocab_data;  // the built tables (tokenizer/vocab_internal.h)

class vocab {
 public:
  vocab() = default;  // empty: size() == 0; encode() on it throws std::logic_error

  const vocab_spec& spec() const;
  vocab_kind kind() const;
  const char* kind_name() const;  // "spm" or "bpe"
  int32_t size() const;           // number of tokens
  const std::string& pre() const;  // resolved pre-tokenizer name ("default" for SPM)
  size_t n_merges() const;
  const special_ids& ids() const;  // after llama.cpp's defaults and EOT detection
  bool add_bos() const;            // effective flags
  bool add_eos() const;
  bool add_space_prefix() const;
  bool clean_spaces() const;       // llama.cpp's detokenizer clean-up default for this vocab
  const std::string& chat_template() const;

  const std::string& token_text(int32_t id) const;  // throws std::out_of_range
  token_type type_of(int32_t id) const;
  float score(int32_t id) const;
  int32_t find(std::string_view text) const;  // id of the token with this text, or TOKEN_NONE
  bool is_control(int32_t id) const;          // control or unknown: not printed by default
  bool is_eog(int32_t id) const;              // ends generation (EOS, EOT, <|im_end|>, ...)
  // Control, user-defined and unknown tokens: the ones encode() can match in raw text.
  std::vector<int32_t> special_tokens() const;

  const vocab_data& data() const;  // for the tokenizer sessions

 private:
  friend vocab vocab_build(vocab_spec spec, const std::string& origin);
  std::shared_ptr<const vocab_data> d_;
};

// Validates `spec` and builds the lookup tables. `origin` (a file name) starts every message.
// Throws input_error on an inconsistent vocabulary: counts that differ, duplicate tokens,
// a merge naming a missing token, a special id out of range, an unknown pre-tokenizer.
vocab vocab_build(vocab_spec spec, const std::string& origin);

// Reads the tokenizer.ggml.* keys of a GGUF file, with llama.cpp's defaults for absent keys.
// Throws input_error naming the file and key when there is no vocabulary, the model type is not
// "llama" or "gpt2", or the vocabulary is inconsistent.
vocab vocab_load(const gguf::file& f);

// Writes every tokenizer.ggml.* key (and tokenizer.chat_template) of `v`, with explicit
// add_bos / add_eos / add_space_prefix values, so llama.cpp loads the same vocabulary.
void vocab_write(gguf::writer& w, const vocab& v);

// Token ids of `text`. add_special: BOS / EOS as the vocabulary's add_bos / add_eos say.
// parse_special: control tokens written in the text become their ids (llama.cpp
// tokenizer_st_partition); user-defined tokens always do. Thread-safe.
std::vector<int32_t> encode(const vocab& v, std::string_view text, bool add_special, bool parse_special);

// The text of one token (llama.cpp token_to_piece): byte tokens give their byte, SPM's U+2581
// gives a space, byte-level BPE tokens give their bytes. Control and unknown tokens give their
// text when `special`, else "". Throws std::out_of_range for an id outside the vocabulary.
std::string token_to_piece(const vocab& v, int32_t id, bool special = true);

struct decode_options {
  bool remove_special = false;   // drop a leading BOS / trailing EOS the vocabulary adds
  bool unparse_special = false;  // print control tokens' text
  bool clean_spaces = false;     // llama.cpp's " ." -> "." clean-up (pass v.clean_spaces() for its default)
};

// Concatenated pieces (llama.cpp detokenize): with add_space_prefix the first piece loses one
// leading space, undoing the space encode() put in front. Bytes are returned as they are; split
// UTF-8 sequences are reassembled by concatenation.
std::string decode(const vocab& v, std::span<const int32_t> ids, const decode_options& opt = {});

// A small byte-level BPE vocabulary that needs no file: 256 byte tokens, merges learned
// (deterministically, once per process) from a short built-in English text about arithmetic word
// problems, and the control tokens <|bos|> and <|eos|>. tokenizer.ggml.model "gpt2", pre "gpt-2",
// add_bos true. Encodes any text and decodes it back byte for byte. Thread-safe.
vocab vocab_builtin();

// A piece made printable on one line: \n \r \t \\ \" and other control or invalid bytes escaped
// (\u00XX for control characters, \xNN for bytes that are not UTF-8).
std::string piece_escape(std::string_view piece);

}  // namespace detaudit::tokenizer
