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

// alone vs concurrent-8 over seven items, each also sent again alone as the control (identical):
// q1 (token 2, margins 0.5 / 0.125, hash step 2), q2 (token 2, graded right -> wrong), q3 (token 0,
// no ids) and q7 (token 1, markup and bad bytes) differ; q4 failed; q5 (token 1) not exercised
// (no overlap); q6 drifted (same tokens, a logit hash differs).
inline std::vector<reports::record> sample_records() {
  using reports::record;
  std::vector<record> v;
  record a1 = rec("q1", "alone", {{1, "a"}, {2, " b"}, {3, " c"}, {4, " d"}});
  record b1 = rec("q1", "concurrent-8", {{1, "a"}, {2, " b"}, {9, " X"}, {4, " d"}}, "concurrency");
  a1.top_logprobs = {{}, {}, {{3, " c", -0.25}, {9, " X", -0.75}}, {}};
  b1.top_logprobs = {{}, {}, {{9, " X", -0.5}, {3, " c", -0.625}}, {}};
  a1.logit_hashes = {1, 2, 3, 4};
  b1.logit_hashes = {1, 2, 5, 6};
  v.push_back(a1);
  v.push_back(b1);
  v.push_back(graded(rec("q2", "alone", words("so #### 18")), "18"));
  v.push_back(graded(rec("q2", "concurrent-8", words("so #### 17"), "concurrency"), "18"));
  v.push_back(rec("q3", "alone", {{-1, "line one\nline two"}}));
  v.push_back(rec("q3", "concurrent-8", {{-1, "line one\nline 2"}}, "concurrency"));
  v.push_back(rec("q4", "alone", words("fine")));
  record b4 = rec("q4", "concurrent-8", {}, "concurrency");
  b4.error = "HTTP 500: <oops> & \"boom\"";
  v.push_back(b4);
  v.push_back(rec("q5", "alone", words("p q")));
  record b5 = rec("q5", "concurrent-8", words("p r"), "concurrency");
  b5.evidence = {{"overlap", false}};
  v.push_back(b5);
  record a6 = rec("q6", "alone", words("same text"));
  record b6 = rec("q6", "concurrent-8", words("same text"), "concurrency");
  a6.logit_hashes = {7, 8};
  b6.logit_hashes = {7, 9};
  v.push_back(a6);
  v.push_back(b6);
  v.push_back(rec("q7", "alone", {{-1, "x<&>\"y"}, {-1, "\x01" "\xff" "z"}}));
  v.push_back(rec("q7", "concurrent-8", {{-1, "x<&>\"y"}, {-1, "\x02" "]]>"}}, "concurrency"));
  for (record& r : v)  // the evidence that the item shared forward steps with the others
    if (r.condition == "concurrent-8" && r.evidence.empty()) r.evidence = {{"overlap", true}, {"batch_width", 8}};
  const std::vector<record> base = v;
  for (const record& r : base)
    if (r.condition == "alone") {
      record c = r;
      c.condition = "control";
      v.push_back(c);
    }
  return v;
}

}  // namespace detaudit::test
