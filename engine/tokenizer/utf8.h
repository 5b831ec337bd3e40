// UTF-8 and byte-level helpers shared by the tokenizers.
//
// Goals: decode UTF-8 the way llama.cpp's unicode.cpp does (so invalid input is handled the same
// way: each invalid byte becomes U+FFFD), and the GPT-2 byte <-> unicode mapping that byte-level
// BPE vocabularies store their tokens in.
// Non-goals: normalization, case mapping, Unicode categories (PCRE2 provides those).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace detaudit::tokenizer {

// Length of the UTF-8 sequence a lead byte announces (1..4); continuation and invalid bytes
// count as 1 (llama.cpp unicode_len_utf8).
size_t utf8_seq_len(char lead);

// Appends the UTF-8 encoding of code point `cpt` (any value < 2^21) to `out`.
void utf8_append(std::string& out, uint32_t cpt);

// Re-encodes `text` code point by code point, replacing each byte that does not start a
// well-formed sequence by U+FFFD, as llama.cpp does before pre-tokenizing byte-level BPE input.
std::string utf8_sanitize(std::string_view text);

// GPT-2 byte-level encoding: byte b -> the UTF-8 text of its stand-in code point
// ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF map to themselves; the other 68 bytes to U+0100..).
const std::string& byte_to_unicode(uint8_t b);
// Inverse for one code point: the byte it stands for, or -1 when it stands for none.
int unicode_to_byte(uint32_t cpt);
// Encodes raw bytes into the byte-level form GGUF "gpt2" vocabularies store.
std::string bytes_to_unicode_text(std::string_view bytes);

}  // namespace detaudit::tokenizer
