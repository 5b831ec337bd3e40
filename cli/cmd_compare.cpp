#include "commands.h"

namespace detaudit::cli {

void setup_compare(CLI::App& app) { (void)app; }

}  // namespace detaudit::cli
