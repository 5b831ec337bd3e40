// `detaudit run` (the real binary) through faults, end to end: a proxy in front of the real
// `detaudit serve` answers chosen generation requests with a 500, a 429 with Retry-After, a
// malformed body, a stream cut before its last event, or a hang; and the run itself is killed with
// SIGKILL at random moments. Each time: every record line is complete, failed requests carry their
// error, the exit status says the run is incomplete (3), and --resume finishes with every key
// answered once and nothing sent twice that had an answer.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "child_process.h"
#include "reports/audit/record.h"
#include "serve_util.h"
#include "test_util.h"

using namespace detaudit;
using json = nlohmann::json;

namespace {

// What the proxy does with the k-th generation request (0-based, counting every attempt).
enum fault { PASS, F500, F429, MALFORMED, CUT_STREAM, HANG };

// A cpp-httplib proxy on 127.0.0.1 in front of `upstream`: GETs are forwarded; POSTs to the
// generation routes are numbered and handled as plan(k) says.
struct fault_proxy {
  httplib::Server srv;
  std::thread th;
  int port = 0;
  int upstream = 0;
  std::atomic<int> n_gen{0};        // generation requests seen
  std::atomic<int> n_forwarded{0};  // generation requests answered by the server

  explicit fault_proxy(int upstream_port) : upstream(upstream_port) {
    srv.new_task_queue = [] { return new httplib::ThreadPool(16); };
    srv.Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
      auto c = test::http_client(upstream);
      copy(c.Get(req.path.c_str()), res);
    });
    srv.Post(".*", [this](const httplib::Request& req, httplib::Response& res) { post(req, res); });
    port = srv.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    th = std::thread([this] { srv.listen_after_bind(); });
  }
  ~fault_proxy() {
    srv.stop();
    th.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  // Set from the test's thread between runs; read by the handler threads.
  void set_plan(std::function<fault(int)> p) {
    std::lock_guard<std::mutex> lk(plan_mu);
    plan = std::move(p);
  }

  static void copy(const httplib::Result& r, httplib::Response& res) {
    if (!r) {
      res.status = 502;
      return;
    }
    res.status = r->status;
    res.set_content(r->body, r->get_header_value("Content-Type").c_str());
  }

  void post(const httplib::Request& req, httplib::Response& res) {
    const int k = n_gen++;
    fault f = PASS;
    {
      std::lock_guard<std::mutex> lk(plan_mu);
      f = plan(k);
    }
    const char* err = R"({"error": {"code": 500, "message": "injected failure"}})";
    switch (f) {
      case F500: res.status = 500; res.set_content(err, "application/json"); return;
      case F429:
        res.status = 429;
        res.set_header("Retry-After", "1");
        res.set_content(R"({"error": {"code": 429, "message": "slow down"}})", "application/json");
        return;
      case MALFORMED: res.set_content(R"({"content": "Once upon", "tokens": [)", "application/json"); return;
      case HANG: std::this_thread::sleep_for(std::chrono::seconds(4)); res.status = 500; return;
      case PASS:
      case CUT_STREAM: break;
    }
    auto c = test::http_client(upstream);
    httplib::Result r = c.Post(req.path.c_str(), req.body, "application/json");
    ++n_forwarded;
    copy(r, res);
    if (f == CUT_STREAM && r) {  // drop the last event and what follows it
      std::string body = r->body;
      const size_t last = body.rfind("data: ", body.size() >= 2 ? body.size() - 2 : 0);
      if (last != std::string::npos) body.resize(last);
      res.set_content(body, "text/event-stream");
    }
  }

 private:
  std::mutex plan_mu;
  std::function<fault(int)> plan = [](int) { return PASS; };
};

std::string prompts_file(const std::string& dir, int n) {
  const std::string path = dir + "/prompts.txt";
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) out << "The little dog ran to item " << i << "\n";
  return path;
}

// 0 when the file does not exist yet.
uintmax_t file_size(const std::string& path) {
  std::error_code ec;
  const uintmax_t n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

// Every line of the records file is a record; per key, how many records have no error.
std::map<std::string, int> usable_per_key(const std::string& run_dir, size_t* n_errors = nullptr) {
  if (!std::filesystem::exists(run_dir + "/records.jsonl")) return {};
  reports::read_stats st;
  const std::vector<reports::record> recs = reports::records_read(run_dir, &st);
  CHECK(st.truncated == 0);
  std::map<std::string, int> usable;
  size_t errors = 0;
  for (const reports::record& r : recs) {
    if (r.error.empty()) usable[reports::record_key(r)]++;
    else ++errors;
  }
  if (n_errors) *n_errors = errors;
  return usable;
}

std::string run_cmd_line(const std::string& target, const std::string& prompts, const std::string& run_dir,
                         const std::string& extra, int n_predict = 8) {
  return test::detaudit_bin() + " run --target " + target + " --prompts " + prompts + " --raw --probe repeat --n-predict " +
         std::to_string(n_predict) + " --n-probs 2 --out " + run_dir + " " + extra;
}

constexpr int ITEMS = 6;
constexpr size_t KEYS = ITEMS * 3;  // alone, control, repeat

}  // namespace

