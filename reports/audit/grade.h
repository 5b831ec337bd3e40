// Graders: GSM8K as lm-evaluation-harness scores it, exact, numeric and regex; whether a response is
// right, and the answer a grader reads from it, so that two wrong responses can be told apart
// (wrong -> other wrong).
#pragma once

#include <optional>
#include <string>

#include "reports/audit/record.h"

namespace detaudit::reports {

// Graders. grade() returns nullopt when the record has no reference or no grader.
// "gsm8k" (strict-match), "gsm8k-flex" (flexible-extract), "exact", "numeric", "regex:PATTERN".
std::optional<bool> grade(const std::string& grader, const std::string& response, const std::string& reference);
std::optional<bool> grade(const record& r);
// What a record's grader reads: its text minus a leading <think>...</think> block ("" when the
// block never closes). A reasoning model's thinking returned apart (record.reasoning) is never read.
std::string final_answer(const std::string& text);
// lm-evaluation-harness's GSM8K answer extraction and normalisation, exposed for tests.
std::optional<std::string> gsm8k_extract_strict(const std::string& response);
std::optional<std::string> gsm8k_extract_flexible(const std::string& response);
std::string gsm8k_normalize(const std::string& s);

// The normalised answer `grader` reads from `response`: gsm8k / gsm8k-flex: the extracted answer
// after lm-evaluation-harness's normalisation ("[invalid]" when nothing matched); numeric: the last
// number as a canonical decimal ("" when none); exact: the trimmed response; regex:PAT: the
// trimmed response. Throws input_error on an unknown grader.
std::string grade_answer(const std::string& grader, const std::string& response);

// A decimal number as a canonical string: ',' and '$' removed, no leading zeros, no trailing
// fractional zeros, "-0" as "0" ("1,234.50" -> "1234.5"). "" when s is not a decimal number.
std::string decimal_canonical(const std::string& s);

}  // namespace detaudit::reports
