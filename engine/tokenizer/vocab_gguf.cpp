// Vocabularies in GGUF files: reading the tokenizer.ggml.* keys with llama.cpp's defaults, and
// writing them back.
//
//   tokenizer.ggml.model        string  "llama" (SentencePiece) | "gpt2" (byte-level BPE)
//   tokenizer.ggml.pre          string  pre-tokenizer family (BPE; SPM files say "default")
//   tokenizer.ggml.tokens       [string] (n_tokens)
//   tokenizer.ggml.scores       [f32]    (n_tokens)   SPM merge priorities
//   tokenizer.ggml.token_type   [i32]    (n_tokens)   1 normal 2 unknown 3 control 4 user 5 unused 6 byte
//   tokenizer.ggml.merges       [string] (n_merges)   BPE: "left right", rank = index
//   tokenizer.ggml.*_token_id   u32      bos eos unknown seperator padding eot eom
//   tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix   bool
//   tokenizer.chat_template     string
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/vocab_internal.h"
#include "util/error.h"

namespace detaudit::tokenizer {
namespace {

struct id_key {
  const char* key;
  int32_t special_ids::*field;
};

const id_key ID_KEYS[] = {
    {"tokenizer.ggml.bos_token_id", &special_ids::bos},
    {"tokenizer.ggml.eos_token_id", &special_ids::eos},
    {"tokenizer.ggml.unknown_token_id", &special_ids::unk},
    {"tokenizer.ggml.seperator_token_id", &special_ids::sep},
    {"tokenizer.ggml.padding_token_id", &special_ids::pad},
    {"tokenizer.ggml.eot_token_id", &special_ids::eot},
    {"tokenizer.ggml.eom_token_id", &special_ids::eom},
};

// llama.cpp's defaults before the id keys are read: SPM 1/2/0, BPE 11/11 (sic); a default
// outside a small vocabulary becomes "none".
special_ids default_ids(vocab_kind kind, const std::string& pre, int64_t n) {
  special_ids ids;
  if (kind == VOCAB_SPM) {
    ids.bos = 1;
    ids.eos = 2;
    ids.unk = 0;
  } else {
    const pre_tokenizer_row* row = pre_tokenizer_find(pre.empty() ? "default" : pre);
    ids.bos = row && !row->has_bos ? TOKEN_NONE : 11;
    ids.eos = 11;
  }
  for (int32_t* id : {&ids.bos, &ids.eos, &ids.unk})
    if (*id >= n) *id = TOKEN_NONE;
  return ids;
}

std::optional<bool> optional_bool(const gguf::file& f, const char* key) {
  if (!f.find(key)) return std::nullopt;
  return f.get_bool(key, false);
}

vocab_kind kind_of(const gguf::file& f) {
  const std::string key = "tokenizer.ggml.model";
  if (!f.find(key)) throw input_error(f.path() + ": no vocabulary: key '" + key + "' is missing");
  const std::string model = f.get_string(key);
  if (model == "llama") return VOCAB_SPM;
  if (model == "gpt2") return VOCAB_BPE;
  throw input_error(f.path() + ": key '" + key + "': tokenizer model '" + gguf::printable(model) +
                    "' is not supported (supported: \"llama\" SentencePiece, \"gpt2\" byte-level BPE)");
}

}  // namespace

vocab vocab_load(const gguf::file& f) {
  vocab_spec s;
  s.kind = kind_of(f);
  s.pre = f.get_string("tokenizer.ggml.pre", "");
  if (!f.find("tokenizer.ggml.tokens"))
    throw input_error(f.path() + ": no vocabulary: key 'tokenizer.ggml.tokens' is missing");
  s.tokens = f.get_strings("tokenizer.ggml.tokens");
  if (f.find("tokenizer.ggml.scores")) s.scores = f.get_f32s("tokenizer.ggml.scores");
  if (f.find("tokenizer.ggml.token_type")) s.types = f.get_i32s("tokenizer.ggml.token_type");
  if (s.kind == VOCAB_BPE) {
    if (!f.find("tokenizer.ggml.merges"))
      throw input_error(f.path() + ": key 'tokenizer.ggml.merges' is missing: a \"gpt2\" vocabulary needs its merges");
    s.merges = f.get_strings("tokenizer.ggml.merges");
  }
  const auto n = static_cast<int64_t>(s.tokens.size());
  s.ids = default_ids(s.kind, s.pre, n);
  for (const id_key& k : ID_KEYS) {
    if (!f.find(k.key)) continue;
    int64_t id = f.get_int(k.key);
    if (id >= 0 && id < n) s.ids.*k.field = static_cast<int32_t>(id);  // else keep the default, as llama.cpp
  }
  s.add_bos = optional_bool(f, "tokenizer.ggml.add_bos_token");
  s.add_eos = optional_bool(f, "tokenizer.ggml.add_eos_token");
  s.add_space_prefix = optional_bool(f, "tokenizer.ggml.add_space_prefix");
  s.chat_template = f.get_string("tokenizer.chat_template", "");
  s.model_name = f.get_string("general.name", "");
  return vocab_build(std::move(s), f.path());
}

void vocab_write(gguf::writer& w, const vocab& v) {
  const vocab_spec& s = v.spec();
  w.set("tokenizer.ggml.model", gguf::value::of_string(s.kind == VOCAB_SPM ? "llama" : "gpt2"));
  w.set("tokenizer.ggml.pre", gguf::value::of_string(v.pre()));
  w.set("tokenizer.ggml.tokens", gguf::value::of_strings(s.tokens));
  if (!s.scores.empty()) w.set("tokenizer.ggml.scores", gguf::value::of_f32s(s.scores));
  std::vector<int32_t> types = s.types;
  if (types.empty()) types.assign(s.tokens.size(), TOKEN_TYPE_NORMAL);
  w.set("tokenizer.ggml.token_type", gguf::value::of_i32s(types));
  if (s.kind == VOCAB_BPE) w.set("tokenizer.ggml.merges", gguf::value::of_strings(s.merges));
  for (const id_key& k : ID_KEYS) {
    int32_t id = v.ids().*k.field;
    if (id != TOKEN_NONE) w.set(k.key, gguf::value::of_u32(static_cast<uint32_t>(id)));
  }
  w.set("tokenizer.ggml.add_bos_token", gguf::value::of_bool(v.add_bos()));
  w.set("tokenizer.ggml.add_eos_token", gguf::value::of_bool(v.add_eos()));
  w.set("tokenizer.ggml.add_space_prefix", gguf::value::of_bool(v.add_space_prefix()));
  if (!s.chat_template.empty()) w.set("tokenizer.chat_template", gguf::value::of_string(s.chat_template));
}

}  // namespace detaudit::tokenizer
