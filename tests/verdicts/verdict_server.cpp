// detaudit_verdict_server: an HTTP server that answers with planted answers, so that a test knows
// the verdict `detaudit run` must reach before it runs (tests/verdicts).
//
//   detaudit_verdict_server --cases FILE.json [--port N] [--log FILE.jsonl]
//
// Listens on 127.0.0.1 only and prints "listening on http://127.0.0.1:PORT" as its first stdout
// line (--port 0, the default, picks a free port), as `detaudit serve` does. The cases file is
// described in verdict_plant.h.
//
// Which answer a request gets: the prompt (a raw "prompt", or the last user message) names a
// case. At temperature 0 the case's answers are taken in arrival order (answers[k] for the k-th
// such request; past the end, answers[0]). At temperature > 0 the answer is the case's
// seed_answer plus one token that is " s<seed>" when the case honours seeds and the request has
// one, else " n<k>" with k fresh on every request. Any other prompt gets " ok".
//
// Concurrency: "parallel" requests each sleep their delay at the same time; "serial" ones are
// served one after another in arrival order (a FIFO ticket queue), each taking its delay, and a
// request for a named case joins the queue 30 ms late, so that beside fillers sent at the same
// moment it is answered last. /slots and /metrics report the requests in their delay ("real"),
// at most one ("one"), or every slot busy whatever happens ("all": a server that lies).
//
// --log FILE appends one JSON line per generation request as it arrives: {path, prompt, case,
// temperature, seed, cache_prompt, stop, n_predict, index} (seed, cache_prompt and stop only when sent).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "verdict_plant.h"

