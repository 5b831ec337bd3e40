// Audit items and lint (probes/items.cpp, probes/lint.cpp): every loader on hand-written files and
// the GSM8K fixture, every error naming file and line, one lint finding per pitfall.
#include <doctest/doctest.h>

#include <fstream>
#include <optional>
#include <set>

#include "probes/runner.h"
#include "reports/compare.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using probes::item;
using json = nlohmann::json;

namespace {

std::string write_file(const std::string& dir, const std::string& name, const std::string& data) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

std::vector<std::string> codes_for(const std::vector<probes::lint_finding>& fs, const std::string& item_id) {
  std::vector<std::string> out;
  for (const probes::lint_finding& f : fs)
    if (f.item_id == item_id) out.push_back(f.code);
  return out;
}

}  // namespace

TEST_CASE("probes_run: a .txt prompt file gives one item per non-blank line, bytes kept") {
  const std::string dir = test::scratch_dir("probes_run_txt");
  const std::string path = write_file(dir, "p.txt", "\xEF\xBB\xBF" "first\n\nsecond\r\nthird\n   \n\tfourth");
  const std::vector<item> items = probes::items_load_prompts(path);
  REQUIRE(items.size() == 4);
  CHECK(items[0].id == "1");
  CHECK(items[0].prompt == "\xEF\xBB\xBF" "first");
  CHECK(items[1].id == "3");
  CHECK(items[1].prompt == "second\r");
  CHECK(items[2].id == "4");
  CHECK(items[2].prompt == "third");
  CHECK(items[3].id == "6");
  CHECK(items[3].prompt == "\tfourth");
  CHECK(items[0].reference.empty());
  CHECK(items[0].grader.empty());
  CHECK_THROWS_WITH_AS(probes::items_load_prompts(write_file(dir, "blank.txt", "\n \n\r\n")), doctest::Contains("no prompts"), input_error);
  CHECK_THROWS_WITH_AS(probes::items_load_prompts(dir + "/missing.txt"), doctest::Contains("missing.txt: cannot open"), input_error);
}

