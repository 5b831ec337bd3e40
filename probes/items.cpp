// Audit items: prompts from a text or JSONL file, or a dataset (GSM8K's test.jsonl).
//
// Goals: the prompt reaches the target byte for byte as it is in the file (a BOM, a CR before the
// newline, zero-width characters are kept so lint can report them and the audit sends what the
// user wrote); every error names the file and line. Non-goals: prompt templates, few-shot prompts.
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

#include "probes/runner.h"
#include "reports/grade.h"
#include "reports/regex.h"
#include "util/error.h"

namespace detaudit::probes {
namespace {

std::string file_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Lines without their '\n' (a '\r' before it is kept), numbered from 1.
std::vector<std::pair<size_t, std::string>> file_lines(const std::string& data) {
  std::vector<std::pair<size_t, std::string>> out;
  size_t pos = 0, line_no = 0;
  while (pos < data.size()) {
    const size_t nl = data.find('\n', pos);
    const size_t end = nl == std::string::npos ? data.size() : nl;
    out.emplace_back(++line_no, data.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

bool blank(const std::string& s) {
  if (s.rfind("\xEF\xBB\xBF", 0) == 0) return blank(s.substr(3));
  return s.find_first_not_of(" \t\r") == std::string::npos;
}

json line_parse(const std::string& line, const std::string& where) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    throw input_error(where + ": not a JSON line (" + std::string(e.what()) + ")");
  }
  if (!j.is_object()) throw input_error(where + ": expected a JSON object, found " + std::string(j.type_name()));
  return j;
}

// A string field, or a number written as text (ids and answers are often numbers).
std::string field_text(const json& j, const char* key, const std::string& where, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw input_error(where + ": field '" + key + "' is missing");
    return "";
  }
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  if (it->is_number()) return it->dump();
  throw input_error(where + ": field '" + key + "' must be a string or a number, found " + std::string(it->type_name()));
}

// A grader the reports cannot apply would make every report of the run fail after everything was
// sent: it is refused here, before anything is.
void grader_check(const std::string& grader, const std::string& where) {
  try {
    if (grader.rfind("regex:", 0) == 0) reports::regex(grader.substr(6), "grader '" + grader + "'");
    else reports::grade_answer(grader, "");
  } catch (const input_error& e) {
    throw input_error(where + ": " + e.what());
  }
}

void ids_check_unique(const std::vector<item>& items, const std::vector<std::string>& wheres) {
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < items.size(); ++i) {
    auto [it, fresh] = seen.emplace(items[i].id, i);
    if (!fresh)
      throw input_error(wheres[i] + ": item id '" + items[i].id + "' is used twice (first at " + wheres[it->second] + ")");
  }
}

std::vector<item> items_from_jsonl(const std::string& path, const std::string& data) {
  std::vector<item> out;
  std::vector<std::string> wheres;
  for (const auto& [line_no, line] : file_lines(data)) {
    if (blank(line)) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const json j = line_parse(line, where);
    item it;
    it.id = field_text(j, "id", where, false);
    if (it.id.empty()) it.id = std::to_string(line_no);
    it.prompt = field_text(j, "prompt", where, true);
    it.reference = field_text(j, "answer", where, false);
    it.grader = field_text(j, "grader", where, false);
    if (!it.grader.empty()) grader_check(it.grader, where);
    out.push_back(std::move(it));
    wheres.push_back(where);
  }
  ids_check_unique(out, wheres);
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<item> items_load_prompts(const std::string& path) {
  const std::string data = file_read(path);
  std::vector<item> out;
  if (ends_with(path, ".jsonl")) {
    out = items_from_jsonl(path, data);
  } else {
    for (const auto& [line_no, line] : file_lines(data))
      if (!blank(line)) out.push_back({std::to_string(line_no), line, "", ""});
  }
  if (out.empty()) throw input_error(path + ": no prompts (every line is blank)");
  return out;
}

std::vector<item> items_load_dataset(const std::string& spec) {
  const std::string prefix = "gsm8k:";
  if (spec.rfind(prefix, 0) != 0)
    throw input_error("--dataset '" + spec + "': expected gsm8k:FILE[:N] (GSM8K's test.jsonl, optionally its first N items)");
  std::string path = spec.substr(prefix.size());
  int64_t limit = -1;
  if (const size_t colon = path.rfind(':'); colon != std::string::npos && colon + 1 < path.size()) {
    const std::string n = path.substr(colon + 1);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (ec == std::errc() && end == n.data() + n.size()) {
      if (v < 1) throw input_error("--dataset '" + spec + "': N must be at least 1, found " + n);
      limit = v;
      path = path.substr(0, colon);
    }
  }
  if (path.empty()) throw input_error("--dataset '" + spec + "': expected gsm8k:FILE[:N]");
  const std::string data = file_read(path);
  std::vector<item> out;
  for (const auto& [line_no, line] : file_lines(data)) {
    if (limit >= 0 && static_cast<int64_t>(out.size()) >= limit) break;
    if (blank(line)) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const json j = line_parse(line, where);
    item it;
    it.id = "gsm8k-" + std::to_string(line_no - 1);
    it.prompt = field_text(j, "question", where, true);
    it.reference = field_text(j, "answer", where, true);
    it.grader = "gsm8k";
    out.push_back(std::move(it));
  }
  if (out.empty()) throw input_error(path + ": no GSM8K items (every line is blank)");
  return out;
}

}  // namespace detaudit::probes
