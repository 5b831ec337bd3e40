// tiktoken and encoder.json + vocab.bpe imports, the special-token tables of the qwen2 and
// llama3 families, and vocab-only GGUF writing.
#include "tokenizer/vocab_import.h"

#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "gguf/gguf.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab_internal.h"
#include "util/error.h"

namespace detaudit::tokenizer {
namespace {

struct added_token {
  std::string text;
  token_type type;
};

std::vector<added_token> qwen2_specials() {
  std::vector<added_token> t;
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                        "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                        "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"})
    t.push_back({s, TOKEN_TYPE_CONTROL});
  for (const char* s : {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                        "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"})
    t.push_back({s, TOKEN_TYPE_USER_DEFINED});  // Qwen2.5 marks these "special": false
  return t;
}

// Llama 3.1 / 3.2 (Hugging Face tokenizer.json): 256 control tokens after the 128000 BPE tokens.
std::vector<added_token> llama3_specials() {
  std::vector<added_token> t;
  for (const char* s : {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                        "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                        "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"})
    t.push_back({s, TOKEN_TYPE_CONTROL});
  for (int i = 3; t.size() < 256; ++i) t.push_back({"<|reserved_special_token_" + std::to_string(i) + "|>", TOKEN_TYPE_CONTROL});
  return t;
}

// One row per pre-tokenizer family: what an import adds and what a vocab-only GGUF declares.
// Special ids are indices into the family's added tokens (-1: none).
struct import_family {
  std::vector<std::string_view> pres;
  std::string_view architecture;
  std::vector<added_token> (*specials)();
  int bos, eos, eot, eom, pad;
};

const std::vector<import_family>& families() {
  static const std::vector<import_family> rows = {
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}, "qwen2", qwen2_specials, 0, 0, 2, -1, 0},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3"}, "llama", llama3_specials, 0, 1, 9, 8, -1},
  };
  return rows;
}

const import_family* family_of(std::string_view pre) {
  for (const import_family& f : families())
    for (std::string_view p : f.pres)
      if (p == pre) return &f;
  return nullptr;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw input_error(path + ": read error");
  return ss.str();
}

// Splits into lines, dropping a trailing '\r' from each.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    pos = nl + 1;
  }
  return lines;
}

bool base64_decode(std::string_view in, std::string& out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return false;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = val(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return true;
}

// BPE over `token`'s bytes with only pieces of rank < `max_rank`; the parts it ends in.
std::vector<std::string_view> bpe_parts(const token_map& ranks, std::string_view token, int32_t max_rank) {
  std::vector<std::string_view> parts;
  for (size_t i = 0; i < token.size(); ++i) parts.push_back(token.substr(i, 1));
  std::string joined;
  while (parts.size() > 1) {
    size_t best = 0;
    int32_t best_rank = -1;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      joined.assign(parts[i]).append(parts[i + 1]);
      auto it = ranks.find(joined);
      if (it != ranks.end() && it->second < max_rank && (best_rank < 0 || it->second < best_rank)) {
        best = i;
        best_rank = it->second;
      }
    }
    if (best_rank < 0) break;
    parts[best] = std::string_view(parts[best].data(), parts[best].size() + parts[best + 1].size());
    parts.erase(parts.begin() + static_cast<long>(best) + 1);
  }
  return parts;
}

// Appends the family's special tokens and sets its special ids.
void add_family_tokens(vocab_spec& s) {
  const import_family* fam = family_of(s.pre);
  if (!fam) return;
  const auto base = static_cast<int32_t>(s.tokens.size());
  if (s.types.empty()) s.types.assign(s.tokens.size(), TOKEN_TYPE_NORMAL);
  for (added_token& t : fam->specials()) {
    s.tokens.push_back(std::move(t.text));
    s.types.push_back(t.type);
  }
  auto id = [&](int index) { return index < 0 ? TOKEN_NONE : base + index; };
  s.ids.bos = id(fam->bos);
  s.ids.eos = id(fam->eos);
  s.ids.eot = id(fam->eot);
  s.ids.eom = id(fam->eom);
  s.ids.pad = id(fam->pad);
}