TEST_CASE("probes_run: a .jsonl prompt file reads id, prompt, answer and grader") {
  const std::string dir = test::scratch_dir("probes_run_jsonl");
  const std::string path = write_file(dir, "p.jsonl",
                                      "{\"id\": \"q1\", \"prompt\": \"What is 2+2?\", \"answer\": \"4\", \"grader\": \"numeric\"}\n"
                                      "\n"
                                      "{\"prompt\": \"Say hi\"}\n"
                                      "{\"id\": 7, \"prompt\": \"Seven\", \"answer\": 7}\n");
  const std::vector<item> items = probes::items_load_prompts(path);
  REQUIRE(items.size() == 3);
  CHECK(items[0].id == "q1");
  CHECK(items[0].prompt == "What is 2+2?");
  CHECK(items[0].reference == "4");
  CHECK(items[0].grader == "numeric");
  CHECK(items[1].id == "3");  // no id: the line number
  CHECK(items[1].reference.empty());
  CHECK(items[2].id == "7");
  CHECK(items[2].reference == "7");

  const std::string bad_json = write_file(dir, "a.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": \n");
  CHECK_THROWS_WITH_AS(probes::items_load_prompts(bad_json), doctest::Contains("a.jsonl:2: not a JSON line"), input_error);
  const std::string no_prompt = write_file(dir, "b.jsonl", "{\"prompt\": \"ok\"}\n{\"question\": \"x\"}\n");
  CHECK_THROWS_WITH_AS(probes::items_load_prompts(no_prompt), doctest::Contains("b.jsonl:2: field 'prompt' is missing"), input_error);
  const std::string wrong_type = write_file(dir, "c.jsonl", "{\"prompt\": [\"x\"]}\n");
  CHECK_THROWS_WITH_AS(probes::items_load_prompts(wrong_type), doctest::Contains("c.jsonl:1: field 'prompt' must be a string"),
                       input_error);
  const std::string not_object = write_file(dir, "d.jsonl", "[1, 2]\n");
  CHECK_THROWS_WITH_AS(probes::items_load_prompts(not_object), doctest::Contains("d.jsonl:1: expected a JSON object"), input_error);
  const std::string dup = write_file(dir, "e.jsonl", "{\"id\": \"x\", \"prompt\": \"a\"}\n{\"id\": \"y\", \"prompt\": \"b\"}\n{\"id\": \"x\", \"prompt\": \"c\"}\n");
  CHECK_THROWS_WITH_AS(probes::items_load_prompts(dup), doctest::Contains("e.jsonl:3: item id 'x' is used twice (first at"), input_error);
}

TEST_CASE("probes_run: the GSM8K fixture loads as graded items") {
  const std::string path = test::fixture("data/test.jsonl");
  const std::vector<item> five = probes::items_load_dataset("gsm8k:" + path + ":5");
  REQUIRE(five.size() == 5);
  CHECK(five[0].id == "gsm8k-0");
  CHECK(five[4].id == "gsm8k-4");
  CHECK(five[0].prompt.rfind("Question: Janet", 0) == 0);  // lm-eval's gsm8k doc_to_text
  CHECK(five[0].prompt.size() > 10);
  CHECK(five[0].prompt.substr(five[0].prompt.size() - 8) == "\nAnswer:");
  CHECK(five[0].reference.find("#### 18") != std::string::npos);
  CHECK(five[0].grader == "gsm8k-flex");  // flips use flexible-extract unless --grader strict
  const std::vector<item> all = probes::items_load_dataset("gsm8k:" + path);
  CHECK(all.size() == 1319);
  CHECK(all.back().id == "gsm8k-1318");
  CHECK_THROWS_WITH_AS(probes::items_load_dataset("mmlu:" + path), doctest::Contains("expected gsm8k:FILE[:N]"), input_error);
  CHECK_THROWS_WITH_AS(probes::items_load_dataset("gsm8k:" + path + ":0"), doctest::Contains("N must be at least 1"), input_error);
  CHECK_THROWS_WITH_AS(probes::items_load_dataset("gsm8k:/nonexistent/test.jsonl"), doctest::Contains("cannot open"), input_error);
  const std::string dir = test::scratch_dir("probes_run_gsm8k");
  const std::string bad = write_file(dir, "g.jsonl", "{\"question\": \"q\", \"answer\": \"#### 1\"}\n{\"question\": \"q2\"}\n");
  CHECK_THROWS_WITH_AS(probes::items_load_dataset("gsm8k:" + bad), doctest::Contains("g.jsonl:2: field 'answer' is missing"), input_error);
}

TEST_CASE("probes_run: GSM8K few-shot prompts are rendered as lm-eval's gsm8k task renders them") {
  const std::string dir = test::scratch_dir("probes_run_fewshot");
  const std::string test_file = write_file(dir, "test.jsonl", "{\"question\": \"What is 2+2?\", \"answer\": \"2+2=4\\n#### 4\"}\n");
  const std::string shots = write_file(dir, "train.jsonl",
                                       "{\"question\": \"A?\", \"answer\": \"a\\n#### 1\"}\n\n"
                                       "{\"question\": \"B?\", \"answer\": \"b\\n#### 2\"}\n"
                                       "{\"question\": \"C?\", \"answer\": \"c\\n#### 3\"}\n");
  probes::dataset_options d;
  d.num_fewshot = 2;
  d.fewshot_file = shots;
  d.strict = true;
  const std::vector<item> items = probes::items_load_dataset("gsm8k:" + test_file, d);
  REQUIRE(items.size() == 1);
  // Two exemplars as lm-eval draws them: CPython's random.Random(1234).sample(range(3), 2) is [1, 0]
  // (the blank line skipped: B, then A), target after a space, joined by a blank line, then a blank
  // line and the question.
  CHECK(items[0].prompt ==
        "Question: B?\nAnswer: b\n#### 2\n\nQuestion: A?\nAnswer: a\n#### 1\n\nQuestion: What is 2+2?\nAnswer:");
  CHECK(items[0].grader == "gsm8k");
  CHECK(probes::gsm8k_stop_strings() == std::vector<std::string>{"Question:", "</s>", "<|im_end|>"});
  d.num_fewshot = 4;
  CHECK_THROWS_WITH_AS(probes::items_load_dataset("gsm8k:" + test_file, d), doctest::Contains("the few-shot pool holds 3 exemplars, fewer than the 4"),
                       input_error);
  d.fewshot_file.clear();
  CHECK_THROWS_WITH_AS(probes::items_load_dataset("gsm8k:" + test_file, d), doctest::Contains("needs --fewshot FILE"), input_error);
  d.num_fewshot = 0;
  d.fewshot_file = shots;
  CHECK_THROWS_WITH_AS(probes::items_load_dataset("gsm8k:" + test_file, d), doctest::Contains("--fewshot FILE with --num-fewshot 0"),
                       input_error);
}

TEST_CASE("probes_run: the built-in set holds 32 distinct prompts, the arithmetic ones graded") {
  const std::vector<item> items = probes::items_builtin();
  REQUIRE(items.size() == 32);
  std::set<std::string> prompts, ids;
  int graded = 0;
  for (const item& it : items) {
    prompts.insert(it.prompt);
    ids.insert(it.id);
    if (!it.grader.empty()) {
      ++graded;
      CHECK(it.grader == "numeric");
      // The reference is the number the prompt asks for: the grader agrees with a bare answer.
      CHECK(detaudit::reports::grade(it.grader, it.reference, it.reference) == std::optional<bool>(true));
    }
  }
  CHECK(prompts.size() == 32);
  CHECK(ids.size() == 32);
  CHECK(items.front().id == "builtin-1");
  CHECK(graded == 8);
  CHECK(detaudit::reports::grade("numeric", "17 + 25 = 42.", items[0].reference) == std::optional<bool>(true));
}

TEST_CASE("probes_run: lint finds each prompt pitfall and nothing in a clean prompt") {
  const std::vector<item> items = {
      {"clean", "What is the capital of France? Answer in one word.", "", "", ""},
      {"bom", "\xEF\xBB\xBF" "What is 2+2?", "", "", ""},
      {"zw", "What is 2\xE2\x80\x8B+2?", "", "", ""},
      {"crlf", "Line one\r\nLine two", "", "", ""},
      {"ts", "Today is 2025-01-01T12:00:00. What day is it?", "", "", ""},
      {"uuid", "Request 123e4567-e89b-12d3-a456-426614174000: summarise.", "", "", ""},
  };
  probes::gen_request base;
  const std::vector<probes::lint_finding> fs = probes::lint(items, base);
  CHECK(codes_for(fs, "clean").empty());
  CHECK(codes_for(fs, "bom") == std::vector<std::string>{"bom"});
  CHECK(codes_for(fs, "zw") == std::vector<std::string>{"zero-width"});
  CHECK(codes_for(fs, "crlf") == std::vector<std::string>{"crlf"});
  CHECK(codes_for(fs, "ts") == std::vector<std::string>{"timestamp"});
  CHECK(codes_for(fs, "uuid") == std::vector<std::string>{"uuid"});
  CHECK(codes_for(fs, "").empty());  // temperature 0 alone is fine
  for (const probes::lint_finding& f : fs) {
    CHECK(f.severity == "warning");
    CHECK_FALSE(f.message.empty());
  }
  bool names_value = false;
  for (const probes::lint_finding& f : fs) names_value = names_value || f.message.find("2025-01-01T12:00:00") != std::string::npos;
  CHECK(names_value);
}

TEST_CASE("probes_run: lint finds request settings that make runs differ") {
  const std::vector<item> none;
  probes::gen_request r;
  r.temperature = 0;
  r.top_p = 0.9;
  r.top_k = 40;
  r.extra = {{"n", 2}, {"repeat_penalty", 1.1}, {"presence_penalty", 0.0}, {"frequency_penalty", 0.5}};
  std::vector<std::string> codes = codes_for(probes::lint(none, r), "");
  CHECK(codes == std::vector<std::string>{"temp0-top-p", "temp0-top-k", "n-gt-1", "penalty", "penalty"});
  r.temperature = 0.7;  // the filters are meant at temperature > 0
  r.extra = json::object();
  CHECK(codes_for(probes::lint(none, r), "").empty());
  r.temperature = 0;
  r.top_p = 1.0;
  r.top_k = 1;
  CHECK(codes_for(probes::lint(none, r), "").empty());
  r.extra = {{"top_p", 0.5}};  // extra fields win over the typed ones
  CHECK(codes_for(probes::lint(none, r), "") == std::vector<std::string>{"temp0-top-p"});
}

// The answer key's hash cannot be fooled by a reference that spells a separator: item q1 of set A
// holds "4\nq2\0exact\04" (and q2 is ungraded), set B holds "4" for both. Hashed as text
// "ID\0GRADER\0REF\n" per item the two keys were the same bytes; hashed as JSON they differ.
TEST_CASE("probes_run: the grading identity tells apart answer keys that spell each other's separators") {
  using namespace std::string_literals;
  std::vector<item> a = {{"q1", "p1", "4\nq2\0exact\0"s "4", "exact", ""}, {"q2", "p2", "", "", ""}};
  std::vector<item> b = {{"q1", "p1", "4", "exact", ""}, {"q2", "p2", "4", "exact", ""}};
  const probes::run_options opt;
  const json ia = probes::run_identity({}, {}, a, opt), ib = probes::run_identity({}, {}, b, opt);
  REQUIRE(ia.contains("grading"));
  CHECK(ia["grading"]["graders"] == ib["grading"]["graders"]);
  CHECK(ia["grading"]["answers_sha256"] != ib["grading"]["answers_sha256"]);
}
