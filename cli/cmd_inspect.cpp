#include <iostream>
#include <memory>

#include "commands.h"
#include "model/inspect.h"

namespace detaudit::cli {

struct inspect_cmd_options {
  std::string path;
  bool json = false;
  bool tensors = false;
  bool sha256 = false;
  bool metadata = false;
};

void setup_inspect(CLI::App& app) {
  auto opt = std::make_shared<inspect_cmd_options>();
  CLI::App* sub = app.add_subcommand("inspect", "Describe a GGUF file: architecture, hyperparameters, vocabulary, "
                                                "chat template, tensors, and whether the engine can run it");
  sub->add_option("file", opt->path, "GGUF file")->required()->check(CLI::ExistingFile);
  sub->add_flag("--json", opt->json, "Print one JSON object instead of text");
  sub->add_flag("--tensors", opt->tensors, "Include the tensor table (name, type, shape, bytes)");
  sub->add_flag("--sha256", opt->sha256, "Hash the whole file (reads every byte)");
  sub->add_flag("--metadata", opt->metadata, "Include every metadata key and value (long arrays summarised)");
  sub->footer("Examples:\n  detaudit inspect model.gguf\n  detaudit inspect model.gguf --json --tensors | jq .tensors");
  sub->callback([opt] {
    model::inspect_options io{opt->tensors, opt->sha256, opt->metadata};
    nlohmann::json info = model::inspect_file(opt->path, io);
    if (opt->json) std::cout << model::safe_dump(info, 2) << "\n";
    else std::cout << model::inspect_to_text(info);
  });
}

}  // namespace detaudit::cli
