// The senders of each probe: what is sent, to which target, the record written and the evidence it
// carries. Which conditions exist, in what order, and how their evidence is judged: the rows of
// reports::condition_table().
#include "probes/conditions.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <latch>
#include <mutex>
#include <optional>
#include <thread>

#include "reports/audit/conditions.h"
#include "util/error.h"
#include "util/sha256.h"

namespace detaudit::probes::detail {

struct item_ctx {
  run_state& st;
  run_target& rt;
  const item& it;
  size_t index;
  std::string prompt_sha256;
};

namespace {

// Short filler prompts for the concurrency probe when the run has too few items of its own.
const char* const FILLERS[] = {
    "Write a short story about a lighthouse keeper.",
    "List five facts about octopuses.",
    "Explain how a hash table handles collisions.",
    "Describe how bread rises.",
    "Summarise the rules of chess.",
    "Write a poem about autumn leaves.",
    "Explain the difference between a list and a set.",
    "Give three tips for learning a new language.",
};

std::string reason_cross(const std::string& what) {
  return "not supported by this target: start two servers " + what + " and compare them with --probe cross";
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string key_of(const std::string& item_id, const std::string& label, const std::string& cond, int rep) {
  reports::record r;
  r.item_id = item_id;
  r.target = {{"label", label}};
  r.condition = cond;
  r.repetition = rep;
  return reports::record_key(r);
}

item_ctx ctx_make(run_state& st, run_target& rt, size_t index) {
  const item& it = (*st.items)[index];
  sha256 h;
  h.update(it.prompt.data(), it.prompt.size());
  return item_ctx{st, rt, it, index, h.hex_digest()};
}

// The item's request on this target: every request but the cache probe's cache-on and cache-warm
// goes without the prompt cache where the target lets us say so.
gen_request item_request(const item_ctx& c) {
  gen_request req = request_for(*c.st.opt, c.rt, c.it.prompt);
  if (c.rt.caps.cache_control && !req.cache_prompt) req.cache_prompt = false;
  return req;
}

reports::record record_base(const item_ctx& c, std::string_view probe, const std::string& cond, int rep,
                            const target* variant) {
  reports::record r;
  r.run_id = c.st.run_id;
  r.item_id = c.it.id;
  r.probe = probe;
  r.condition = cond;
  r.repetition = rep;
  r.target = c.rt.target_json;
  if (variant) {
    r.target["spec"] = variant->spec();
    r.target["base_spec"] = c.rt.t->spec();
  }
  r.prompt_sha256 = c.prompt_sha256;
  r.reference = c.it.reference;
  r.grader = c.it.grader;
  return r;
}

bool skip(const item_ctx& c, const std::string& cond, int rep) {
  const std::string key = key_of(c.it.id, c.rt.label, cond, rep);
  if (c.st.sent.count(key)) return true;
  if (!c.st.done.count(key)) return false;
  ++c.st.result->records_skipped;
  return true;
}

void record_write(const item_ctx& c, reports::record r, const reports::record& base) {
  json evidence = r.evidence;
  const std::string error = r.error;
  json target = base.target;
  if (r.target.is_object())  // what the response itself says (a server's fingerprint, its URL) wins
    for (const auto& [k, v] : r.target.items())
      if (k != "label" && !v.is_null() && !(v.is_string() && v.get_ref<const std::string&>().empty())) target[k] = v;
  r.run_id = base.run_id;
  r.item_id = base.item_id;
  r.probe = base.probe;
  r.condition = base.condition;
  r.repetition = base.repetition;
  r.target = std::move(target);
  r.prompt_sha256 = base.prompt_sha256;
  r.reference = base.reference;
  r.grader = base.grader;
  r.evidence = evidence.is_object() ? evidence : json::object();
  c.st.writer->write(r);
  c.st.sent.insert(reports::record_key(r));
  ++c.st.result->records_written;
  if (!error.empty()) ++c.st.result->errors;
  record_note(c.st, r);
}

// The fields every response of this run carries besides the target's own: the temperature asked,
// the extra evidence the sender knows, and "cold" for a target's first request.
// The temperature the request body carried: a --request object can set its own, which the target
// then samples at (ollama takes it under "options"). The greedy check reads this value.
std::optional<double> body_temperature(const json& body) {
  for (const json* o : {&body, body.is_object() && body.contains("options") ? &body["options"] : nullptr})
    if (o && o->is_object())
      if (auto it = o->find("temperature"); it != o->end() && it->is_number()) return it->get<double>();
  return std::nullopt;
}

void response_finish(const item_ctx& c, target& t, const gen_request& req, const json& extra, reports::record& r) {
  r.temperature = body_temperature(r.request).value_or(req.temperature);
  for (const auto& [k, v] : extra.items()) r.evidence[k] = v;
  if (!c.st.used.count(&t)) r.evidence["cold"] = true;
  c.st.used.insert(&t);
}

bool refused_outright(const reports::record& r);
std::string refusal_fix(const run_options& opt, const reports::record& r);

// The first response of each target in this invocation. A target that refuses it outright is
// asked once more with another item (one token, not recorded): when it refuses that too, it would
// refuse every request the same way, so the run stops at once (exit 2) with the fix and sends
// nothing more; when it takes it, the refusal was the item's own (a prompt too long, say) and is
// recorded as that item's error like any other.
void first_response_check(const item_ctx& c, target& t, const reports::record& r) {
  if (!c.st.checked.insert(&t).second || !refused_outright(r)) return;
  const std::vector<item>& items = *c.st.items;
  for (size_t k = 1; k < items.size(); ++k) {
    const item& other = items[(c.index + k) % items.size()];
    if (other.prompt == c.it.prompt) continue;
    gen_request req = request_for(*c.st.opt, c.rt, other.prompt);
    req.n_predict = 1;
    if (c.rt.caps.cache_control) req.cache_prompt = false;
    const reports::record again = t.complete(req);
    if (run_interrupted()) throw interrupted_error("interrupted");
    if (!refused_outright(again)) return;
    break;
  }
  throw input_error("target " + c.rt.label + " (" + t.spec() + ") refused the first request (item " + c.it.id + "): " + r.error +
                    "; every request would fail the same way: " + refusal_fix(*c.st.opt, r));
}

// Sends one request to `t` and writes its record; returns the record's evidence (empty when the
// key was recorded already).
json send(const item_ctx& c, target& t, std::string_view probe, const std::string& cond, int rep, const gen_request& req,
          const target* variant = nullptr, const json& extra = json::object()) {
  if (skip(c, cond, rep)) return json::object();
  if (run_interrupted()) throw interrupted_error("interrupted");
  const reports::record base = record_base(c, probe, cond, rep, variant);
  reports::record r = t.complete(req);
  if (run_interrupted()) throw interrupted_error("interrupted");
  first_response_check(c, t, r);
  response_finish(c, t, req, extra, r);
  json evidence = r.evidence;
  record_write(c, std::move(r), base);
  return evidence;
}

void not_exercised(const item_ctx& c, std::string_view probe, const std::string& cond, int rep, const std::string& reason) {
  if (skip(c, cond, rep)) return;
  reports::record r = record_base(c, probe, cond, rep, nullptr);
  r.evidence = {{"exercised", false}, {"reason", reason}};
  record_write(c, r, r);
}

// A request sent beside the item: another item of the run, or one of FILLERS.
struct filler {
  std::string prompt;
  std::string item_id;  // "" for FILLERS
  int fixed = -1;       // index into FILLERS, or -1
};

std::vector<filler> fillers_for(const std::vector<item>& items, size_t index, int n) {
  std::vector<filler> pool;
  for (size_t k = 1; k < items.size(); ++k) {
    const item& it = items[(index + k) % items.size()];
    pool.push_back({it.prompt, it.id, -1});
  }
  if (static_cast<int>(pool.size()) < n)
    for (size_t f = 0; f < std::size(FILLERS); ++f) pool.push_back({FILLERS[f], "", static_cast<int>(f)});
  std::vector<filler> out;
  for (int i = 0; i < n; ++i) out.push_back(pool[static_cast<size_t>(i) % pool.size()]);
  return out;
}

// While a burst runs: how many slots the target says are processing (and which, where it names
// them), sampled every 10 ms.
struct busy_poller {
  struct sample {
    double t;
    int busy;
    std::vector<int> ids;
  };
  std::vector<sample> samples;
  std::atomic<bool> stop{false};
  std::thread th;

  explicit busy_poller(target& t) {
    th = std::thread([this, &t] {
      while (!stop.load() && !run_interrupted()) {
        std::vector<int> ids;
        int b = -1;
        try {  // nothing may escape this thread: an exception here would end the process
          b = t.busy_now(&ids);
        } catch (const std::exception&) {
          b = -1;
        }
        if (b >= 0) samples.push_back({unix_now(), b, std::move(ids)});
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  // The most seen busy at once between t0 and t1, counting only readings where `slot` (when >= 0
  // and the readings name slots) was among the busy ones; -1 when nothing was read then.
  int max_between(double t0, double t1, int slot) {
    stop = true;
    if (th.joinable()) th.join();
    int best = -1;
    for (const sample& s : samples) {
      if (s.t < t0 || s.t > t1) continue;
      if (slot >= 0 && !s.ids.empty() && std::find(s.ids.begin(), s.ids.end(), slot) == s.ids.end()) continue;
      best = std::max(best, s.busy);
    }
    return best;
  }
  ~busy_poller() {
    stop = true;
    if (th.joinable()) th.join();
  }
};

// When the item's request was being processed: from the end back by the server's own prompt and
// generation time where it reports them (llama.cpp's timings), else its whole time in flight (a
// request waiting in the server's queue is in flight but shares no step).
std::pair<double, double> processing_window(const reports::record& r, double t0, double t1) {
  const json server = r.timings.is_object() ? r.timings.value("server", json::object()) : json::object();
  const json* pm = server.is_object() && server.contains("prompt_ms") ? &server["prompt_ms"] : nullptr;
  const json* gm = server.is_object() && server.contains("predicted_ms") ? &server["predicted_ms"] : nullptr;
  if (pm && gm && pm->is_number() && gm->is_number()) {
    const double busy_s = (pm->get<double>() + gm->get<double>()) / 1000.0;
    if (busy_s >= 0 && busy_s <= t1 - t0) return {t1 - busy_s, t1};
  }
  return {t0, t1};
}

// The item's latency when it was sent alone: the smaller of alone's and control's (the first
// request a target serves can be slow for reasons of its own); 0 when neither is known.
double single_latency_ms(const item_ctx& c) {
  double best = 0;
  for (const char* cond : {"alone", "control"}) {
    auto it = c.st.latency_ms.find(key_of(c.it.id, c.rt.label, cond, 0));
    if (it != c.st.latency_ms.end() && it->second > 0 && (best == 0 || it->second < best)) best = it->second;
  }
  return best;
}

// N requests released at the same moment from N threads; the item's is requests[0].
struct burst {
  std::vector<reports::record> outs;
  std::vector<double> t0, t1;
};

burst burst_send(target& t, const std::vector<gen_request>& reqs) {
  burst b;
  const size_t n = reqs.size();
  b.outs.resize(n), b.t0.resize(n), b.t1.resize(n);
  std::vector<std::exception_ptr> errs(n);
  std::latch start(static_cast<std::ptrdiff_t>(n));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      b.t0[i] = unix_now();
      try {
        b.outs[i] = t.complete(reqs[i]);
      } catch (...) {
        errs[i] = std::current_exception();
      }
      b.t1[i] = unix_now();
    });
  for (std::thread& th : threads) th.join();
  for (const std::exception_ptr& e : errs)
    if (e) std::rethrow_exception(e);
  return b;
}

// The item beside N-1 filler requests. Evidence: whether they overlapped in time, each request's
// end after the release (the queue test), and the busy slots the target showed while the item's
// request ran; the item's own batch width comes with its response where the target reports it.
// Each filler's time alone on this target, where known (null otherwise), for the queue test: an
// item filler's from its alone and control records so far, a fixed filler's measured here once per
// target (sent alone FILLER_SENDS times, the quickest kept, no record written).
constexpr int FILLER_SENDS = 2;
json filler_latencies(const item_ctx& c, const std::vector<filler>& fs) {
  json out = json::array();
  for (const filler& f : fs) {
    double ms = 0;
    if (f.fixed < 0) {
      for (const char* cond : {"alone", "control"}) {
        auto it = c.st.latency_ms.find(key_of(f.item_id, c.rt.label, cond, 0));
        if (it != c.st.latency_ms.end() && it->second > 0 && (ms == 0 || it->second < ms)) ms = it->second;
      }
    } else {
      const auto key = std::make_pair(c.rt.label, f.fixed);
      auto it = c.st.filler_latency_ms.find(key);
      if (it == c.st.filler_latency_ms.end()) {
        // The quicker of two sends, as the item's own is the quicker of alone and control: one
        // slow send (a cold server) must not widen the window the timing test reads.
        double best = 0;
        for (int k = 0; k < FILLER_SENDS; ++k) {
          const double t0 = unix_now();
          const reports::record r = c.rt.t->complete(request_for(*c.st.opt, c.rt, f.prompt));
          const double took = (unix_now() - t0) * 1000.0;
          if (r.error.empty() && (best == 0 || took < best)) best = took;
        }
        it = c.st.filler_latency_ms.emplace(key, best).first;
      }
      ms = it->second;
    }
    out.push_back(ms > 0 ? json(ms) : json(nullptr));
  }
  return out;
}

// The item beside N-1 filler requests. Evidence: whether they overlapped in time, each request's
// end after the release and each filler's time alone (the queue test), and the busy slots the
// target showed while the item's request ran; the item's own batch width comes with its response
// where the target reports it.
void run_concurrency(const item_ctx& c, const gen_request& req) {
  const int n = c.st.opt->concurrency;
  const std::string cond = "concurrent-" + std::to_string(n);
  if (skip(c, cond, 0)) return;
  if (run_interrupted()) throw interrupted_error("interrupted");
  const std::vector<filler> fs = fillers_for(*c.st.items, c.index, n - 1);
  const json filler_ms = filler_latencies(c, fs);
  std::vector<gen_request> reqs = {req};
  json filler_items = json::array();
  for (const filler& f : fs) {
    reqs.push_back(request_for(*c.st.opt, c.rt, f.prompt));
    reqs.back().cache_prompt = req.cache_prompt;
    filler_items.push_back(f.item_id.empty() ? json(nullptr) : json(f.item_id));
  }
  std::unique_ptr<busy_poller> poller;
  if (!c.rt.caps.busy_source.empty()) poller = std::make_unique<busy_poller>(*c.rt.t);
  const burst b = burst_send(*c.rt.t, reqs);
  if (run_interrupted()) throw interrupted_error("interrupted");
  reports::record r = b.outs[0];
  first_response_check(c, *c.rt.t, r);
  const double release = *std::min_element(b.t0.begin(), b.t0.end());
  const double latest_start = *std::max_element(b.t0.begin(), b.t0.end());
  const double earliest_end = *std::min_element(b.t1.begin(), b.t1.end());
  json ends = json::array();
  for (double t : b.t1) ends.push_back((t - release) * 1000.0);
  json extra = {{"overlap", latest_start < earliest_end},
                {"overlap_s", std::max(0.0, earliest_end - latest_start)},
                {"n_requests", n},
                {"end_ms", ends},
                {"filler_items", filler_items},
                {"filler_single_ms", filler_ms}};
  if (poller) {
    const auto [w0, w1] = processing_window(r, b.t0[0], b.t1[0]);
    const json slot = r.evidence.value("slot", json());
    const int busy = poller->max_between(w0, w1, slot.is_number_integer() ? slot.get<int>() : -1);
    if (busy >= 0) extra["slots_busy_max"] = busy, extra["slots_source"] = c.rt.caps.busy_source;
  }
  if (const double single = single_latency_ms(c); single > 0) extra["single_ms"] = single;
  response_finish(c, *c.rt.t, req, extra, r);
  record_write(c, std::move(r), record_base(c, "concurrency", cond, 0, nullptr));
}

void run_repeat(const item_ctx& c, const gen_request& req) { send(c, *c.rt.t, "repeat", "repeat", 0, req); }

// cache-on and cache-warm go to the slot that served cache-off, where the target names it (the
// engine, llama.cpp): a server that hands each request the least recently used slot would
// otherwise never find the prompt it has just computed.
void run_cache(const item_ctx& c, const gen_request& req) {
  gen_request on = req;
  on.cache_prompt = true;
  if (c.rt.caps.cache_control) {
    gen_request off = req;
    off.cache_prompt = false;
    const json ev = send(c, *c.rt.t, "cache", "cache-off", 0, off);
    if (auto slot = ev.find("slot"); slot != ev.end() && slot->is_number_integer()) on.id_slot = slot->get<int>();
    send(c, *c.rt.t, "cache", "cache-on", 0, on);
    send(c, *c.rt.t, "cache", "cache-warm", 0, on);
    return;
  }
  const std::string reason = "not supported by this target: no per-request prompt-cache control";
  not_exercised(c, "cache", "cache-off", 0, reason);
  not_exercised(c, "cache", "cache-on", 0, reason);
  send(c, *c.rt.t, "cache", "cache-warm", 0, req);
}

void run_batch(const item_ctx& c, const gen_request& req) {
  if (c.rt.ubatch_1 && c.rt.ubatch_8192) {
    send(c, *c.rt.ubatch_1, "batch", "ubatch-1", 0, req, c.rt.ubatch_1.get(), {{"ubatch", 1}, {"ubatch_alone", c.rt.ubatch}});
    send(c, *c.rt.ubatch_8192, "batch", "ubatch-8192", 0, req, c.rt.ubatch_8192.get(),
         {{"ubatch", 8192}, {"ubatch_alone", c.rt.ubatch}});
    return;
  }
  const std::string reason = reason_cross("with different -ub");
  not_exercised(c, "batch", "ubatch-1", 0, reason);
  not_exercised(c, "batch", "ubatch-8192", 0, reason);
}

void run_speculation(const item_ctx& c, const gen_request& req) {
  if (c.rt.spec_variant) {
    send(c, *c.rt.spec_variant, "speculation", c.rt.spec_condition, 0, req, c.rt.spec_variant.get());
    return;
  }
  not_exercised(c, "speculation", "spec-ngram", 0, reason_cross("with and without speculative decoding"));
}

void run_seed(const item_ctx& c, const gen_request& req) {
  gen_request fixed = req;
  fixed.temperature = c.st.opt->seed_temperature;
  fixed.seed = c.st.opt->seed;
  gen_request none = fixed;
  none.seed.reset();
  const int k = c.st.opt->seed_k;
  for (int rep = 0; rep < k; ++rep) {
    if (c.rt.seed_reason.empty()) send(c, *c.rt.t, "seed", "seed-fixed", rep, fixed);
    else not_exercised(c, "seed", "seed-fixed", rep, c.rt.seed_reason);
  }
  for (int rep = 0; rep < k; ++rep) send(c, *c.rt.t, "seed", "seed-none", rep, none);
}

bool wanted(const run_options& opt, std::string_view probe) {
  return std::find(opt.probes.begin(), opt.probes.end(), probe) != opt.probes.end();
}

void item_run_target(run_state& st, run_target& rt, size_t index) {
  const item_ctx c = ctx_make(st, rt, index);
  const gen_request req = item_request(c);
  send(c, *rt.t, "base", "alone", 0, req);
  for (int rep = 0; rep + 1 < st.opt->repeat; ++rep) send(c, *rt.t, "base", "control", rep, req);
  for (const probe_sender& p : probe_senders())
    if (wanted(*st.opt, p.probe)) p.send(c, req);
}

// A first request every later one would repeat: the target refused it as a request (4xx), not for
// a passing reason (408 timeout, 429 too many requests).
bool refused_outright(const reports::record& r) {
  return !r.error.empty() && r.http_status >= 400 && r.http_status < 500 && r.http_status != 408 && r.http_status != 429;
}

std::string refusal_fix(const run_options& opt, const reports::record& r) {
  const std::string e = r.error;
  auto has = [&e](const char* w) { return e.find(w) != std::string::npos; };
  if (r.http_status == 401 || r.http_status == 403) return "pass the API key with --api-key-env NAME";
  if (opt.chat && (has("template") || has("chat")))
    return "send raw prompts with --raw, or give the model a chat template (engine: chat_template=NAME in the spec; "
           "a server: its --chat-template)";
  if (r.http_status == 404) return "check --api (the dialect) and --model (the model name the server knows)";
  if (r.http_status == 413 || has("context") || has("too long") || has("exceeds"))
    return "shorten the prompts or --n-predict, or give the server a larger context";
  return "check the request settings (--n-predict, --request, --model, --raw/--chat)";
}

}  // namespace

const std::vector<probe_sender>& probe_senders() {
  static const std::vector<probe_sender> table = {
      {"repeat", run_repeat}, {"concurrency", run_concurrency}, {"cache", run_cache},
      {"batch", run_batch},   {"speculation", run_speculation}, {"seed", run_seed},
  };
  return table;
}

gen_request request_for(const run_options& opt, const std::string& prompt) {
  gen_request r = opt.base;
  if (opt.chat) {
    r.prompt.clear();
    r.messages.clear();
    if (!opt.system.empty()) r.messages.push_back({"system", opt.system});
    r.messages.push_back({"user", prompt});
  } else {
    r.messages.clear();
    r.prompt = prompt;
  }
  return r;
}

gen_request request_for(const run_options& opt, const run_target& rt, const std::string& prompt) {
  gen_request r = request_for(opt, prompt);
  if (!rt.eos_stop.empty()) r.stop.push_back(rt.eos_stop);
  return r;
}

void item_run(run_state& st, std::vector<run_target>& targets, size_t index) {
  for (run_target& rt : targets) item_run_target(st, rt, index);
}

void target_seed_check(const run_options& opt, run_target& rt, const item& it) {
  if (rt.t->dialect() == "engine") {
    rt.seed_reason.clear();
    rt.seed_check = {{"result", "honoured"}, {"how", "the built-in engine seeds each request's sampler"}};
    return;
  }
  gen_request req = request_for(opt, rt, it.prompt);
  req.temperature = opt.seed_temperature;
  if (rt.caps.cache_control) req.cache_prompt = false;
  std::vector<std::pair<uint64_t, std::string>> seen;
  auto ask = [&](uint64_t seed) -> std::string {
    req.seed = seed;
    if (run_interrupted()) throw interrupted_error("interrupted");
    const reports::record r = rt.t->complete(req);
    if (!r.error.empty()) throw std::runtime_error(r.error);
    seen.push_back({seed, r.text});
    return r.text;
  };
  try {
    const std::string first = ask(opt.seed), again = ask(opt.seed), other = ask(opt.seed + 1);
    if (first != again) {
      rt.seed_reason = "the server does not honour seeds: seed " + std::to_string(opt.seed) + " gave two different answers";
    } else if (other != first || ask(opt.seed + 2) != first) {
      rt.seed_reason.clear();
    } else {
      rt.seed_reason = "could not confirm that the server honours seeds: seeds " + std::to_string(opt.seed) + " to " +
                       std::to_string(opt.seed + 2) + " gave the same answer";
    }
  } catch (const std::runtime_error& e) {
    if (dynamic_cast<const interrupted_error*>(&e)) throw;
    rt.seed_reason = std::string("the seed check failed: ") + e.what();
  }
  json answers = json::array();
  for (const auto& [seed, text] : seen) answers.push_back({{"seed", seed}, {"text", text.substr(0, 200)}});
  rt.seed_check = {{"result", rt.seed_reason.empty() ? "honoured" : "not confirmed"}, {"reason", rt.seed_reason},
                   {"temperature", opt.seed_temperature}, {"answers", answers}};
}

void record_note(run_state& st, const reports::record& r) {
  if (!r.error.empty()) return;
  st.done.insert(reports::record_key(r));
  if (auto lat = r.timings.find("latency_ms"); lat != r.timings.end() && lat->is_number())
    st.latency_ms[reports::record_key(r)] = lat->get<double>();
  const auto ex = r.evidence.find("exercised");
  if (ex != r.evidence.end() && ex->is_boolean() && !ex->get<bool>()) return;
  const std::string label = r.target.value("label", "");
  st.texts[{r.item_id, label}][{r.condition, r.repetition}] = r.text;
}

bool item_diverged(const run_state& st, const std::vector<run_target>& targets, const item& it) {
  for (const run_target& rt : targets) {
    auto conds = st.texts.find({it.id, rt.label});
    if (conds == st.texts.end()) continue;
    const auto& m = conds->second;
    const auto alone = m.find({"alone", 0});
    for (const auto& [cond, text] : m) {
      const reports::condition_def* d = reports::condition_find(cond.first);
      if (d && d->pairs == reports::PAIR_NONE) continue;
      const auto ref = d && d->pairs == reports::PAIR_REP0 ? m.find({cond.first, 0}) : alone;
      if (ref != m.end() && ref->second != text) return true;
    }
  }
  return false;
}

}  // namespace detaudit::probes::detail
