// Writing a rendered report where the user asked for it.
#pragma once

#include <string>

#include "reports/compare.h"

namespace detaudit::reports {

// Renders `r` in `format` (see report_render) and writes it to the file `path`, or to stdout when
// `path` is "" or "-". Throws input_error on an unknown format or a file that cannot be written,
// naming `flag` (the option that gave the path).
void report_output(const report& r, const std::string& format, const std::string& path, const char* flag = "-o");

}  // namespace detaudit::reports
