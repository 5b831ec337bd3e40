// What run, report and compare do with a finished report: write it where asked, then apply
// --fail-on (one stderr line per reason, exit 1 beyond it).
#pragma once

#include <string>

#include "reports/compare.h"

namespace detaudit::cli {

// Renders `rep` in `format` to `output` ("" or "-": stdout), then throws exit_with(EXIT_DIVERGED)
// when `fail_on` is exceeded, after printing "detaudit CMD: --fail-on SPEC: REASON" lines.
void report_finish(const reports::report& rep, const std::string& format, const std::string& output,
                   const std::string& fail_on, const std::string& cmd);

}  // namespace detaudit::cli