vocab_spec bpe_spec(const std::string& pre) {
  vocab_spec s;
  s.kind = VOCAB_BPE;
  s.pre = pre;
  if (!pre_tokenizer_find(pre))
    throw input_error("unknown pre-tokenizer '" + pre + "' (known: " + pre_tokenizer_names() + ")");
  return s;
}

}  // namespace

vocab vocab_import_tiktoken(const std::string& path, const std::string& pre) {
  vocab_spec s = bpe_spec(pre);
  const std::string text = read_all(path);
  std::vector<std::string> raw;  // token bytes by rank
  token_map ranks;
  size_t line_no = 0;
  for (std::string_view line : lines_of(text)) {
    ++line_no;
    if (line.empty()) continue;
    auto where = [&] { return path + ":" + std::to_string(line_no); };
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos) throw input_error(where() + ": expected \"base64 rank\", found no space");
    std::string bytes;
    if (!base64_decode(line.substr(0, sp), bytes) || bytes.empty())
      throw input_error(where() + ": '" + std::string(line.substr(0, sp)) + "' is not base64 of a token");
    std::string_view rank_text = line.substr(sp + 1);
    const std::string expected = std::to_string(raw.size());
    if (rank_text != expected)
      throw input_error(where() + ": rank '" + std::string(rank_text) + "', expected " + expected + " (ranks must be 0..n-1 in order)");
    if (!ranks.emplace(bytes, static_cast<int32_t>(raw.size())).second)
      throw input_error(where() + ": token bytes repeat an earlier line");
    raw.push_back(std::move(bytes));
  }
  if (raw.empty()) throw input_error(path + ": no ranks found");
  for (size_t r = 0; r < raw.size(); ++r) {
    s.tokens.push_back(bytes_to_unicode_text(raw[r]));
    if (raw[r].size() < 2) continue;
    std::vector<std::string_view> parts = bpe_parts(ranks, raw[r], static_cast<int32_t>(r));
    if (parts.size() != 2)
      throw input_error(path + ": rank " + std::to_string(r) + ": the token is not a merge of two lower-ranked tokens (BPE ends in " +
                        std::to_string(parts.size()) + " parts)");
    s.merges.push_back(bytes_to_unicode_text(parts[0]) + " " + bytes_to_unicode_text(parts[1]));
  }
  add_family_tokens(s);
  return vocab_build(std::move(s), path);
}

namespace {

// A strict reader for encoder.json: one JSON object of string keys and non-negative integer
// values, nothing else. Errors name the file and byte offset.
class encoder_reader {
 public:
  encoder_reader(std::string_view text, const std::string& path) : t_(text), path_(path) {}

  std::vector<std::pair<std::string, int64_t>> read() {
    std::vector<std::pair<std::string, int64_t>> entries;
    expect('{');
    if (peek() == '}') {
      ++pos_;
    } else {
      while (true) {
        std::string key = string_value();
        expect(':');
        entries.emplace_back(std::move(key), integer());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        break;
      }
    }
    if (peek() != '\0') fail("expected the end of the file");
    return entries;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw input_error(path_ + ": offset " + std::to_string(pos_) + ": " + what);
  }
  char peek() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\n' || t_[pos_] == '\r' || t_[pos_] == '\t')) ++pos_;
    return pos_ < t_.size() ? t_[pos_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  int64_t integer() {
    if (peek() < '0' || peek() > '9') fail("expected a non-negative integer id");
    int64_t v = 0;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
      v = v * 10 + (t_[pos_++] - '0');
      if (v > INT32_MAX) fail("id too large");
    }
    return v;
  }
  uint32_t hex4() {
    if (pos_ + 4 > t_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = t_[pos_++];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad \\u escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }
  void escape(std::string& out) {
    if (pos_ >= t_.size()) fail("truncated escape");
    char c = t_[pos_++];
    switch (c) {
      case '"': case '\\': case '/': out += c; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: fail(std::string("unknown escape \\") + c);
    }
    uint32_t cpt = hex4();
    if (cpt >= 0xD800 && cpt < 0xDC00 && t_.substr(pos_, 2) == "\\u") {
      pos_ += 2;
      uint32_t lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate");
      cpt = 0x10000 + ((cpt - 0xD800) << 10) + (lo - 0xDC00);
    }
    utf8_append(out, cpt);
  }
  std::string string_value() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= t_.size()) fail("unterminated string");
      char c = t_[pos_++];
      if (c == '"') return out;
      if (c == '\\') escape(out);
      else out += c;
    }
  }

  std::string_view t_;
  const std::string& path_;
  size_t pos_ = 0;
};

}  // namespace

