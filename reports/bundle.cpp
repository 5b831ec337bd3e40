// Bug-report bundles: choosing the pair of records, the fillers and the reproducer's settings, and
// writing the folder and its tarball. The README and the scripts are rendered in bundle_readme.cpp
// and bundle_scripts.cpp.
#include "reports/bundle.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <spawn.h>
#include <sys/wait.h>

#include "reports/audit/file_write.h"
#include "reports/audit/redact.h"
#include "reports/audit/utf8.h"
#include "reports/bundle_internal.h"
#include "reports/compare_internal.h"
#include "util/error.h"

extern char** environ;

namespace detaudit::reports {
namespace {

namespace fs = std::filesystem;

struct side_spec {
  std::string label, condition;
  int rep = 0;
};

std::string label_of(const record& r) { return json_str(r.target, "label", "A"); }

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// "LABEL:condition#REP", the label and the repetition optional.
side_spec side_parse(const std::string& spec, const std::string& default_label) {
  side_spec s{default_label, spec, 0};
  if (const size_t colon = s.condition.find(':'); colon != std::string::npos) {
    s.label = s.condition.substr(0, colon);
    s.condition = s.condition.substr(colon + 1);
  }
  if (const size_t hash = s.condition.find('#'); hash != std::string::npos) {
    const std::string rep = s.condition.substr(hash + 1);
    if (rep.empty() || rep.size() > 6 || !std::all_of(rep.begin(), rep.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }))
      throw input_error("--conditions: '" + spec + "': expected CONDITION#REP with REP a number, found '#" + rep + "'");
    s.rep = std::stoi(rep);
    s.condition.resize(hash);
  }
  if (s.condition.empty() || s.label.empty()) throw input_error("--conditions: '" + spec + "': expected [LABEL:]CONDITION[#REP]");
  return s;
}

std::string conditions_listed(const std::vector<record>& recs) {
  std::string out;
  std::set<std::string> seen;
  for (const record& r : recs) {
    const std::string n = label_of(r) + ":" + r.condition + (r.repetition ? "#" + std::to_string(r.repetition) : "");
    if (seen.insert(n).second) out += (out.empty() ? "" : ", ") + n;
  }
  return out;
}

const record& side_find(const bundle_ctx& c, const side_spec& s) {
  for (const record& r : c.records)
    if (label_of(r) == s.label && r.condition == s.condition && r.repetition == s.rep) return r;
  throw input_error("item '" + c.item_id + "' has no record for " + s.label + ":" + s.condition + "#" + std::to_string(s.rep) +
                    " (it has: " + conditions_listed(c.records) + ")");
}

// Target label, then the condition table's order, then repetition.
bool record_order_less(const record& x, const record& y) {
  auto rank = [](const record& r) {
    const condition_def* d = condition_find(r.condition);
    const auto& t = condition_table();
    return d ? static_cast<size_t>(d - t.data()) : t.size();
  };
  if (label_of(x) != label_of(y)) return label_of(x) < label_of(y);
  if (rank(x) != rank(y)) return rank(x) < rank(y);
  return x.repetition < y.repetition;
}

bool row_differs(const pair_item& row) { return !row.d.identical && !row.error && row.exercised; }

// Alone against the first condition (report order) where the item differs, then against another
// target's alone (cross), else against control; all on the first target.
std::pair<side_spec, side_spec> pair_default(const bundle_ctx& c) {
  const std::string label = label_of(c.records.front());
  const side_spec alone{label, "alone", 0};
  const record& a = side_find(c, alone);
  std::vector<const record*> others;
  for (const record& r : c.records)
    if (label_of(r) == label && r.repetition == 0 && r.condition != "alone" && r.condition != "control" &&
        r.condition != "seed-none")
      others.push_back(&r);
  std::stable_sort(others.begin(), others.end(),
                   [](const record* x, const record* y) { return probe_rank(x->probe) < probe_rank(y->probe); });
  for (const record* r : others)
    if (row_differs(row_make(a, *r, "alone", r->condition))) return {alone, {label, r->condition, 0}};
  for (const record& r : c.records)
    if (label_of(r) != label && r.condition == "alone" && r.repetition == 0 &&
        row_differs(row_make(a, r, "alone", "alone", {.judge = false, .one_vocab = false})))
      return {alone, {label_of(r), "alone", 0}};
  return {alone, {label, "control", 0}};
}

void side_fill(bundle_side& side, const record& r, bool labelled) {
  side.rec = &r;
  const bool rep_named = r.repetition > 0 || starts_with(r.condition, "seed-");
  side.report_name = r.condition + (rep_named ? "#" + std::to_string(r.repetition) : "");
  side.name = (labelled ? label_of(r) + ":" : "") + side.report_name;
  if (labelled) side.report_name = side.name;  // a report of two targets names conditions with labels
  if (starts_with(r.condition, "concurrent-")) {
    const std::string n = r.condition.substr(11);
    const json ev_n = r.evidence.value("n_requests", json());
    if (ev_n.is_number_integer()) side.n_concurrent = ev_n.get<int>();
    else if (!n.empty() && n.size() < 6 && std::all_of(n.begin(), n.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }))
      side.n_concurrent = std::stoi(n);
  }
  side.warm = r.condition == "cache-warm";
  side.url = json_str(r.target, "url");
  side.path = r.endpoint;
}

