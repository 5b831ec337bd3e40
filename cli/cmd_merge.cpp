#include <iostream>
#include <memory>

#include "commands.h"
#include "probes/runner.h"

namespace detaudit::cli {
namespace {

struct merge_cmd_options {
  std::string out;
  std::vector<std::string> dirs;
  bool partial = false;
};

void run_merge(const merge_cmd_options& o) {
  const size_t n = probes::runs_merge(o.dirs, o.out, o.partial);
  std::cerr << "merged " << n << " records from " << o.dirs.size() << " run folders into " << o.out << "/records.jsonl\n";
}

}  // namespace

void setup_merge(CLI::App& app) {
  auto opt = std::make_shared<merge_cmd_options>();
  CLI::App* sub = app.add_subcommand(
      "merge",
      "Join the shards of one audit (run with --shard I/N, the same settings, on several machines) into one run\n"
      "folder: each (item, target, condition, repetition) once, the first record without an error winning. Folders\n"
      "that are not shards of one run (another model, prompt set, setting or shard count, a shard given twice) are\n"
      "refused, and so is an incomplete set unless --partial. The manifest is the first folder's run.json with\n"
      "\"merged_from\", every run id met and \"shards\" {count, merged, missing}. Report it with 'detaudit report'.");
  sub->add_option("--out", opt->out, "The merged run folder (must not hold records yet)")->required()->type_name("DIR");
  sub->add_option("dirs", opt->dirs, "Run folders to join, in order of precedence")->required()->type_name("RUN_DIR");
  sub->add_flag("--partial", opt->partial,
                "Merge although shards are missing; run.json and every report of the result name the missing shards");
  sub->footer(
      "Exit codes: 0 merged, 2 bad input (not shards of one run, shards missing without --partial).\n"
      "Example:\n"
      "  detaudit run --config audit.json --shard 1/2 --out runs/s1   # on machine 1\n"
      "  detaudit run --config audit.json --shard 2/2 --out runs/s2   # on machine 2\n"
      "  detaudit merge --out runs/all runs/s1 runs/s2 && detaudit report runs/all");
  sub->callback([opt] { run_merge(*opt); });
}

}  // namespace detaudit::cli
