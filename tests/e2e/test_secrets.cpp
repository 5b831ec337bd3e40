// Secrets never reach an artefact: a real `detaudit serve` guarded by a random API key, `detaudit
// run` against it with the key from --api-key-env (right key, wrong key, a failing item, a dead
// target, two dialects, an lm-eval export), `detaudit report` in every format and `detaudit
// bundle`; then every file written, the bundles' unpacked tarballs, the server's pages and the
// stdout and stderr of every command and of the server are searched for the key, "Bearer KEY",
// the wrong key and pieces of each. A second server echoes the key it is sent, lower-cased and
// cut short, into every field of every answer and of its capability routes: the same search,
// case-insensitive and for any 12 characters of the key, finds nothing either. The search itself
// (test_util.h, detaudit::test::secrets) is tested in-process: tests/unit/test_secrets.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "serve_util.h"
#include "synth_util.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace detaudit;
using json = nlohmann::json;
using test::secrets::leaks;
using test::secrets::lowered;
using test::secrets::random_key;

namespace {

// `detaudit serve` with its stdout and stderr both kept in files (everything it ever prints),
// the key in its environment only.
struct logged_server {
  std::optional<test::child_process> proc;
  std::string url;
  std::string out_path, err_path;

  logged_server(const std::string& dir, const std::vector<std::string>& extra, const std::string& env_name, const std::string& key)
      : out_path(dir + "/serve.stdout"), err_path(dir + "/serve.stderr") {
    test::child_spec spec;
    spec.argv = {test::detaudit_bin(), "serve", "-m", test::fixture("models/stories260K.gguf"), "--port", "0", "-t", "1"};
    spec.argv.insert(spec.argv.end(), extra.begin(), extra.end());
    spec.env = {{env_name, key}};
    spec.stdout_path = out_path;
    spec.stderr_path = err_path;
    proc.emplace(std::move(spec));
    const std::string prefix = "listening on ";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    std::string line;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string out = test::file_text(out_path);
      if (out.find('\n') != std::string::npos) {
        line = out.substr(0, out.find('\n'));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    INFO("server stdout: " << line << " stderr: " << test::file_text(err_path));
    REQUIRE(line.rfind(prefix, 0) == 0);
    url = line.substr(prefix.size());
  }
  logged_server(const logged_server&) = delete;
  logged_server& operator=(const logged_server&) = delete;

  int stop() { return proc->stop(); }
};

// Everything a command showed, kept under a name for the search at the end.
struct transcript {
  std::vector<std::pair<std::string, std::string>> texts;

