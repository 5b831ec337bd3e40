// The oracle's file (oracle.json): its shape, read and written whole (reports/audit/oracle_data.h).
#include "reports/audit/oracle_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "reports/audit/file_write.h"
#include "util/error.h"

namespace detaudit::reports {
namespace {

json step_to_json(const oracle_step& s) {
  return {{"id", s.id},           {"token", s.token},               {"logprob", s.logprob},           {"rank", s.rank},
          {"best_id", s.best_id}, {"best_token", s.best_token},     {"best_logprob", s.best_logprob},
          {"second_logprob", s.second_logprob}};
}

const json& field(const json& o, const char* key, const std::string& where) {
  if (!o.is_object() || !o.contains(key)) throw input_error(where + ": missing field '" + key + "'");
  return o[key];
}

double num(const json& o, const char* key, const std::string& where) {
  const json& v = field(o, key, where);
  if (!v.is_number() || !std::isfinite(v.get<double>())) throw input_error(where + ": field '" + key + "' must be a number");
  return v.get<double>();
}

int64_t integer(const json& o, const char* key, const std::string& where) {
  const json& v = field(o, key, where);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
    throw input_error(where + ": field '" + key + "' must be an integer");
  return v.get<int64_t>();
}

// A count or a sum of distances: an integer / number >= 0.
int64_t count_at(const json& o, const char* key, const std::string& where) {
  const int64_t n = integer(o, key, where);
  if (n < 0) throw input_error(where + ": field '" + key + "' must be >= 0");
  return n;
}

double nonneg_at(const json& o, const char* key, const std::string& where) {
  const double x = num(o, key, where);
  if (x < 0) throw input_error(where + ": field '" + key + "' must be >= 0");
  return x;
}

std::string str(const json& o, const char* key, const std::string& where) {
  const json& v = field(o, key, where);
  if (!v.is_string()) throw input_error(where + ": field '" + key + "' must be a string");
  return v.get<std::string>();
}

oracle_step step_from_json(const json& j, const std::string& where) {
  oracle_step s;
  s.id = static_cast<int32_t>(integer(j, "id", where));
  s.token = str(j, "token", where);
  s.logprob = num(j, "logprob", where);
  s.rank = static_cast<int>(integer(j, "rank", where));
  s.best_id = static_cast<int32_t>(integer(j, "best_id", where));
  s.best_token = str(j, "best_token", where);
  s.best_logprob = num(j, "best_logprob", where);
  s.second_logprob = num(j, "second_logprob", where);
  return s;
}

oracle_response response_from_json(const json& r, const std::string& w) {
  oracle_response o;
  o.alignment = str(r, "alignment", w);
  o.skipped = str(r, "skipped", w);
  o.note = str(r, "note", w);
  o.prompt_hash = str(r, "prompt_hash", w);
  o.prompt_tokens = count_at(r, "prompt_tokens", w);
  const json& steps = field(r, "steps", w);
  if (!steps.is_array()) throw input_error(w + ": field 'steps' must be an array");
  for (size_t k = 0; k < steps.size(); ++k) o.steps.push_back(step_from_json(steps[k], w + ".steps[" + std::to_string(k) + "]"));
  const json& f = field(r, "fidelity", w);
  o.fid_n = count_at(f, "n", w + ".fidelity");
  o.fid_sum = nonneg_at(f, "sum", w + ".fidelity");
  o.fid_max = nonneg_at(f, "max", w + ".fidelity");
  o.fid_equal = count_at(f, "equal", w + ".fidelity");
  o.kl_n = count_at(f, "kl_n", w + ".fidelity");
  o.kl_sum = num(f, "kl_sum", w + ".fidelity");
  o.spread_n = count_at(f, "spread_n", w + ".fidelity");
  o.spread_max = nonneg_at(f, "spread_max", w + ".fidelity");
  if (o.fid_equal > o.fid_n) throw input_error(w + ".fidelity: 'equal' exceeds 'n'");
  return o;
}

}  // namespace

bool oracle_logprob_usable(double v) { return std::isfinite(v) && v >= ORACLE_LOWEST_LOGPROB; }

void oracle_step_fidelity(oracle_response& o, const std::vector<std::pair<double, double>>& server_exact) {
  int64_t n = 0;
  double lo = 0, hi = 0;
  for (const auto& [server, exact] : server_exact) {
    if (!oracle_logprob_usable(server)) continue;  // "-inf" written as a huge number
    const double d = server - exact;
    lo = n == 0 ? d : std::min(lo, d);
    hi = n == 0 ? d : std::max(hi, d);
    ++n;
    ++o.fid_n;
    o.fid_sum += std::fabs(d);
    o.fid_max = std::max(o.fid_max, std::fabs(d));
    if (server == exact) ++o.fid_equal;
  }
  if (n < 2) return;
  ++o.spread_n;
  o.spread_max = std::max(o.spread_max, hi - lo);
}

json oracle_to_json(const oracle_data& d) {
  json responses = json::array();
  for (const auto& [key, o] : d.responses) {
    json steps = json::array();
    for (const oracle_step& s : o.steps) steps.push_back(step_to_json(s));
    responses.push_back({{"key", key},
                         {"alignment", o.alignment},
                         {"skipped", o.skipped},
                         {"note", o.note},
                         {"prompt_hash", o.prompt_hash},
                         {"prompt_tokens", o.prompt_tokens},
                         {"steps", std::move(steps)},
                         {"fidelity", {{"n", o.fid_n}, {"sum", o.fid_sum}, {"max", o.fid_max}, {"equal", o.fid_equal},
                                       {"kl_n", o.kl_n}, {"kl_sum", o.kl_sum}, {"spread_n", o.spread_n},
                                       {"spread_max", o.spread_max}}}});
  }
  return {{"schema", ORACLE_FILE_SCHEMA}, {"model", d.model},  {"cost", d.cost},
          {"notes", d.notes},            {"responses", std::move(responses)}};
}

oracle_data oracle_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw input_error(where + ": expected a JSON object");
  if (!json_depth_within(j, JSON_MAX_DEPTH))
    throw input_error(where + ": nested deeper than " + std::to_string(JSON_MAX_DEPTH) + " levels");
  const int64_t schema = integer(j, "schema", where);
  if (schema == 1)
    throw input_error(where + ": oracle file schema 1, written before the tie bound was measured on log-prob "
                      "differences: recompute it with --oracle");
  if (schema != ORACLE_FILE_SCHEMA)
    throw input_error(where + ": oracle file schema " + std::to_string(schema) + ", this detaudit reads " +
                      std::to_string(ORACLE_FILE_SCHEMA));
  oracle_data d;
  d.model = field(j, "model", where);
  d.cost = field(j, "cost", where);
  const json& notes = field(j, "notes", where);
  if (!notes.is_array()) throw input_error(where + ": field 'notes' must be an array");
  for (const json& n : notes)
    if (n.is_string()) d.notes.push_back(n.get<std::string>());
  const json& rs = field(j, "responses", where);
  if (!rs.is_array()) throw input_error(where + ": field 'responses' must be an array");
  for (size_t i = 0; i < rs.size(); ++i) {
    const std::string w = where + ": responses[" + std::to_string(i) + "]";
    const std::string key = str(rs[i], "key", w);
    d.responses[key] = response_from_json(rs[i], w);
  }
  return d;
}

void oracle_write(const std::string& dir, const oracle_data& d) {
  const std::string path = (std::filesystem::path(dir) / ORACLE_FILE).string();
  const std::string tmp = path + ".tmp";
  // Token texts are pieces of the vocabulary, and a byte-level piece can be part of a UTF-8
  // sequence: written with U+FFFD for such bytes (the texts are for reading; ids are what count).
  text_file_write(tmp, oracle_to_json(d).dump(-1, ' ', false, json::error_handler_t::replace) + "\n", "oracle");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw input_error("oracle: cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
}

bool oracle_present(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(dir) / ORACLE_FILE, ec);
}

oracle_data oracle_read(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / ORACLE_FILE).string();
  std::ifstream in(path);
  if (!in) throw input_error(path + ": cannot open the oracle file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw input_error(path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  return oracle_from_json(j, path);
}

}  // namespace detaudit::reports
