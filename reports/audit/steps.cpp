// Token bytes, margins and ranks of one step (see steps.h).
#include "reports/audit/steps.h"

#include <algorithm>
#include <limits>
#include <cmath>

namespace detaudit::reports {
namespace {

const std::string REPLACEMENT = "\xEF\xBF\xBD";  // U+FFFD

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte of "\xHH" at s[i] (i points at the backslash), or -1.
int escape_at(const std::string& s, size_t i) {
  if (i + 4 > s.size()) return -1;
  if (s[i] != '\\' || s[i + 1] != 'x') return -1;
  const int hi = hex_value(s[i + 2]), lo = hex_value(s[i + 3]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// The byte of "<0xHH>" at s[i], or -1.
int piece_at(const std::string& s, size_t i) {
  if (i + 6 > s.size() || s.compare(i, 3, "<0x") != 0 || s[i + 5] != '>') return -1;
  const int hi = hex_value(s[i + 3]), lo = hex_value(s[i + 4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// "bytes:" followed only by \xHH escapes -> those bytes; nullopt when the rest is anything else.
std::optional<std::string> openai_bytes(const std::string& s) {
  const std::string prefix = "bytes:";
  if (s.size() <= prefix.size() || s.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::string out;
  for (size_t i = prefix.size(); i < s.size(); i += 4) {
    const int b = escape_at(s, i);
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
  }
  return out;
}

bool same_token(const token_rec& t, const alt_rec& a) {
  if (t.id >= 0 && a.id >= 0) return t.id == a.id;
  const std::optional<std::string> tb = token_bytes(t), ab = token_string_bytes(a.token);
  if (tb && ab) return *tb == *ab;
  return t.text == a.token;
}

}  // namespace

std::optional<std::string> token_string_bytes(const std::string& s) {
  if (std::optional<std::string> b = openai_bytes(s)) return b;
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (const int b = piece_at(s, i); b >= 0) {
      out += static_cast<char>(b);
      i += 6;
    } else if (const int e = escape_at(s, i); e >= 0x80) {
      out += static_cast<char>(e);
      i += 4;
    } else {
      out += s[i++];
    }
  }
  if (out.find(REPLACEMENT) != std::string::npos) return std::nullopt;
  return out;
}

std::optional<std::string> token_bytes(const token_rec& t) {
  if (!t.bytes.empty()) {
    std::string b(t.bytes.begin(), t.bytes.end());
    if (b.find(REPLACEMENT) == std::string::npos) return b;
  }
  return token_string_bytes(t.text);
}

std::optional<double> step_margin(const std::vector<alt_rec>& alts) {
  if (alts.size() < 2) return std::nullopt;
  double top1 = -INFINITY, top2 = -INFINITY;
  for (const alt_rec& a : alts) {
    if (a.logprob > top1) {
      top2 = top1;
      top1 = a.logprob;
    } else if (a.logprob > top2) {
      top2 = a.logprob;
    }
  }
  // Log-probs a hostile server writes as +-1e308 would overflow to inf, which JSON cannot carry
  // (it would read as "no margin"): the largest double stands for it in every format.
  return std::min(top1 - top2, std::numeric_limits<double>::max());
}

int step_rank(const token_rec& t, const std::vector<alt_rec>& alts) {
  if (alts.empty()) return -1;
  std::optional<double> lp = t.logprob;
  if (!lp) {
    auto it = std::find_if(alts.begin(), alts.end(), [&t](const alt_rec& a) { return same_token(t, a); });
    if (it == alts.end()) return static_cast<int>(alts.size());
    lp = it->logprob;
  }
  if (std::isnan(*lp)) return -1;
  return static_cast<int>(std::count_if(alts.begin(), alts.end(), [&lp](const alt_rec& a) { return a.logprob > *lp; }));
}

void record_normalise(record& r) {
  for (size_t k = 0; k < r.top_logprobs.size(); ++k) {
    std::vector<alt_rec>& alts = r.top_logprobs[k];
    std::stable_sort(alts.begin(), alts.end(), [](const alt_rec& a, const alt_rec& b) { return a.logprob > b.logprob; });
    if (k >= r.tokens.size()) continue;
    token_rec& t = r.tokens[k];
    if (!t.logprob) {
      auto it = std::find_if(alts.begin(), alts.end(), [&t](const alt_rec& a) { return same_token(t, a); });
      if (it != alts.end()) t.logprob = it->logprob;
    }
    t.rank = step_rank(t, alts);
  }
}

int64_t first_not_argmax(const record& r) {
  if (!r.temperature || *r.temperature != 0) return -1;
  const size_t n = std::min(r.tokens.size(), r.top_logprobs.size());
  for (size_t k = 0; k < n; ++k)
    if (step_rank(r.tokens[k], r.top_logprobs[k]) > 0) return static_cast<int64_t>(k);
  return -1;
}

}  // namespace detaudit::reports
