// detaudit_load: `detaudit serve` held under N concurrent keep-alive connections for S seconds on
// 127.0.0.1 (default 64 for 60 s; CTest runs 10 s, scripts/load.sh the full run). The server is
// `detaudit serve -m MODEL --host 127.0.0.1 --port 0 --parallel P -t 1 --chat-template chatml
// --header-timeout 5 --max-connections C --max-connections-per-client C` (stories260K has no chat
// template of its own; C = 2 (N + M) + 16, room for every client of the test while the old
// connection of a reconnecting one is still being closed), in the default `--numerics exact`.
//
//   1. alone: the fixed request set (load_support.h) sent one at a time; each answer's canonical
//      form (text, token ids, log-probs, logit hashes, stop reason; no timings, ids or slot) kept.
//   2. load: N threads, one httplib::Client each, pick requests with a seeded RNG: 80% the set,
//      12% cheap routes (GET /health, /metrics, /props), 8% bad requests (malformed JSON -> 400,
//      unknown route -> 404). A 200 answer must equal its alone answer exactly; 503 is the
//      documented backpressure (the worker backs off 5-20 ms); every other status, a connection
//      error, a timeout (60 s) or a malformed answer is a failure. VmRSS sampled every 0.5 s.
//      Beside them, throughout: M slow-head connections (default 12, load_slow.h) each sent one
//      byte of a request head that never ends every 2 s, reopened when the server cuts them off;
//      none may stay open past the head deadline plus 3 s, and none may get an answer but 408.
//      A probe sends GET /health on a new connection every 250 ms: each must answer 200 within 1 s.
//   3. after: 2 s idle, VmRSS read; the set again (must equal phase 1); GET /health 200;
//      requests_rejected_total from /metrics next to the 503s counted; SIGTERM must exit 0.
//
// Memory rule (a leak check, not a determinism claim): RSS after the load must not exceed the RSS
// at the end of the first quarter of the load phase ("warm") by more than max(16 MiB, 10% of warm).
// In a sanitizer build it is not applied (ASan's quarantine and TSan's shadow grow RSS without a
// leak); under ASan, LeakSanitizer checks the server's exit instead.
//
// Prints a table per route and status, latencies, RSS, and a last line `load: PASS` or
// `load: FAIL: why`. Exit 0 pass, 1 fail, 2 bad options.
// Non-goals: throughput claims (scripts/bench/ measures speed) and checking every field of every
// route (tests/unit/test_serve_http.cpp does).
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "load/load_slow.h"
#include "load/load_support.h"
#include "test_util.h"

namespace detaudit::load {
namespace {

using clock_type = std::chrono::steady_clock;

struct options {
  std::string detaudit, model, json_path;
  int connections = 64;
  double seconds = 60;
  int parallel = 4;
  int slow = 12;
  uint64_t seed = 1;
};

// The server's --header-timeout, the pause between two bytes of a slow head, and the bounds the
// slow heads and the /health probe are held to (see the header comment).
constexpr int HEADER_TIMEOUT_S = 5;
constexpr int SLOW_INTERVAL_MS = 2000;
constexpr double SLOW_HELD_MAX_S = HEADER_TIMEOUT_S + 3;
constexpr int PROBE_EVERY_MS = 250;
constexpr int PROBE_LIMIT_MS = 1000;

const char* USAGE =
    "usage: detaudit_load [--detaudit BIN] [--model FILE] [--connections N] [--seconds S] [--parallel N]\n"
    "                     [--slow M] [--seed N] [--json FILE]\n"
    "  Starts `detaudit serve` on 127.0.0.1 and holds it under N concurrent keep-alive connections\n"
    "  for S seconds (default 64 for 60); every exact-mode answer must equal the same request sent\n"
    "  alone, no 5xx but the 503 backpressure, RSS flat afterwards. --parallel: serve's slots (4).\n"
    "  Beside them M connections (default 12; 0: none) send a request head one byte every 2 s and\n"
    "  never finish it; GET /health must answer within 1 s throughout.\n"
    "  Defaults: the detaudit built with this test, fixtures models/stories260K.gguf\n"
    "  (DETAUDIT_BIN / DETAUDIT_FIXTURES override). Exit 0 pass, 1 fail, 2 bad options.\n";

// Parses argv; returns 0 to run, -1 after --help (exit 0), or 2 for a bad option.
int options_parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(USAGE, stdout);
      return -1;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "detaudit_load: %s: unknown option or missing value\n%s", a.c_str(), USAGE);
      return 2;
    }
    const std::string v = argv[++i];
    try {
      size_t used = 0;
      used = v.size();
      if (a == "--detaudit") o.detaudit = v;
      else if (a == "--model") o.model = v;
      else if (a == "--json") o.json_path = v;
      else if (a == "--connections") o.connections = std::stoi(v, &used);
      else if (a == "--seconds") o.seconds = std::stod(v, &used);
      else if (a == "--parallel") o.parallel = std::stoi(v, &used);
      else if (a == "--slow") o.slow = std::stoi(v, &used);
      else if (a == "--seed") o.seed = std::stoull(v, &used);
      else throw std::invalid_argument("unknown option");
      if (used != v.size() || v.empty()) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      std::fprintf(stderr, "detaudit_load: %s: unknown option or bad value '%s'\n%s", a.c_str(), v.c_str(), USAGE);
      return 2;
    }
  }
  if (o.connections < 1 || o.connections > 256 || !(o.seconds > 0 && o.seconds <= 86400) || o.parallel < 1 ||
      o.parallel > 256 || o.slow < 0 || o.slow > 64) {
    std::fprintf(stderr, "detaudit_load: --connections 1..256, --seconds > 0, --parallel 1..256, --slow 0..64\n");
    return 2;
  }
  return 0;
}

