// Audit items: prompts from a text or JSONL file, or a dataset (GSM8K's test.jsonl).
//
// Goals: the prompt reaches the target byte for byte as it is in the file (a BOM, a CR before the
// newline, zero-width characters are kept so lint can report them and the audit sends what the
// user wrote); every error names the file and line; GSM8K's few-shot exemplars drawn as lm-eval draws them.
// Non-goals: prompt templates beyond lm-eval's gsm8k.
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "probes/fewshot.h"
#include "probes/runner.h"
#include "reports/audit/grade.h"
#include "reports/audit/regex.h"
#include "util/error.h"
#include "util/sha256.h"

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
    it.doc = line;
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
      if (!blank(line)) out.push_back({std::to_string(line_no), line, "", "", ""});
  }
  if (out.empty()) throw input_error(path + ": no prompts (every line is blank)");
  return out;
}

const std::vector<std::string>& gsm8k_stop_strings() {
  static const std::vector<std::string> stops = {"Question:", "</s>", "<|im_end|>"};
  return stops;
}

namespace {

// lm-eval's gsm8k doc_to_text; the target follows after a space (its target_delimiter).
std::string gsm8k_question(const std::string& q) { return "Question: " + q + "\nAnswer:"; }

// The exemplars of a few-shot file, each rendered as lm-eval renders an exemplar: the question as
// doc_to_text, a space (target_delimiter), the answer (doc_to_target), and the fewshot_delimiter.
std::vector<std::string> gsm8k_fewshot_pool(const std::string& path) {
  std::vector<std::string> pool;
  for (const auto& [line_no, line] : file_lines(file_read(path))) {
    if (blank(line)) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    const json j = line_parse(line, where);
    pool.push_back(gsm8k_question(field_text(j, "question", where, true)) + " " + field_text(j, "answer", where, true) +
                   "\n\n");
  }
  return pool;
}

// How many exemplars: --num-fewshot, else lm-eval's 5 when --fewshot names the pool, else 0.
int fewshot_count(const dataset_options& d) {
  if (d.num_fewshot < 0 && d.num_fewshot != FEWSHOT_DEFAULT)
    throw input_error("--num-fewshot must be >= 0, found " + std::to_string(d.num_fewshot));
  const int k = d.num_fewshot == FEWSHOT_DEFAULT ? (d.fewshot_file.empty() ? 0 : GSM8K_FEWSHOT) : d.num_fewshot;
  if (k == 0 && !d.fewshot_file.empty())
    throw input_error("--fewshot FILE with --num-fewshot 0: give K > 0 exemplars, or leave --fewshot out");
  if (k > 0 && d.fewshot_file.empty())
    throw input_error("--num-fewshot " + std::to_string(k) +
                      " needs --fewshot FILE (jsonl with question/answer, e.g. GSM8K's train.jsonl, the pool the "
                      "exemplars are drawn from)");
  return k;
}

// Each document's few-shot context, in document order: lm-eval's draw (fewshot.h) from the pool.
// The pool is the documents themselves when --fewshot is the dataset's own file.
std::vector<std::string> gsm8k_contexts(const dataset_options& d, const std::string& dataset_path, size_t n_docs) {
  const int k = fewshot_count(d);
  if (k == 0) return std::vector<std::string>(n_docs);
  const std::vector<std::string> pool = gsm8k_fewshot_pool(d.fewshot_file);
  std::error_code ec;
  const bool same = std::filesystem::equivalent(d.fewshot_file, dataset_path, ec);
  std::vector<std::vector<size_t>> draws;
  try {
    // lm-eval drops an exemplar equal to the document itself, a duplicate line of it included.
    draws = fewshot_draws(pool.size(), static_cast<size_t>(k), n_docs, same, LMEVAL_FEWSHOT_SEED,
                          [&pool](size_t d, size_t i) { return pool[i] == pool[d]; });
  } catch (const std::invalid_argument& e) {
    throw input_error(d.fewshot_file + ": --num-fewshot " + std::to_string(k) + ": " + e.what());
  }
  std::vector<std::string> out;
  for (const std::vector<size_t>& picked : draws) {
    std::string ctx;
    for (size_t i : picked) ctx += pool[i];
    out.push_back(std::move(ctx));
  }
  return out;
}

}  // namespace

