// diverge(): where two responses part, token by token and byte by byte, with the context, the
// top-2 margins and the first differing logit hash there.
#include <algorithm>

#include "reports/compare.h"
#include "reports/utf8.h"

namespace detaudit::reports {
namespace {

constexpr size_t k_before_chars = 40;
constexpr size_t k_after_chars = 60;

bool all_ids(const record& r) {
  return std::all_of(r.tokens.begin(), r.tokens.end(), [](const token_rec& t) { return t.id >= 0; });
}

bool same_token(const token_rec& x, const token_rec& y, bool by_id) {
  if (by_id) return x.id == y.id;
  return x.text == y.text && x.bytes == y.bytes;
}

size_t token_bytes(const token_rec& t) { return t.bytes.empty() ? t.text.size() : t.bytes.size(); }

// The byte offset in r.text where token k starts, from the tokens' lengths (capped at the text).
size_t token_offset(const record& r, size_t k) {
  size_t off = 0;
  for (size_t i = 0; i < k && i < r.tokens.size(); ++i) off += token_bytes(r.tokens[i]);
  return std::min(off, r.text.size());
}

std::optional<double> margin_at(const record& r, size_t k) {
  if (k >= r.top_logprobs.size() || r.top_logprobs[k].size() < 2) return std::nullopt;
  return r.top_logprobs[k][0].logprob - r.top_logprobs[k][1].logprob;
}

void context_at(const std::string& text, size_t offset, std::string* before, std::string* after) {
  const size_t p = utf8_char_start(text, std::min(offset, text.size()));
  const size_t b = utf8_back(text, p, k_before_chars);
  const size_t e = utf8_forward(text, p, k_after_chars);
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

}  // namespace

divergence diverge(const record& a, const record& b) {
  divergence d;
  if (!a.error.empty() || !b.error.empty()) {
    d.identical = false;
    d.note = failure_note(a, b);
    return d;
  }
  const bool by_id = all_ids(a) && all_ids(b);
  const size_t n = std::min(a.tokens.size(), b.tokens.size());
  size_t k = 0;
  while (k < n && same_token(a.tokens[k], b.tokens[k], by_id)) ++k;
  const bool tokens_same = k == n && a.tokens.size() == b.tokens.size();
  const bool text_same = a.text == b.text;
  hash_step_find(a, b, d);
  d.identical = tokens_same && text_same;
  if (d.identical) return d;
  if (!tokens_same) {
    d.token_index = static_cast<int64_t>(k);
    if (k < a.tokens.size()) d.token_a = a.tokens[k].text, d.id_a = a.tokens[k].id;
    if (k < b.tokens.size()) d.token_b = b.tokens[k].text, d.id_b = b.tokens[k].id;
    d.margin_a = margin_at(a, k);
    d.margin_b = margin_at(b, k);
  }
  if (!text_same) {
    const size_t m = std::min(a.text.size(), b.text.size());
    size_t c = 0;
    while (c < m && a.text[c] == b.text[c]) ++c;
    d.char_offset = static_cast<int64_t>(c);
    context_at(a.text, c, &d.before_a, &d.after_a);
    context_at(b.text, c, &d.before_b, &d.after_b);
  } else {
    context_at(a.text, token_offset(a, k), &d.before_a, &d.after_a);
    context_at(b.text, token_offset(b, k), &d.before_b, &d.after_b);
    d.note = "the texts are identical; the token sequences differ";
  }
  return d;
}

}  // namespace detaudit::reports
