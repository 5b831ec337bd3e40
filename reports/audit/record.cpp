// Run records to and from JSON lines.
#include "reports/audit/record.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <type_traits>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "util/error.h"

namespace detaudit::reports {
namespace {

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t parse_hex64(const std::string& s, const std::string& where) {
  if (s.empty() || s.size() > 16 || s.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    throw input_error(where + ": logit hash '" + s + "' is not a 64-bit hex value");
  return std::stoull(s, nullptr, 16);
}

// A JSON number that is a whole number within T's range (a float such as 3.0 counts), as T.
template <class T>
bool int_from_json(const json& v, T& out) {
  static_assert(sizeof(T) < sizeof(int64_t), "the range checks below need T narrower than 64 bits");
  constexpr int64_t lo = std::numeric_limits<T>::min();
  constexpr int64_t hi = std::numeric_limits<T>::max();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return false;
    out = static_cast<T>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) return false;
    out = static_cast<T>(i);
    return true;
  }
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)) || d != std::trunc(d)) return false;
  out = static_cast<T>(d);
  return true;
}

// Integer fields (and byte arrays) are range-checked: converting an out-of-range number is
// undefined behaviour inside nlohmann::json.
template <class T>
T get_or(const json& j, const char* key, T dflt, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  const std::string wrong = where + ": field '" + key + "' has the wrong type (" + it->type_name() + ")";
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    T v{};
    if (!int_from_json(*it, v)) throw input_error(wrong + " or is out of range");
    return v;
  } else if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
    if (!it->is_array()) throw input_error(wrong);
    T out(it->size());
    for (size_t i = 0; i < out.size(); ++i)
      if (!int_from_json((*it)[i], out[i])) throw input_error(where + ": field '" + key + "' must hold bytes (0..255)");
    return out;
  } else {
    try {
      return it->get<T>();
    } catch (const json::exception&) {
      throw input_error(wrong);
    }
  }
}

// Throws input_error naming `where` when `j` nests deeper than JSON_MAX_DEPTH.
void depth_check(const json& j, const std::string& where) {
  if (!json_depth_within(j, JSON_MAX_DEPTH))
    throw input_error(where + ": JSON nested more than " + std::to_string(JSON_MAX_DEPTH) + " levels deep");
}

json obj_or_empty(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return json::object();
  if (!it->is_object()) throw input_error(where + ": field '" + key + "' must be an object");
  return *it;
}

}  // namespace

json record_to_json(const record& r) {
  json j;
  j["schema"] = r.schema;
  j["run_id"] = r.run_id;
  j["item_id"] = r.item_id;
  j["probe"] = r.probe;
  j["condition"] = r.condition;
  j["repetition"] = r.repetition;
  j["target"] = r.target;
  j["request"] = r.request;
  j["endpoint"] = r.endpoint;
  if (r.temperature) j["temperature"] = *r.temperature;
  j["prompt_sha256"] = r.prompt_sha256;
  j["text"] = r.text;
  if (!r.reasoning.empty()) j["reasoning"] = r.reasoning;  // absent when none, as in records before it
  json toks = json::array();
  for (const token_rec& t : r.tokens) {
    json o = {{"id", t.id}, {"text", t.text}};
    if (!t.bytes.empty()) o["bytes"] = t.bytes;
    if (t.logprob) o["logprob"] = *t.logprob;
    if (t.rank >= 0) o["rank"] = t.rank;
    toks.push_back(std::move(o));
  }
  j["tokens"] = std::move(toks);
  json tops = json::array();
  for (const auto& step : r.top_logprobs) {
    json s = json::array();
    for (const alt_rec& a : step) s.push_back(json::array({a.id, a.token, a.logprob}));
    tops.push_back(std::move(s));
  }
  j["top_logprobs"] = std::move(tops);
  j["logprobs_kind"] = r.logprobs_kind;
  json hashes = json::array();
  for (uint64_t h : r.logit_hashes) hashes.push_back(hex64(h));
  j["logit_hashes"] = std::move(hashes);
  j["chained_hash"] = r.chained_hash;
  j["finish_reason"] = r.finish_reason;
  j["usage"] = r.usage;
  j["timings"] = r.timings;
  j["evidence"] = r.evidence;
  j["reference"] = r.reference;
  j["grader"] = r.grader;
  j["error"] = r.error;
  j["http_status"] = r.http_status;
  return j;
}

