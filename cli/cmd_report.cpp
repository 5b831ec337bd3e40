#include "commands.h"

namespace detaudit::cli {

void setup_report(CLI::App& app) { (void)app; }

}  // namespace detaudit::cli
