#include <iostream>
#include <memory>

#include "commands.h"
#include "probes/runner.h"

namespace detaudit::cli {
namespace {

struct merge_cmd_options {
  std::string out;
  std::vector<std::string> dirs;
};

void run_merge(const merge_cmd_options& o) {
  const size_t n = probes::runs_merge(o.dirs, o.out);
  std::cerr << "merged " << n << " records from " << o.dirs.size() << " run folders into " << o.out << "/records.jsonl\n";
}

}  // namespace

void setup_merge(CLI::App& app) {
  auto opt = std::make_shared<merge_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "merge",
      "Join run folders (the shards of one audit, run with --shard I/N on several machines) into one run folder:\n"
      "each (item, target, condition, repetition) once, the first record without an error winning. The manifest is\n"
      "the first folder's run.json with \"merged_from\" and every run id met. Report the result with 'detaudit report'.");
  sub->add_option("--out", opt->out, "The merged run folder (must not hold records yet)")->required()->type_name("DIR");
  sub->add_option("dirs", opt->dirs, "Run folders to join, in order of precedence")->required()->type_name("RUN_DIR");
  sub->footer(
      "Example:\n"
      "  detaudit run --config audit.json --shard 1/2 --out runs/s1   # on machine 1\n"
      "  detaudit run --config audit.json --shard 2/2 --out runs/s2   # on machine 2\n"
      "  detaudit merge --out runs/all runs/s1 runs/s2 && detaudit report runs/all");
  sub->callback([opt] { run_merge(*opt); });
}

}  // namespace detaudit::cli