// The server's resident set in KiB (VmRSS), or -1 when it cannot be read.
int64_t rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

httplib::Client client_make(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_keep_alive(true);
  c.set_tcp_nodelay(true);  // as curl, urllib3 and Node do: no Nagle stall between headers and body
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(60, 0);
  c.set_write_timeout(60, 0);
  return c;
}

// HTTP status -> the latency of each answer with it; status 0: no answer (connection error, timeout).
using route_stats = std::map<int, std::vector<double>>;

// What one worker saw; merged after the load.
struct worker_stats {
  std::map<std::string, route_stats> routes;
  int64_t n_503 = 0;
};

// Failures from every thread; the first one, and the first answer mismatch, kept in full.
// Thread-safe.
struct failures {
  std::atomic<int64_t> n{0};
  std::mutex mu;
  std::string first, first_mismatch;

  void add(const std::string& what, bool mismatch = false) {
    std::lock_guard<std::mutex> lk(mu);
    if (n++ == 0) first = what;
    if (mismatch && first_mismatch.empty()) first_mismatch = what;
  }
};

// One exchange; records its status and latency under `route`. Returns the answer or null.
httplib::Result exchange(httplib::Client& c, const std::string& method, const std::string& path, const std::string& body,
                         const std::string& route, worker_stats& ws) {
  const auto t0 = clock_type::now();
  httplib::Result r = method == "GET" ? c.Get(path.c_str()) : c.Post(path.c_str(), body, "application/json");
  ws.routes[route][r ? r->status : 0].push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
  return r;
}

// A generation request: 200 must match its alone answer, 503 backs off, anything else fails.
void gen_check(httplib::Client& c, const gen_request& g, const std::string& alone, test::test_rng& rng, worker_stats& ws,
               failures& f) {
  httplib::Result r = exchange(c, "POST", g.path, g.body.dump(), g.route, ws);
  if (!r) return f.add(g.route + ": no answer: " + httplib::to_string(r.error()));
  if (r->status == 503) {
    ws.n_503++;
    std::this_thread::sleep_for(std::chrono::milliseconds(rng.range(5, 20)));
    return;
  }
  if (r->status != 200) return f.add(g.route + ": status " + std::to_string(r->status) + ": " + r->body.substr(0, 300));
  try {
    const std::string got = canonical_answer(g.kind, r->body);
    if (got != alone)
      f.add(g.route + " " + g.body.dump() + ": answer under load differs from the alone answer\n--- alone:\n" + alone +
            "\n--- under load:\n" + got, /*mismatch=*/true);
  } catch (const malformed_answer& e) {
    f.add(g.route + ": malformed answer: " + e.what());
  }
}