  test::cmd_result run(const std::string& name, const std::string& cmdline) {
    const test::cmd_result r = test::run_cmd(cmdline);
    texts.push_back({name + " (stdout)", r.out});
    texts.push_back({name + " (stderr)", r.err});
    return r;
  }
};

std::string prompts_file(const std::string& dir) {
  const std::string path = dir + "/prompts.txt";
  std::ofstream out(path);
  out << "Once upon a time\n";
  out << "The little dog\n";
  std::string long_prompt;  // more tokens than a 128-token slot holds: the server answers 400
  for (int i = 0; i < 300; ++i) long_prompt += "story ";
  out << long_prompt << "\n";
  return path;
}

// One server, one key, and the `detaudit run` command line every step shares.
struct scene {
  std::string dir, key, wrong, bin, url, run;
  // The command's environment with `k` as the key the run reads.
  static std::string with(const std::string& k) { return "DETAUDIT_SECRETS_KEY=" + test::shell_quote(k) + " "; }
};

// Right key in two dialects (a failing item among them), wrong key with and without the dialect
// given, and a key that would break the header.
void runs_against_server(transcript& tr, const scene& s) {
  const test::cmd_result r1 = tr.run("run llamacpp", scene::with(s.key) + s.run + " --raw --probe concurrency,cache,repeat --concurrency 2 --export lm-eval" +
                                                         " --out " + s.dir + "/run1 --report " + s.dir + "/run1-report.html --junit " +
                                                         s.dir + "/run1.xml");
  INFO(r1.err);
  CHECK(r1.exit_code == 3);  // incomplete: the long item gets the server's 400
  CHECK(r1.err.find("request(s) failed") != std::string::npos);
  const test::cmd_result r2 =
      tr.run("run chat", scene::with(s.key) + s.run + " --api openai-chat --probe concurrency --concurrency 2 --out " + s.dir + "/run2");
  INFO(r2.err);
  CHECK(r2.exit_code == 3);
  // A wrong key: detection stops with 401 (exit 2); with the dialect given, the first request is
  // refused with 401 and the run stops there (exit 2), saying how to pass the key.
  const test::cmd_result r3 = tr.run("run wrong key", scene::with(s.wrong) + s.run + " --raw --out " + s.dir + "/run3");
  CHECK(r3.exit_code == 2);
  CHECK(r3.err.find("401") != std::string::npos);
  const test::cmd_result r4 =
      tr.run("run wrong key, dialect given", scene::with(s.wrong) + s.run + " --raw --api llamacpp --out " + s.dir + "/run4");
  CHECK(r4.exit_code == 2);
  CHECK(r4.err.find("401") != std::string::npos);
  CHECK(r4.err.find("--api-key-env") != std::string::npos);
  // A key with a line break would start a second header: refused before anything is sent.
  const test::cmd_result r5 =
      tr.run("run key with a line break", scene::with(s.wrong + "\r\nX-Other: 1") + s.run + " --raw --out " + s.dir + "/run_nl");
  CHECK(r5.exit_code == 2);
  CHECK(r5.err.find("control character") != std::string::npos);
}

// Every report format, on stdout and to a file, of each run that has records; bundles of an
// answered item, the failed item and a 401 item, and their tarballs unpacked.
void reports_and_bundles(transcript& tr, const scene& s) {
  for (const char* f : {"text", "json", "md", "junit", "html"}) {
    for (const char* r : {"run1", "run2", "run4"}) {
      const std::string name = std::string("report ") + r + " " + f;
      const std::string cmd = s.bin + " report " + s.dir + "/" + r + " --format " + f + " --fail-on none";
      // run4 stopped at its first request (401): its report covers fewer items than the run holds
      // and ends INCOMPLETE (exit 3) even with --fail-on none.
      const int want = std::string(r) == "run4" ? 3 : 0;
      CHECK_MESSAGE(tr.run(name, cmd).exit_code == want, name);
      CHECK_MESSAGE(tr.run(name + " -o", cmd + " -o " + s.dir + "/report-" + r + "." + f).exit_code == want, name);
    }
  }
  const test::cmd_result b1 = tr.run("bundle item 1", s.bin + " bundle " + s.dir + "/run1 --item 1 -o " + s.dir + "/bundle1");
  INFO(b1.err);
  CHECK(b1.exit_code == 0);
  CHECK(fs::is_regular_file(s.dir + "/bundle1.tar.gz"));
  tr.run("bundle the failed item", s.bin + " bundle " + s.dir + "/run1 --item 3 -o " + s.dir + "/bundle3");
  tr.run("bundle a 401 item", s.bin + " bundle " + s.dir + "/run4 --item 1 -o " + s.dir + "/bundle4");
  CHECK(tr.run("unpack bundle1", "tar xzOf " + s.dir + "/bundle1.tar.gz").exit_code == 0);
  for (const char* b : {"bundle3", "bundle4"})
    if (fs::is_regular_file(s.dir + "/" + b + ".tar.gz")) tr.run(std::string("unpack ") + b, "tar xzOf " + s.dir + "/" + b + ".tar.gz");
}

// What the server itself shows to a client holding the key.
void server_pages(transcript& tr, const scene& s) {
  httplib::Client c("127.0.0.1", std::stoi(s.url.substr(s.url.rfind(':') + 1)));
  c.set_bearer_token_auth(s.key);
  for (const char* path : {"/props", "/metrics", "/slots", "/v1/models", "/api/tags"}) {
    auto r = c.Get(path);
    REQUIRE(r);
    CHECK(r->status == 200);
    tr.texts.push_back({std::string("GET ") + path, r->body});
  }
}

}  // namespace

TEST_CASE("secrets: no run record, report, bundle, log or error message holds the API key") {
  scene s;
  s.dir = test::scratch_dir("secrets");
  s.key = random_key("right");
  s.wrong = random_key("wrong");
  s.bin = test::detaudit_bin();
  transcript tr;
  auto server = std::make_unique<logged_server>(s.dir, std::vector<std::string>{"-np", "2", "-c", "256", "--chat-template", "chatml",
                                                                                "--api-key-env", "DETAUDIT_SECRETS_SERVER_KEY"},
                                                "DETAUDIT_SECRETS_SERVER_KEY", s.key);
  s.url = server->url;
  s.run = s.bin + " run --target " + s.url + " --prompts " + prompts_file(s.dir) +
          " --n-predict 4 --fail-on none --retries 0 --timeout 60 --api-key-env DETAUDIT_SECRETS_KEY";
  runs_against_server(tr, s);
  reports_and_bundles(tr, s);
  server_pages(tr, s);

  // The server goes away: the run stops with exit 3 and its messages name the URL, not the key.
  CHECK(server->stop() == 0);
  CHECK(tr.run("run dead target", scene::with(s.key) + s.run + " --raw --api llamacpp --out " + s.dir + "/run5").exit_code == 3);
  const std::string serve_unset = s.bin + " serve -m " + test::fixture("models/stories260K.gguf") +
                                  " --port 0 --api-key-env DETAUDIT_SECRETS_UNSET_NAME";
  CHECK(tr.run("serve key env unset", scene::with(s.key) + serve_unset).exit_code == 2);

  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(s.dir)) {
    if (!e.is_regular_file()) continue;
    ++files;
    tr.texts.push_back({e.path().string(), test::file_text(e.path().string())});
  }
  CHECK(files >= 50);
  CHECK(test::file_text(s.dir + "/serve.stdout").find("listening on") != std::string::npos);
  const std::vector<std::string> found = leaks(tr.texts, {s.key, s.wrong});
  for (const std::string& f : found) FAIL_CHECK(f);
  CHECK(found.empty());
}

