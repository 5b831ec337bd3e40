// The known-answer suite's harness: planted answers built in a few lines, the verdict server
// started as a child process, the real `detaudit` run against it, and each report row checked
// against the verdict worked out by hand from the planted data and the rules of
// /work/notes/issue16-design.md (the spec the tests are written from, not the code's output).
//
// A case reads:
//
//   planted p(OPENAI_CHAT);
//   p.item("euro", {answer({"Price", ":", " ", "\xE2", "\x82", "\xAC"}),      // alone
//                   answer({"Price", ":", " ", "\xE2", "\x82", "\xAD"})});    // control
//   const outcome r = run_planted(p, "--probe repeat");
//   check_verdict(r.row("alone", "control"), {.status = "differs", .token_index = 5, .char_offset = 9});
//   CHECK(r.exit_code == 1);
//
// Tokens are strings; one that is not valid UTF-8 ("\xE2") is a byte token, spelled the way the
// answer's form() says (default: the dialect's own spelling).
#pragma once

#include <doctest/doctest.h>

#include <climits>
#include <cmath>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "child_process.h"
#include "test_util.h"

#ifndef DETAUDIT_VERDICT_SERVER_DEFAULT
#define DETAUDIT_VERDICT_SERVER_DEFAULT ""
#endif

namespace detaudit::verdicts_test {

using json = nlohmann::json;
namespace test = ::detaudit::test;

// ---- dialects ----

// What one dialect's responses can carry, and the flags that make detaudit speak it.
struct dialect {
  const char* name;
  const char* api;        // --api
  bool raw;               // --raw (else --chat)
  bool older;             // llama.cpp's older completion_probabilities shape (probabilities, no ids)
  bool ids;               // token ids in the answer (llama.cpp: made from the bytes)
  bool bytes_field;       // a per-token "bytes" array exists in the shape
  bool alt_list;          // alternatives are a list (duplicates survive), not a {token: logprob} object
  bool probs;             // alternatives travel as probabilities
  const char* byte_form;  // how this dialect's servers spell a byte token
};

inline const dialect OPENAI_CHAT{"openai-chat", "openai-chat", false, false, false, true, true, false, "openai"};
inline const dialect OPENAI_COMPLETIONS{"openai-completions", "openai-completions", true, false, false, false, false, false, "openai"};
inline const dialect LLAMACPP{"llamacpp", "llamacpp", true, false, true, true, true, false, "replacement"};
inline const dialect LLAMACPP_OLDER{"llamacpp-older", "llamacpp", true, true, false, false, true, true, "sentencepiece"};
inline const dialect OLLAMA{"ollama", "ollama", true, false, false, true, true, false, "escape"};
// llama.cpp's OpenAI-compatible chat route (--api llamacpp --chat): OpenAI's shape with ids.
inline const dialect LLAMACPP_CHAT{"llamacpp-chat", "llamacpp", false, false, true, true, true, false, "replacement"};

// The margin detaudit must find between two planted log-probs. A dialect that sends
// probabilities sends exp(lp), and the reader takes its log: the expected value goes the same way.
inline double margin(const dialect& d, double top1, double top2) {
  if (!d.probs) return top1 - top2;
  return std::log(std::exp(top1)) - std::log(std::exp(top2));
}

// ---- planted answers ----

inline bool utf8_valid(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

struct alt {
  std::string token;
  double logprob;
};

// A planted answer under construction (verdict_plant.h, ANSWER).
class answer {
 public:
  answer(std::initializer_list<std::string> tokens) : tokens_(tokens) {}
  answer(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}

  answer& form(const std::string& f) { form_ = f; return *this; }
  answer& top(size_t step, std::vector<alt> alts) { tops_[step] = std::move(alts); return *this; }
  answer& logprob(size_t step, double lp) { logprobs_[step] = lp; return *this; }
  answer& id(size_t step, int id) { ids_[step] = id; return *this; }
  answer& omit(const std::string& what) { extra_["omit"].push_back(what); return *this; }
  // Any other ANSWER field: cached_tokens, max_seqs_in_step, delay_ms, text, finish, logit_hashes, ...
  answer& set(const std::string& key, json v) { extra_[key] = std::move(v); return *this; }
  answer& error(int status, const std::string& message) { return set("error", {{"status", status}, {"message", message}}); }

  json to_json(const dialect& d) const {
    json j = extra_.is_null() ? json::object() : extra_;
    j["tokens"] = json::array();
    for (size_t i = 0; i < tokens_.size(); ++i) {
      json t = token_json(tokens_[i], d);
      if (auto it = logprobs_.find(i); it != logprobs_.end()) t["logprob"] = it->second;
      if (auto it = ids_.find(i); it != ids_.end()) t["id"] = it->second;
      if (auto it = tops_.find(i); it != tops_.end()) {
        t["top"] = json::array();
        for (const alt& a : it->second) {
          json at = token_json(a.token, d);
          at["logprob"] = a.logprob;
          t["top"].push_back(std::move(at));
        }
      }
      j["tokens"].push_back(std::move(t));
    }
    return j;
  }

 private:
  json token_json(const std::string& s, const dialect& d) const {
    if (utf8_valid(s)) return {{"text", s}};
    json bytes = json::array();
    for (char c : s) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
    return {{"bytes", bytes}, {"form", form_.empty() ? d.byte_form : form_}};
  }

  std::vector<std::string> tokens_;
  std::string form_;
  std::map<size_t, std::vector<alt>> tops_;
  std::map<size_t, double> logprobs_;
  std::map<size_t, int> ids_;
  json extra_;
};

// One server's cases file under construction (verdict_plant.h), for one dialect.
class planted {
 public:
  explicit planted(const dialect& d) : d_(d) {
    if (d.older) shape_ = "older";
    if (std::string(d.api) == "llamacpp") cfg_["server"]["props"] = true;
    if (std::string(d.api) == "ollama") cfg_["server"]["api_version"] = true;
    cfg_["cases"] = json::object();
  }
  planted& server(const std::string& key, json v) { cfg_["server"][key] = std::move(v); return *this; }
  // A prompt and its temperature-0 answers in arrival order (alone, control, then the probes' conditions).
  planted& item(const std::string& prompt, const std::vector<answer>& answers, json extra = json::object()) {
    json c = std::move(extra);
    for (const answer& a : answers) c["answers"].push_back(a.to_json(d_));
    if (!shape_.empty()) c["shape"] = shape_;
    if (d_.ids) c["auto_ids"] = true;
    cfg_["cases"][prompt] = std::move(c);
    prompts_.push_back(prompt);
    return *this;
  }
  // The answer every temperature > 0 request of `prompt` starts with, and whether seeds are honoured.
  planted& seeded(const std::string& prompt, const answer& base, bool honour) {
    cfg_["cases"][prompt]["seed_answer"] = base.to_json(d_);
    cfg_["cases"][prompt]["seed"] = honour ? "honour" : "ignore";
    return *this;
  }
  planted& case_field(const std::string& prompt, const std::string& key, json v) {
    cfg_["cases"][prompt][key] = std::move(v);
    return *this;
  }
  const json& cases() const { return cfg_; }
  const dialect& d() const { return d_; }
  const std::vector<std::string>& prompts() const { return prompts_; }
  // The detaudit flags that speak this dialect.
  std::string api_flags() const { return std::string("--api ") + d_.api + (d_.raw ? " --raw" : " --chat"); }

 private:
  const dialect& d_;
  std::string shape_;
  json cfg_ = {{"server", json::object()}};
  std::vector<std::string> prompts_;
};

// ---- processes and files ----

inline std::string fresh_dir() {
  static int n = 0;
  return test::process_scratch_dir("verdicts_" + std::to_string(n++));
}

inline std::string file_write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
  return path;
}

// One prompt per line: the item ids are the line numbers ("1", "2", ...).
inline std::string prompts_write(const std::string& dir, const std::vector<std::string>& prompts, const std::string& name = "prompts.txt") {
  std::string text;
  for (const std::string& p : prompts) text += p + "\n";
  return file_write(dir, name, text);
}

// detaudit_verdict_server as a child process (child_process.h) on 127.0.0.1; killed when it goes
// out of scope.
class verdict_server {
 public:
  verdict_server(const json& cases, int port = 0) : dir_(fresh_dir()) {
    const std::string bin = test::setting("DETAUDIT_VERDICT_SERVER", DETAUDIT_VERDICT_SERVER_DEFAULT);
    REQUIRE_MESSAGE(!bin.empty(), "DETAUDIT_VERDICT_SERVER is not set and no default was configured");
    const std::string cases_path = file_write(dir_, "cases.json", cases.dump(2));
    log_ = dir_ + "/requests.jsonl";
    test::child_spec spec;
    spec.argv = {bin, "--cases", cases_path, "--log", log_, "--port", std::to_string(port)};
    spec.stdout_pipe = true;
    spec.stderr_path = dir_ + "/stderr";
    proc_.emplace(std::move(spec));
    const std::string line = proc_->first_line(30);
    const std::string prefix = "listening on http://127.0.0.1:";
    INFO("verdict server stdout: " << line << "\nstderr: " << test::file_text(dir_ + "/stderr"));
    REQUIRE(line.rfind(prefix, 0) == 0);
    port_ = std::stoi(line.substr(prefix.size()));
  }
  verdict_server(const verdict_server&) = delete;
  verdict_server& operator=(const verdict_server&) = delete;
  ~verdict_server() { stop(); }