namespace detaudit::verdicts {
namespace {

constexpr int SERIAL_CASE_LAG_MS = 30;

// A generation request as the server reads it.
struct ask_info {
  route_ask route;
  std::string prompt;
  double temperature = 0.8;  // llama.cpp's default when the field is absent
  std::optional<int64_t> seed;
  std::optional<bool> cache_prompt;
  int64_t n_predict = -1;
  bool stream = false;
  json stop;  // as sent, or null
};

struct server_state {
  plant_server plant;
  std::mutex mu;                             // guards next_greedy, n_fresh and log
  std::map<std::string, size_t> next_greedy;  // per prompt: temperature-0 requests so far
  uint64_t n_fresh = 0;
  std::ofstream log;
  std::mutex queue_mu;                       // serial mode: a FIFO of tickets
  std::condition_variable queue_cv;
  uint64_t next_ticket = 0, now_serving = 0;
  std::atomic<int> busy{0};                  // requests inside their delay
};

struct bad_request : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// The last user message's content (a string, or OpenAI's [{type: text, text}] parts joined).
std::string last_user_text(const json& messages) {
  if (!messages.is_array()) throw bad_request("'messages' must be an array");
  std::string out;
  for (const json& m : messages) {
    if (!m.is_object() || m.value("role", "") != "user") continue;
    const json* c = member(m, "content");
    if (!c) continue;
    out.clear();
    if (c->is_string()) out = c->get<std::string>();
    else if (c->is_array())
      for (const json& part : *c)
        if (part.is_object() && part.value("type", "") == "text") out += part.value("text", "");
  }
  return out;
}

template <typename T>
std::optional<T> number_at(const json& body, const json* options, const char* key, const char* option_key) {
  const json* v = member(body, key);
  if (!v && options) v = member(*options, option_key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw bad_request(std::string("'") + key + "' must be a number");
  return v->get<T>();
}

ask_info ask_parse(const std::string& path, const std::string& text, const std::string& model) {
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) throw bad_request("the body is not a JSON object");
  ask_info a;
  a.route.path = path;
  a.route.model = model;
  const json* options = member(body, "options");
  if (const json* p = member(body, "prompt")) {
    if (!p->is_string()) throw bad_request("'prompt' must be a string");
    a.prompt = p->get<std::string>();
  } else if (const json* m = member(body, "messages")) {
    a.prompt = last_user_text(*m);
  } else {
    throw bad_request("the body has neither 'prompt' nor 'messages'");
  }
  a.temperature = number_at<double>(body, options, "temperature", "temperature").value_or(0.8);
  a.seed = number_at<int64_t>(body, options, "seed", "seed");
  a.n_predict = number_at<int64_t>(body, options, "n_predict", "num_predict")
                    .value_or(number_at<int64_t>(body, nullptr, "max_tokens", "").value_or(-1));
  if (const json* c = member(body, "cache_prompt"); c && c->is_boolean()) a.cache_prompt = c->get<bool>();
  if (const json* s = member(body, "stream"); s && s->is_boolean()) a.stream = s->get<bool>();
  if (const json* r = member(body, "return_tokens"); r && r->is_boolean()) a.route.return_tokens = r->get<bool>();
  if (const json* st = member(body, "stop")) a.stop = *st;
  return a;
}

plant_token text_token(const std::string& s) {
  plant_token t;
  t.bytes = s;
  t.logprob = -0.5;
  return t;
}

// The answer to one request, and what the log says about it. Takes the next greedy index.
plant_answer answer_pick(server_state& st, const ask_info& ask, const plant_case& c, bool named, json& log_line) {
  std::lock_guard<std::mutex> lk(st.mu);
  log_line = {{"path", ask.route.path}, {"prompt", ask.prompt}, {"case", named}, {"temperature", ask.temperature},
              {"n_predict", ask.n_predict}};
  if (ask.seed) log_line["seed"] = *ask.seed;
  if (ask.cache_prompt) log_line["cache_prompt"] = *ask.cache_prompt;
  if (!ask.stop.is_null()) log_line["stop"] = ask.stop;
  plant_answer a;
  if (ask.temperature <= 0) {
    const size_t k = st.next_greedy[ask.prompt]++;
    log_line["index"] = k;
    a = k < c.answers.size() ? c.answers[k] : c.answers[0];
  } else {
    a = c.seed_answer;
    const bool by_seed = c.seed_honour && ask.seed;
    a.tokens.push_back(text_token(by_seed ? " s" + std::to_string(*ask.seed) : " n" + std::to_string(st.n_fresh++)));
  }
  if (st.log.is_open()) st.log << log_line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
  return a;
}

// At most n_predict tokens; a cut answer finishes with "length" and its text follows the tokens.
void truncate_to(plant_answer& a, int64_t n_predict) {
  if (n_predict < 0 || a.tokens.size() <= static_cast<size_t>(n_predict)) return;
  a.tokens.resize(static_cast<size_t>(n_predict));
  a.finish = "length";
  a.text.reset();
}

// Holds the request's turn in serial mode (FIFO), marks it busy, sleeps its delay.
void serve_delay(server_state& st, bool named, int delay_ms) {
  std::unique_lock<std::mutex> turn(st.queue_mu, std::defer_lock);
  uint64_t ticket = 0;
  if (st.plant.serial) {
    if (named) std::this_thread::sleep_for(std::chrono::milliseconds(SERIAL_CASE_LAG_MS));
    turn.lock();
    ticket = st.next_ticket++;
    st.queue_cv.wait(turn, [&] { return st.now_serving == ticket; });
  }
  ++st.busy;
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  --st.busy;
  if (st.plant.serial) {
    ++st.now_serving;
    turn.unlock();
    st.queue_cv.notify_all();
  }
}

// The server's "deep_json" levels of nested arrays, spliced in as text (a json value that deep
// would overflow this server's own stack when it is copied or printed).
int g_deep_json = 0;

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  if (g_deep_json > 0 && status == 200 && body.is_object() && !body.empty())
    text.insert(1, "\"deep\":" + std::string(static_cast<size_t>(g_deep_json), '[') + std::string(static_cast<size_t>(g_deep_json), ']') + ",");
  res.set_content(text, "application/json");
}

// A flood (verdict_plant.h): head, `count` units, tail, written in blocks as the client reads,
// so a body of hundreds of megabytes costs this server one block.
void flood_reply(httplib::Response& res, const std::string& kind, int64_t count) {
  struct flood_body {
    std::string head, unit, last, tail;
    int64_t left = 0;
    bool head_sent = false;
  };
  auto f = std::make_shared<flood_body>();
  f->left = std::max<int64_t>(count, 1);
  std::string type = "application/json";
  if (kind == "tokens") {
    *f = {R"({"content": "x", "stop_type": "limit", "tokens": [)", "1,", "1", "]}", f->left, false};
  } else if (kind == "alts") {
    const std::string alt = R"({"id": 2, "token": "b", "logprob": -1})";
    *f = {R"({"content": "a", "tokens": [1], "completion_probabilities": [{"id": 1, "token": "a", "logprob": -1, "top_logprobs": [)",
          alt + ",", alt, "]}]}", f->left, false};
  } else if (kind == "values") {
    *f = {R"({"content": "x", "timings": {"v": [)", "0,", "0", "]}}", f->left, false};
  } else {  // events: none of them the final one
    const std::string ev = "data: {\"content\": \"x\", \"stop\": false}\n\n";
    *f = {"", ev, ev, "", f->left, false};
    type = "text/event-stream";
  }
  res.status = 200;
  res.set_chunked_content_provider(type, [f](size_t, httplib::DataSink& sink) {
    std::string block;
    if (!f->head_sent) {
      block = f->head;
      f->head_sent = true;
    }
    while (f->left > 1 && block.size() < (64u << 10)) {
      block += f->unit;
      --f->left;
    }
    if (f->left == 1) {
      block += f->last + f->tail;
      f->left = 0;
    }
    if (!block.empty() && !sink.write(block.data(), block.size())) return false;
    if (f->left == 0) sink.done();
    return true;
  });
}

void generate(server_state& st, const std::string& path, const httplib::Request& req, httplib::Response& res) {
  if (!st.plant.flood.empty()) return flood_reply(res, st.plant.flood, st.plant.flood_count);
  route_ask route{path, false, st.plant.model};
  ask_info ask;
  try {
    ask = ask_parse(path, req.body, st.plant.model);
    if (ask.stream) throw bad_request("the verdict server does not stream; send \"stream\": false");
  } catch (const bad_request& e) {
    return reply_json(res, 400, render_error(route, 400, e.what()));
  }
  auto it = st.plant.cases.find(ask.prompt);
  const bool named = it != st.plant.cases.end();
  const plant_case& c = named ? it->second : st.plant.default_case;
  json log_line;
  plant_answer a = answer_pick(st, ask, c, named, log_line);
  truncate_to(a, ask.n_predict);
  const int delay = a.delay_ms >= 0 ? a.delay_ms : c.delay_ms >= 0 ? c.delay_ms : st.plant.delay_ms;
  serve_delay(st, named, delay);
  if (a.error_status) return reply_json(res, a.error_status, render_error(ask.route, a.error_status, a.error_message));
  reply_json(res, 200, render_answer(ask.route, a, c));
}

int busy_reported(const server_state& st, const std::string& mode) {
  const int n = st.busy.load();
  if (mode == "all") return st.plant.n_slots;
  return mode == "one" ? std::min(n, 1) : n;
}

json slots_json(const server_state& st) {
  const int busy = busy_reported(st, st.plant.slots);
  json out = json::array();
  for (int i = 0; i < std::max(st.plant.n_slots, busy); ++i) out.push_back({{"id", i}, {"is_processing", i < busy}});
  return out;
}

std::string metrics_text(const server_state& st) {
  std::ostringstream m;
  m << "# HELP llamacpp:requests_processing Number of requests processing.\n"
    << "# TYPE llamacpp:requests_processing gauge\n"
    << "llamacpp:requests_processing " << busy_reported(st, st.plant.metrics) << "\n"
    << "# HELP llamacpp:requests_deferred Number of requests deferred.\n"
    << "# TYPE llamacpp:requests_deferred gauge\n"
    << "llamacpp:requests_deferred 0\n";
  return m.str();
}

void routes_add(httplib::Server& srv, server_state& st) {
  for (const char* path : {"/completion", "/v1/chat/completions", "/v1/completions", "/api/generate", "/api/chat"})
    srv.Post(path, [&st, p = std::string(path)](const httplib::Request& req, httplib::Response& res) { generate(st, p, req, res); });
  const plant_server& ps = st.plant;
  srv.Get("/health", [](const httplib::Request&, httplib::Response& res) { reply_json(res, 200, {{"status", "ok"}}); });
  srv.Get("/v1/models", [&ps](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", ps.model}, {"object", "model"}, {"owned_by", "verdict-server"}};
    reply_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
  });
  if (ps.props)
    srv.Get("/props", [&ps](const httplib::Request&, httplib::Response& res) {
      json props = {{"build_info", "verdict-server"}, {"model_path", "/planted/" + ps.model + ".gguf"},
                    {"total_slots", ps.n_slots}, {"default_generation_settings", {{"n_ctx", 4096}}}};
      if (ps.props_name_bytes > 0) {
        props["build_info"] = "verdict-server " + std::string(static_cast<size_t>(ps.props_name_bytes), 'b');
        props["system_fingerprint"] = "fp " + std::string(static_cast<size_t>(ps.props_name_bytes), 'f');
      }
      if (ps.props_width <= 0) return reply_json(res, 200, props);
      // "wide" spliced in as text: props_depth arrays around props_width zeros
      std::string wide(static_cast<size_t>(ps.props_depth), '[');
      for (int64_t i = 0; i < ps.props_width; ++i) wide += i ? ",0" : "0";
      wide += std::string(static_cast<size_t>(ps.props_depth), ']');
      std::string text = props.dump();
      text.insert(1, "\"wide\": [" + wide + "], ");
      res.set_content(text, "application/json");
    });
  if (ps.api_version) {
    srv.Get("/api/version", [](const httplib::Request&, httplib::Response& res) { reply_json(res, 200, {{"version", "0.0.0-verdict"}}); });
    srv.Get("/api/tags", [&ps](const httplib::Request&, httplib::Response& res) {
      reply_json(res, 200, {{"models", json::array({{{"name", ps.model}}})}});
    });
  }
  if (ps.slots != "off")
    srv.Get("/slots", [&st](const httplib::Request&, httplib::Response& res) { reply_json(res, 200, slots_json(st)); });
  if (ps.metrics != "off")
    srv.Get("/metrics", [&st](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(st), "text/plain; version=0.0.4");
    });
  if (ps.get_delay_ms > 0)
    srv.set_pre_routing_handler([&ps](const httplib::Request& req, httplib::Response&) {
      if (req.method == "GET") std::this_thread::sleep_for(std::chrono::milliseconds(ps.get_delay_ms));
      return httplib::Server::HandlerResponse::Unhandled;
    });
  srv.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply_json(res, 500, {{"error", {{"code", 500}, {"message", "verdict server: " + what}, {"type", "server_error"}}}});
  });
}