namespace {

// A server that echoes the key it is sent (lower-cased, without its last 3 characters) into every
// field of every answer: /props, /v1/models, /slots, /metrics, llama.cpp's /completion and the
// OpenAI chat route (text, tokens, alternatives, timings, usage, fingerprint, model), and its
// error messages ("fail" is answered 500).
struct echo_server {
  httplib::Server srv;
  std::thread th;
  int port = 0;

  static std::string echo_of(const httplib::Request& req) {
    std::string auth = req.get_header_value("Authorization");
    const std::string bearer = "Bearer ";
    if (auth.rfind(bearer, 0) == 0) auth = auth.substr(bearer.size());
    return lowered(auth.substr(0, auth.size() > 3 ? auth.size() - 3 : 0));
  }
  static void reply(httplib::Response& res, const json& j) { res.set_content(j.dump(), "application/json"); }
  static bool failing(const httplib::Request& req) { return req.body.find("fail") != std::string::npos; }

  echo_server() {
    srv.Get("/props", [](const httplib::Request& req, httplib::Response& res) {
      const std::string e = echo_of(req);
      reply(res, {{"build_info", "b-" + e}, {"system_fingerprint", e}, {"model_path", "/models/" + e + ".gguf"}, {"model_sha256", e},
                  {"total_slots", 2}, {"chat_template", "{{ '" + e + "' }}"}, {e, {{"nested", e}}}});
    });
    srv.Get("/v1/models", [](const httplib::Request& req, httplib::Response& res) {
      const std::string e = echo_of(req);
      reply(res, {{"object", "list"}, {"data", {{{"id", e}, {"object", "model"}, {"owned_by", e}}}}});
    });
    srv.Get("/slots", [](const httplib::Request& req, httplib::Response& res) {
      reply(res, json::array({{{"id", 0}, {"is_processing", false}, {"note", echo_of(req)}}}));
    });
    srv.Get("/metrics", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content("llamacpp:requests_processing 0\nx_" + echo_of(req) + " 1\n", "text/plain");
    });
    srv.Post("/completion", [](const httplib::Request& req, httplib::Response& res) {
      const std::string e = echo_of(req);
      if (failing(req)) {
        res.status = 500;
        return reply(res, {{"error", {{"code", 500}, {"message", "no such key " + e}}}});
      }
      const json alt = {{"id", 7}, {"token", e}, {"logprob", -0.5}};
      const json entry = {{"id", 7}, {"token", e}, {"logprob", -0.5}, {"top_logprobs", {alt, {{"id", 8}, {"token", "x" + e}, {"logprob", -1.5}}}}};
      reply(res, {{"content", e + e}, {"tokens", {7, 7}}, {"completion_probabilities", {entry, entry}}, {"stop_type", e},
                  {"tokens_evaluated", 3}, {"tokens_predicted", 2}, {"system_fingerprint", e}, {"model", e},
                  {"timings", {{"prompt_n", 3}, {"note", e}, {e, e}}}, {"chained_hash", e}});
    });
    srv.Post("/v1/chat/completions", [](const httplib::Request& req, httplib::Response& res) {
      const std::string e = echo_of(req);
      if (failing(req)) {
        res.status = 500;
        return reply(res, {{"error", {{"code", 500}, {"message", "no such key " + e}}}});
      }
      const json step = {{"token", e}, {"logprob", -0.5}, {"bytes", json::array()}, {"top_logprobs", {{{"token", e}, {"logprob", -0.5}}}}};
      json s2 = step;
      s2.erase("bytes");
      reply(res, {{"id", e}, {"object", "chat.completion"}, {"model", e}, {"system_fingerprint", e},
                  {"choices", {{{"index", 0}, {"finish_reason", e}, {"message", {{"role", "assistant"}, {"content", e + e}}},
                                {"logprobs", {{"content", {s2, s2}}}}}}},
                  {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 2}, {"note", e}}}, {"timings", {{e, e}}}});
    });
    port = srv.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    th = std::thread([this] { srv.listen_after_bind(); });
  }
  ~echo_server() {
    srv.stop();
    if (th.joinable()) th.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

}  // namespace

