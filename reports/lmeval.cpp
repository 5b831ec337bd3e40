#include "reports/lmeval.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "reports/audit/file_write.h"
#include "reports/compare_internal.h"
#include "util/error.h"
#include "util/sha256.h"

namespace detaudit::reports {
namespace {

std::string sha256_hex(const std::string& s) {
  sha256 h;
  h.update(s.data(), s.size());
  return h.hex_digest();
}

std::string text_or_json(const json& j) { return j.is_string() ? j.get<std::string>() : j.dump(); }

const json& field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) throw input_error(where + ": lm-eval sample without \"" + key + "\"");
  return *it;
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (!it->is_string())
    throw input_error(where + ": \"" + key + "\": expected a string, found " + std::string(it->type_name()));
  return it->get<std::string>();
}

// resps[0][0] for generate_until; anything else as compact JSON.
std::string response_of(const json& resps, const std::string& where) {
  if (!resps.is_array())
    throw input_error(where + ": \"resps\": expected a list, found " + std::string(resps.type_name()));
  if (!resps.empty() && resps[0].is_array() && !resps[0].empty() && resps[0][0].is_string())
    return resps[0][0].get<std::string>();
  return resps.dump();
}

std::string filtered_of(const json& f, const std::string& where) {
  if (!f.is_array())
    throw input_error(where + ": \"filtered_resps\": expected a list, found " + std::string(f.type_name()));
  if (f.size() == 1 && f[0].is_string()) return f[0].get<std::string>();
  return f.dump();
}

// The first metric named in "metrics" whose top-level value is a number or a boolean.
void metric_of(const json& j, lmeval_sample& s) {
  auto m = j.find("metrics");
  if (m == j.end() || !m->is_array()) return;
  for (const json& name : *m) {
    if (!name.is_string()) continue;
    auto v = j.find(name.get<std::string>());
    if (v == j.end() || !(v->is_number() || v->is_boolean())) continue;
    s.metric = name.get<std::string>();
    const double x = v->is_boolean() ? (v->get<bool>() ? 1.0 : 0.0) : v->get<double>();
    if (x == 1.0) s.correct = true;
    if (x == 0.0) s.correct = false;
    return;
  }
}

lmeval_sample sample_from_json(const json& j, const std::string& where) {
  if (!j.is_object())
    throw input_error(where + ": expected an lm-eval sample object, found " + std::string(j.type_name()));
  const json& id = field(j, "doc_id", where);
  if (!id.is_number_integer())
    throw input_error(where + ": \"doc_id\": expected an integer, found " + std::string(id.type_name()));
  lmeval_sample s;
  s.doc_id = id.get<int64_t>();
  s.filter = string_field(j, "filter", where);
  if (s.filter.empty()) s.filter = "none";
  s.doc_hash = string_field(j, "doc_hash", where);
  s.prompt_hash = string_field(j, "prompt_hash", where);
  auto t = j.find("target");
  if (t != j.end() && !t->is_null()) s.target = text_or_json(*t);
  s.response = response_of(field(j, "resps", where), where);
  s.filtered = filtered_of(field(j, "filtered_resps", where), where);
  auto a = j.find("arguments");
  s.arguments = a == j.end() ? json::object() : *a;
  metric_of(j, s);
  return s;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error("cannot open lm-eval samples file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string align_key(int64_t doc_id, const std::string& filter) { return std::to_string(doc_id) + "\x1f" + filter; }

record record_of(const lmeval_sample& s, const std::string& label) {
  record r;
  r.run_id = "lm-eval";
  r.item_id = std::to_string(s.doc_id);
  r.probe = "lm-eval";
  r.condition = s.filter;
  r.target = {{"label", label}, {"spec", "lm-eval samples"}};
  r.request = s.arguments;
  r.prompt_sha256 = s.prompt_hash;
  r.text = s.response;
  r.reference = s.target;
  return r;
}

flip_kind flip_of(const lmeval_sample& a, const lmeval_sample& b) {
  if (!a.correct || !b.correct) return FLIP_NONE;
  if (*a.correct && !*b.correct) return FLIP_RIGHT_TO_WRONG;
  if (!*a.correct && *b.correct) return FLIP_WRONG_TO_RIGHT;
  if (!*a.correct && a.filtered != b.filtered) return FLIP_WRONG_TO_OTHER_WRONG;
  return FLIP_NONE;
}

std::string short_hash(const std::string& h) { return h.size() > 12 ? h.substr(0, 12) : h; }

}  // namespace

bool lmeval_is_samples_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, false);
    return j.is_object() && j.contains("doc_id") && j.contains("resps") && j.contains("filtered_resps") &&
           j.contains("filter");
  }
  return false;
}