TEST_CASE("probes_run_faults: HTTP errors, malformed answers and cut streams are per-item errors, exit 3, --resume completes") {
  test::serve_child srv({"-np", "2"});
  fault_proxy proxy(srv.port);
  proxy.set_plan([](int k) {
    static const std::map<int, fault> faults = {{1, F500}, {4, F429}, {7, MALFORMED}, {10, CUT_STREAM}};
    auto it = faults.find(k);
    return it == faults.end() ? PASS : it->second;
  });
  const std::string dir = test::scratch_dir("run_faults_errors");
  const std::string prompts = prompts_file(dir, ITEMS);
  const std::string run_dir = dir + "/run";
  const std::string cmd = run_cmd_line(proxy.url(), prompts, run_dir, "--stream --retries 0 --timeout 30");

  const test::cmd_result first = test::run_cmd(cmd);
  INFO(first.err);
  CHECK(first.exit_code == 3);
  CHECK(first.err.find("incomplete: 4 request(s) failed") != std::string::npos);
  CHECK(first.err.find("--resume --out " + run_dir) != std::string::npos);
  const std::string text = test::file_text(run_dir + "/records.jsonl");
  REQUIRE_FALSE(text.empty());
  CHECK(text.back() == '\n');
  size_t n_errors = 0;
  CHECK(usable_per_key(run_dir, &n_errors).size() == KEYS - 4);
  CHECK(n_errors == 4);
  std::vector<std::string> errors;
  for (const reports::record& r : reports::records_read(run_dir))
    if (!r.error.empty()) errors.push_back(r.error);
  REQUIRE(errors.size() == 4);
  CHECK(errors[0].find("HTTP 500: injected failure") != std::string::npos);
  CHECK(errors[1].find("HTTP 429: slow down") != std::string::npos);
  // A body cut inside an array: not valid JSON, and the parser's reason is given.
  CHECK(errors[2].find("the answer is not valid JSON ([json.exception.parse_error.101]") != std::string::npos);
  CHECK(errors[3].find("the event stream ended early") != std::string::npos);

  proxy.set_plan([](int) { return PASS; });
  const int sent_before = proxy.n_gen;
  const test::cmd_result second = test::run_cmd(cmd + " --resume");
  INFO(second.err);
  CHECK(second.exit_code == 0);
  CHECK(proxy.n_gen - sent_before == 4);  // only the failed keys were sent again
  const std::map<std::string, int> usable = usable_per_key(run_dir);
  CHECK(usable.size() == KEYS);
  for (const auto& [key, n] : usable) {
    CAPTURE(key);
    CHECK(n == 1);
  }
}

TEST_CASE("probes_run_faults: 5xx and 429 answers are retried and the run completes with exit 0") {
  test::serve_child srv({"-np", "2"});
  fault_proxy proxy(srv.port);
  proxy.set_plan([](int k) { return k == 0 || k == 5 ? F500 : k == 2 ? F429 : PASS; });
  const std::string dir = test::scratch_dir("run_faults_retries");
  const std::string run_dir = dir + "/run";
  const test::cmd_result r =
      test::run_cmd(run_cmd_line(proxy.url(), prompts_file(dir, ITEMS), run_dir, "--retries 2 --timeout 30"));
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(proxy.n_gen == static_cast<int>(KEYS) + 3);
  size_t n_errors = 0;
  const std::map<std::string, int> usable = usable_per_key(run_dir, &n_errors);
  CHECK(n_errors == 0);
  CHECK(usable.size() == KEYS);
  int retried = 0;
  for (const reports::record& rec : reports::records_read(run_dir)) retried += rec.timings.value("attempts", 1) == 2;
  CHECK(retried == 3);
}

TEST_CASE("probes_run_faults: a target that hangs is a timeout, the run stops with exit 3, --resume completes") {
  test::serve_child srv({"-np", "2"});
  fault_proxy proxy(srv.port);
  proxy.set_plan([](int k) { return k == 5 ? HANG : PASS; });
  const std::string dir = test::scratch_dir("run_faults_hang");
  const std::string prompts = prompts_file(dir, ITEMS);
  const std::string run_dir = dir + "/run";
  const std::string cmd = run_cmd_line(proxy.url(), prompts, run_dir, "--retries 0 --timeout 1");
  const test::cmd_result first = test::run_cmd(cmd);
  INFO(first.err);
  CHECK(first.exit_code == 3);
  CHECK(first.err.find("target unreachable") != std::string::npos);
  CHECK(first.err.find("imed out") != std::string::npos);
  CHECK(usable_per_key(run_dir).size() == 5);

  proxy.set_plan([](int) { return PASS; });
  const test::cmd_result second = test::run_cmd(cmd + " --resume");
  INFO(second.err);
  CHECK(second.exit_code == 0);
  const std::map<std::string, int> usable = usable_per_key(run_dir);
  CHECK(usable.size() == KEYS);
  for (const auto& [key, n] : usable) CHECK(n == 1);
}

