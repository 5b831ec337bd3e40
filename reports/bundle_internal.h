// Pieces shared by bundle.cpp (choosing the pair, writing the files), bundle_readme.cpp and
// bundle_scripts.cpp; not part of the reports interface.
#pragma once

#include <string>
#include <vector>

#include "reports/bundle.h"
#include "reports/compare.h"

namespace detaudit::reports {

// One side of the bundled pair.
struct bundle_side {
  const record* rec = nullptr;  // points into bundle_ctx::records
  std::string name;             // as the README names it: "alone", "concurrent-8", "B:alone", "seed-fixed#2"
  std::string report_name;      // as a one-target report names it: "alone", "seed-fixed#2"
  int n_concurrent = 0;         // N when the condition is concurrent-N, else 0
  bool warm = false;            // cache-warm: the body is sent once before, to fill the cache
  std::string url;              // the server's base URL ("" for engine targets)
  std::string path;             // the endpoint the body was posted to ("" for engine targets)
};

struct bundle_ctx {
  std::vector<record> records;  // every record of the item, deduplicated by key
  std::string item_id;
  json manifest;                // run.json (may be empty)
  json target_entry;            // run.json's entry for side A's target (may be empty)
  bundle_side a, b;
  pair_item row;                // the pair's divergence, grades and flip
  // A side of a condition that was not exercised holds no response at all (no tokens, no text):
  // the pair is then not a comparison, neither "identical" nor "differs".
  bool no_response = false;
  int64_t compared = 0, differed = 0;  // over the item's records for the two conditions
  std::vector<json> fillers;    // concurrency: the N-1 bodies sent beside the item
  std::string filler_note;      // how the fillers were chosen
  bool engine = false;          // an `engine:` target: the reproducer runs `detaudit run`
  std::string engine_spec;
  std::vector<std::string> engine_args;  // `detaudit run` options after --target and --prompts
  json item_lines = json::array();       // engine: item.jsonl's lines (the item, then its fillers)
};

std::string bundle_readme(const bundle_ctx& c);
json bundle_manifest(const bundle_ctx& c);
std::string bundle_repro_py();
std::string bundle_repro_sh(const bundle_ctx& c);

}  // namespace detaudit::reports