// A URL or endpoint from a record goes into repro.sh and repro.py: anything but an http(s) URL and
// a path (printable ASCII, no space) is refused, so that no recorded string can reach curl or
// urllib as an option, a local file or a second argument.
bool url_chars_ok(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char ch) { return ch > 0x20 && ch < 0x7f && ch != '\\'; });
}

// A URL the records do not give is left for the user to pass (`sh repro.sh URL`, `repro.py --url`);
// one they give must be http(s), and an endpoint a path, so that curl and urllib read them as a URL
// and nothing else (an absent endpoint posts to the URL itself).
void side_target_check(const bundle_side& side) {
  const std::string& u = side.url;
  if (!u.empty() && (!(starts_with(u, "http://") || starts_with(u, "https://")) || u.size() <= 8 || !url_chars_ok(u)))
    throw input_error("bundle: side " + side.name + "'s recorded target URL '" + escape_line(u) +
                      "' is not an http(s) URL; the reproducer would pass it to curl");
  if (!side.path.empty() && (!starts_with(side.path, "/") || !url_chars_ok(side.path)))
    throw input_error("bundle: side " + side.name + "'s recorded endpoint '" + escape_line(side.path) +
                      "' is not a path on the server (it must start with '/', printable ASCII without spaces)");
}

// The item's prompt as the runner had it: the request's "prompt", or its last user message.
std::string prompt_of(const record& r) {
  if (r.request.contains("prompt") && r.request["prompt"].is_string()) return r.request["prompt"];
  if (r.request.contains("messages") && r.request["messages"].is_array())
    for (auto it = r.request["messages"].rbegin(); it != r.request["messages"].rend(); ++it)
      if (json_str(*it, "role") == "user" && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  return "";
}

json body_with_prompt(json body, const std::string& prompt) {
  if (body.contains("prompt")) {
    body["prompt"] = prompt;
  } else if (body.contains("messages") && body["messages"].is_array()) {
    for (auto it = body["messages"].rbegin(); it != body["messages"].rend(); ++it)
      if (json_str(*it, "role") == "user") {
        (*it)["content"] = prompt;
        break;
      }
  }
  return body;
}

// The concurrency probe's fillers, as the runner chose them: the run's other items in order,
// starting after this one (their order is the order of their first records).
void fillers_make(bundle_ctx& c, const std::vector<record>& all, const bundle_side& conc) {
  std::vector<std::string> ids;
  std::map<std::string, std::string> prompts;
  for (const record& r : all) {
    if (!prompts.count(r.item_id)) ids.push_back(r.item_id);
    if (prompts[r.item_id].empty()) prompts[r.item_id] = prompt_of(r);
  }
  const size_t self = static_cast<size_t>(std::find(ids.begin(), ids.end(), c.item_id) - ids.begin());
  const size_t want = static_cast<size_t>(std::max(0, conc.n_concurrent - 1));
  std::vector<std::string> others;
  for (size_t k = 1; k < ids.size() && others.size() < want; ++k) others.push_back(ids[(self + k) % ids.size()]);
  c.item_lines = json::array({{{"id", c.item_id}, {"prompt", prompt_of(*conc.rec)}}});
  if (!conc.rec->reference.empty()) c.item_lines[0]["answer"] = conc.rec->reference;
  if (!conc.rec->grader.empty()) c.item_lines[0]["grader"] = conc.rec->grader;
  for (const std::string& id : others) c.item_lines.push_back({{"id", id}, {"prompt", prompts[id]}});
  for (size_t k = 0; k < want; ++k)
    c.fillers.push_back(others.empty() ? conc.rec->request
                                       : body_with_prompt(conc.rec->request, prompts[others[k % others.size()]]));
  if (others.empty())
    c.filler_note = "the run has no other item, so the fillers are copies of the request itself";
  else if (others.size() < want)
    c.filler_note = "the run has " + std::to_string(others.size()) + " other item(s); `detaudit run` added its built-in short "
                    "filler prompts to make " + std::to_string(want) + ", the HTTP reproducers cycle the other items instead";
  else
    c.filler_note = "the fillers are the run's next " + std::to_string(want) + " items after this one, as `detaudit run` chose them";
}

void item_lines_plain(bundle_ctx& c) {
  if (!c.item_lines.empty()) return;
  const record& r = *c.a.rec;
  json line = {{"id", c.item_id}, {"prompt", prompt_of(r)}};
  if (!r.reference.empty()) line["answer"] = r.reference;
  if (!r.grader.empty()) line["grader"] = r.grader;
  c.item_lines.push_back(line);
}

std::string number_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// `detaudit run` options that send the item as the run did, under the pair's probes.
void engine_args_make(bundle_ctx& c) {
  const json opt = c.manifest.value("options", json::object());
  std::vector<std::string>& a = c.engine_args;
  const record& ra = *c.a.rec;
  const record& rb = *c.b.rec;
  c.engine_spec = json_str(ra.target, "base_spec", json_str(ra.target, "spec"));
  if (!starts_with(c.engine_spec, "engine:"))
    throw input_error("bundle: the recorded engine spec '" + escape_line(c.engine_spec) + "' does not start with 'engine:'");
  // Every option is one argument, --flag=value: no recorded value can be read as an option of its own.
  const auto opt_arg = [&a](const std::string& flag, const std::string& v) { a.push_back(flag + "=" + v); };
  if (label_of(ra) != label_of(rb)) {
    const std::string other = json_str(rb.target, "base_spec", json_str(rb.target, "spec"));
    if (!starts_with(other, "engine:"))
      throw input_error("bundle: the recorded engine spec '" + escape_line(other) + "' does not start with 'engine:'");
    opt_arg("--target", other);
  }
  a.push_back(opt.value("chat", !ra.request.contains("prompt")) ? "--chat" : "--raw");
  const std::pair<const char*, const char*> flags[] = {
      {"n_predict", "--n-predict"}, {"temperature", "--temperature"}, {"n_probs", "--n-probs"},
      {"concurrency", "--concurrency"}, {"seed", "--seed"}, {"seed_k", "--seed-k"},
      {"seed_temperature", "--seed-temperature"}, {"top_p", "--top-p"}, {"top_k", "--top-k"}, {"repeat", "--repeat"}};
  for (const auto& [key, flag] : flags)
    if (opt.contains(key) && opt[key].is_number()) opt_arg(flag, number_text(opt[key]));
  if (!opt.contains("n_predict") && ra.request.contains("n_predict") && ra.request["n_predict"].is_number())
    opt_arg("--n-predict", number_text(ra.request["n_predict"]));
  if (c.a.n_concurrent + c.b.n_concurrent > 0 && !opt.contains("concurrency"))
    opt_arg("--concurrency", std::to_string(std::max(c.a.n_concurrent, c.b.n_concurrent)));
  if (opt.contains("request") && opt["request"].is_object()) opt_arg("--request", redact_json(opt["request"], "").dump());
  if (opt.contains("system") && opt["system"].is_string()) opt_arg("--system", opt["system"].get<std::string>());
  if (opt.contains("stop") && opt["stop"].is_array())
    for (const json& s : opt["stop"])
      if (s.is_string()) opt_arg("--stop", s.get<std::string>());
  std::vector<std::string> probes;
  for (const record* r : {&ra, &rb})
    if (r->probe != "base" && !r->probe.empty() && std::find(probes.begin(), probes.end(), r->probe) == probes.end())
      probes.push_back(r->probe);
  if (label_of(ra) != label_of(rb)) probes.push_back("cross");
  std::string probe_list = probes.empty() ? "repeat" : "";
  for (const std::string& p : probes) probe_list += (probe_list.empty() ? "" : ",") + p;
  opt_arg("--probe", probe_list);
  if (c.item_lines.size() > 1) opt_arg("--shard", "1/" + std::to_string(c.item_lines.size()));
  a.insert(a.end(), {"--fail-on", "none", "--format", "json"});
}

// How often the pair differed: every record of the item for side A's condition against every one
// for side B's (a record is not compared with itself; the same condition twice counts each pair once).
void frequency_count(bundle_ctx& c, const std::vector<record>& all) {
  auto of = [&](const record& side) {
    std::vector<const record*> v;
    for (const record& r : all)
      if (r.item_id == c.item_id && r.error.empty() && label_of(r) == label_of(side) && r.condition == side.condition)
        v.push_back(&r);
    return v;
  };
  const std::vector<const record*> sa = of(*c.a.rec), sb = of(*c.b.rec);
  const bool same = label_of(*c.a.rec) == label_of(*c.b.rec) && c.a.rec->condition == c.b.rec->condition;
  for (size_t i = 0; i < sa.size(); ++i)
    for (size_t j = same ? i + 1 : 0; j < sb.size(); ++j) {
      if (sa[i] == sb[j]) continue;
      ++c.compared;
      if (!diverge(*sa[i], *sb[j], label_of(*sa[i]) == label_of(*sb[j])).identical) ++c.differed;
    }
}

void file_write(const fs::path& p, const std::string& text, bool executable = false) {
  text_file_write(p.string(), text, "bundle");
  if (executable)
    fs::permissions(p, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
}

std::string json_text(const json& j) { return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n"; }

void out_dir_prepare(const fs::path& out) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec) || (!fs::is_empty(out, ec) && !fs::exists(out / "bundle.json", ec)))
      throw input_error("bundle: -o " + out.string() + ": expected a new folder or an earlier bundle, found a " +
                        (fs::is_directory(out, ec) ? "folder without bundle.json" : "file"));
    fs::remove_all(out, ec);
  }
  fs::create_directories(out, ec);
  if (ec) throw input_error("bundle: cannot create " + out.string() + ": " + ec.message());
}