json dataset_fewshot_identity(const dataset_options& d) {
  const int k = fewshot_count(d);
  if (k == 0) return json::object();
  sha256 h;
  const std::string data = file_read(d.fewshot_file);
  h.update(data.data(), data.size());
  return {{"count", k}, {"file_sha256", h.hex_digest()}, {"sampler", "lm-eval: one Random(1234), sample() per document"}};
}

std::vector<item> items_load_dataset(const std::string& spec, const dataset_options& d) {
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
    it.prompt = gsm8k_question(field_text(j, "question", where, true));
    it.reference = field_text(j, "answer", where, true);
    it.grader = d.strict ? "gsm8k" : "gsm8k-flex";
    it.doc = line;
    out.push_back(std::move(it));
  }
  if (out.empty()) throw input_error(path + ": no GSM8K items (every line is blank)");
  const std::vector<std::string> contexts = gsm8k_contexts(d, path, out.size());
  for (size_t i = 0; i < out.size(); ++i) out[i].prompt = contexts[i] + out[i].prompt;
  return out;
}

std::vector<item> items_builtin() {
  // Short prompts with short, settled answers: differences between conditions show in a few tokens.
  // The arithmetic ones are graded by their last number.
  static const std::pair<const char*, const char*> prompts[] = {
      {"What is 17 + 25? Answer with the number only.", "42"},
      {"What is 9 times 8? Answer with the number only.", "72"},
      {"What is 144 divided by 12? Answer with the number only.", "12"},
      {"What is 1000 minus 357? Answer with the number only.", "643"},
      {"A box holds 6 eggs. How many eggs are in 7 boxes? Answer with the number only.", "42"},
      {"What is 15% of 200? Answer with the number only.", "30"},
      {"How many minutes are in 3 hours? Answer with the number only.", "180"},
      {"What is the square root of 169? Answer with the number only.", "13"},
      {"Name the largest planet in the solar system.", nullptr},
      {"What is the chemical symbol for gold?", nullptr},
      {"In which year did the first person walk on the Moon?", nullptr},
      {"What is the capital of Australia?", nullptr},
      {"Which gas do plants take in for photosynthesis?", nullptr},
      {"Who wrote the play Romeo and Juliet?", nullptr},
      {"What is the boiling point of water at sea level in degrees Celsius?", nullptr},
      {"How many sides does a hexagon have?", nullptr},
      {"Write a Python function that returns the square of a number.", nullptr},
      {"Write a C function that swaps two integers through pointers.", nullptr},
      {"Write a shell command that counts the lines in a file named data.txt.", nullptr},
      {"Write a SQL query that selects every row of a table named users.", nullptr},
      {"List three primary colors, separated by commas.", nullptr},
      {"List the first five prime numbers.", nullptr},
      {"Name the days of the week that start with the letter T.", nullptr},
      {"List four animals that live in the ocean.", nullptr},
      {"Translate 'good morning' into French.", nullptr},
      {"Translate 'thank you very much' into Spanish.", nullptr},
      {"Translate 'where is the station?' into German.", nullptr},
      {"Give one word that means the opposite of 'ancient'.", nullptr},
      {"Complete the sentence: The quick brown fox jumps over the", nullptr},
      {"Summarise in one sentence why the sky looks blue.", nullptr},
      {"Explain in one sentence what a compiler does.", nullptr},
      {"Write a haiku about a lighthouse.", nullptr},
  };
  std::vector<item> out;
  int n = 0;
  for (const auto& [prompt, answer] : prompts) {
    item it;
    it.id = "builtin-" + std::to_string(++n);
    it.prompt = prompt;
    if (answer) {
      it.reference = answer;
      it.grader = "numeric";
    }
    out.push_back(std::move(it));
  }
  return out;
}

}  // namespace detaudit::probes
