// Building a vocabulary from its spec (validation, lookup tables, llama.cpp's attribute rules)
// and the class accessors. GGUF reading and writing live in vocab_gguf.cpp.
#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "gguf/gguf.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab_internal.h"
#include "util/error.h"

namespace detaudit::tokenizer {
namespace {

// Token texts llama.cpp treats as ending generation (and forces to CONTROL), and which of them
// it takes as the EOT / EOM token when the file names none.
const std::vector<std::string_view> EOG_TEXTS = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                                   "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"};
const std::vector<std::string_view> EOT_TEXTS = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                                   "<|endoftext|>", "<EOT>", "<｜end▁of▁sentence｜>"};

uint32_t attr_of_type(int32_t type) {
  switch (type) {
    case TOKEN_TYPE_NORMAL: return ATTR_NORMAL;
    case TOKEN_TYPE_UNKNOWN: return ATTR_UNKNOWN;
    case TOKEN_TYPE_CONTROL: return ATTR_CONTROL;
    case TOKEN_TYPE_USER_DEFINED: return ATTR_USER_DEFINED;
    case TOKEN_TYPE_UNUSED: return ATTR_UNUSED;
    case TOKEN_TYPE_BYTE: return ATTR_BYTE;
    default: return ATTR_UNDEFINED;
  }
}

void check_counts(const vocab_spec& s, const std::string& origin) {
  if (s.tokens.empty()) throw input_error(origin + ": tokenizer.ggml.tokens: the vocabulary has no tokens");
  if (s.tokens.size() > static_cast<size_t>(INT32_MAX))
    throw input_error(origin + ": tokenizer.ggml.tokens: " + std::to_string(s.tokens.size()) + " tokens is too many");
  if (!s.scores.empty() && s.scores.size() != s.tokens.size())
    throw input_error(origin + ": tokenizer.ggml.scores has " + std::to_string(s.scores.size()) +
                      " entries, expected one per token (" + std::to_string(s.tokens.size()) + ")");
  if (!s.types.empty() && s.types.size() != s.tokens.size())
    throw input_error(origin + ": tokenizer.ggml.token_type has " + std::to_string(s.types.size()) +
                      " entries, expected one per token (" + std::to_string(s.tokens.size()) + ")");
  if (s.kind == VOCAB_SPM && !s.merges.empty())
    throw input_error(origin + ": tokenizer.ggml.merges: a SentencePiece (\"llama\") vocabulary has no merges");
}

bool is_byte_name(const std::string& t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

void build_tokens(vocab_data& d, const std::string& origin) {
  const auto n = static_cast<int32_t>(d.spec.tokens.size());
  d.attrs.resize(n);
  d.token_to_id.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    std::string& t = d.spec.tokens[i];
    if (t.empty()) t = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    auto [it, fresh] = d.token_to_id.emplace(t, i);
    if (!fresh)
      throw input_error(origin + ": tokenizer.ggml.tokens: token " + std::to_string(i) + " '" + gguf::printable(t) +
                        "' duplicates token " + std::to_string(it->second));
    d.attrs[i] = d.spec.types.empty() ? ATTR_NORMAL : attr_of_type(d.spec.types[i]);
    if (d.spec.kind == VOCAB_SPM && (d.attrs[i] & ATTR_BYTE) && !is_byte_name(t))
      throw input_error(origin + ": tokenizer.ggml.tokens: token " + std::to_string(i) + " '" + gguf::printable(t) +
                        "' has type byte (6) but is not of the form <0xNN>");
  }
}

void build_merges(vocab_data& d, const std::string& origin) {
  const auto& merges = d.spec.merges;
  d.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    auto what = [&] { return origin + ": tokenizer.ggml.merges[" + std::to_string(i) + "] '" + m + "'"; };
    size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos) throw input_error(what() + ": expected two tokens separated by a space");
    std::string_view left = std::string_view(m).substr(0, sp), right = std::string_view(m).substr(sp + 1);
    int32_t l = d.find(left), r = d.find(right);
    if (l == TOKEN_NONE) throw input_error(what() + ": names '" + std::string(left) + "', which is not a token");
    if (r == TOKEN_NONE) throw input_error(what() + ": names '" + std::string(right) + "', which is not a token");
    int32_t result = d.find(std::string(left) + std::string(right));
    if (result == TOKEN_NONE)
      throw input_error(what() + ": its result '" + std::string(left) + std::string(right) + "' is not a token");
    d.merges.emplace(merge_key(l, r), merge_entry{static_cast<int32_t>(i), result});  // first rank wins
  }
}

