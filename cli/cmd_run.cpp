#include "commands.h"

namespace detaudit::cli {

void setup_run(CLI::App& app) { (void)app; }

}  // namespace detaudit::cli
