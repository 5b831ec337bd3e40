// runs_merge: the shard folders of one run joined into one run folder.
//
// Shards of one run: each folder's run.json has an identity (reports/audit/identity.h) equal to the
// others', and a shard {index, count} with the same count and its own index. Per key (item, target
// label, condition, repetition) one record is kept: the first one without an error, taking the
// folders in the order given and each folder's records in file order; a key with only error
// records keeps its last one. The manifest is the first folder's without the shard fields, with
// "merged_from" (the folders), "run_ids" (every run id met, in order) and "shards" ({count, merged,
// missing}).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>

#include "probes/runner.h"
#include "reports/audit/file_write.h"
#include "reports/audit/identity.h"
#include "util/error.h"

namespace detaudit::probes {
namespace {

namespace fs = std::filesystem;

struct shard_of {
  std::string dir;
  json manifest;
  int index = 0, count = 0;
};

shard_of shard_read(const std::string& dir) {
  shard_of s;
  s.dir = dir;
  s.manifest = reports::run_manifest_read(dir);
  if (s.manifest.empty()) throw input_error("merge: " + dir + " has no run.json: not a run folder of detaudit run");
  const json* sh = s.manifest.contains("shard") ? &s.manifest["shard"] : nullptr;
  if (!sh || !sh->is_object() || !(*sh)["index"].is_number_integer() || !(*sh)["count"].is_number_integer())
    throw input_error("merge: " + dir + " is not a shard (its run was not made with --shard I/N); merge joins the shards of one "
                      "run; to set two runs side by side use 'detaudit compare'");
  const int64_t index = (*sh)["index"].get<int64_t>(), count = (*sh)["count"].get<int64_t>();
  // What `detaudit run --shard I/N` writes: 1 <= I <= N, N the identity's shard count, and no more
  // shards than items (a shard holds at least one). Anything else (an edited or corrupt run.json)
  // would make the merged run claim shards it lacks, or none missing.
  const json id = reports::identity_of(s.manifest);
  const json id_count = id.contains("shard") && id["shard"].is_object() ? id["shard"].value("count", json()) : json();
  const json items = id.contains("items") && id["items"].is_object() ? id["items"].value("count", json()) : json();
  const bool fits = count >= 1 && index >= 1 && index <= count && (id_count.is_null() || id_count == json(count)) &&
                    (!items.is_number_integer() || count <= items.get<int64_t>()) && count <= INT32_MAX;
  if (!fits)
    throw input_error("merge: " + dir + "/run.json: shard " + std::to_string(index) + "/" + std::to_string(count) +
                      " is not a shard detaudit run writes (1 <= I <= N, N its identity's shard count " +
                      (id_count.is_null() ? std::string("(none)") : id_count.dump()) + " and at most its items)");
  s.index = static_cast<int>(index);
  s.count = static_cast<int>(count);
  return s;
}

// The shards must be of one run: the same identity, the same count, each index once. Returns the
// missing indices.
std::vector<int> shards_check(const std::vector<shard_of>& shards, bool partial) {
  const shard_of& first = shards.front();
  const json id0 = reports::identity_of(first.manifest);
  if (id0.empty()) throw input_error("merge: " + first.dir + "/run.json records no identity (an older detaudit): run the shards again");
  std::map<int, std::string> seen;
  for (const shard_of& s : shards) {
    if (s.count != first.count)
      throw input_error("merge: " + s.dir + " is shard " + std::to_string(s.index) + "/" + std::to_string(s.count) + " but " +
                        first.dir + " is shard " + std::to_string(first.index) + "/" + std::to_string(first.count));
    std::string list;
    for (const reports::identity_difference& d : reports::identity_diff(id0, reports::identity_of(s.manifest)))
      list += (list.empty() ? "" : "; ") + reports::identity_difference_text(d);
    if (!list.empty())
      throw input_error("merge: " + s.dir + " is not a shard of the same run as " + first.dir + " (" + first.dir + " vs " + s.dir +
                        ": " + list + ")");
    auto [it, fresh] = seen.emplace(s.index, s.dir);
    if (!fresh) throw input_error("merge: shard " + std::to_string(s.index) + "/" + std::to_string(s.count) + " is given twice (" + it->second + ", " + s.dir + ")");
  }
  std::vector<int> missing;
  for (int i = 1; i <= first.count; ++i)
    if (!seen.count(i)) missing.push_back(i);
  if (!missing.empty() && !partial) {
    std::string list;
    for (int m : missing) list += (list.empty() ? "" : ", ") + std::to_string(m);
    throw input_error("merge: shard(s) " + list + " of " + std::to_string(first.count) +
                      " are missing; give every shard, or --partial to merge these and say which are missing");
  }
  return missing;
}

void manifest_merged_write(const std::string& out_dir, const std::vector<shard_of>& shards, const std::vector<int>& missing,
                           const std::vector<std::string>& run_ids) {
  json m = shards.front().manifest;
  m.erase("shard");
  m.erase("items_in_shard");
  m["records"] = "records.jsonl";
  std::vector<std::string> dirs;
  std::vector<int> merged;
  for (const shard_of& s : shards) dirs.push_back(s.dir), merged.push_back(s.index);
  std::sort(merged.begin(), merged.end());
  m["merged_from"] = dirs;
  m["run_ids"] = run_ids;
  m["shards"] = {{"count", shards.front().count}, {"merged", merged}, {"missing", missing}};
  reports::text_file_write((fs::path(out_dir) / "run.json").string(), m.dump(2, ' ', false, json::error_handler_t::replace) + "\n",
                           "merge");
}

}  // namespace

size_t runs_merge(const std::vector<std::string>& dirs, const std::string& out_dir, bool partial) {
  if (dirs.empty()) throw input_error("merge: no run folders given");
  const fs::path out_records = fs::path(out_dir) / "records.jsonl";
  std::error_code ec;
  for (const std::string& d : dirs) {
    if (!fs::is_directory(d, ec)) throw input_error("merge: '" + d + "' is not a run folder");
    if (fs::equivalent(d, out_dir, ec)) throw input_error("merge: the output folder '" + out_dir + "' is also an input");
  }
  auto out_check = [&out_dir, &out_records, &ec] {
    if (fs::exists(out_records, ec)) throw input_error("merge: " + out_records.string() + " already exists; choose another --out");
    if (const std::string other = run_folder_other_records(out_dir, ""); !other.empty())
      throw input_error("merge: " + out_dir + " holds the records of a run (" + other + "); choose another --out");
  };
  out_check();
  std::vector<shard_of> shards;
  for (const std::string& d : dirs) shards.push_back(shard_read(d));
  const std::vector<int> missing = shards_check(shards, partial);

  std::vector<reports::record> kept;
  std::map<std::string, size_t> by_key;
  std::vector<std::string> run_ids;
  for (const shard_of& s : shards) {
    if (run_folder_busy(s.dir)) throw input_error("merge: " + s.dir + " is in use by a detaudit run still writing to it");
    for (reports::record& r : reports::records_read(s.dir)) {
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
  run_folder_make(out_dir);
  const run_folder_lock lock(out_dir);
  out_check();  // again under the lock: another merge into the same folder may have written meanwhile
  {
    reports::record_writer w(out_records.string());
    for (const reports::record& r : kept) w.write(r);
  }
  manifest_merged_write(out_dir, shards, missing, run_ids);
  return kept.size();
}

}  // namespace detaudit::probes
