#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

#include "tokenizer/utf8.h"

namespace detaudit::tokenizer {
namespace {

// Regex strings as in llama.cpp llama-vocab.cpp (llm_tokenizer_bpe), per pre type.
constexpr std::string_view GPT2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr std::string_view LLAMA3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
    "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view QWEN2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?"
    "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// gpt-4o (o200k, gpt-oss): the tokenizer.json regex, then its lookahead form, in order, as
// llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT4O applies them.
constexpr std::string_view GPT4O_1 =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view GPT4O_2 =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|"
    "'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|"
    "'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr std::string_view SPLIT_PUNCT = " ?[^(\\s|.,!?…。，、।۔،)]+";
constexpr std::string_view DIGIT = "\\p{N}";

const std::vector<pre_tokenizer_row>& table() {
  static const std::vector<pre_tokenizer_row> rows = {
      {{"default"},
       {"[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de",
        "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais"},
       {GPT2}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, {LLAMA3}, true, true},
      {{"dbrx", "smaug-bpe"}, {LLAMA3}},
      {{"qwen2", "deepseek-r1-qwen"}, {QWEN2}, false, false, false},
      {{"megrez", "stablelm2"}, {QWEN2}},
      {{"deepseek-llm"},
       {"[\r\n]",
        "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
        "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"},
       false, false, false},
      {{"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", DIGIT}, false, false, false},
      {{"deepseek-v3"},
       {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?"
        "[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
       false, false, false},
      {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b"}, {DIGIT, GPT2}},
      {{"command-r", "smollm"}, {DIGIT, GPT2}, false, false, false},
      {{"poro-chat"}, {SPLIT_PUNCT}, false, false, false},
      {{"bloom", "gpt3-finnish"}, {SPLIT_PUNCT}},
      {{"viking"}, {SPLIT_PUNCT, DIGIT}, false, false, false},
      {{"chatglm-bpe"}, {LLAMA3}, false, false, true, false},
      {{"gpt-4o", "llama4", "kanana2", "talkie"}, {GPT4O_1, GPT4O_2}, false, false, false},
      {{"tekken"},
       {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])"
        "([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       true, true, false},
      {{"chameleon"},
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", DIGIT,
        "[\\p{P}!-/:-@\\[-`{-~]", GPT2},
       false, true, false},
  };
  return rows;
}

}  // namespace

const pre_tokenizer_row* pre_tokenizer_find(std::string_view name) {
  for (const pre_tokenizer_row& row : table())
    for (std::string_view n : row.names)
      if (n == name) return &row;
  return nullptr;
}

std::string pre_tokenizer_names() {
  std::string out;
  for (const pre_tokenizer_row& row : table())
    for (std::string_view n : row.names) {
      if (!out.empty()) out += ", ";
      out += n;
    }
  return out;
}

struct pre_splitter::compiled {
  pcre2_code* code = nullptr;
  ~compiled() { pcre2_code_free(code); }
};

pre_splitter::pre_splitter(const pre_tokenizer_row& row) {
  // DOLLAR_ENDONLY: '$' means end of piece only, as in std::regex (llama.cpp).
  // MATCH_INVALID_UTF: never fail on a subject; input is sanitized anyway.
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF;
  for (std::string_view re : row.regexes) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto c = std::make_unique<compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(), options, &err, &err_offset, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw std::runtime_error("pre-tokenizer '" + std::string(row.names[0]) + "': regex does not compile at offset " +
                               std::to_string(err_offset) + ": " + reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    regexes_.push_back(std::move(c));
  }
}

pre_splitter::~pre_splitter() = default;

namespace {

struct match_state {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mc = nullptr;
  pcre2_jit_stack* js = nullptr;
  ~match_state() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    pcre2_jit_stack_free(js);
  }
  // Runs one match; grows the JIT stack once if the default 32 KiB is too small.
  int match(const pcre2_code* code, std::string_view s, size_t start) {
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start, 0, md, mc);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !js) {
      mc = pcre2_match_context_create(nullptr);
      js = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
      if (!mc || !js) throw std::bad_alloc();
      pcre2_jit_stack_assign(mc, nullptr, js);
      rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start, 0, md, mc);
    }
    return rc;
  }
};

// Splits one piece [off, off+len) of `text` by `code`, appending the sub-pieces to `out`.
void split_piece(match_state& st, const pcre2_code* code, std::string_view text, size_t off, size_t len,
                 std::vector<std::pair<size_t, size_t>>& out) {
  std::string_view piece = text.substr(off, len);
  size_t pos = 0, emitted = 0;
  while (pos < piece.size()) {
    int rc = st.match(code, piece, pos);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw std::runtime_error("pre-tokenizer regex failed to match (PCRE2 error " + std::to_string(rc) + ")");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
    size_t m_begin = ov[0], m_end = ov[1];
    if (m_end == m_begin) {  // an empty match splits nothing: step one character
      if (m_begin >= piece.size()) break;
      pos = m_begin + std::min(utf8_seq_len(piece[m_begin]), piece.size() - m_begin);
      continue;
    }
    if (m_begin > emitted) out.emplace_back(off + emitted, m_begin - emitted);
    out.emplace_back(off + m_begin, m_end - m_begin);
    emitted = pos = m_end;
  }
  if (emitted < piece.size()) out.emplace_back(off + emitted, piece.size() - emitted);
}

}  // namespace

std::vector<std::pair<size_t, size_t>> pre_splitter::split(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> pieces;
  if (text.empty()) return pieces;
  pieces.emplace_back(0, text.size());
  match_state st;
  for (const auto& re : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    if (!md) throw std::bad_alloc();
    pcre2_match_data_free(st.md);
    st.md = md;
    std::vector<std::pair<size_t, size_t>> next;
    next.reserve(pieces.size() * 2);
    for (auto [off, len] : pieces) split_piece(st, re->code, text, off, len, next);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace detaudit::tokenizer
