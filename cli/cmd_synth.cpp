#include "commands.h"

namespace detaudit::cli {

void setup_synth(CLI::App& app) { app.add_subcommand("synth", "(under construction)"); }

}  // namespace detaudit::cli
