#include "commands.h"

namespace detaudit::cli {

void setup_merge(CLI::App& app) { (void)app; }

}  // namespace detaudit::cli