struct cli_args {
  std::string cases, log;
  int port = 0;
};

cli_args args_parse(int argc, char** argv) {
  cli_args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("option " + k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--cases") a.cases = v;
    else if (k == "--log") a.log = v;
    else if (k == "--port") a.port = std::stoi(v);
    else throw std::runtime_error("unknown option " + k);
  }
  if (a.cases.empty()) throw std::runtime_error("--cases FILE.json is required");
  return a;
}

json file_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::runtime_error(path + ": not JSON");
  return j;
}

int server_main(int argc, char** argv) {
  const cli_args args = args_parse(argc, argv);
  server_state st;
  st.plant = plant_load(file_json(args.cases));
  g_deep_json = st.plant.deep_json;
  if (!args.log.empty()) {
    st.log.open(args.log, std::ios::app);
    if (!st.log) throw std::runtime_error(args.log + ": cannot open for appending");
  }
  httplib::Server srv;
  srv.new_task_queue = [] { return new httplib::ThreadPool(64); };
  routes_add(srv, st);
  int port = args.port;
  if (port == 0) port = srv.bind_to_any_port("127.0.0.1");
  else if (!srv.bind_to_port("127.0.0.1", port)) port = -1;
  if (port <= 0) throw std::runtime_error("cannot listen on 127.0.0.1:" + std::to_string(args.port));
  std::cout << "listening on http://127.0.0.1:" << port << std::endl;
  return srv.listen_after_bind() ? 0 : 1;
}

}  // namespace
}  // namespace detaudit::verdicts

int main(int argc, char** argv) {
  try {
    return detaudit::verdicts::server_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "detaudit_verdict_server: %s\n", e.what());
    return 2;
  }
}