record record_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw input_error(where + ": a record must be a JSON object");
  record r;
  r.schema = get_or<int>(j, "schema", 0, where);
  if (r.schema < 1 || r.schema > RECORD_SCHEMA)
    throw input_error(where + ": record schema " + std::to_string(r.schema) + " is not supported (this build reads 1.." +
                      std::to_string(RECORD_SCHEMA) + ")");
  r.item_id = get_or<std::string>(j, "item_id", "", where);
  if (r.item_id.empty()) throw input_error(where + ": the record has no item_id");
  r.run_id = get_or<std::string>(j, "run_id", "", where);
  r.probe = get_or<std::string>(j, "probe", "", where);
  r.condition = get_or<std::string>(j, "condition", "", where);
  if (r.condition.empty()) throw input_error(where + ": the record has no condition");
  r.repetition = get_or<int>(j, "repetition", 0, where);
  r.target = obj_or_empty(j, "target", where);
  r.request = obj_or_empty(j, "request", where);
  r.endpoint = get_or<std::string>(j, "endpoint", "", where);
  if (auto t = j.find("temperature"); t != j.end() && !t->is_null()) {
    if (!t->is_number()) throw input_error(where + ": field 'temperature' must be a number");
    r.temperature = t->get<double>();
  }
  r.prompt_sha256 = get_or<std::string>(j, "prompt_sha256", "", where);
  r.text = get_or<std::string>(j, "text", "", where);
  r.reasoning = get_or<std::string>(j, "reasoning", "", where);
  if (auto it = j.find("tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw input_error(where + ": field 'tokens' must be an array");
    for (const json& t : *it) {
      if (!t.is_object()) throw input_error(where + ": each entry of 'tokens' must be an object");
      token_rec tr;
      tr.id = get_or<int32_t>(t, "id", -1, where);
      tr.text = get_or<std::string>(t, "text", "", where);
      tr.bytes = get_or<std::vector<uint8_t>>(t, "bytes", {}, where);
      if (auto lp = t.find("logprob"); lp != t.end() && lp->is_number()) tr.logprob = lp->get<double>();
      tr.rank = get_or<int>(t, "rank", -1, where);
      r.tokens.push_back(std::move(tr));
    }
  }
  if (auto it = j.find("top_logprobs"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) throw input_error(where + ": field 'top_logprobs' must be an array");
    for (const json& step : *it) {
      if (!step.is_array()) throw input_error(where + ": each step of 'top_logprobs' must be an array");
      std::vector<alt_rec> alts;
      for (const json& a : step) {
        if (!a.is_array() || a.size() != 3 || !a[0].is_number_integer() || !a[1].is_string() || !a[2].is_number())
          throw input_error(where + ": a 'top_logprobs' entry must be [id, token, logprob]");
        int32_t id = -1;
        if (!int_from_json(a[0], id)) throw input_error(where + ": a 'top_logprobs' id is out of range");
        alts.push_back({id, a[1].get<std::string>(), a[2].get<double>()});
      }
      r.top_logprobs.push_back(std::move(alts));
    }
  }
  r.logprobs_kind = get_or<std::string>(j, "logprobs_kind", "", where);
  for (const std::string& h : get_or<std::vector<std::string>>(j, "logit_hashes", {}, where))
    r.logit_hashes.push_back(parse_hex64(h, where));
  r.chained_hash = get_or<std::string>(j, "chained_hash", "", where);
  r.finish_reason = get_or<std::string>(j, "finish_reason", "", where);
  r.usage = obj_or_empty(j, "usage", where);
  r.timings = obj_or_empty(j, "timings", where);
  r.evidence = obj_or_empty(j, "evidence", where);
  r.reference = get_or<std::string>(j, "reference", "", where);
  r.grader = get_or<std::string>(j, "grader", "", where);
  r.error = get_or<std::string>(j, "error", "", where);
  r.http_status = get_or<int>(j, "http_status", 0, where);
  return r;
}

