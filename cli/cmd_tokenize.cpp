#include "commands.h"

namespace detaudit::cli {

void setup_tokenize(CLI::App& app) { app.add_subcommand("tokenize", "(under construction)"); }

}  // namespace detaudit::cli
