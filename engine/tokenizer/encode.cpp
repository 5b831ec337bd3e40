// encode / decode: special-token partitioning, BOS / EOS, SPM space handling, pieces and the
// detokenizer, following llama.cpp llama_vocab::impl::tokenize / token_to_piece / detokenize.
#include <algorithm>
#include <cstdio>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab_internal.h"

namespace detaudit::tokenizer {
namespace {

// A piece of the input: raw text [offset, offset + length) or an already-known token.
struct fragment {
  int32_t token;  // TOKEN_NONE for raw text
  size_t offset;
  size_t length;
};

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// Splits the raw fragments of `in` on every occurrence of special token `id`
// (llama.cpp tokenizer_st_partition, one token at a time, honouring LSTRIP / RSTRIP).
std::vector<fragment> split_on(const vocab_data& d, std::string_view text, int32_t id, const std::vector<fragment>& in) {
  const std::string& tok = d.spec.tokens[id];
  const uint32_t attr = d.attrs[id];
  std::vector<fragment> out;
  out.reserve(in.size());
  for (const fragment& f : in) {
    if (f.token != TOKEN_NONE) {
      out.push_back(f);
      continue;
    }
    size_t off = f.offset, len = f.length;
    while (true) {
      size_t match = text.substr(0, off + len).find(tok, off);
      if (match == std::string_view::npos) {
        if (len > 0) out.push_back({TOKEN_NONE, off, len});
        break;
      }
      size_t left_len = match - off;
      if (attr & ATTR_LSTRIP)
        while (left_len > 0 && ascii_space(text[off + left_len - 1])) --left_len;
      if (left_len > 0) out.push_back({TOKEN_NONE, off, left_len});
      out.push_back({id, 0, 0});
      size_t right_off = match + tok.size();
      size_t right_len = off + len - right_off;
      if (attr & ATTR_RSTRIP)
        while (right_len > 0 && ascii_space(text[right_off])) ++right_off, --right_len;
      off = right_off;
      len = right_len;
    }
  }
  return out;
}

std::vector<fragment> partition(const vocab_data& d, std::string_view text, bool parse_special) {
  std::vector<fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({TOKEN_NONE, 0, text.size()});
  for (int32_t id : d.special_cache) {
    if (!parse_special && (d.attrs[id] & (ATTR_CONTROL | ATTR_UNKNOWN))) continue;  // user-defined always split
    frags = split_on(d, text, id, frags);
  }
  return frags;
}

void encode_spm(const vocab_data& d, std::string_view text, const std::vector<fragment>& frags,
                std::vector<int32_t>& out) {
  bool prev_special = true;  // the first raw fragment gets the space prefix too
  for (const fragment& f : frags) {
    if (f.token != TOKEN_NONE) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    std::string escaped;
    if (d.add_space_prefix && prev_special) escaped = "\xE2\x96\x81";
    for (char c : text.substr(f.offset, f.length)) {
      if (c == ' ') escaped += "\xE2\x96\x81";
      else escaped += c;
    }
    spm_tokenize(d, escaped, out);
    prev_special = false;
  }
}

void decode_byte_level(const std::string& text, std::string& out) {
  const std::string clean = utf8_sanitize(text);
  size_t pos = 0;
  while (pos < clean.size()) {
    size_t n = std::min(utf8_seq_len(clean[pos]), clean.size() - pos);
    uint32_t cpt = static_cast<uint8_t>(clean[pos]);
    if (n == 2) cpt = ((cpt & 0x1Fu) << 6) | (static_cast<uint8_t>(clean[pos + 1]) & 0x3Fu);
    int b = n <= 2 ? unicode_to_byte(cpt) : -1;
    if (b >= 0) {
      out += static_cast<char>(b);
    } else {  // not a byte-level character: llama.cpp's marker
      out += "[UNK_BYTE_0x";
      char hex[3];
      for (size_t i = 0; i < n; ++i) {
        std::snprintf(hex, sizeof hex, "%02x", static_cast<uint8_t>(clean[pos + i]));
        out += hex;
      }
      out += text + "]";
    }
    pos += n;
  }
}

}  // namespace

std::string piece_uncached(const vocab_data& d, int32_t id) {
  const std::string& text = d.spec.tokens[id];
  const uint32_t attr = d.attrs[id];
  if (attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED)) return text;
  std::string out;
  if (d.spec.kind == VOCAB_SPM) {
    if (attr & ATTR_NORMAL) {
      for (size_t i = 0; i < text.size(); ++i) {
        if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
          out += ' ';
          i += 2;
        } else {
          out += text[i];
        }
      }
    } else if (attr & ATTR_BYTE) {
      out += static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16));
    }
  } else if (attr & ATTR_NORMAL) {
    decode_byte_level(text, out);
  }
  return out;
}

