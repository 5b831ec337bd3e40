// One setup_<name>(CLI::App&) per subcommand, each in cli/cmd_<name>.cpp. A setup function adds
// its subcommand, binds an options struct held by shared_ptr, and sets a callback that only calls
// a library. Callbacks report bad input by throwing detaudit::input_error.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "runtime/context.h"

namespace detaudit::cli {

// --backend and --device of the commands that run the engine (cmd_devices.cpp).
struct backend_options {
  std::string backend = "cpu";
  int device = 0;
};
void add_backend_options(CLI::App* sub, backend_options& o);
// Sets cp.backend / cp.device; throws input_error for an unknown backend.
void apply_backend_options(const backend_options& o, runtime::context_params& cp);

void setup_inspect(CLI::App& app);
void setup_tokenize(CLI::App& app);
void setup_vocab(CLI::App& app);
void setup_synth(CLI::App& app);
void setup_generate(CLI::App& app);
void setup_score(CLI::App& app);
void setup_serve(CLI::App& app);
void setup_run(CLI::App& app);
void setup_merge(CLI::App& app);
void setup_compare(CLI::App& app);
void setup_report(CLI::App& app);
void setup_bundle(CLI::App& app);
void setup_bench(CLI::App& app);
void setup_devices(CLI::App& app);

}  // namespace detaudit::cli
