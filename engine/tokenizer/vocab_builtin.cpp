// The built-in vocabulary for synthetic models: a tiny byte-level BPE trainer run once on an
// embedded text. Deterministic: the most frequent adjacent pair wins, ties go to the pair of
// smallest ids, and the text never changes, so every process learns the same merges.
#include <map>

#include "tokenizer/utf8.h"
#include "tokenizer/vocab_internal.h"

namespace detaudit::tokenizer {
namespace {

constexpr int MAX_TOKENS = 768;  // byte tokens + merges, before the two control tokens

// Written for this project. Word problems in the style of grade-school maths benchmarks, so
// prompts of that kind split into whole words and numbers.
constexpr std::string_view TRAINING_TEXT =
    "Question: Maria has 12 apples. She gives 3 apples to her brother and buys 5 more at the store. "
    "How many apples does Maria have now? Answer: Maria starts with 12 apples. After giving away 3, "
    "she has 12 - 3 = 9 apples. After buying 5 more, she has 9 + 5 = 14 apples. The answer is 14.\n\n"
    "Question: A farmer plants 4 rows of tomatoes with 8 plants in each row. Each plant gives 6 "
    "tomatoes. How many tomatoes does the farmer pick in total? Answer: There are 4 * 8 = 32 plants. "
    "Each plant gives 6 tomatoes, so the farmer picks 32 * 6 = 192 tomatoes. The answer is 192.\n\n"
    "Question: A train leaves the station at 9 o'clock and travels 60 miles every hour. How far has "
    "the train travelled by 12 o'clock? Answer: From 9 to 12 is 3 hours. In 3 hours the train travels "
    "3 * 60 = 180 miles. The answer is 180.\n\n"
    "Question: Tom earns $15 per hour and works 7 hours a day for 5 days. He spends $120 on books. "
    "How much money does he have left? Answer: Each day Tom earns 15 * 7 = $105. In 5 days he earns "
    "5 * 105 = $525. After spending $120, he has 525 - 120 = $405 left. The answer is 405.\n\n"
    "Question: A school has 240 students. One third of the students walk to school, and half of the "
    "rest take the bus. How many students take the bus? Answer: One third of 240 is 240 / 3 = 80 "
    "students who walk. The rest is 240 - 80 = 160 students. Half of them is 160 / 2 = 80 students "
    "who take the bus. The answer is 80.\n\n"
    "Question: Sarah buys 3 notebooks for $4 each and 2 pens for $1.50 each. She pays with a $20 bill. "
    "How much change does she get? Answer: The notebooks cost 3 * 4 = $12. The pens cost "
    "2 * 1.50 = $3. The total is 12 + 3 = $15. Her change is 20 - 15 = $5. The answer is 5.\n\n"
    "Question: A baker makes 48 cookies and puts them into boxes of 6. He sells each box for $9. "
    "How much money does he make if he sells every box? Answer: There are 48 / 6 = 8 boxes. "
    "Selling each box for $9 gives 8 * 9 = $72. The answer is 72.\n\n"
    "Question: The temperature in the morning was 14 degrees. By noon it had risen by 9 degrees, and "
    "by night it had fallen by 11 degrees from the noon temperature. What was the temperature at "
    "night? Answer: At noon the temperature was 14 + 9 = 23 degrees. At night it was 23 - 11 = 12 "
    "degrees. The answer is 12.\n\n"
    "Let us think step by step. First we find how many there are in each group, then we multiply by "
    "the number of groups, and finally we add or subtract what was given or taken away. Always check "
    "that the answer makes sense: a number of people, apples or hours cannot be negative, and the "
    "total should be larger than each of its parts.\n";

struct trainer {
  std::vector<std::string> tokens;        // raw bytes per id
  std::map<std::string, int32_t> lookup;  // raw bytes -> id
  std::vector<std::string> merges;        // byte-level form "left right"
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;  // ids, frequency

  trainer() {
    for (int b = 0; b < 256; ++b) {
      tokens.emplace_back(1, static_cast<char>(b));
      lookup.emplace(tokens.back(), b);
    }
  }

  void load_words(std::string_view text) {
    pre_splitter splitter(*pre_tokenizer_find("gpt-2"));
    std::map<std::string, int64_t> counts;
    for (auto [off, len] : splitter.split(text)) ++counts[std::string(text.substr(off, len))];
    for (const auto& [w, n] : counts) {
      std::vector<int32_t> ids;
      for (char c : w) ids.push_back(static_cast<uint8_t>(c));
      words.emplace_back(std::move(ids), n);
    }
  }

  // The most frequent adjacent pair (ties: smallest ids); count 0 when none occurs twice.
  std::pair<std::pair<int32_t, int32_t>, int64_t> best_pair() const {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (const auto& [ids, n] : words)
      for (size_t i = 0; i + 1 < ids.size(); ++i) pairs[{ids[i], ids[i + 1]}] += n;
    std::pair<std::pair<int32_t, int32_t>, int64_t> best{{0, 0}, 0};
    for (const auto& [p, n] : pairs)
      if (n > best.second) best = {p, n};
    return best;
  }

  void merge(std::pair<int32_t, int32_t> p) {
    std::string bytes = tokens[p.first] + tokens[p.second];
    auto [it, fresh] = lookup.emplace(bytes, static_cast<int32_t>(tokens.size()));
    if (fresh) tokens.push_back(bytes);
    merges.push_back(bytes_to_unicode_text(tokens[p.first]) + " " + bytes_to_unicode_text(tokens[p.second]));
    for (auto& [ids, n] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i + 1 < ids.size() && ids[i] == p.first && ids[i + 1] == p.second) {
          out.push_back(it->second);
          ++i;
        } else {
          out.push_back(ids[i]);
        }
      }
      ids = std::move(out);
    }
  }
};

vocab train() {
  trainer t;
  t.load_words(TRAINING_TEXT);
  while (static_cast<int>(t.tokens.size()) < MAX_TOKENS) {
    auto [pair, count] = t.best_pair();
    if (count < 2) break;
    t.merge(pair);
  }
  vocab_spec s;
  s.kind = VOCAB_BPE;
  s.pre = "gpt-2";
  for (const std::string& bytes : t.tokens) s.tokens.push_back(bytes_to_unicode_text(bytes));
  s.types.assign(s.tokens.size(), TOKEN_TYPE_NORMAL);
  s.merges = std::move(t.merges);
  s.ids.bos = static_cast<int32_t>(s.tokens.size());
  s.tokens.push_back("<|bos|>");
  s.types.push_back(TOKEN_TYPE_CONTROL);
  s.ids.eos = static_cast<int32_t>(s.tokens.size());
  s.tokens.push_back("<|eos|>");
  s.types.push_back(TOKEN_TYPE_CONTROL);
  s.add_bos = true;
  s.add_eos = false;
  s.model_name = "detaudit-builtin";
  return vocab_build(std::move(s), "built-in vocabulary");
}

}  // namespace

vocab vocab_builtin() {
  static const vocab v = train();
  return v;
}

}  // namespace detaudit::tokenizer