void resolve_flags(vocab_data& d, const std::string& origin) {
  const vocab_spec& s = d.spec;
  if (s.kind == VOCAB_SPM) {
    d.pre_name = "default";
    d.add_bos = s.add_bos.value_or(true);
    d.add_space_prefix = s.add_space_prefix.value_or(true);
    d.clean_spaces = false;
  } else {
    d.pre_name = s.pre.empty() ? "default" : s.pre;
    d.pre_row = pre_tokenizer_find(d.pre_name);
    if (!d.pre_row)
      throw input_error(origin + ": tokenizer.ggml.pre: unknown pre-tokenizer '" + gguf::printable(d.pre_name) +
                        "' (known: " + pre_tokenizer_names() + ")");
    d.splitter = std::make_unique<pre_splitter>(*d.pre_row);
    d.ignore_merges = d.pre_row->ignore_merges;
    d.add_bos = s.add_bos.value_or(d.pre_row->add_bos);
    d.add_space_prefix = s.add_space_prefix.value_or(false);
    d.clean_spaces = d.pre_row->clean_spaces;
  }
  d.add_eos = s.add_eos.value_or(false);
}

void check_ids(vocab_data& d, const std::string& origin) {
  const auto n = static_cast<int32_t>(d.spec.tokens.size());
  const std::pair<const char*, int32_t*> all[] = {
      {"bos_token_id", &d.ids.bos}, {"eos_token_id", &d.ids.eos}, {"unknown_token_id", &d.ids.unk},
      {"seperator_token_id", &d.ids.sep}, {"padding_token_id", &d.ids.pad}, {"eot_token_id", &d.ids.eot},
      {"eom_token_id", &d.ids.eom}};
  for (auto [key, id] : all)
    if (*id != TOKEN_NONE && (*id < 0 || *id >= n))
      throw input_error(origin + ": tokenizer.ggml." + key + " = " + std::to_string(*id) + " is outside the vocabulary (" +
                        std::to_string(n) + " tokens)");
  if (d.add_bos && d.ids.bos == TOKEN_NONE)
    throw input_error(origin + ": tokenizer.ggml.add_bos_token is true but the vocabulary has no BOS token");
  if (d.add_eos && d.ids.eos == TOKEN_NONE)
    throw input_error(origin + ": tokenizer.ggml.add_eos_token is true but the vocabulary has no EOS token");
}

// llama.cpp's rules by token text: EOT / EOM detection, end-of-generation set, CONTROL forcing.
void apply_text_rules(vocab_data& d) {
  auto force_control = [&](int32_t id) { d.attrs[id] |= ATTR_CONTROL; };
  if (d.ids.eot == TOKEN_NONE)
    for (std::string_view t : EOT_TEXTS)
      if (int32_t id = d.find(t); id != TOKEN_NONE) {
        d.ids.eot = id;
        force_control(id);
        break;
      }
  if (d.ids.eom == TOKEN_NONE)
    if (int32_t id = d.find("<|eom_id|>"); id != TOKEN_NONE) {
      d.ids.eom = id;
      force_control(id);
    }
  for (std::string_view t : EOG_TEXTS)
    if (int32_t id = d.find(t); id != TOKEN_NONE) {
      d.eog.insert(id);
      force_control(id);
    }
  for (int32_t id : {d.ids.eos, d.ids.eot, d.ids.eom})
    if (id != TOKEN_NONE) d.eog.insert(id);
  // gpt-oss's harmony tokens (o200k_harmony), as the current llama.cpp treats them: the channel
  // markers are user-defined (written in the output text), and with <|return|> and <|call|> ending
  // generation, <|end|> (which closes an analysis message before the final one) does not.
  for (std::string_view t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (int32_t id = d.find(t); id != TOKEN_NONE) d.attrs[id] = ATTR_USER_DEFINED;
  const int32_t ret = d.find("<|return|>"), call = d.find("<|call|>"), end = d.find("<|end|>");
  if (ret != TOKEN_NONE && call != TOKEN_NONE && end != TOKEN_NONE && d.eog.count(ret) && d.eog.count(call) && d.eog.count(end)) {
    d.eog.erase(end);
    d.attrs[end] = ATTR_USER_DEFINED;
  }
}

void build_special_cache(vocab_data& d) {
  for (int32_t id = 0; id < static_cast<int32_t>(d.attrs.size()); ++id)
    if (d.attrs[id] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN)) d.special_cache.push_back(id);
  std::stable_sort(d.special_cache.begin(), d.special_cache.end(), [&](int32_t a, int32_t b) {
    return d.spec.tokens[a].size() > d.spec.tokens[b].size();
  });
  // Phi-3 vocabularies: spaces after special tokens are stripped (llama.cpp, by general.name).
  std::string name = d.spec.model_name;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : d.special_cache) d.attrs[id] |= ATTR_RSTRIP;
    if (int32_t id = d.find("</s>"); id != TOKEN_NONE) d.attrs[id] |= ATTR_RSTRIP;
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"})
      if (int32_t id = d.find(t); id != TOKEN_NONE) d.attrs[id] &= ~static_cast<uint32_t>(ATTR_RSTRIP);
  }
}

