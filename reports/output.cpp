// report_output: a rendered report to a file or stdout.
#include "reports/output.h"

#include <fstream>
#include <iostream>

#include "util/error.h"

namespace detaudit::reports {

void report_output(const report& r, const std::string& format, const std::string& path) {
  const std::string text = report_render(r, format);
  if (path.empty() || path == "-") {
    std::cout << text << std::flush;
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw input_error("-o " + path + ": cannot open the file for writing");
  out << text;
  out.close();
  if (!out) throw input_error("-o " + path + ": writing the report failed");
}

}  // namespace detaudit::reports
