// report_output: a rendered report to a file or stdout.
#include "reports/output.h"

#include <iostream>

#include "reports/audit/file_write.h"

namespace detaudit::reports {

void report_output(const report& r, const std::string& format, const std::string& path, const char* flag) {
  const std::string text = report_render(r, format);
  if (path.empty() || path == "-") {
    std::cout << text << std::flush;
    return;
  }
  text_file_write(path, text, flag);
}

}  // namespace detaudit::reports