std::vector<lmeval_sample> lmeval_read(const std::string& path) {
  const std::string data = read_all(path);
  std::vector<lmeval_sample> out;
  std::set<std::string> seen;
  size_t pos = 0, line_no = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    if (nl == std::string::npos) nl = data.size();
    const std::string line = data.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    lmeval_sample s = sample_from_json(json_line_parse(line, where), where);
    if (!seen.insert(align_key(s.doc_id, s.filter)).second)
      throw input_error(where + ": doc_id " + std::to_string(s.doc_id) + " with filter \"" + s.filter +
                        "\" appears twice (expected one line per doc and filter)");
    out.push_back(std::move(s));
  }
  return out;
}

report lmeval_compare(const std::vector<lmeval_sample>& a, const std::vector<lmeval_sample>& b) {
  report rep;
  std::map<std::string, size_t> index_b;
  for (size_t i = 0; i < b.size(); ++i) index_b[align_key(b[i].doc_id, b[i].filter)] = i;
  std::vector<std::pair<size_t, size_t>> matched;
  for (size_t i = 0; i < a.size(); ++i) {
    auto f = index_b.find(align_key(a[i].doc_id, a[i].filter));
    if (f != index_b.end()) matched.push_back({i, f->second});
  }
  rep.records.reserve(2 * matched.size());
  for (const auto& [ia, ib] : matched) {
    rep.records.push_back(record_of(a[ia], "A"));
    rep.records.push_back(record_of(b[ib], "B"));
  }
  std::vector<std::string> filters;
  std::map<std::string, pair_summary> by_filter;
  for (size_t k = 0; k < matched.size(); ++k) {
    const lmeval_sample& sa = a[matched[k].first];
    const lmeval_sample& sb = b[matched[k].second];
    if (!by_filter.count(sa.filter)) {
      filters.push_back(sa.filter);
      pair_summary& s = by_filter[sa.filter];
      s.probe = "lm-eval";
      s.cond_a = "A:" + sa.filter;
      s.cond_b = "B:" + sa.filter;
    }
    pair_item row = row_make(rep.records[2 * k], rep.records[2 * k + 1], "A:" + sa.filter, "B:" + sb.filter,
                             {.judge = false, .one_vocab = false});
    row.correct_a = sa.correct;
    row.correct_b = sb.correct;
    row.flip = flip_of(sa, sb);
    if (sa.doc_hash != sb.doc_hash) {
      row.status = STATUS_NOT_COMPARABLE;
      row.d.identical = false;
      row.correct_a = row.correct_b = std::nullopt;
      row.flip = FLIP_NONE;
      row.reason = "different documents (doc_hash " + short_hash(sa.doc_hash) + " in A, " + short_hash(sb.doc_hash) +
                   " in B)";
      rep.notes.push_back("doc_id " + std::to_string(sa.doc_id) + " (" + sa.filter + "): " + row.reason +
                          ": not compared");
    }
    summary_add(by_filter[sa.filter], std::move(row));
  }
  for (const std::string& f : filters) {
    pair_summary& s = by_filter[f];
    std::stable_sort(s.rows.begin(), s.rows.end(),
                     [](const pair_item& x, const pair_item& y) { return natural_less(x.item_id, y.item_id); });
    rep.pairs.push_back(std::move(s));
  }
  const size_t only_a = a.size() - matched.size(), only_b = b.size() - matched.size();
  if (only_a || only_b)
    rep.notes.push_back(std::to_string(only_a) + " sample(s) only in A and " + std::to_string(only_b) +
                        " only in B were left out (matched by doc_id and filter)");
  significance_apply(rep);  // McNemar on each filter's flips, as for runs
  int64_t comparable = 0;
  for (const pair_summary& s : rep.pairs) comparable += s.items - s.not_comparable;
  if (comparable == 0)
    throw input_error(std::string("compare: nothing comparable: ") +
                      (matched.empty() ? "no doc_id and filter is in both sample files"
                                       : "every doc matched by doc_id and filter has another doc_hash (a different document)"));
  return rep;
}

namespace {

void python_string(const std::string& v, std::string& out) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (const char c : v) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (u < 0x20) out += std::string("\\u00") + hex[u >> 4] + hex[u & 15];
        else out += c;  // ensure_ascii=False: everything else as it is
    }
  }
  out += '"';
}

