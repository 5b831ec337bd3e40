// Graders: GSM8K strict-match and flexible-extract as lm-evaluation-harness scores them, checked on
// the GSM8K test answers in the fixtures and on hand-written responses; exact, numeric and regex.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "reports/audit/grade.h"
#include "reports/compare.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit::reports;

namespace {

std::vector<std::string> gsm8k_answers() {
  std::ifstream in(detaudit::test::fixture("data/test.jsonl"));
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).at("answer").get<std::string>());
  return out;
}

// The answer with its final number (after "#### ") replaced by that number plus one.
std::string perturbed(const std::string& answer) {
  const size_t mark = answer.rfind("#### ");
  std::string n;
  for (char c : answer.substr(mark + 5))
    if (c != ',') n += c;
  return answer.substr(0, mark + 5) + std::to_string(std::stoll(n) + 1);
}

}  // namespace

TEST_CASE("grade: every GSM8K reference answer is right against itself and wrong when its number changes") {
  const std::vector<std::string> answers = gsm8k_answers();
  REQUIRE(answers.size() == 1319);
  size_t strict_right = 0, flex_right = 0, perturbed_wrong = 0;
  for (const std::string& a : answers) {
    CAPTURE(a);
    const std::string response = "The answer is as follows.\n" + a;
    strict_right += grade("gsm8k", response, a) == std::optional<bool>(true);
    flex_right += grade("gsm8k-flex", response, a) == std::optional<bool>(true);
    const std::string wrong = "The answer is as follows.\n" + perturbed(a);
    perturbed_wrong += grade("gsm8k", wrong, a) == std::optional<bool>(false);
  }
  CHECK(strict_right == answers.size());
  CHECK(flex_right == answers.size());
  CHECK(perturbed_wrong == answers.size());
}

TEST_CASE("grade: GSM8K strict-match takes the first #### answer and fails without one") {
  CHECK(gsm8k_extract_strict("so #### 5 and later #### 7") == std::optional<std::string>("5"));
  CHECK(gsm8k_extract_strict("#### -3.5,") == std::optional<std::string>("-3.5,"));
  CHECK_FALSE(gsm8k_extract_strict("The answer is 42").has_value());
  CHECK_FALSE(gsm8k_extract_strict("####42").has_value());  // the space after #### is part of the pattern
  CHECK(grade_answer("gsm8k", "The answer is 42") == "[invalid]");
  CHECK(grade("gsm8k", "The answer is 42", "#### 42") == std::optional<bool>(false));
  CHECK(grade("gsm8k", "#### 1,000.", "It costs a lot.\n#### 1000") == std::optional<bool>(true));
  CHECK(grade("gsm8k", "#### 5", "#### 7") == std::optional<bool>(false));
}

TEST_CASE("grade: GSM8K flexible-extract takes the last number and its non-empty group") {
  CHECK(gsm8k_extract_flexible("I had 3 apples and 12 pears, total 15") == std::optional<std::string>("15"));
  CHECK(gsm8k_extract_flexible("12 pears cost $1,234.") == std::optional<std::string>("$1,234."));
  // "-5" is too short for the first alternative: the second group holds it.
  CHECK(gsm8k_extract_flexible("the change is -5 dollars") == std::optional<std::string>("-5"));
  CHECK(gsm8k_extract_flexible("7 then 8") == std::optional<std::string>("8"));
  CHECK_FALSE(gsm8k_extract_flexible("no digits at all").has_value());
  CHECK(grade_answer("gsm8k-flex", "no digits at all") == "[invalid]");
  CHECK(grade("gsm8k-flex", "The answer is 42", "#### 42") == std::optional<bool>(true));
  CHECK(grade("gsm8k-flex", "42 at first, then 43.", "#### 42") == std::optional<bool>(false));
  // As in lm-eval: only a final '.' is removed, so "18.00" is not "18".
  CHECK(grade("gsm8k-flex", "It costs $18.00", "#### 18") == std::optional<bool>(false));
  CHECK(grade("gsm8k-flex", "It costs $18.", "#### 18") == std::optional<bool>(true));
}

TEST_CASE("grade: GSM8K normalisation removes commas, dollars, everything through ####, a final dot, and folds case") {
  CHECK(gsm8k_normalize("$1,234.") == "1234");
  CHECK(gsm8k_normalize("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72") == "72");
  CHECK(gsm8k_normalize("#### 1\n#### 2") == "2");  // greedy: through the last marker
  CHECK(gsm8k_normalize("5..") == "5.");            // one final dot only
  CHECK(gsm8k_normalize("72.\n") == "72\n");         // Python's '$' also matches before a final newline
  CHECK(gsm8k_normalize("ABC") == "abc");
  CHECK(gsm8k_normalize("[invalid]") == "[invalid]");
}

TEST_CASE("grade: numeric compares the last number as a decimal value") {
  CHECK(decimal_canonical("1,234.50") == "1234.5");
  CHECK(decimal_canonical("$007") == "7");
  CHECK(decimal_canonical("-0.0") == "0");
  CHECK(decimal_canonical("-12.") == "-12");
  CHECK(decimal_canonical("1.2.3") == "");
  CHECK(decimal_canonical("abc") == "");
  CHECK(grade("numeric", "so it is 1,234.50 dollars", "#### 1234.5") == std::optional<bool>(true));
  CHECK(grade("numeric", "3 then 4", "3") == std::optional<bool>(false));
  CHECK(grade("numeric", "0.50", "0.5") == std::optional<bool>(true));
  CHECK(grade("numeric", "no number", "5") == std::optional<bool>(false));
  CHECK_THROWS_AS(grade("numeric", "5", "five"), detaudit::input_error);
}

TEST_CASE("grade: exact trims, regex searches, unknown graders are input errors") {
  CHECK(grade("exact", "  Paris \n", "Paris") == std::optional<bool>(true));
  CHECK(grade("exact", "paris", "Paris") == std::optional<bool>(false));
  CHECK(grade("regex:\\bParis\\b", "It is Paris.", "") == std::optional<bool>(true));
  CHECK(grade("regex:^Paris$", "It is Paris.", "") == std::optional<bool>(false));
  CHECK_THROWS_AS(grade("regex:(unclosed", "x", ""), detaudit::input_error);
  CHECK_THROWS_AS(grade("gsm8k-strictest", "x", "#### 1"), detaudit::input_error);
  CHECK_FALSE(grade("", "x", "#### 1").has_value());
  CHECK_FALSE(grade("gsm8k", "#### 1", "").has_value());
  record r;
  r.item_id = "q1";
  r.text = "#### 1";
  CHECK_FALSE(grade(r).has_value());
  r.reference = "#### 1";
  r.grader = "gsm8k";
  CHECK(grade(r) == std::optional<bool>(true));
}
