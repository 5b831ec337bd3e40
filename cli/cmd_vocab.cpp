#include "commands.h"

namespace detaudit::cli {

void setup_vocab(CLI::App& app) { app.add_subcommand("vocab", "(under construction)"); }

}  // namespace detaudit::cli