TEST_CASE("probes_run_faults: a run killed with SIGKILL at random moments leaves complete lines, --resume completes") {
  test::serve_child srv({"-np", "2"});
  const std::string dir = test::scratch_dir("run_faults_kill");
  constexpr int n_items = 12;
  constexpr size_t n_keys = n_items * 3;
  const std::string prompts = prompts_file(dir, n_items);
  const std::string run_dir = dir + "/run";
  const std::string records = run_dir + "/records.jsonl";
  const std::string cmd = run_cmd_line(srv.url(), prompts, run_dir, "--retries 0 --timeout 60", 32);
  test::test_rng rng{20261129};
  int killed_mid_run = 0;
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    // Kill when the file has changed size a random number of times: right after a write, at
    // whatever point of its next one the process then is.
    const int changes = static_cast<int>(rng.range(1, 6));
    const bool resume = std::filesystem::exists(run_dir + "/run.json");
    test::child_process run(test::shell_spec(cmd + (resume ? " --resume" : "") + " >/dev/null 2>&1"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    uintmax_t size = file_size(records);
    for (int seen = 0; seen < changes && std::chrono::steady_clock::now() < deadline && run.alive();) {
      const uintmax_t now = file_size(records);
      if (now != size) ++seen;
      size = now;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    run.kill9();  // no-op when it had ended
    if (!run.exited_normally()) ++killed_mid_run;
    const std::string text = test::file_text(records);
    CHECK((text.empty() || text.back() == '\n'));
    for (const auto& [key, n] : usable_per_key(run_dir)) CHECK(n == 1);
  }
  CHECK(killed_mid_run >= 2);
  CHECK(usable_per_key(run_dir).size() < n_keys);
  const test::cmd_result last = test::run_cmd(cmd + " --resume");
  INFO(last.err);
  CHECK(last.exit_code == 0);
  const std::map<std::string, int> usable = usable_per_key(run_dir);
  CHECK(usable.size() == n_keys);
  for (const auto& [key, n] : usable) CHECK(n == 1);
}

// A full disk ended `detaudit run` with "internal error", exit 4, as if detaudit had a bug. It is
// the machine's state: exit 3 (the run is incomplete), what was kept, and how to go on. The full
// disk is the file-size limit here (RLIMIT_FSIZE with SIGXFSZ ignored: write() fails with EFBIG,
// as it fails with ENOSPC on a full disk). --resume, with room again, completes the run.
TEST_CASE("probes_run_faults: a full disk stops the run with exit 3, the records kept and --resume advice") {
  const std::string dir = test::scratch_dir("run_faults_disk_full");
  constexpr int n_items = 40;
  constexpr size_t n_keys = n_items * 3;
  const std::string prompts = prompts_file(dir, n_items);
  const std::string run_dir = dir + "/run";
  const std::string cmd = run_cmd_line("engine:" + test::fixture("models/stories260K.gguf"), prompts, run_dir, "--fail-on none");
  const test::cmd_result full = test::run_cmd("bash -c " + test::shell_quote("ulimit -f 48; trap '' XFSZ; exec " + cmd));
  INFO(full.err);
  CHECK(full.exit_code == 3);
  CHECK(full.err.find("internal error") == std::string::npos);
  CHECK(full.err.find("disk full") != std::string::npos);
  CHECK(full.err.find("record(s) are kept in " + run_dir) != std::string::npos);
  CHECK(full.err.find("--resume --out " + run_dir) != std::string::npos);
  const std::string text = test::file_text(run_dir + "/records.jsonl");
  const size_t whole_lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  CHECK(whole_lines > 0);
  CHECK(whole_lines < n_keys);
  CHECK(json::parse(test::file_text(run_dir + "/run.json")).is_object());  // run.json whole

  const test::cmd_result resumed = test::run_cmd(cmd + " --resume");
  INFO(resumed.err);
  CHECK(resumed.exit_code == 0);
  const std::map<std::string, int> usable = usable_per_key(run_dir);
  CHECK(usable.size() == n_keys);
  for (const auto& [key, n] : usable) CHECK(n == 1);

  // Any command writing a file: a full disk is exit 3 and says so (/dev/full answers ENOSPC).
  const test::cmd_result report = test::run_cmd(test::detaudit_bin() + " report " + run_dir + " --format json --fail-on none -o /dev/full");
  CHECK(report.exit_code == 3);
  CHECK(report.err.find("disk full") != std::string::npos);
  CHECK(report.err.find("internal error") == std::string::npos);
  // A folder that cannot be made is the user's input: exit 2, one line naming it.
  const std::string impossible = dir + "/" + std::string(300, 'x') + "/run";
  const test::cmd_result bad_out = test::run_cmd(cmd.substr(0, cmd.find(" --out ")) + " --out " + impossible);
  CHECK(bad_out.exit_code == 2);
  CHECK(bad_out.err.find("choose another --out") != std::string::npos);
  const test::cmd_result bad_report = test::run_cmd(test::detaudit_bin() + " report " + run_dir + " --fail-on none -o " + dir + "/no/such/folder/r.txt");
  CHECK(bad_report.exit_code == 2);
}