// A float as Python's repr writes it: the shortest digits that read back, fixed for exponents -4 to
// 15 (".0" on an integral value), else d.ddde+XX.
std::string python_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string t(buf, r.ptr);  // [-]d[.ddd]e[+-]XX
  const size_t e_at = t.find('e');
  const bool neg = t[0] == '-';
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < e_at; ++i)
    if (t[i] != '.') digits += t[i];
  const int exp = std::stoi(t.substr(e_at + 1));
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return out + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    const size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
    return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int a = exp < 0 ? -exp : exp;
  return out + (exp < 0 ? "e-" : "e+") + (a < 10 ? "0" : "") + std::to_string(a);
}

// An integer too large for 64 bits, kept as its digits: JSON allows it and Python reads it exactly,
// so lm-eval hashes its digits. Held as a string with this prefix while the document is an
// ordered_json, written back as the bare digits (python_dumps, sample lines).
constexpr const char* BIG_INT = "\x01" "detaudit-big-int:";

bool big_int_text(const std::string& s) { return s.rfind(BIG_INT, 0) == 0; }

void python_dumps(const ordered_json& j, int depth, std::string& out) {
  const std::string pad(static_cast<size_t>(2 * (depth + 1)), ' '), close(static_cast<size_t>(2 * depth), ' ');
  if (j.is_object() || j.is_array()) {
    if (j.empty()) {
      out += j.is_object() ? "{}" : "[]";
      return;
    }
    out += j.is_object() ? "{\n" : "[\n";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      out += (first ? "" : ",\n") + pad;
      first = false;
      if (j.is_object()) {
        python_string(it.key(), out);
        out += ": ";
      }
      python_dumps(*it, depth + 1, out);
    }
    out += "\n" + close + (j.is_object() ? "}" : "]");
  } else if (j.is_string()) {
    const std::string& v = j.get_ref<const std::string&>();
    if (big_int_text(v)) out += v.substr(std::string(BIG_INT).size());
    else python_string(v, out);
  } else if (j.is_boolean()) {
    out += j.get<bool>() ? "true" : "false";
  } else if (j.is_null()) {
    out += "null";
  } else if (j.is_number_float()) {
    out += python_float(j.get<double>());
  } else {
    out += j.dump();
  }
}

// Builds an ordered_json as nlohmann's own parser does, but an integer literal that does not fit 64
// bits becomes a BIG_INT string instead of a rounded double.
struct doc_sax : nlohmann::json_sax<ordered_json> {
  ordered_json root;
  std::vector<ordered_json*> stack;
  std::string pending_key;
  bool refused = false;

  void put(ordered_json v) {
    if (stack.empty()) root = std::move(v);
    else if (stack.back()->is_array()) stack.back()->push_back(std::move(v));
    else (*stack.back())[pending_key] = std::move(v);  // a repeated key: the last value, at the first place, as Python's dict
  }
  bool open(ordered_json v) {
    put(std::move(v));
    ordered_json* at = stack.empty() ? &root : stack.back()->is_array() ? &stack.back()->back() : &(*stack.back())[pending_key];
    stack.push_back(at);
    return true;
  }
  bool null() override { put(nullptr); return true; }
  bool boolean(bool v) override { put(v); return true; }
  bool number_integer(number_integer_t v) override { put(v); return true; }
  bool number_unsigned(number_unsigned_t v) override { put(v); return true; }
  bool number_float(number_float_t v, const string_t& lexeme) override {
    if (lexeme.find_first_of(".eE") == std::string::npos) put(std::string(BIG_INT) + lexeme);
    else put(v);
    return true;
  }
  bool string(string_t& v) override {
    refused = refused || big_int_text(v);
    put(v);
    return true;
  }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return open(ordered_json::object()); }
  bool key(string_t& k) override { pending_key = k; return true; }
  bool end_object() override { stack.pop_back(); return true; }
  bool start_array(std::size_t) override { return open(ordered_json::array()); }
  bool end_array() override { stack.pop_back(); return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

// The item's document: its dataset line in the line's own key order, else {"question": prompt}.
ordered_json doc_of(const lmeval_doc& d) {
  if (!d.doc.empty()) {
    doc_sax sax;
    if (ordered_json::sax_parse(d.doc, &sax) && !sax.refused && sax.root.is_object()) return sax.root;
  }
  return {{"question", d.prompt}};
}

// A sample line as JSON text, BIG_INT strings written back as their digits.
std::string sample_line(const ordered_json& j) {
  std::string text = j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  const std::string quoted = "\"\\u0001detaudit-big-int:";
  for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at)) {
    const size_t end = text.find('"', at + quoted.size());
    text.replace(at, end + 1 - at, text.substr(at + quoted.size(), end - at - quoted.size()));
  }
  return text;
}

}  // namespace

