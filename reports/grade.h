// Graders beyond the ones reports/compare.h declares: the answer a grader reads from a response,
// so that two wrong responses can be told apart (wrong -> other wrong).
#pragma once

#include <string>

namespace detaudit::reports {

// The normalised answer `grader` reads from `response`: gsm8k / gsm8k-flex: the extracted answer
// after lm-evaluation-harness's normalisation ("[invalid]" when nothing matched); numeric: the last
// number as a canonical decimal ("" when none); exact: the trimmed response; regex:PAT: the
// trimmed response. Throws input_error on an unknown grader.
std::string grade_answer(const std::string& grader, const std::string& response);

// A decimal number as a canonical string: ',' and '$' removed, no leading zeros, no trailing
// fractional zeros, "-0" as "0" ("1,234.50" -> "1234.5"). "" when s is not a decimal number.
std::string decimal_canonical(const std::string& s);

}  // namespace detaudit::reports