void build_byte_tokens(vocab_data& d) {
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    int32_t id = TOKEN_NONE;
    if (d.spec.kind == VOCAB_SPM) {
      const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
      id = d.find(std::string_view(name, 6));
      if (id == TOKEN_NONE) id = d.find(std::string(1, static_cast<char>(b)));
    } else {
      id = d.find(byte_to_unicode(static_cast<uint8_t>(b)));
    }
    d.byte_token[b] = id;
  }
}

}  // namespace

vocab vocab_build(vocab_spec spec, const std::string& origin) {
  check_counts(spec, origin);
  auto d = std::make_shared<vocab_data>();
  d->spec = std::move(spec);
  d->ids = d->spec.ids;
  build_tokens(*d, origin);
  resolve_flags(*d, origin);
  check_ids(*d, origin);
  if (d->spec.kind == VOCAB_BPE) build_merges(*d, origin);
  apply_text_rules(*d);
  build_special_cache(*d);
  build_byte_tokens(*d);
  d->pieces.reserve(d->spec.tokens.size());
  for (int32_t id = 0; id < static_cast<int32_t>(d->spec.tokens.size()); ++id) d->pieces.push_back(piece_uncached(*d, id));
  vocab v;
  v.d_ = std::move(d);
  return v;
}

const vocab_data& vocab::data() const {
  if (!d_) throw std::logic_error("tokenizer: use of an empty vocab");
  return *d_;
}
const vocab_spec& vocab::spec() const { return data().spec; }
vocab_kind vocab::kind() const { return data().spec.kind; }
const char* vocab::kind_name() const { return kind() == VOCAB_SPM ? "spm" : "bpe"; }
int32_t vocab::size() const { return d_ ? static_cast<int32_t>(d_->spec.tokens.size()) : 0; }
const std::string& vocab::pre() const { return data().pre_name; }
size_t vocab::n_merges() const { return data().merges.size(); }
const special_ids& vocab::ids() const { return data().ids; }
bool vocab::add_bos() const { return data().add_bos; }
bool vocab::add_eos() const { return data().add_eos; }
bool vocab::add_space_prefix() const { return data().add_space_prefix; }
bool vocab::clean_spaces() const { return data().clean_spaces; }
const std::string& vocab::chat_template() const { return data().spec.chat_template; }
const std::string& vocab::token_text(int32_t id) const { return data().spec.tokens.at(static_cast<size_t>(id)); }
token_type vocab::type_of(int32_t id) const {
  const vocab_data& d = data();
  (void)d.spec.tokens.at(static_cast<size_t>(id));
  return d.spec.types.empty() ? TOKEN_TYPE_NORMAL : static_cast<token_type>(d.spec.types[id]);
}
float vocab::score(int32_t id) const {
  const vocab_data& d = data();
  (void)d.spec.tokens.at(static_cast<size_t>(id));
  return d.spec.scores.empty() ? 0.0f : d.spec.scores[id];
}
int32_t vocab::find(std::string_view text) const { return data().find(text); }
bool vocab::is_control(int32_t id) const {
  return data().attrs.at(static_cast<size_t>(id)) & (ATTR_CONTROL | ATTR_UNKNOWN);
}
bool vocab::is_eog(int32_t id) const { return data().eog.count(id) > 0; }
std::vector<int32_t> vocab::special_tokens() const {
  std::vector<int32_t> ids = data().special_cache;
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace detaudit::tokenizer
