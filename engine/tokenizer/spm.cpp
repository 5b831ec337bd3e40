// SentencePiece ("llama") tokenizer session: score-driven bigram merges with byte fallback,
// as in llama.cpp llm_tokenizer_spm_session (itself after the original llama.cpp tokenizer).
//
// The text is split into UTF-8 characters; every adjacent pair whose concatenation is a token
// is queued by that token's score (highest first, leftmost on ties); the best pair is merged and
// its new neighbours are queued, until the queue is empty. A final symbol that is not a token
// (a character outside the vocabulary) is emitted as its <0xNN> byte tokens.
#include <algorithm>
#include <queue>
#include <stdexcept>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab_internal.h"
#include "util/error.h"

namespace detaudit::tokenizer {
namespace {

struct symbol {
  int prev;
  int next;
  size_t offset;  // into the session text
  size_t n;       // bytes; 0 once merged into its left neighbour
};

struct bigram {
  int left;
  int right;
  float score;
  size_t size;
};

struct bigram_order {
  bool operator()(const bigram& l, const bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

class spm_session {
 public:
  spm_session(const vocab_data& d, std::string_view text) : d_(d), text_(text) {}

  void run(std::vector<int32_t>& out) {
    split_chars();
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add(i - 1, i);
    while (!queue_.empty()) {
      bigram b = queue_.top();
      queue_.pop();
      symbol& l = symbols_[b.left];
      symbol& r = symbols_[b.right];
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // outdated
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols_[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (int i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[i].next) emit(symbols_[i], out);
  }

 private:
  void split_chars() {
    size_t offs = 0;
    int index = 0;
    while (offs < text_.size()) {
      size_t n = std::min(utf8_seq_len(text_[offs]), text_.size() - offs);
      symbols_.push_back({index - 1, offs + n == text_.size() ? -1 : index + 1, offs, n});
      offs += n;
      ++index;
    }
  }

  void try_add(int left, int right) {
    if (left == -1 || right == -1) return;
    size_t size = symbols_[left].n + symbols_[right].n;
    int32_t id = d_.find(text_.substr(symbols_[left].offset, size));
    if (id == TOKEN_NONE) return;
    queue_.push({left, right, d_.spec.scores.empty() ? 0.0f : d_.spec.scores[id], size});
  }

  void emit(const symbol& s, std::vector<int32_t>& out) const {
    std::string_view piece = text_.substr(s.offset, s.n);
    int32_t id = d_.find(piece);
    if (id != TOKEN_NONE) {
      out.push_back(id);
      return;
    }
    for (char c : piece) {
      int32_t b = d_.byte_token[static_cast<uint8_t>(c)];
      if (b == TOKEN_NONE) b = d_.ids.unk;
      if (b == TOKEN_NONE)
        throw input_error("SPM vocabulary has no byte token <0x" + hex_byte(c) + "> and no unknown token: cannot encode the text");
      out.push_back(b);
    }
  }

  static std::string hex_byte(char c) {
    static const char* hex = "0123456789ABCDEF";
    uint8_t b = static_cast<uint8_t>(c);
    return {hex[b >> 4], hex[b & 15]};
  }

  const vocab_data& d_;
  std::string_view text_;
  std::vector<symbol> symbols_;
  std::priority_queue<bigram, std::vector<bigram>, bigram_order> queue_;
};

}  // namespace

void spm_tokenize(const vocab_data& d, std::string_view text, std::vector<int32_t>& out) {
  spm_session(d, text).run(out);
}

}  // namespace detaudit::tokenizer
