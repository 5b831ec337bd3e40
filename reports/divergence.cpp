// diverge(): where two responses part, token by token (as bytes) and byte by byte, with the
// context, the margins between the best two alternatives, the first differing logit hash, and how
// far the shared alternatives' log-probs drifted before the tokens parted.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "reports/audit/steps.h"
#include "reports/audit/utf8.h"
#include "reports/compare.h"

namespace detaudit::reports {
namespace {

constexpr size_t BEFORE_CHARS = 40;
constexpr size_t AFTER_CHARS = 60;
constexpr const char* U_FFFD = "\xEF\xBF\xBD";

// Whether two tokens are the same token: the same bytes when both sides' bytes are known, else
// the same id when both have one, else the same string. A token with neither bytes nor a string
// (llama.cpp's ids without log-probs) has unknown bytes.
std::optional<std::string> known_bytes(const token_rec& t) {
  if (t.bytes.empty() && t.text.empty()) return std::nullopt;
  return token_bytes(t);
}

// One vocabulary (one_vocab): ids are compared first, where both sides have them.
bool same_token(const token_rec& x, const token_rec& y, bool one_vocab) {
  if (one_vocab && x.id >= 0 && y.id >= 0 && x.id != y.id) return false;
  const std::optional<std::string> bx = known_bytes(x), by = known_bytes(y);
  if (bx && by) return *bx == *by;
  if (x.id >= 0 && y.id >= 0) return x.id == y.id;
  return x.text == y.text;
}

size_t token_length(const token_rec& t) {
  const std::optional<std::string> b = known_bytes(t);
  return b ? b->size() : t.text.size();
}

std::optional<double> margin_at(const record& r, size_t k) {
  if (k >= r.top_logprobs.size()) return std::nullopt;
  return step_margin(r.top_logprobs[k]);
}

void context_at(const std::string& text, size_t offset, std::string* before, std::string* after) {
  const size_t p = utf8_char_start(text, std::min(offset, text.size()));
  const size_t b = utf8_back(text, p, BEFORE_CHARS);
  const size_t e = utf8_forward(text, p, AFTER_CHARS);
  *before = text.substr(b, p - b);
  *after = text.substr(p, e - p);
}

std::string failure_note(const record& a, const record& b) {
  std::string note;
  if (!a.error.empty()) note = "side A failed: " + a.error;
  if (!b.error.empty()) note += (note.empty() ? "" : "; ") + std::string("side B failed: ") + b.error;
  return note;
}

void hash_step_find(const record& a, const record& b, divergence& d) {
  d.hashes_available = !a.logit_hashes.empty() && !b.logit_hashes.empty();
  if (!d.hashes_available) return;
  const size_t n = std::min(a.logit_hashes.size(), b.logit_hashes.size());
  for (size_t i = 0; i < n; ++i)
    if (a.logit_hashes[i] != b.logit_hashes[i]) {
      d.hash_step = static_cast<int64_t>(i);
      return;
    }
  if (a.logit_hashes.size() != b.logit_hashes.size()) d.hash_step = static_cast<int64_t>(n);
}

// The same alternative on both sides: the same string, and the same id where both have one. An id
// alone is not enough: across two vocabularies (a cross audit) the same id names another token.
bool same_alternative(const alt_rec& x, const alt_rec& y) {
  return x.token == y.token && (x.id < 0 || y.id < 0 || x.id == y.id);
}

// Log-prob drift over steps [0, n): alternatives listed on both sides, compared bit for bit.
void drift_find(const record& a, const record& b, size_t n, divergence& d) {
  n = std::min({n, a.top_logprobs.size(), b.top_logprobs.size()});
  for (size_t i = 0; i < n; ++i) {
    const std::vector<alt_rec>&sa = a.top_logprobs[i], &sb = b.top_logprobs[i];
    if (sa.empty() || sb.empty()) continue;
    if (!d.max_drift) d.max_drift = 0.0;
    for (const alt_rec& x : sa) {
      auto y = std::find_if(sb.begin(), sb.end(), [&x](const alt_rec& z) { return same_alternative(x, z); });
      if (y == sb.end() || y->logprob == x.logprob) continue;
      if (d.drift_step < 0) d.drift_step = static_cast<int64_t>(i);
      // Capped at the largest double, as margins are: an inf from +-1e308 would read as null in JSON.
      d.max_drift = std::max(*d.max_drift, std::min(std::fabs(y->logprob - x.logprob), std::numeric_limits<double>::max()));
    }
  }
}

// The first byte where the texts part; both contexts there.
void text_diverge(const record& a, const record& b, divergence& d) {
  const size_t m = std::min(a.text.size(), b.text.size());
  size_t c = 0;
  while (c < m && a.text[c] == b.text[c]) ++c;
  d.char_offset = static_cast<int64_t>(c);
  context_at(a.text, c, &d.before_a, &d.after_a);
  context_at(b.text, c, &d.before_b, &d.after_b);
}

// The concatenated bytes of r's tokens from token k on; nullopt when one of their bytes is unknown.
std::optional<std::string> tokens_bytes(const record& r, size_t k = 0) {
  std::string out;
  for (size_t i = k; i < r.tokens.size(); ++i) {
    const std::optional<std::string> b = known_bytes(r.tokens[i]);
    if (!b) return std::nullopt;
    out += *b;
  }
  return out;
}

// The length in r.text of token t standing at byte off: its string's, else its bytes' (see
// laid_over_text); nullopt when neither stands there.
std::optional<size_t> length_in_text(const record& r, size_t off, const token_rec& t) {
  if (r.text.compare(off, t.text.size(), t.text) == 0) return t.text.size();
  if (const std::optional<std::string> b = known_bytes(t); b && r.text.compare(off, b->size(), *b) == 0) return b->size();
  return std::nullopt;
}

// Each token's length in r.text, from the first token, through the token holding byte c (every
// token when c lies past them), stopping early at a token that does not stand at its place. A text
// is valid UTF-8: a token that is a lone byte shows in it as U+FFFD, three bytes, as in the token's
// own string, while one piece of a character split across tokens shows as the character. So a
// token whose string stands at its place in the text takes the string's length, else one whose
// bytes do takes theirs.
std::vector<size_t> laid_over_text(const record& r, size_t c) {
  std::vector<size_t> len;
  size_t off = 0;
  for (const token_rec& t : r.tokens) {
    if (off > c) break;
    const std::optional<size_t> n = length_in_text(r, off, t);
    if (!n) break;
    len.push_back(*n);
    off += *n;
  }
  return len;
}

// laid_over_text when it reaches byte c (or the last token); nullopt when a token before c does
// not stand in the text: the text cannot be laid out over the tokens there.
std::optional<std::vector<size_t>> text_layout(const record& r, size_t c) {
  std::vector<size_t> len = laid_over_text(r, c);
  size_t off = 0;
  for (size_t n : len) off += n;
  if (len.size() < r.tokens.size() && off <= c) return std::nullopt;
  return len;
}

// Each token's length in the tokens' bytes; nullopt when a token's bytes are unknown.
std::optional<std::vector<size_t>> byte_layout(const record& r) {
  std::vector<size_t> len;
  for (const token_rec& t : r.tokens) {
    const std::optional<std::string> b = known_bytes(t);
    if (!b) return std::nullopt;
    len.push_back(b->size());
  }
  return len;
}

// The byte offset in r.text where token k starts (capped at the text): tokens 0..k-1 laid over the
// text, or by their bytes' lengths where they cannot be.
size_t token_offset(const record& r, size_t k) {
  k = std::min(k, r.tokens.size());
  const std::vector<size_t> laid = laid_over_text(r, std::string::npos);
  size_t off = 0;
  for (size_t i = 0; i < k; ++i) off += laid.size() >= k ? laid[i] : token_length(r.tokens[i]);
  return std::min(off, r.text.size());
}

// The token holding byte c of a layout, and the offsets where tokens start before c.
int64_t token_at_byte(const std::vector<size_t>& len, size_t c, std::vector<size_t>* starts) {
  size_t off = 0;
  for (size_t i = 0; i < len.size(); ++i) {
    if (c < off + len[i]) return static_cast<int64_t>(i);
    off += len[i];
    if (off < c) starts->push_back(off);
  }
  return static_cast<int64_t>(len.size());
}

void tokens_at_divergence(const record& a, const record& b, divergence& d) {
  if (d.char_offset < 0 || a.tokens.empty() || b.tokens.empty()) return;
  size_t c = static_cast<size_t>(d.char_offset);
  std::optional<std::vector<size_t>> la, lb;
  bool in_bytes = false;
  const std::optional<std::string> ra = tokens_bytes(a), rb = tokens_bytes(b);
  if (ra && rb) {
    // Both sides' bytes known: located where the bytes part, which can come before the texts part
    // (two different lone bytes both show as U+FFFD).
    la = byte_layout(a);
    lb = byte_layout(b);
    in_bytes = *ra != a.text || *rb != b.text;
    const size_t m = std::min(ra->size(), rb->size());
    c = 0;
    while (c < m && (*ra)[c] == (*rb)[c]) ++c;
  } else {
    // Else each side's tokens laid over its own text; a side they cannot be laid over is not
    // located (-1) rather than located wrongly.
    la = text_layout(a, c);
    lb = text_layout(b, c);
    if (!la || !lb) return;
  }
  std::vector<size_t> starts_a, starts_b;
  d.token_index_a = token_at_byte(*la, c, &starts_a);
  d.token_index_b = token_at_byte(*lb, c, &starts_b);
  d.tokenized_differently = starts_a != starts_b;
  if (!d.tokenized_differently) return;
  auto tok = [](const record& r, int64_t i) {
    return i < static_cast<int64_t>(r.tokens.size()) ? "'" + r.tokens[static_cast<size_t>(i)].text + "'" : std::string("(end)");
  };
  const std::string where = "the targets tokenize differently: byte " + std::to_string(c) +
                            (in_bytes ? " of the tokens' bytes" : "") + " is in A's token " + std::to_string(d.token_index_a) +
                            " " + tok(a, d.token_index_a) + " and B's token " + std::to_string(d.token_index_b) + " " +
                            tok(b, d.token_index_b) + "; token indices of the two sides do not correspond";
  d.note = d.note.empty() ? where : d.note + "; " + where;
}

// Equal texts over tokens that part at k: a re-cut of the same bytes, or a difference the texts
// do not show. From k on, bytes known on both sides decide; where they are not, token k with the
// same string at the same place on both sides (another id) is a difference, else a re-cut.
bool texts_hide_a_difference(const record& a, const record& b, size_t k) {
  const std::optional<std::string> ta = tokens_bytes(a, k), tb = tokens_bytes(b, k);
  if (ta && tb) return *ta != *tb;
  return k < a.tokens.size() && k < b.tokens.size() && a.tokens[k].text == b.tokens[k].text &&
         token_offset(a, k) == token_offset(b, k);
}

// Why equal texts hide a difference: a text cut before its tokens end (a stop string), or bytes
// that are not UTF-8, each shown as U+FFFD.
std::string hidden_difference_note(const record& a, const record& b) {
  auto cut = [](const record& r) {
    std::string strings;
    for (const token_rec& t : r.tokens) strings += t.text;
    const std::optional<std::string> raw = tokens_bytes(r);
    auto longer = [&r](const std::string& s) { return s.size() > r.text.size() && s.compare(0, r.text.size(), r.text) == 0; };
    return longer(strings) || (raw && longer(*raw));
  };
  const std::string why = cut(a) || cut(b) ? " (a text ends before its tokens do, as at a stop string)"
                          : a.text.find(U_FFFD) != std::string::npos
                              ? " (a text shows each byte that is not UTF-8 as U+FFFD)"
                              : "";
  return "the texts are identical, but the tokens differ" + why;
}

// The answers (texts and tokens) of two responses that both succeeded.
divergence diverge_answer(const record& a, const record& b, bool one_vocab) {
  divergence d;
  hash_step_find(a, b, d);
  const bool text_same = a.text == b.text;
  if (a.tokens.empty() || b.tokens.empty()) {
    d.text_only = true;
    d.identical = text_same;
    if (a.tokens.empty() != b.tokens.empty())
      d.note = std::string("compared on the texts: side ") + (a.tokens.empty() ? "A" : "B") + " reported no tokens";
    if (!text_same) text_diverge(a, b, d);
    return d;
  }
  const size_t n = std::min(a.tokens.size(), b.tokens.size());
  size_t k = 0;
  while (k < n && same_token(a.tokens[k], b.tokens[k], one_vocab)) ++k;
  const bool tokens_same = k == n && a.tokens.size() == b.tokens.size();
  d.identical = tokens_same && text_same;
  drift_find(a, b, k, d);
  if (d.identical) return d;
  if (!tokens_same) {
    d.token_index = static_cast<int64_t>(k);
    if (k < a.tokens.size()) d.token_a = a.tokens[k].text, d.id_a = a.tokens[k].id;
    if (k < b.tokens.size()) d.token_b = b.tokens[k].text, d.id_b = b.tokens[k].id;
    d.margin_a = margin_at(a, k);
    d.margin_b = margin_at(b, k);
  }
  if (!text_same) {
    text_diverge(a, b, d);
    tokens_at_divergence(a, b, d);
  } else {
    context_at(a.text, token_offset(a, k), &d.before_a, &d.after_a);
    context_at(b.text, token_offset(b, k), &d.before_b, &d.after_b);
    if (texts_hide_a_difference(a, b, k)) {
      d.note = hidden_difference_note(a, b);
    } else {
      d.retokenized = true;
      d.note = k < n && same_token(a.tokens[k], b.tokens[k], false)
                   ? "the texts are identical; token " + std::to_string(k) + " has the same bytes under another id (" +
                         std::to_string(d.id_a) + " vs " + std::to_string(d.id_b) + ")"
                   : "the texts are identical; the tokens are cut differently";
    }
  }
  return d;
}

// A reasoning model's thinking, compared as its own stream: where it parts, and whether the final
// answer then differs. Thinking that parts makes the responses part even when the answers agree.
void reasoning_diverge(const record& a, const record& b, divergence& d) {
  if (a.reasoning.empty() && b.reasoning.empty()) return;
  d.reasoning_compared = true;
  if (a.reasoning == b.reasoning) return;
  const size_t m = std::min(a.reasoning.size(), b.reasoning.size());
  size_t c = 0;
  while (c < m && a.reasoning[c] == b.reasoning[c]) ++c;
  d.reasoning_offset = static_cast<int64_t>(c);
  std::string before_a, after_a, before_b, after_b;
  context_at(a.reasoning, c, &before_a, &after_a);
  context_at(b.reasoning, c, &before_b, &after_b);
  const std::string where = "the reasoning parts at byte " + std::to_string(c) + " ('" + after_a + "' vs '" + after_b + "'); the final answers " + (d.identical ? "agree" : "differ too");
  d.note = d.note.empty() ? where : d.note + "; " + where;
  d.identical = false;
}

}  // namespace

divergence diverge(const record& a, const record& b, bool one_vocab) {
  if (!a.error.empty() || !b.error.empty()) {
    divergence d;
    d.identical = false;
    d.note = failure_note(a, b);
    return d;
  }
  divergence d = diverge_answer(a, b, one_vocab);
  reasoning_diverge(a, b, d);
  return d;
}

}  // namespace detaudit::reports