// OUT.tar.gz holding OUT's folder under its own name, written by the system tar.
std::string tarball_write(const fs::path& out) {
  const fs::path abs = fs::absolute(out).lexically_normal();
  const fs::path dir = abs.has_filename() ? abs : abs.parent_path();
  const std::string tgz = dir.string() + ".tar.gz";
  std::vector<std::string> args = {"tar", "-czf", tgz, "-C", dir.parent_path().string(), dir.filename().string()};
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, "tar", nullptr, nullptr, argv.data(), environ) != 0)
    throw input_error("bundle: cannot run tar to write " + tgz + " (is tar installed?)");
  int st = 0;
  if (::waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    throw input_error("bundle: tar failed writing " + tgz);
  return tgz;
}

void files_write(const bundle_ctx& c, const fs::path& out) {
  file_write(out / "README.md", bundle_readme(c));
  file_write(out / "bundle.json", json_text(bundle_manifest(c)));
  file_write(out / "request-A.json", json_text(redact_json(c.a.rec->request, "")));
  file_write(out / "request-B.json", json_text(redact_json(c.b.rec->request, "")));
  file_write(out / "response-A.json", json_text(redact_json(record_to_json(*c.a.rec), "")));
  file_write(out / "response-B.json", json_text(redact_json(record_to_json(*c.b.rec), "")));
  file_write(out / "target.json", json_text(redact_json(c.target_entry, "")));
  if (!c.fillers.empty()) {
    fs::create_directories(out / "fillers");
    for (size_t k = 0; k < c.fillers.size(); ++k)
      file_write(out / "fillers" / ("filler-" + std::to_string(k + 1) + ".json"), json_text(redact_json(c.fillers[k], "")));
  }
  if (c.engine) {
    std::string lines;
    for (const json& l : c.item_lines) lines += l.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    file_write(out / "item.jsonl", lines);
  }
  file_write(out / "repro.py", bundle_repro_py(), true);
  file_write(out / "repro.sh", bundle_repro_sh(c), true);
}

