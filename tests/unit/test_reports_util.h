// Hand-built run records for the reports tests: every token list is written out, so each expected
// divergence point is known before the code under test runs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "reports/record.h"

namespace detaudit::test {

// One generated token: id (-1: the target gives none) and its text.
using tok = std::pair<int32_t, std::string>;

// A record whose text is the concatenation of its tokens' texts.
inline reports::record rec(const std::string& item, const std::string& condition, const std::vector<tok>& toks,
                           const std::string& probe = "", const std::string& label = "A", int repetition = 0) {
  reports::record r;
  r.run_id = "run-test";
  r.item_id = item;
  r.condition = condition;
  r.probe = probe.empty() ? (condition == "alone" || condition == "control" ? "base" : condition) : probe;
  r.repetition = repetition;
  r.target = {{"label", label}, {"spec", "engine:test.gguf"}};
  for (const auto& [id, text] : toks) {
    reports::token_rec t;
    t.id = id;
    t.text = text;
    r.tokens.push_back(t);
    r.text += text;
  }
  r.finish_reason = "length";
  return r;
}

// The same record graded: GSM8K-style reference "... #### N" and the gsm8k grader.
inline reports::record graded(reports::record r, const std::string& answer) {
  r.reference = "Work it out.\n#### " + answer;
  r.grader = "gsm8k";
  return r;
}

// A token id that depends only on the token's text (FNV-1a, folded below 100000).
inline int32_t word_id(const std::string& text) {
  uint32_t h = 2166136261u;
  for (unsigned char c : text) h = (h ^ c) * 16777619u;
  return static_cast<int32_t>(h % 100000u);
}

// Tokens of a text split before each space (the space starts the next token), ids from word_id.
inline std::vector<tok> words(const std::string& text) {
  std::vector<tok> out;
  size_t start = 0;
  for (size_t i = 1; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ' ') {
      out.push_back({word_id(text.substr(start, i - start)), text.substr(start, i - start)});
      start = i;
    }
  return out;
}

}  // namespace detaudit::test
