// Byte-level BPE ("gpt2") tokenizer session, as in llama.cpp llm_tokenizer_bpe_session.
//
// The text is sanitized (invalid UTF-8 bytes -> U+FFFD), split by the vocabulary's
// pre-tokenizer, and each piece is merged on its own: every byte starts as the token of its
// byte-level character; adjacent pairs that form a merge are queued by merge rank (lowest
// first, leftmost on ties) and applied until none is left. With ignore_merges (llama3), a piece
// that is itself a token is emitted whole before any merging.
#include <queue>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab_internal.h"

namespace detaudit::tokenizer {
namespace {

struct symbol {
  int prev;
  int next;
  int32_t id;  // TOKEN_NONE: a byte whose character is not in the vocabulary
  size_t n;    // bytes; 0 once merged into its left neighbour
};

struct bigram {
  int left;
  int right;
  int32_t left_id;
  int32_t right_id;
  int32_t rank;
};

struct bigram_order {
  bool operator()(const bigram& l, const bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

class bpe_session {
 public:
  explicit bpe_session(const vocab_data& d) : d_(d) {}

  void word(std::string_view bytes, std::vector<int32_t>& out) {
    if (d_.ignore_merges) {
      int32_t whole = d_.find(bytes_to_unicode_text(bytes));
      if (whole != TOKEN_NONE) {
        out.push_back(whole);
        return;
      }
    }
    symbols_.clear();
    for (size_t i = 0; i < bytes.size(); ++i) {
      int idx = static_cast<int>(i);
      symbols_.push_back({idx - 1, i + 1 == bytes.size() ? -1 : idx + 1,
                          d_.byte_token[static_cast<uint8_t>(bytes[i])], 1});
    }
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add(i - 1, i);
    while (!queue_.empty()) {
      bigram b = queue_.top();
      queue_.pop();
      symbol& l = symbols_[b.left];
      symbol& r = symbols_[b.right];
      if (l.n == 0 || r.n == 0 || l.id != b.left_id || r.id != b.right_id) continue;  // outdated
      l.id = d_.merges.at(merge_key(b.left_id, b.right_id)).result;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (size_t i = 0; i < symbols_.size(); ++i) {
      const symbol& s = symbols_[i];
      if (s.n == 0) continue;
      if (s.id != TOKEN_NONE) {
        out.push_back(s.id);
        continue;
      }
      // As llama.cpp: try each byte of the character's text as a one-byte token.
      for (char c : byte_to_unicode(static_cast<uint8_t>(bytes[i]))) {
        int32_t id = d_.find(std::string_view(&c, 1));
        if (id != TOKEN_NONE) out.push_back(id);
      }
    }
  }

 private:
  void try_add(int left, int right) {
    if (left == -1 || right == -1) return;
    int32_t l = symbols_[left].id, r = symbols_[right].id;
    if (l == TOKEN_NONE || r == TOKEN_NONE) return;
    auto it = d_.merges.find(merge_key(l, r));
    if (it == d_.merges.end()) return;
    queue_.push({left, right, l, r, it->second.rank});
  }

  const vocab_data& d_;
  std::vector<symbol> symbols_;
  std::priority_queue<bigram, std::vector<bigram>, bigram_order> queue_;
};

}  // namespace

void bpe_tokenize(const vocab_data& d, std::string_view text, std::vector<int32_t>& out) {
  const std::string clean = utf8_sanitize(text);
  bpe_session session(d);
  for (auto [off, len] : d.splitter->split(clean)) session.word(std::string_view(clean).substr(off, len), out);
}

}  // namespace detaudit::tokenizer