void ctx_target(bundle_ctx& c) {
  const std::string label = label_of(*c.a.rec);
  c.target_entry = json::object();
  for (const json& t : c.manifest.value("targets", json::array()))
    if (t.is_object() && json_str(t, "label") == label) c.target_entry = t;
  if (c.target_entry.contains("capabilities") && !c.target_entry["capabilities"].is_object()) c.target_entry.erase("capabilities");
}

// run.json as the bundle reads it: an object whose "options" is an object and "targets" an array
// (a hand-edited or foreign run.json of another shape is read as if those fields were absent).
json manifest_shape(json m) {
  if (!m.is_object()) return json::object();
  if (m.contains("options") && !m["options"].is_object()) m.erase("options");
  if (m.contains("targets") && !m["targets"].is_array()) m.erase("targets");
  return m;
}

}  // namespace

bundle_result bundle_write(const std::string& run_dir, const bundle_options& o) {
  if (o.item_id.empty()) throw input_error("bundle: --item: expected an item id, found nothing");
  if (o.out_dir.empty()) throw input_error("bundle: -o: expected the bundle folder, found nothing");
  if (o.cond_a.empty() != o.cond_b.empty()) throw input_error("bundle: --conditions: expected two conditions A,B");
  std::vector<record> all = records_read(run_dir);
  bundle_ctx c;
  c.item_id = o.item_id;
  const fs::path manifest_dir = fs::is_directory(run_dir) ? fs::path(run_dir) : fs::path(run_dir).parent_path();
  c.manifest = manifest_shape(run_manifest_read(manifest_dir.empty() ? "." : manifest_dir.string()));
  for (const record& r : all)
    if (r.item_id == o.item_id) c.records.push_back(r);
  if (c.records.empty()) throw input_error("bundle: " + run_dir + ": no record has item_id '" + o.item_id + "'");
  size_t dropped = 0;
  c.records = records_dedupe(std::move(c.records), record_key, &dropped);
  std::stable_sort(c.records.begin(), c.records.end(), record_order_less);  // not the order they were sent in
  const std::string label = label_of(c.records.front());
  const auto [sa, sb] = o.cond_a.empty() ? pair_default(c) : std::make_pair(side_parse(o.cond_a, label), side_parse(o.cond_b, label));
  const bool labelled = sa.label != sb.label;
  side_fill(c.a, side_find(c, sa), labelled);
  side_fill(c.b, side_find(c, sb), labelled);
  c.row = row_make(*c.a.rec, *c.b.rec, c.a.name, c.b.name, {.judge = !labelled, .one_vocab = !labelled});
  const auto empty = [](const record& r) { return r.tokens.empty() && r.text.empty(); };
  c.no_response = !c.row.error && !c.row.exercised && (empty(*c.a.rec) || empty(*c.b.rec));
  if (o.oracle && c.row.status == STATUS_DIFFERS && !c.row.error)
    c.row.oracle = oracle_judge(c.row, *o.oracle, oracle_bound(all, *o.oracle, o.oracle_opt));
  c.engine = json_str(c.a.rec->target, "dialect") == "engine";
  if (!c.engine)
    for (const bundle_side* side : {&c.a, &c.b}) side_target_check(*side);
  ctx_target(c);
  frequency_count(c, all);
  if (c.a.n_concurrent > 0 || c.b.n_concurrent > 0) fillers_make(c, all, c.b.n_concurrent > 0 ? c.b : c.a);
  item_lines_plain(c);
  if (c.engine) engine_args_make(c);
  const fs::path out(o.out_dir);
  out_dir_prepare(out);
  files_write(c, out);
  bundle_result res;
  res.dir = out.string();
  res.cond_a = c.a.name;
  res.cond_b = c.b.name;
  res.identical = c.row.d.identical;
  res.error = c.row.error;
  res.no_response = c.no_response;
  res.token_index = c.row.d.token_index;
  if (o.tarball) res.tarball = tarball_write(out);
  return res;
}

}  // namespace detaudit::reports