std::vector<int32_t> encode(const vocab& v, std::string_view text, bool add_special, bool parse_special) {
  const vocab_data& d = v.data();
  const std::vector<fragment> frags = partition(d, text, parse_special);
  std::vector<int32_t> out;
  if (add_special && d.add_bos) out.push_back(d.ids.bos);
  if (d.spec.kind == VOCAB_SPM) {
    encode_spm(d, text, frags, out);
  } else {
    for (const fragment& f : frags) {
      if (f.token != TOKEN_NONE) out.push_back(f.token);
      else bpe_tokenize(d, text.substr(f.offset, f.length), out);
    }
  }
  if (add_special && d.add_eos) out.push_back(d.ids.eos);
  return out;
}

std::string token_to_piece(const vocab& v, int32_t id, bool special) {
  const vocab_data& d = v.data();
  const std::string& piece = d.pieces.at(static_cast<size_t>(id));
  if (!special && (d.attrs[id] & (ATTR_UNKNOWN | ATTR_CONTROL))) return {};
  return piece;
}

namespace {

// llama.cpp's detokenizer clean-up: " ?" " !" " ." " ," lose the space, a lone "'" between
// spaces loses both, and " 's" " 'm" " 're" " 've" lose the space.
std::string clean_up(const std::string& s) {
  std::string a;
  for (size_t i = 0; i < s.size(); ++i) {
    char x = s[i];
    if (i > 0 && s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a += x;
  }
  std::string t = a;  // llama.cpp blanks the space after a removed " ' " in place
  std::string b;
  for (size_t i = 0; i < t.size(); ++i) {
    char x = t[i];
    if (i > 0 && x == '\'' && i + 1 < t.size() && t[i - 1] == ' ' && t[i + 1] == ' ') {
      b.pop_back();
      b += x;
      t[++i] = '\0';
      continue;
    }
    b += x;
  }
  std::string c;
  for (size_t i = 0; i < b.size(); ++i) {
    char x = b[i];
    if (i > 0 && b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      char x1 = b[i + 1];
      bool two = i + 2 < b.size();
      if (x1 == 's' || x1 == 'm' || (two && ((x1 == 'r' && b[i + 2] == 'e') || (x1 == 'v' && b[i + 2] == 'e'))))
        c.pop_back();
    }
    c += x;
  }
  return c;
}

}  // namespace

std::string decode(const vocab& v, std::span<const int32_t> ids, const decode_options& opt) {
  const vocab_data& d = v.data();
  bool remove_space = d.add_space_prefix;
  if (opt.remove_special && d.add_bos && !ids.empty() && ids.front() == d.ids.bos) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (opt.remove_special && d.add_eos && !ids.empty() && ids.back() == d.ids.eos) ids = ids.first(ids.size() - 1);
  std::string out;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(v, id, opt.unparse_special);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    remove_space = false;
    out += piece;
  }
  return opt.clean_spaces ? clean_up(out) : out;
}

std::string piece_escape(std::string_view piece) {
  std::string out;
  size_t i = 0;
  char buf[8];
  while (i < piece.size()) {
    unsigned char c = static_cast<unsigned char>(piece[i]);
    size_t n = std::min(utf8_seq_len(piece[i]), piece.size() - i);
    bool valid = c < 0x80 || (n > 1 && utf8_sanitize(piece.substr(i, n)) == piece.substr(i, n));
    if (!valid) {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      i += 1;
      continue;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\u%04X", c);
      out += buf;
    } else {
      out.append(piece.substr(i, n));
    }
    i += c < 0x80 ? 1 : n;
  }
  return out;
}

}  // namespace detaudit::tokenizer