// Before, the exact-match redaction let all of this through: the key lower-cased and cut short
// was in run.json's capabilities (build, fingerprint, model, model hash, raw), every record
// (target, text, tokens, alternatives, timings, usage, error), the reports and the bundles.
TEST_CASE("secrets: a server echoing the key lower-cased and cut short leaves no piece of it in any artefact") {
  const std::string dir = test::scratch_dir("secrets_echo");
  const std::string key = random_key("Echoed", true);  // upper-case: lower-cased, it differs
  const std::string bin = test::detaudit_bin();
  echo_server srv;
  {
    std::ofstream p(dir + "/prompts.txt");
    p << "Once upon a time\nplease fail\n";
  }
  transcript tr;
  const std::string run = scene::with(key) + bin + " run --target " + srv.url() + " --prompts " + dir + "/prompts.txt" +
                          " --n-predict 2 --fail-on none --retries 0 --timeout 30 --api-key-env DETAUDIT_SECRETS_KEY";
  const test::cmd_result r1 = tr.run("run llamacpp", run + " --raw --probe repeat,concurrency --concurrency 2 --out " + dir + "/raw --report " +
                                                         dir + "/raw.html --junit " + dir + "/raw.xml");
  INFO(r1.err);
  CHECK(r1.exit_code == 3);  // the "fail" item
  const test::cmd_result r2 = tr.run("run chat", run + " --api openai-chat --probe repeat --out " + dir + "/chat");
  INFO(r2.err);
  CHECK(r2.exit_code == 3);
  for (const char* run_dir : {"raw", "chat"}) {
    for (const char* f : {"text", "json", "md", "junit", "html"}) {
      const std::string name = std::string("report ") + run_dir + " " + f;
      CHECK_MESSAGE(tr.run(name, bin + " report " + dir + "/" + run_dir + " --format " + f + " --fail-on none -o " + dir + "/" + run_dir +
                                     "-report." + f).exit_code == 0, name);
      tr.run(name + " (stdout)", bin + " report " + dir + "/" + run_dir + " --format " + f + " --fail-on none");
    }
    for (const char* item : {"1", "2"}) {
      const std::string out = dir + "/" + run_dir + "-bundle" + item;
      tr.run(std::string("bundle ") + run_dir + " " + item, bin + " bundle " + dir + "/" + run_dir + " --item " + item + " -o " + out);
      if (fs::is_regular_file(out + ".tar.gz")) tr.run(std::string("unpack ") + out, "tar xzOf " + out + ".tar.gz");
    }
  }
  CHECK(fs::is_regular_file(dir + "/raw-bundle1.tar.gz"));
  // The server did echo: its answers hold the key's pieces (else the search proves nothing).
  httplib::Client c("127.0.0.1", srv.port);
  c.set_bearer_token_auth(key);
  auto props = c.Get("/props");
  REQUIRE(props);
  CHECK(lowered(props->body).find(lowered(key).substr(0, 20)) != std::string::npos);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == "prompts.txt") continue;
    ++files;
    tr.texts.push_back({e.path().string(), test::file_text(e.path().string())});
  }
  CHECK(files >= 20);
  const std::string records = test::file_text(dir + "/raw/records.jsonl");
  CHECK(records.find("[REDACTED]") != std::string::npos);
  const std::vector<std::string> found = leaks(tr.texts, {key});
  for (const std::string& f : found) FAIL_CHECK(f);
  CHECK(found.empty());
}

// The hostile review of issue 47: an engine target recorded --request's credential fields in clear
// (run.json was redacted; records.jsonl was not).
TEST_CASE("secrets: an engine target records --request's credential fields as [REDACTED]") {
  const std::string dir = test::scratch_dir("secrets_engine_request");
  test::write_file(dir + "/p.txt", "Once upon a time\n");
  const std::string key = random_key("ENGINEKEY");
  const test::cmd_result run = test::run_cmd(
      test::detaudit_bin() + " run --target 'engine:" + test::narrow_model() + "?threads=1' --prompts " + dir +
      "/p.txt --probe repeat --n-predict 4 --raw --out " + dir + "/run --request " +
      test::shell_quote(json({{"api_key", key}, {"Authorization", "Bearer " + key}}).dump()));
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  for (const char* f : {"/run/run.json", "/run/records.jsonl"}) {
    CAPTURE(f);
    const std::string text = test::file_text(dir + f);
    CHECK(text.find("ENGINEKEY") == std::string::npos);
  }
  CHECK(test::file_text(dir + "/run/records.jsonl").find("[REDACTED]") != std::string::npos);
}