// Cheap routes must answer 200; bad requests their 4xx.
void side_check(httplib::Client& c, int64_t pick, worker_stats& ws, failures& f) {
  struct side {
    const char *route, *method, *path, *body;
    int expect;
  };
  static const side SIDES[] = {
      {"GET /health", "GET", "/health", "", 200},
      {"GET /metrics", "GET", "/metrics", "", 200},
      {"GET /props", "GET", "/props", "", 200},
      {"POST /completion (malformed JSON)", "POST", "/completion", "{\"prompt\": \"Once\", \"n_predict\": ", 400},
      {"GET /no-such-route", "GET", "/no-such-route", "", 404},
  };
  const side& s = SIDES[pick];
  httplib::Result r = exchange(c, s.method, s.path, s.body, s.route, ws);
  if (!r) return f.add(std::string(s.route) + ": no answer: " + httplib::to_string(r.error()));
  if (r->status != s.expect)
    f.add(std::string(s.route) + ": status " + std::to_string(r->status) + ", expected " + std::to_string(s.expect) + ": " +
          r->body.substr(0, 300));
}

struct load_plan {
  int port = 0;
  uint64_t seed = 1;
  clock_type::time_point deadline;
  const std::vector<gen_request>* set = nullptr;
  const std::vector<std::string>* alone = nullptr;
};

void worker_run(const load_plan& p, int index, worker_stats& ws, failures& f) {
  test::test_rng rng{p.seed * 0x100000001b3ull + static_cast<uint64_t>(index)};
  httplib::Client c = client_make(p.port);
  // A server that died makes every exchange fail at once: stop spinning after many failures.
  while (clock_type::now() < p.deadline && f.n < 10000) {
    const int64_t pick = rng.range(0, 99);
    if (pick < 12) side_check(c, pick / 4, ws, f);          // 0..2: health, metrics, props
    else if (pick < 20) side_check(c, 3 + (pick - 12) / 4, ws, f);  // 3..4: bad JSON, unknown route
    else {
      const size_t i = static_cast<size_t>(rng.range(0, static_cast<int64_t>(p.set->size()) - 1));
      gen_check(c, (*p.set)[i], (*p.alone)[i], rng, ws, f);
    }
  }
}

// The set sent one request at a time; appends a failure and returns what it got.
std::vector<std::string> alone_run(int port, const std::vector<gen_request>& set, failures& f) {
  httplib::Client c = client_make(port);
  std::vector<std::string> out;
  for (const gen_request& g : set) {
    httplib::Result r = c.Post(g.path.c_str(), g.body.dump(), "application/json");
    std::string canon;
    if (!r) f.add("alone: " + g.route + ": no answer: " + httplib::to_string(r.error()));
    else if (r->status != 200) f.add("alone: " + g.route + ": status " + std::to_string(r->status) + ": " + r->body.substr(0, 300));
    else {
      try {
        canon = canonical_answer(g.kind, r->body);
      } catch (const malformed_answer& e) {
        f.add("alone: " + g.route + ": malformed answer: " + e.what());
      }
    }
    out.push_back(canon);
  }
  return out;
}

struct rss_record {
  int64_t start = -1, warm = -1, peak = -1, after = -1;
  std::vector<std::pair<double, int64_t>> samples;  // (seconds into the load, KiB)
};