vocab vocab_import_hf(const std::string& encoder_json, const std::string& merges_bpe, const std::string& pre) {
  vocab_spec s = bpe_spec(pre);
  const std::string json = read_all(encoder_json);
  auto entries = encoder_reader(json, encoder_json).read();
  if (entries.empty()) throw input_error(encoder_json + ": the encoder has no tokens");
  s.tokens.assign(entries.size(), std::string());
  std::vector<bool> seen(entries.size(), false);
  for (auto& [text, id] : entries) {
    if (id >= static_cast<int64_t>(entries.size()))
      throw input_error(encoder_json + ": token '" + text + "' has id " + std::to_string(id) + ", expected ids 0.." +
                        std::to_string(entries.size() - 1));
    if (seen[id]) throw input_error(encoder_json + ": id " + std::to_string(id) + " is given to two tokens");
    seen[id] = true;
    s.tokens[id] = std::move(text);
  }
  const std::string bpe = read_all(merges_bpe);
  bool first = true;
  for (std::string_view line : lines_of(bpe)) {
    if (first && line.rfind("#version", 0) == 0) {
      first = false;
      continue;
    }
    first = false;
    if (!line.empty()) s.merges.emplace_back(line);
  }
  add_family_tokens(s);
  return vocab_build(std::move(s), encoder_json + " + " + merges_bpe);
}

std::string vocab_architecture(const vocab& v) {
  if (v.kind() == VOCAB_SPM) return "llama";
  const import_family* fam = family_of(v.pre());
  return fam ? std::string(fam->architecture) : "gpt2";
}

namespace {

// Hyperparameters llama.cpp reads when it loads a vocab-only file of each architecture:
// placeholder values of a small model of the family (Llama 3.2 1B, Qwen2.5 0.5B, GPT-2).
struct arch_key {
  const char* suffix;
  bool is_float;
  double value;
};

std::vector<arch_key> arch_keys(const std::string& arch) {
  if (arch == "qwen2")
    return {{"context_length", false, 32768}, {"embedding_length", false, 896}, {"block_count", false, 24},
            {"feed_forward_length", false, 4864}, {"attention.head_count", false, 14},
            {"attention.head_count_kv", false, 2}, {"rope.freq_base", true, 1000000.0},
            {"attention.layer_norm_rms_epsilon", true, 1e-6}};
  if (arch == "llama")
    return {{"context_length", false, 131072}, {"embedding_length", false, 2048}, {"block_count", false, 16},
            {"feed_forward_length", false, 8192}, {"attention.head_count", false, 32},
            {"attention.head_count_kv", false, 8}, {"rope.freq_base", true, 500000.0},
            {"attention.layer_norm_rms_epsilon", true, 1e-5}, {"rope.dimension_count", false, 64}};
  return {{"context_length", false, 1024}, {"embedding_length", false, 768}, {"block_count", false, 12},
          {"feed_forward_length", false, 3072}, {"attention.head_count", false, 12},
          {"attention.layer_norm_epsilon", true, 1e-5}};
}

}  // namespace

void vocab_write_vocab_only(const std::string& path, const vocab& v, const std::string& name) {
  const std::string arch = vocab_architecture(v);
  gguf::writer w;
  w.set("general.architecture", gguf::value::of_string(arch));
  w.set("general.name", gguf::value::of_string(name));
  for (const arch_key& k : arch_keys(arch)) {
    std::string key = arch + "." + k.suffix;
    w.set(key, k.is_float ? gguf::value::of_f32(static_cast<float>(k.value))
                          : gguf::value::of_u32(static_cast<uint32_t>(k.value)));
  }
  w.set(arch + ".vocab_size", gguf::value::of_u32(static_cast<uint32_t>(v.size())));
  vocab_write(w, v);
  w.write(path);
}

}  // namespace detaudit::tokenizer
