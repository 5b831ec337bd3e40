#include "tokenizer/utf8.h"

#include <array>

namespace detaudit::tokenizer {
namespace {

// Decodes one code point at `pos` with llama.cpp's checks (lead byte class and continuation
// bits only). Returns false for an invalid sequence; `n` receives its length when valid.
bool decode_one(std::string_view s, size_t pos, uint32_t* cpt, size_t* n) {
  auto b = [&](size_t i) { return static_cast<uint8_t>(s[pos + i]); };
  auto cont = [&](size_t i) { return pos + i < s.size() && (b(i) & 0xC0) == 0x80; };
  uint8_t c = b(0);
  if (!(c & 0x80)) {
    *cpt = c;
    *n = 1;
  } else if (!(c & 0x40)) {
    return false;
  } else if (!(c & 0x20)) {
    if (!cont(1)) return false;
    *cpt = ((c & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    *n = 2;
  } else if (!(c & 0x10)) {
    if (!cont(1) || !cont(2)) return false;
    *cpt = ((c & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    *n = 3;
  } else if (!(c & 0x08)) {
    if (!cont(1) || !cont(2) || !cont(3)) return false;
    *cpt = ((c & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
    *n = 4;
    if (*cpt > 0x10FFFF) return false;  // llama.cpp cannot re-encode these either
  } else {
    return false;
  }
  return true;
}

struct byte_maps {
  std::array<std::string, 256> to_text;
  std::array<int, 512> from_cpt;  // every stand-in code point is < 0x144
};

byte_maps make_byte_maps() {
  byte_maps m;
  m.from_cpt.fill(-1);
  auto direct = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    uint32_t cpt = direct(b) ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
    utf8_append(m.to_text[b], cpt);
    m.from_cpt[cpt] = b;
  }
  return m;
}

const byte_maps& maps() {
  static const byte_maps m = make_byte_maps();
  return m;
}

}  // namespace

size_t utf8_seq_len(char lead) {
  static constexpr size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[static_cast<uint8_t>(lead) >> 4];
}

void utf8_append(std::string& out, uint32_t cpt) {
  if (cpt < 0x80) {
    out += static_cast<char>(cpt);
  } else if (cpt < 0x800) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | ((cpt >> 18) & 0x07));
    out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
}

std::string utf8_sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cpt = 0;
    size_t n = 0;
    if (decode_one(text, pos, &cpt, &n)) {
      utf8_append(out, cpt);
      pos += n;
    } else {
      out += "\xEF\xBF\xBD";
      pos += 1;
    }
  }
  return out;
}

const std::string& byte_to_unicode(uint8_t b) { return maps().to_text[b]; }

int unicode_to_byte(uint32_t cpt) { return cpt < 512 ? maps().from_cpt[cpt] : -1; }

std::string bytes_to_unicode_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_to_unicode(static_cast<uint8_t>(c));
  return out;
}

}  // namespace detaudit::tokenizer