  void stop() {
    if (proc_) proc_->kill9();
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The generation requests received so far, in arrival order (the server's --log).
  std::vector<json> requests() const {
    std::vector<json> out;
    std::istringstream in(test::file_text(log_));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(json::parse(line));
    return out;
  }

 private:
  std::string dir_, log_;
  std::optional<test::child_process> proc_;
  int port_ = 0;
};

// `detaudit ARGS`, stdout and stderr apart.
inline test::cmd_result detaudit_cli(const std::string& args) { return test::run_cmd(test::detaudit_bin() + " " + args); }

// The flags every run of the suite shares: small answers, no retries, a JSON report, --fail-on any.
inline std::string run_flags(const std::string& out_dir, int n_predict = 16, const std::string& fail_on = "any") {
  return "--out " + out_dir + " --format json --n-predict " + std::to_string(n_predict) +
         " --retries 0 --timeout 20 --fail-on " + fail_on;
}

// ---- outcomes and verdicts ----

struct outcome {
  int exit_code = -1;
  std::string out, err;
  json report;                  // stdout parsed, or null when it is not JSON
  std::vector<json> requests;   // what the server received
  std::string run_dir;

  // The row of item `item` in the pair cond_a vs cond_b (e.g. "alone", "seed-fixed#2", "B:cache-warm").
  const json& row(const std::string& cond_a, const std::string& cond_b, const std::string& item = "1") const {
    if (report.is_object() && report.contains("pairs"))
      for (const json& p : report["pairs"])
        for (const json& r : p["rows"])
          if (r.value("cond_a", "") == cond_a && r.value("cond_b", "") == cond_b && r.value("item_id", "") == item) return r;
    FAIL("no row " << cond_a << " vs " << cond_b << " for item " << item << "; stdout: " << out.substr(0, 2000) << "\nstderr: " << err);
    static const json none;
    return none;
  }
  // The pair whose rows are cond_a vs cond_b (a seed pair's cond_b reads "seed-fixed#k").
  const json& pair(const std::string& cond_a, const std::string& cond_b) const {
    if (report.is_object() && report.contains("pairs"))
      for (const json& p : report["pairs"])
        if (p.value("cond_a", "") == cond_a && p.value("cond_b", "") == cond_b) return p;
    FAIL("no pair " << cond_a << " vs " << cond_b << "; stdout: " << out.substr(0, 2000) << "\nstderr: " << err);
    static const json none;
    return none;
  }
};

inline json json_or_null(const std::string& s) {
  const json j = json::parse(s, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json(nullptr) : j;
}

inline outcome outcome_of(const test::cmd_result& c, const std::string& run_dir = "") {
  outcome o;
  o.exit_code = c.exit_code;
  o.out = c.out;
  o.err = c.err;
  o.report = json_or_null(c.out);
  o.run_dir = run_dir;
  return o;
}

// Starts the planted server, writes the prompts (one line per item()), runs `detaudit run` in
// the dialect with run_flags() and `args`, and returns what happened.
inline outcome run_planted(const planted& p, const std::string& args) {
  verdict_server srv(p.cases());
  const std::string dir = fresh_dir();
  const std::string prompts = prompts_write(dir, p.prompts());
  const std::string run_dir = dir + "/run";
  outcome o = outcome_of(detaudit_cli("run --target " + srv.url() + " " + p.api_flags() + " --prompts " + prompts + " " +
                                  run_flags(run_dir) + " " + args),
                         run_dir);
  o.requests = srv.requests();
  return o;
}

// token_index / char_offset of a row one of whose conditions was never sent (the record is only a
// not-exercised flag, with no text): where an absent answer parts from a real one is no verdict the
// rules define, so such cases do not check it.
inline constexpr int64_t UNSENT = INT64_MIN;

// The verdict of one row, worked out by hand. Margins: nullopt expects null.
struct verdict {
  // Every member has an initializer, so that a case names only what it expects to differ.
  std::string status = "";
  int64_t token_index = -1;
  int64_t char_offset = -1;
  std::optional<double> margin_a = std::nullopt, margin_b = std::nullopt;
  bool exercised = true;
  std::string reason = "";                       // a stable part of the reason; "" expects an empty reason
  std::string flip = "none";
  bool not_argmax_a = false, not_argmax_b = false;
  int64_t not_argmax_step_a = -1, not_argmax_step_b = -1;
  std::optional<int64_t> hash_step = std::nullopt;  // checked when given
  int64_t drift_step = -1;                           // log-prob drift before the tokens part
  std::optional<double> max_drift = std::nullopt;    // checked when given
};

// A row not exercised; `reason` a stable part of its reason. The answers agree unless the
// divergence (still shown for information) is given.
inline verdict not_exercised(const std::string& reason, int64_t token_index = -1, int64_t char_offset = -1) {
  return {.status = "not_exercised", .token_index = token_index, .char_offset = char_offset, .exercised = false, .reason = reason};
}
// A row whose condition was never sent (see UNSENT).
inline verdict unsent(const std::string& reason) { return not_exercised(reason, UNSENT, UNSENT); }

inline void check_margin(const json& row, const char* key, const std::optional<double>& want) {
  CAPTURE(key);
  const json v = row.value(key, json("<absent>"));
  if (!want) {
    CHECK(v.is_null());
    return;
  }
  REQUIRE(v.is_number());
  CHECK(v.get<double>() == *want);
}

inline void check_verdict(const json& row, const verdict& v) {
  INFO("row: " << row.dump());
  CHECK(row.value("status", "<absent>") == v.status);
  CHECK(row.value("identical", json(nullptr)) == json(v.status == "identical" || v.status == "drifted"));
  CHECK(row.value("error", json(nullptr)) == json(v.status == "error"));
  if (v.status == "error") return;
  if (v.token_index != UNSENT) CHECK(row.value("token_index", json(nullptr)) == json(v.token_index));
  if (v.char_offset != UNSENT) CHECK(row.value("char_offset", json(nullptr)) == json(v.char_offset));
  check_margin(row, "margin_a", v.margin_a);
  check_margin(row, "margin_b", v.margin_b);
  CHECK(row.value("exercised", json(nullptr)) == json(v.exercised));
  const std::string reason = row.value("reason", "<absent>");
  if (v.reason.empty()) CHECK(reason == "");
  else CHECK(reason.find(v.reason) != std::string::npos);
  CHECK(row.value("flip", "<absent>") == v.flip);
  CHECK(row.value("not_argmax_a", json(nullptr)) == json(v.not_argmax_a));
  CHECK(row.value("not_argmax_b", json(nullptr)) == json(v.not_argmax_b));
  CHECK(row.value("not_argmax_step_a", json(nullptr)) == json(v.not_argmax_step_a));
  CHECK(row.value("not_argmax_step_b", json(nullptr)) == json(v.not_argmax_step_b));
  if (v.hash_step) CHECK(row.value("hash_step", json(nullptr)) == json(*v.hash_step));
  CHECK(row.value("drift_step", json(nullptr)) == json(v.drift_step));
  if (v.max_drift) check_margin(row, "max_drift", v.max_drift);
}

// A pair's counts: rows, rows counted as differing, errors, rows not exercised.
inline void check_counts(const json& pair, int64_t items, int64_t differ, int64_t errors, int64_t not_exercised) {
  INFO("pair: " << pair.value("cond_a", "") << " vs " << pair.value("cond_b", ""));
  CHECK(pair.value("items", int64_t{-1}) == items);
  CHECK(pair.value("differ", int64_t{-1}) == differ);
  CHECK(pair.value("errors", int64_t{-1}) == errors);
  CHECK(pair.value("not_exercised", int64_t{-1}) == not_exercised);
}

// One TEST_CASE per dialect for a rule written as `void fn(const dialect&)`.
#define VERDICTS_EACH_DIALECT(title, fn)                                                  \
  TEST_CASE("verdicts openai-chat: " title) { fn(OPENAI_CHAT); }                        \
  TEST_CASE("verdicts openai-completions: " title) { fn(OPENAI_COMPLETIONS); }          \
  TEST_CASE("verdicts llamacpp: " title) { fn(LLAMACPP); }                                \
  TEST_CASE("verdicts llamacpp-older: " title) { fn(LLAMACPP_OLDER); }                    \
  TEST_CASE("verdicts ollama: " title) { fn(OLLAMA); }

}  // namespace detaudit::verdicts_test