struct record_writer::impl {
  std::string path;
  int fd = -1;
  std::mutex mu;
  ~impl() {
    if (fd >= 0) ::close(fd);
  }
};

record_writer::record_writer(const std::string& path) : p_(std::make_unique<impl>()) {
  p_->path = path;
  p_->fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (p_->fd < 0) {
    const int err = errno;
    throw input_error("cannot open '" + path + "' for appending records: " + std::strerror(err));
  }
}

record_writer::~record_writer() = default;

void record_writer::write(const record& r) {
  // The whole line in one write(2) on an O_APPEND descriptor: a process killed at any moment
  // leaves the line complete or absent (a short write, possible only on a full disk or a signal,
  // is continued; a reader cuts an unfinished last line, see records_read_file).
  std::string line = record_to_json(r).dump(-1, ' ', false, json::error_handler_t::replace);
  line += '\n';
  std::lock_guard<std::mutex> lk(p_->mu);
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(p_->fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw_write_error("writing a record to '" + p_->path + "'", n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
}

const std::string& record_writer::path() const { return p_->path; }

std::vector<record> records_read_file(const std::string& path, read_stats* stats) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error("cannot open records file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  std::vector<record> out;
  read_stats st;
  size_t pos = 0, line_no = 0;
  while (pos < data.size()) {
    const size_t nl = data.find('\n', pos);
    ++line_no;
    if (nl == std::string::npos) {
      ++st.truncated;  // the writer died mid-line: the line never completed
      break;
    }
    const std::string line = data.substr(pos, nl - pos);
    pos = nl + 1;
    ++st.lines;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    out.push_back(record_from_json(json_line_parse(line, where), where));
    ++st.records;
  }
  if (stats) {
    stats->lines += st.lines;
    stats->records += st.records;
    stats->truncated += st.truncated;
  }
  return out;
}

std::vector<record> records_read(const std::string& dir_or_file, read_stats* stats) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(dir_or_file, ec)) return records_read_file(dir_or_file, stats);
  if (!fs::is_directory(dir_or_file, ec)) throw input_error("'" + dir_or_file + "' is neither a run folder nor a .jsonl file");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_or_file))
    if (e.is_regular_file() && e.path().extension() == ".jsonl") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw input_error("'" + dir_or_file + "' holds no *.jsonl records");
  std::vector<record> out;
  for (const std::string& f : files) {
    std::vector<record> part = records_read_file(f, stats);
    out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return out;
}

json run_manifest_read(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(dir) / "run.json";
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return json::object();
  std::ifstream in(p);
  json m;
  try {
    m = json::parse(in);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw input_error(p.string() + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  depth_check(m, p.string());
  return m;
}

bool json_depth_within(const json& j, size_t max_depth) {
  std::vector<std::pair<const json*, size_t>> todo = {{&j, 1}};
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (!v->is_structured() || v->empty()) continue;
    if (depth >= max_depth) return false;
    for (const json& e : *v) todo.push_back({&e, depth + 1});
  }
  return true;
}

json json_line_parse(const std::string& line, const std::string& where) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number too large
    throw input_error(where + ": not a JSON line (" + std::string(e.what()) + ")");
  }
  depth_check(j, where);
  return j;
}

std::string record_key(const record& r) {
  const std::string label = r.target.is_object() && r.target.contains("label") && r.target["label"].is_string()
                                ? r.target["label"].get<std::string>()
                                : "";
  return r.item_id + "\x1f" + label + "\x1f" + r.condition + "\x1f" + std::to_string(r.repetition);
}

}  // namespace detaudit::reports
