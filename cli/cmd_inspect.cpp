#include "commands.h"

namespace detaudit::cli {

void setup_inspect(CLI::App& app) { app.add_subcommand("inspect", "(under construction)"); }

}  // namespace detaudit::cli
