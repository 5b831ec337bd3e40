// libFuzzer target for the tokenizers: random bytes through encode, then decode, on two vocabularies
// built in the process (no file is read): the built-in byte-level BPE vocabulary and a small
// SentencePiece vocabulary with byte fallback and a user-defined token.
//
// The first input byte chooses the flags (bit 0: add_special, bit 1: parse_special, bit 2:
// remove_special, bit 3: unparse_special, bit 4: clean_spaces); the rest is the text. Properties:
//   - encode and decode never crash and throw nothing (every byte string is a valid text);
//   - every id encode returns lies inside the vocabulary, and token_to_piece accepts it;
//   - the built-in vocabulary gives the text back byte for byte without special tokens
//     (tokenizer/vocab.h: it "decodes it back byte for byte"), once each byte that does not start
//     well-formed UTF-8 is replaced by U+FFFD as llama.cpp does (tokenizer/utf8.h utf8_sanitize).
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

namespace tk = detaudit::tokenizer;

namespace {

struct spm_piece {
  const char* text;
  float score;
};

constexpr spm_piece SPM_PIECES[] = {
    {"\xE2\x96\x81", -1.0f},      {"\xE2\x96\x81" "t", -2.0f},     {"\xE2\x96\x81" "the", -3.0f},
    {"\xE2\x96\x81" "a", -2.5f},     {"he", -4.0f},                {"th", -4.5f},
    {"e", -5.0f},                 {"t", -5.1f},                 {"h", -5.2f},
    {"a", -5.3f},                 {"n", -5.4f},                 {"an", -6.0f},
    {"\xE2\x96\x81" "an", -6.5f},    {"\xC3\xA9", -7.0f},          {"\xE2\x96\x81\xE2\x96\x81", -7.5f},
    {"12", -8.0f},                {"1", -8.1f},                 {"2", -8.2f},
};

tk::vocab spm_vocab() {
  tk::vocab_spec s;
  s.kind = tk::VOCAB_SPM;
  auto add = [&s](std::string text, float score, int32_t type) {
    s.tokens.push_back(std::move(text));
    s.scores.push_back(score);
    s.types.push_back(type);
  };
  add("<unk>", 0.0f, tk::TOKEN_TYPE_UNKNOWN);
  add("<s>", 0.0f, tk::TOKEN_TYPE_CONTROL);
  add("</s>", 0.0f, tk::TOKEN_TYPE_CONTROL);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 0.0f, tk::TOKEN_TYPE_BYTE);
  }
  for (const spm_piece& p : SPM_PIECES) add(p.text, p.score, tk::TOKEN_TYPE_NORMAL);
  add("<|user|>", 0.0f, tk::TOKEN_TYPE_USER_DEFINED);
  s.ids.unk = 0;
  s.ids.bos = 1;
  s.ids.eos = 2;
  return tk::vocab_build(std::move(s), "fuzz-spm");
}

void check_ids(const tk::vocab& v, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    if (id < 0 || id >= v.size()) __builtin_trap();
    (void)tk::token_to_piece(v, id, (id & 1) != 0);
  }
}

std::string run(const tk::vocab& v, std::string_view text, uint8_t flags) {
  const bool add_special = (flags & 1) != 0;
  const bool parse_special = (flags & 2) != 0;
  const std::vector<int32_t> ids = tk::encode(v, text, add_special, parse_special);
  check_ids(v, ids);
  tk::decode_options opt;
  opt.remove_special = (flags & 4) != 0;
  opt.unparse_special = (flags & 8) != 0;
  opt.clean_spaces = (flags & 16) != 0;
  return tk::decode(v, ids, opt);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tk::vocab bpe = tk::vocab_builtin();
  static const tk::vocab spm = spm_vocab();
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  (void)run(spm, text, flags);
  (void)run(bpe, text, flags);
  if (run(bpe, text, 0) != tk::utf8_sanitize(text)) __builtin_trap();
  return 0;
}
