#include "report_out.h"

#include <iostream>

#include "app.h"
#include "reports/output.h"

namespace detaudit::cli {

void report_finish(const reports::report& rep, const std::string& format, const std::string& output,
                   const std::string& fail_on, const std::string& cmd) {
  const reports::fail_policy policy = reports::fail_policy_parse(fail_on);
  reports::report_output(rep, format, output);
  const std::vector<std::string> reasons = reports::fail_reasons(rep, policy);
  for (const std::string& r : reasons) std::cerr << "detaudit " << cmd << ": --fail-on " << fail_on << ": " << r << "\n";
  if (!reasons.empty()) throw exit_with(EXIT_DIVERGED);
}

}  // namespace detaudit::cli
