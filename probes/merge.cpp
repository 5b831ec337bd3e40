// runs_merge: shard folders (or separate runs of the same items) joined into one run folder.
//
// Per key (item, target label, condition, repetition) one record is kept: the first one without an
// error, taking the folders in the order given and each folder's records in file order; a key
// with only error records keeps its last one. The manifest is the first folder's, without the
// shard fields, with "merged_from" (the folders) and "run_ids" (every run id met, in order).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "probes/runner.h"
#include "util/error.h"

namespace detaudit::probes {
namespace {

namespace fs = std::filesystem;

void manifest_merged_write(const std::string& out_dir, json m, const std::vector<std::string>& dirs,
                           const std::vector<std::string>& run_ids) {
  if (!m.is_object()) m = json::object();
  m.erase("shard");
  m.erase("items_in_shard");
  m["records"] = "records.jsonl";
  m["merged_from"] = dirs;
  m["run_ids"] = run_ids;
  std::ofstream out(fs::path(out_dir) / "run.json", std::ios::binary | std::ios::trunc);
  out << m.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  if (!out) throw input_error("cannot write " + (fs::path(out_dir) / "run.json").string());
}

}  // namespace

size_t runs_merge(const std::vector<std::string>& dirs, const std::string& out_dir) {
  if (dirs.empty()) throw input_error("merge: no run folders given");
  const fs::path out_records = fs::path(out_dir) / "records.jsonl";
  std::error_code ec;
  for (const std::string& d : dirs) {
    if (!fs::is_directory(d, ec)) throw input_error("merge: '" + d + "' is not a run folder");
    if (fs::equivalent(d, out_dir, ec)) throw input_error("merge: the output folder '" + out_dir + "' is also an input");
  }
  if (fs::exists(out_records, ec)) throw input_error("merge: " + out_records.string() + " already exists; choose another --out");

  std::vector<reports::record> kept;
  std::map<std::string, size_t> by_key;
  std::vector<std::string> run_ids;
  json first_manifest;
  for (const std::string& d : dirs) {
    const json m = reports::run_manifest_read(d);
    if (first_manifest.is_null()) first_manifest = m;
    for (reports::record& r : reports::records_read(d)) {
      if (std::find(run_ids.begin(), run_ids.end(), r.run_id) == run_ids.end()) run_ids.push_back(r.run_id);
      const std::string key = reports::record_key(r);
      auto it = by_key.find(key);
      if (it == by_key.end()) {
        by_key.emplace(key, kept.size());
        kept.push_back(std::move(r));
      } else if (!kept[it->second].error.empty()) {
        kept[it->second] = std::move(r);
      }
    }
  }
  fs::create_directories(out_dir);
  {
    reports::record_writer w(out_records.string());
    for (const reports::record& r : kept) w.write(r);
  }
  manifest_merged_write(out_dir, first_manifest, dirs, run_ids);
  return kept.size();
}

}  // namespace detaudit::probes