std::string lmeval_python_dumps(const ordered_json& j) {
  std::string out;
  python_dumps(j, 0, out);
  return out;
}

std::string lmeval_doc_hash(const ordered_json& doc) { return sha256_hex(lmeval_python_dumps(doc)); }

std::vector<ordered_json> lmeval_samples_of(const record& r, int64_t doc_id, const lmeval_doc& d) {
  const ordered_json doc = doc_of(d);
  const ordered_json args = ordered_json::parse(r.request.dump(-1, ' ', false, json::error_handler_t::replace));
  struct variant {
    const char* filter;
    std::string grader;
    std::optional<std::string> extracted, own;  // from the text as sent back; from its final answer
  };
  std::vector<variant> variants;
  const std::string final_text = final_answer(r.text);
  if (r.grader == "gsm8k" || r.grader == "gsm8k-flex") {  // lm-eval's gsm8k task has both filters, whichever decides flips
    variants.push_back({"strict-match", "gsm8k", gsm8k_extract_strict(r.text), gsm8k_extract_strict(final_text)});
    variants.push_back({"flexible-extract", "gsm8k-flex", gsm8k_extract_flexible(r.text), gsm8k_extract_flexible(final_text)});
  } else {
    variants.push_back({"none", r.grader, r.text, final_text});
  }
  auto graded = [&r](const std::string& grader, const std::string& text) -> std::optional<bool> {
    if (r.reference.empty() || grader.empty()) return std::nullopt;
    return grade(grader, text, r.reference);
  };
  std::vector<ordered_json> out;
  for (const variant& v : variants) {
    ordered_json j = {{"doc_id", doc_id},
                      {"doc", doc},
                      {"target", r.reference},
                      {"arguments", {{"gen_args_0", {{"arg_0", d.prompt}, {"arg_1", args}}}}},
                      {"resps", ordered_json::array({ordered_json::array({r.text})})},
                      {"filtered_resps", ordered_json::array({v.extracted.value_or("[invalid]")})},
                      {"filter", v.filter}};
    const std::optional<bool> ok = graded(v.grader, r.text);
    j["metrics"] = ok ? ordered_json::array({"exact_match"}) : ordered_json::array();
    j["doc_hash"] = lmeval_doc_hash(doc);
    j["prompt_hash"] = r.prompt_sha256.empty() ? sha256_hex(d.prompt) : r.prompt_sha256;
    j["target_hash"] = sha256_hex(r.reference);
    if (ok) j["exact_match"] = *ok ? 1.0 : 0.0;
    // detaudit's own reading: the final answer after any thinking block, as its graders read it.
    ordered_json own = {{"final_answer", final_text}, {"filtered", v.own.value_or("[invalid]")}};
    if (const std::optional<bool> g = graded(v.grader, final_text)) own["exact_match"] = *g ? 1.0 : 0.0;
    j["detaudit"] = std::move(own);
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<std::string> lmeval_export(const std::vector<record>& records, const std::vector<lmeval_doc>& docs,
                                       const std::string& dir) {
  std::map<std::string, size_t> doc_index;
  for (size_t i = 0; i < docs.size(); ++i) doc_index.emplace(docs[i].item_id, i);
  std::set<std::string> labels;
  for (const record& r : records) labels.insert(json_str(r.target, "label"));
  // file name -> (doc_id, filter) -> line; later records of the same request replace earlier ones.
  std::map<std::string, std::map<std::pair<int64_t, std::string>, ordered_json>> files;
  for (const record& r : records) {
    auto d = doc_index.find(r.item_id);
    if (d == doc_index.end() || !r.error.empty()) continue;
    std::string name = "samples_" + r.probe + "_" + r.condition;
    if (labels.size() > 1) name += "_" + json_str(r.target, "label");
    if (r.repetition > 0) name += "_r" + std::to_string(r.repetition);
    name += ".jsonl";
    const int64_t doc_id = static_cast<int64_t>(d->second);
    for (ordered_json& j : lmeval_samples_of(r, doc_id, docs[d->second])) {
      const std::string filter = j["filter"].get<std::string>();
      files[name][{doc_id, filter}] = std::move(j);
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw input_error("--export lm-eval: cannot create '" + dir + "': " + ec.message());
  std::vector<std::string> written;
  for (const auto& [name, lines] : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::string text;
    for (const auto& [key, j] : lines) text += sample_line(j) + "\n";
    text_file_write(path, text, "--export lm-eval");
    written.push_back(path);
  }
  return written;
}

}  // namespace detaudit::reports