// Samples VmRSS every 0.5 s until `stop`; `warm` is the last sample in the first quarter.
void rss_sample(pid_t pid, double seconds, const std::atomic<bool>& stop, rss_record& rec) {
  const auto t0 = clock_type::now();
  while (!stop) {
    const double t = std::chrono::duration<double>(clock_type::now() - t0).count();
    const int64_t kib = rss_kib(pid);
    if (kib > 0) {
      rec.samples.emplace_back(t, kib);
      rec.peak = std::max(rec.peak, kib);
      if (t <= seconds / 4 || rec.warm < 0) rec.warm = kib;
    }
    for (int i = 0; i < 10 && !stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

struct load_result {
  worker_stats total;
  double wall_s = 0;
};

load_result load_phase(const options& o, const load_plan& plan, failures& f) {
  std::vector<worker_stats> per(static_cast<size_t>(o.connections));
  std::vector<std::thread> threads;
  const auto t0 = clock_type::now();
  for (int i = 0; i < o.connections; ++i)
    threads.emplace_back([&plan, &per, &f, i] { worker_run(plan, i, per[static_cast<size_t>(i)], f); });
  for (std::thread& t : threads) t.join();
  load_result out;
  out.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  for (const worker_stats& w : per) {
    out.total.n_503 += w.n_503;
    for (const auto& [route, rs] : w.routes)
      for (const auto& [status, ms] : rs) {
        std::vector<double>& dst = out.total.routes[route][status];
        dst.insert(dst.end(), ms.begin(), ms.end());
      }
  }
  return out;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
}

// `detaudit_<name> VALUE` from Prometheus text, or -1.
int64_t metric_value(const std::string& text, const std::string& name) {
  const std::string key = "\ndetaudit_" + name + " ";
  const size_t p = text.find(key);
  return p == std::string::npos ? -1 : std::atoll(text.c_str() + p + key.size());
}

struct after_result {
  int64_t rejected_total = -1;
  int exit_status = -1;
};

// Phase 3 up to the shutdown: idle, RSS, the set again, /health, /metrics.
after_result after_phase(serve_child& srv, const std::vector<gen_request>& set, const std::vector<std::string>& alone,
                         rss_record& rss, failures& f) {
  after_result out;
  std::this_thread::sleep_for(std::chrono::seconds(2));
  rss.after = rss_kib(srv.pid());
  const std::vector<std::string> again = alone_run(srv.port(), set, f);
  for (size_t i = 0; i < set.size(); ++i)
    if (again[i] != alone[i])
      f.add("after: " + set[i].route + " " + set[i].body.dump() + ": differs from the first alone answer\n--- first:\n" +
            alone[i] + "\n--- after:\n" + again[i], /*mismatch=*/true);
  httplib::Client c = client_make(srv.port());
  httplib::Result h = c.Get("/health");
  if (!h || h->status != 200) f.add("after: GET /health did not answer 200");
  httplib::Result m = c.Get("/metrics");
  if (m && m->status == 200) out.rejected_total = metric_value(m->body, "requests_rejected_total");
  else f.add("after: GET /metrics did not answer 200");
  return out;
}

json summary_json(const options& o, const load_result& lr, const rss_record& rss, const after_result& ar, int64_t n_total) {
  json routes = json::object();
  for (const auto& [route, rs] : lr.total.routes)
    for (const auto& [status, ms] : rs)
      routes[route][std::to_string(status)] = {{"count", ms.size()}, {"p50_ms", percentile(ms, 0.5)},
                                               {"p99_ms", percentile(ms, 0.99)}, {"max_ms", percentile(ms, 1.0)}};
  return {{"connections", o.connections}, {"seconds", o.seconds}, {"parallel", o.parallel}, {"seed", o.seed},
          {"requests", n_total}, {"requests_per_s", static_cast<double>(n_total) / std::max(lr.wall_s, 1e-9)},
          {"n_503", lr.total.n_503}, {"requests_rejected_total", ar.rejected_total}, {"routes", routes},
          {"rss_kib", {{"start", rss.start}, {"warm", rss.warm}, {"peak", rss.peak}, {"after", rss.after}}},
          {"server_exit_status", ar.exit_status}};
}

int64_t report_print(const options& o, const load_result& lr, const rss_record& rss, const after_result& ar) {
  std::printf("\n%-36s %6s %8s %10s %10s %10s\n", "ROUTE", "STATUS", "COUNT", "P50 MS", "P99 MS", "MAX MS");
  int64_t n_total = 0;
  for (const auto& [route, rs] : lr.total.routes) {
    bool first = true;
    for (const auto& [status, ms] : rs) {
      n_total += static_cast<int64_t>(ms.size());
      std::printf("%-36s %6d %8zu %10.1f %10.1f %10.1f\n", first ? route.c_str() : "", status, ms.size(), percentile(ms, 0.5),
                  percentile(ms, 0.99), percentile(ms, 1.0));
      first = false;
    }
  }
  std::printf("\n%d connections, %.1f s, --parallel %d, seed %" PRIu64 ": %" PRId64 " requests, %.1f requests/s\n",
              o.connections, lr.wall_s, o.parallel, o.seed, n_total, static_cast<double>(n_total) / std::max(lr.wall_s, 1e-9));
  std::printf("503 backpressure: %" PRId64 " (%.2f%% of all requests); server requests_rejected_total: %" PRId64 "\n",
              lr.total.n_503, n_total ? 100.0 * static_cast<double>(lr.total.n_503) / static_cast<double>(n_total) : 0.0,
              ar.rejected_total);
  std::printf("RSS MiB: start %.1f, warm (end of first quarter) %.1f, peak %.1f, after %.1f\n", rss.start / 1024.0,
              rss.warm / 1024.0, rss.peak / 1024.0, rss.after / 1024.0);
  return n_total;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool SANITIZER_BUILD = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool SANITIZER_BUILD = true;
#else
constexpr bool SANITIZER_BUILD = false;
#endif
#else
constexpr bool SANITIZER_BUILD = false;
#endif

// The memory rule of the header comment; appends a failure when it is broken. In a sanitizer
// build (the server is built the same way) RSS grows without a leak: AddressSanitizer holds freed
// memory in quarantine (up to 256 MiB), ThreadSanitizer's shadow grows with what was touched. The
// rule is reported, not applied; under ASan, LeakSanitizer checks the server when it exits (a leak
// makes its exit status non-zero, which fails the test).
void rss_judge(const rss_record& rss, failures& f) {
  if (SANITIZER_BUILD) {
    std::printf("memory rule: not applied in a sanitizer build (quarantine, shadow memory)\n");
    return;
  }
  const int64_t allowed = std::max<int64_t>(16 * 1024, rss.warm / 10);
  std::printf("memory rule: after <= warm + max(16 MiB, 10%% of warm) = %.1f MiB: %s\n", (rss.warm + allowed) / 1024.0,
              rss.after >= 0 && rss.warm > 0 && rss.after <= rss.warm + allowed ? "holds" : "BROKEN");
  if (rss.after < 0 || rss.warm <= 0) f.add("RSS could not be read");
  else if (rss.after > rss.warm + allowed)
    f.add("RSS after the load " + std::to_string(rss.after) + " KiB > warm " + std::to_string(rss.warm) + " KiB + " +
          std::to_string(allowed) + " KiB");
}

// The slow heads and the /health probe beside the load (header comment); prints what they saw
// and appends a failure for each bound broken.
void slow_judge(const options& o, const slow_result& sr, const probe_result& pr, failures& f) {
  std::printf("slow heads: %d clients, %" PRId64 " connections: %" PRId64 " answered 408, %" PRId64
              " closed silently, %" PRId64 " other answers, %" PRId64 " failed to connect; longest held %.1f s (bound %.0f s)\n",
              o.slow, sr.connections, sr.answered_408, sr.closed_silent, sr.answered_other, sr.connect_failed,
              sr.longest_held_s, SLOW_HELD_MAX_S);
  std::printf("GET /health probe: %" PRId64 " probes, slowest %.1f ms (bound %d ms), %" PRId64 " late or failed\n", pr.probes,
              pr.max_ms, PROBE_LIMIT_MS, pr.late_or_failed);
  if (pr.late_or_failed > 0) f.add(pr.first_failure + " (" + std::to_string(pr.late_or_failed) + " such probes)");
  if (pr.probes == 0) f.add("GET /health probe: no probe ran");
  if (sr.longest_held_s > SLOW_HELD_MAX_S)
    f.add("slow heads: a connection whose head never ended stayed open " + std::to_string(sr.longest_held_s) +
          " s, more than --header-timeout " + std::to_string(HEADER_TIMEOUT_S) + " s + 3 s");
  if (sr.answered_other > 0) f.add("slow heads: " + std::to_string(sr.answered_other) + " answers other than 408 to a head that never ended");
  if (sr.connect_failed > 0) f.add("slow heads: " + std::to_string(sr.connect_failed) + " connections could not be opened");
}

// Phases 2 and 3 against a started server; fills the summary.
void load_and_after(const options& o, serve_child& srv, const std::vector<gen_request>& set,
                    const std::vector<std::string>& alone, failures& f, json& summary) {
  rss_record rss;
  rss.start = rss_kib(srv.pid());
  std::atomic<bool> stop{false};
  std::thread sampler([&] { rss_sample(srv.pid(), o.seconds, stop, rss); });
  load_plan plan;
  plan.port = srv.port();
  plan.seed = o.seed;
  plan.set = &set;
  plan.alone = &alone;
  // The slow heads are open before the first request of the load and stay open until its end.
  slow_heads slow(srv.port(), o.slow, SLOW_INTERVAL_MS);
  slow_result sr;
  probe_result pr;
  slow.open_all(sr);
  std::atomic<bool> stop_slow{false};
  std::thread slow_thread([&] { slow.run(stop_slow, sr); });
  std::thread probe_thread([&] { health_probe(srv.port(), PROBE_EVERY_MS, PROBE_LIMIT_MS, stop_slow, pr); });
  plan.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<int64_t>(o.seconds * 1000));
  const load_result lr = load_phase(o, plan, f);
  stop_slow = true;
  probe_thread.join();
  slow_thread.join();
  stop = true;
  sampler.join();
  after_result ar;
  if (!srv.alive()) {
    std::printf("detaudit serve died under load: %s\n", srv.status().c_str());
    f.add("detaudit serve died under load: " + srv.status());
  } else {
    ar = after_phase(srv, set, alone, rss, f);
  }
  ar.exit_status = srv.stop(30);
  const int64_t n_total = report_print(o, lr, rss, ar);
  slow_judge(o, sr, pr, f);
  rss_judge(rss, f);
  std::printf("server shutdown (SIGTERM): exit status %d\n", ar.exit_status);
  if (ar.exit_status != 0) f.add("detaudit serve did not shut down cleanly: exit status " + std::to_string(ar.exit_status));
  summary = summary_json(o, lr, rss, ar, n_total);
  summary["slow_heads"] = {{"clients", o.slow},
                           {"connections", sr.connections},
                           {"answered_408", sr.answered_408},
                           {"answered_other", sr.answered_other},
                           {"closed_silent", sr.closed_silent},
                           {"connect_failed", sr.connect_failed},
                           {"longest_held_s", sr.longest_held_s}};
  summary["health_probe"] = {{"probes", pr.probes}, {"late_or_failed", pr.late_or_failed}, {"max_ms", pr.max_ms}};
}

void on_signal(int sig) {
  if (g_child_pid > 0) ::kill(g_child_pid, SIGKILL);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int run(const options& o) {
  failures f;
  json summary = json::object();
  try {
    const std::string bin = o.detaudit.empty() ? test::detaudit_bin() : o.detaudit;
    const std::string model = o.model.empty() ? test::fixture("models/stories260K.gguf") : o.model;
    const std::string err_path = test::scratch_dir("load_" + std::to_string(::getpid())) + "/serve.stderr";
    const std::string max_conn = std::to_string(2 * (o.connections + o.slow) + 16);
    const std::vector<std::string> extra = {"--parallel", std::to_string(o.parallel), "-t", "1", "--chat-template", "chatml",
                                            "--header-timeout", std::to_string(HEADER_TIMEOUT_S), "--max-connections",
                                            max_conn, "--max-connections-per-client", max_conn};
    std::string line = "detaudit serve -m " + model + " --host 127.0.0.1 --port 0";
    for (const std::string& a : extra) line += " " + a;
    std::printf("%s\n", line.c_str());
    serve_child srv(bin, model, extra, err_path);
    const std::vector<gen_request> set = request_set();
    const std::vector<std::string> alone = alone_run(srv.port(), set, f);
    std::printf("alone: %zu requests answered; server stderr: %s\n", set.size(), err_path.c_str());
    if (f.n == 0) load_and_after(o, srv, set, alone, f, summary);
  } catch (const std::exception& e) {
    f.add(e.what());
  }
  if (!f.first_mismatch.empty()) std::printf("\nfirst answer mismatch:\n%s\n", f.first_mismatch.c_str());
  else if (f.first.find('\n') != std::string::npos) std::printf("\nfirst failure:\n%s\n", f.first.c_str());
  if (f.n > 1) std::printf("%" PRId64 " failures in all (the first one on the last line)\n", f.n.load());
  const std::string verdict = f.n == 0 ? "PASS" : "FAIL: " + f.first.substr(0, f.first.find('\n'));
  summary["failures"] = f.n.load();
  summary["first_failure"] = f.first;
  summary["result"] = verdict;
  if (!o.json_path.empty()) std::ofstream(o.json_path) << summary.dump(2) << "\n";
  std::printf("load: %s\n", verdict.c_str());
  return f.n == 0 ? 0 : 1;
}

}  // namespace
}  // namespace detaudit::load

int main(int argc, char** argv) {
  detaudit::load::options o;
  if (const int rc = detaudit::load::options_parse(argc, argv, o); rc != 0) return rc < 0 ? 0 : rc;
  std::signal(SIGINT, detaudit::load::on_signal);
  std::signal(SIGTERM, detaudit::load::on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  return detaudit::load::run(o);
}
