// The conditions of each probe for one item: what is sent, to which target, and the record written.
#include "probes/conditions.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <latch>
#include <thread>

#include "util/sha256.h"

namespace detaudit::probes::detail {
namespace {

// Short filler prompts for the concurrency probe when the run has too few items of its own.
const char* const k_fillers[] = {
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

// One item on one target: the fields every record of it shares.
struct item_ctx {
  run_state& st;
  run_target& rt;
  const item& it;
  size_t index;
  std::string prompt_sha256;
};

reports::record record_base(const item_ctx& c, const std::string& probe, const std::string& cond, int rep,
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
  if (!c.st.done.count(key_of(c.it.id, c.rt.label, cond, rep))) return false;
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
  ++c.st.result->records_written;
  if (!error.empty()) ++c.st.result->errors;
  record_note(c.st, r);
}

// Sends one request to `t` and writes its record.
void send(const item_ctx& c, target& t, const std::string& probe, const std::string& cond, int rep, const gen_request& req,
          const target* variant = nullptr) {
  if (skip(c, cond, rep)) return;
  const reports::record base = record_base(c, probe, cond, rep, variant);
  reports::record r = t.complete(req);
  if (!c.st.used.count(&t)) r.evidence["cold"] = true;
  c.st.used.insert(&t);
  record_write(c, std::move(r), base);
}

void not_exercised(const item_ctx& c, const std::string& probe, const std::string& cond, const std::string& reason) {
  if (skip(c, cond, 0)) return;
  reports::record r = record_base(c, probe, cond, 0, nullptr);
  r.evidence = {{"exercised", false}, {"reason", reason}};
  record_write(c, r, r);
}

std::vector<std::string> filler_prompts(const std::vector<item>& items, size_t index, int n) {
  std::vector<std::string> pool;
  for (size_t k = 1; k < items.size(); ++k) pool.push_back(items[(index + k) % items.size()].prompt);
  if (static_cast<int>(pool.size()) < n)
    for (const char* f : k_fillers) pool.push_back(f);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(pool[static_cast<size_t>(i) % pool.size()]);
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Batch width from a target's counters, by metric name whatever its prefix: detaudit's
// max_seqs_in_step (the engine's own name, or detaudit_max_seqs_in_step from serve's /metrics),
// llama.cpp's llamacpp:n_busy_slots_per_decode (an average over decode calls).
void metrics_evidence(const json& m, json& evidence) {
  for (const auto& [name, v] : m.items()) {
    if (!v.is_number()) continue;
    if (ends_with(name, "max_seqs_in_step")) evidence["batch_width"] = v;
    else if (ends_with(name, "n_busy_slots_per_decode")) evidence["busy_slots_per_decode"] = v;
  }
}

// The item beside N-1 filler requests, all released at the same moment from N threads.
void run_concurrency(const item_ctx& c, const gen_request& req) {
  const int n = c.st.opt->concurrency;
  const std::string cond = "concurrent-" + std::to_string(n);
  if (skip(c, cond, 0)) return;
  std::vector<gen_request> reqs = {req};
  for (const std::string& p : filler_prompts(*c.st.items, c.index, n - 1)) {
    reqs.push_back(request_for(*c.st.opt, p));
    reqs.back().cache_prompt = req.cache_prompt;
  }
  std::vector<reports::record> outs(reqs.size());
  std::vector<double> t0(reqs.size()), t1(reqs.size());
  std::vector<std::exception_ptr> errs(reqs.size());
  std::latch start(static_cast<std::ptrdiff_t>(reqs.size()));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      t0[i] = unix_now();
      try {
        outs[i] = c.rt.t->complete(reqs[i]);
      } catch (...) {
        errs[i] = std::current_exception();
      }
      t1[i] = unix_now();
    });
  for (std::thread& th : threads) th.join();
  for (const std::exception_ptr& e : errs)
    if (e) std::rethrow_exception(e);
  reports::record r = std::move(outs[0]);
  const double latest_start = *std::max_element(t0.begin(), t0.end());
  const double earliest_end = *std::min_element(t1.begin(), t1.end());
  r.evidence["overlap"] = latest_start < earliest_end;
  r.evidence["overlap_s"] = std::max(0.0, earliest_end - latest_start);
  r.evidence["n_requests"] = n;
  if (c.rt.caps.metrics) metrics_evidence(c.rt.t->metrics(), r.evidence);
  if (!c.st.used.count(c.rt.t)) r.evidence["cold"] = true;
  c.st.used.insert(c.rt.t);
  record_write(c, std::move(r), record_base(c, "concurrency", cond, 0, nullptr));
}

void run_cache(const item_ctx& c, const gen_request& req) {
  gen_request on = req;
  on.cache_prompt = true;
  if (c.rt.caps.cache_control) {
    gen_request off = req;
    off.cache_prompt = false;
    send(c, *c.rt.t, "cache", "cache-off", 0, off);
    send(c, *c.rt.t, "cache", "cache-on", 0, on);
    send(c, *c.rt.t, "cache", "cache-warm", 0, on);
    return;
  }
  const std::string reason = "not supported by this target: no per-request prompt-cache control";
  not_exercised(c, "cache", "cache-off", reason);
  not_exercised(c, "cache", "cache-on", reason);
  send(c, *c.rt.t, "cache", "cache-warm", 0, req);
}

void run_batch(const item_ctx& c, const gen_request& req) {
  if (c.rt.ubatch_1 && c.rt.ubatch_8192) {
    send(c, *c.rt.ubatch_1, "batch", "ubatch-1", 0, req, c.rt.ubatch_1.get());
    send(c, *c.rt.ubatch_8192, "batch", "ubatch-8192", 0, req, c.rt.ubatch_8192.get());
    return;
  }
  const std::string reason = reason_cross("with different -ub");
  not_exercised(c, "batch", "ubatch-1", reason);
  not_exercised(c, "batch", "ubatch-8192", reason);
}

void run_speculation(const item_ctx& c, const gen_request& req) {
  if (c.rt.spec_variant) {
    send(c, *c.rt.spec_variant, "speculation", c.rt.spec_condition, 0, req, c.rt.spec_variant.get());
    return;
  }
  not_exercised(c, "speculation", "spec-ngram", reason_cross("with and without speculative decoding"));
}

void run_seed(const item_ctx& c, const gen_request& req) {
  gen_request fixed = req;
  fixed.temperature = c.st.opt->seed_temperature;
  fixed.seed = c.st.opt->seed;
  gen_request none = fixed;
  none.seed.reset();
  const int k = c.st.opt->seed_k;
  for (int rep = 0; rep < k; ++rep) {
    if (c.rt.caps.seed) send(c, *c.rt.t, "seed", "seed-fixed", rep, fixed);
    else if (!skip(c, "seed-fixed", rep)) {
      reports::record r = record_base(c, "seed", "seed-fixed", rep, nullptr);
      r.evidence = {{"exercised", false}, {"reason", "not supported by this target: no per-request seed"}};
      record_write(c, r, r);
    }
  }
  for (int rep = 0; rep < k; ++rep) send(c, *c.rt.t, "seed", "seed-none", rep, none);
}

void item_run_target(run_state& st, run_target& rt, size_t index) {
  const item& it = (*st.items)[index];
  sha256 h;
  h.update(it.prompt.data(), it.prompt.size());
  const item_ctx c{st, rt, it, index, h.hex_digest()};
  gen_request req = request_for(*st.opt, it.prompt);
  if (rt.caps.cache_control && !req.cache_prompt) req.cache_prompt = false;
  send(c, *rt.t, "base", "alone", 0, req);
  send(c, *rt.t, "base", "control", 0, req);
  const std::vector<std::string>& probes = st.opt->probes;
  auto wanted = [&probes](const char* p) { return std::find(probes.begin(), probes.end(), p) != probes.end(); };
  if (wanted("repeat")) send(c, *rt.t, "repeat", "repeat", 0, req);
  if (wanted("concurrency")) run_concurrency(c, req);
  if (wanted("cache")) run_cache(c, req);
  if (wanted("batch")) run_batch(c, req);
  if (wanted("speculation")) run_speculation(c, req);
  if (wanted("seed")) run_seed(c, req);
}

}  // namespace

const std::vector<std::string>& probe_names() {
  static const std::vector<std::string> names = {"repeat", "concurrency", "cache", "batch", "speculation", "seed", "cross", "lint"};
  return names;
}

gen_request request_for(const run_options& opt, const std::string& prompt) {
  gen_request r = opt.base;
  if (opt.chat) {
    r.prompt.clear();
    r.messages = {{"user", prompt}};
  } else {
    r.messages.clear();
    r.prompt = prompt;
  }
  return r;
}

void item_run(run_state& st, std::vector<run_target>& targets, size_t index) {
  for (run_target& rt : targets) item_run_target(st, rt, index);
}

void record_note(run_state& st, const reports::record& r) {
  if (!r.error.empty()) return;
  st.done.insert(reports::record_key(r));
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
    const auto fixed0 = m.find({"seed-fixed", 0});
    for (const auto& [cond, text] : m) {
      if (cond.first == "seed-none") continue;
      const auto ref = cond.first == "seed-fixed" ? fixed0 : alone;
      if (ref != m.end() && ref->second != text) return true;
    }
  }
  return false;
}

}  // namespace detaudit::probes::detail
