// The built tables of a vocabulary, shared by vocab.cpp and the tokenizer sessions.
// Not part of the public interface: include tokenizer/vocab.h instead.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace detaudit::tokenizer {

// Token attribute bits (llama.cpp llama_token_attr), derived from the token types.
enum token_attr : uint32_t {
  ATTR_UNDEFINED = 0,
  ATTR_UNKNOWN = 1u << 0,
  ATTR_UNUSED = 1u << 1,
  ATTR_NORMAL = 1u << 2,
  ATTR_CONTROL = 1u << 3,
  ATTR_USER_DEFINED = 1u << 4,
  ATTR_BYTE = 1u << 5,
  ATTR_LSTRIP = 1u << 7,
  ATTR_RSTRIP = 1u << 8,
};

struct string_hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using token_map = std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>>;

// A BPE merge of two tokens: its rank and the token it produces.
struct merge_entry {
  int32_t rank;
  int32_t result;
};
inline uint64_t merge_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct vocab_data {
  vocab_spec spec;  // as given (tokens with empty text renamed "[EMPTY_<id>]")
  std::string pre_name;  // resolved
  const pre_tokenizer_row* pre_row = nullptr;  // BPE only
  std::unique_ptr<pre_splitter> splitter;      // BPE only
  special_ids ids;                             // resolved
  bool add_bos = false, add_eos = false, add_space_prefix = false, clean_spaces = false;
  bool ignore_merges = false;

  std::vector<uint32_t> attrs;  // (n_tokens) token_attr bits
  token_map token_to_id;
  std::unordered_map<uint64_t, merge_entry> merges;  // by merge_key(left, right)
  // SPM: the <0xNN> token (or the one-byte token) of each byte; BPE: the token of the byte's
  // byte-level character. TOKEN_NONE where the vocabulary has none.
  std::array<int32_t, 256> byte_token{};
  std::vector<int32_t> special_cache;  // control / user-defined / unknown ids, longest text first
  std::unordered_set<int32_t> eog;
  std::vector<std::string> pieces;  // token_to_piece(id, special = true), precomputed

  int32_t find(std::string_view text) const {
    auto it = token_to_id.find(text);
    return it == token_to_id.end() ? TOKEN_NONE : it->second;
  }
};

// Sessions (one per encode() call): append the ids of one raw-text fragment to `out`.
// spm_tokenize expects the text with spaces already escaped to U+2581.
void spm_tokenize(const vocab_data& d, std::string_view text, std::vector<int32_t>& out);
void bpe_tokenize(const vocab_data& d, std::string_view text, std::vector<int32_t>& out);

// token_to_piece without the cache (used to fill it).
std::string piece_uncached(const vocab_data& d, int32_t id);

}  // namespace detaudit::tokenizer
