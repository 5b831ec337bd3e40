// runtime::scheduler: continuous batching, prompt cache, slot save/restore and n-gram speculation
// change nothing in exact numerics (token ids, top log-probs and logit hashes compared bit for bit,
// against each other and against runtime::generate()); queue limits and shutdown answer as
// llama-server does. In float numerics a shared step can change a request's logits.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/generate.h"
#include "runtime/scheduler.h"
#include "synth_util.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;

namespace {

// The HTTP status a slot action answers with: 200 when it returns, else its http_error's.
template <class F>
int slot_status(F&& action) {
  try {
    action();
    return 200;
  } catch (const runtime::request_error& e) {
    CHECK_FALSE(std::string(e.what()).empty());
    return e.status();
  }
}

std::shared_ptr<const model::model> stories() {
  static auto m = model::model::load(test::fixture("models/stories260K.gguf"));
  return m;
}

runtime::scheduler_params sched_params(int n_slots, int64_t total_ctx,
                                     runtime::numerics_mode mode = runtime::NUMERICS_EXACT) {
  runtime::scheduler_params p;
  p.ctx.numerics = mode;
  p.ctx.n_ctx = total_ctx;
  p.n_slots = n_slots;
  p.n_queue = 2 * n_slots;
  return p;
}

const char* const TEXTS[] = {
    "Once upon a time, there was a little dog",
    "Lily liked to play in the park with her ball",
    "The sun was hot and the boy wanted",
    "Tom had a big red truck. One day",
    "A bird sat on a tree",
    "Mom said it was time for bed, but Sue",
    "There was a cat who loved milk",
    "The little girl found a shiny stone",
};

runtime::request make_request(const model::model& m, const std::string& text, int64_t n_predict = 24) {
  runtime::request r;
  r.prompt = runtime::generate_tokenize(m.vocab(), text);
  r.n_predict = n_predict;
  r.n_probs = 5;
  r.logit_hashes = true;
  return r;
}

// Collects results by key; waits for them.
struct collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, runtime::request_result> done;
  std::map<int, size_t> n_events;

  runtime::request_callbacks callbacks(int key) {
    runtime::request_callbacks cb;
    cb.on_token = [this, key](const runtime::token_event&) {
      std::lock_guard<std::mutex> lk(mu);
      ++n_events[key];
      return true;
    };
    cb.on_done = [this, key](const runtime::request_result& r) {
      std::lock_guard<std::mutex> lk(mu);
      done[key] = r;
      cv.notify_all();
    };
    return cb;
  }
  void wait(int key) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done.count(key) > 0; });
  }
  runtime::request_result get(int key) {
    wait(key);
    std::lock_guard<std::mutex> lk(mu);
    return done[key];
  }
};

// A one-token request whose on_token blocks until release(): holds the scheduler thread so that
// requests submitted meanwhile are admitted together, and keeps its slot busy.
struct blocker {
  std::promise<void> entered, gate;
  std::shared_future<void> gate_f = gate.get_future().share();
  bool released = false;

  void submit(runtime::scheduler& s, collector& c, int key, int id_slot = -1) {
    runtime::request r;
    r.prompt = {1, 403};
    r.n_predict = 1;
    r.id_slot = id_slot;
    r.cache_prompt = false;
    runtime::request_callbacks cb = c.callbacks(key);
    cb.on_token = [this](const runtime::token_event&) {
      entered.set_value();
      gate_f.wait();
      return true;
    };
    REQUIRE(s.submit(r, cb));
    entered.get_future().wait();
  }
  void release() {
    if (!released) gate.set_value();
    released = true;
  }
  ~blocker() { release(); }  // never leave the scheduler thread held when a check fails
};

runtime::request_result run_alone(runtime::scheduler& s, const runtime::request& r) {
  collector c;
  REQUIRE(s.submit(r, c.callbacks(0)));
  return c.get(0);
}

// Submits every request while the scheduler thread is held, so they start in the same step.
std::vector<runtime::request_result> run_together(runtime::scheduler& s, const std::vector<runtime::request>& rs) {
  collector c;
  blocker b;
  b.submit(s, c, -1);
  for (size_t i = 0; i < rs.size(); ++i) REQUIRE(s.submit(rs[i], c.callbacks(static_cast<int>(i))));
  b.release();
  std::vector<runtime::request_result> out;
  for (size_t i = 0; i < rs.size(); ++i) out.push_back(c.get(static_cast<int>(i)));
  c.wait(-1);
  return out;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bitwise equality of everything an audit compares; names the first difference.
std::string diff(const runtime::generate_result& a, const runtime::generate_result& b) {
  if (a.tokens.size() != b.tokens.size())
    return "token count " + std::to_string(a.tokens.size()) + " vs " + std::to_string(b.tokens.size());
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    const runtime::generated_token &x = a.tokens[i], &y = b.tokens[i];
    if (x.id != y.id) return "step " + std::to_string(i) + ": token id";
    if (x.logit_hash != y.logit_hash) return "step " + std::to_string(i) + ": logit hash";
    if (x.top.size() != y.top.size()) return "step " + std::to_string(i) + ": top size";
    for (size_t k = 0; k < x.top.size(); ++k)
      if (x.top[k].id != y.top[k].id || bits(x.top[k].logprob) != bits(y.top[k].logprob))
        return "step " + std::to_string(i) + ": top log-prob " + std::to_string(k);
  }
  if (a.chained_hash != b.chained_hash) return "chained hash";
  if (a.text != b.text) return "text";
  if (a.finish != b.finish || a.stop != b.stop) return "finish";
  return "";
}

}  // namespace

TEST_CASE("serve scheduler: 8 requests together equal each alone and runtime::generate bit for bit") {
  auto m = stories();
  std::vector<runtime::request> rs;
  for (const char* t : TEXTS) rs.push_back(make_request(*m, t));
  rs[3].sampling.temp = 0.8f;
  rs[3].sampling.seed = 42;
  rs[5].stop = {"."};
  std::vector<runtime::request_result> alone;
  {
    runtime::scheduler s(m, sched_params(4, 1024));
    for (const runtime::request& r : rs) alone.push_back(run_alone(s, r));
    CHECK(s.metrics().max_seqs_in_step == 1);
  }
  runtime::scheduler s(m, sched_params(4, 1024));
  const std::vector<runtime::request_result> together = run_together(s, rs);
  const runtime::metrics_snapshot mt = s.metrics();
  CHECK(mt.max_seqs_in_step >= 2);
  CHECK(mt.requests_total == 9);
  for (size_t i = 0; i < rs.size(); ++i) {
    CAPTURE(i);
    CHECK(alone[i].error.empty());
    CHECK(alone[i].gen.tokens.size() > 0);
    CHECK(diff(alone[i].gen, together[i].gen) == "");
    // the same request on a fresh context with generate()
    runtime::context_params cp;
    cp.n_ctx = s.slot_n_ctx();
    runtime::context c(m, cp);
    runtime::generate_params gp;
    gp.n_predict = rs[i].n_predict;
    gp.sampling = rs[i].sampling;
    gp.stop = rs[i].stop;
    gp.n_top_logprobs = rs[i].n_probs;
    CHECK(diff(runtime::generate(c, rs[i].prompt, gp), together[i].gen) == "");
  }
}

TEST_CASE("serve scheduler: the prompt cache serves the second run and changes nothing") {
  auto m = stories();
  runtime::scheduler s(m, sched_params(1, 512));
  const runtime::request r = make_request(*m, TEXTS[0]);
  const runtime::request_result first = run_alone(s, r);
  CHECK(first.n_cached == 0);
  const runtime::request_result second = run_alone(s, r);
  CHECK(second.n_cached == static_cast<int64_t>(r.prompt.size()) - 1);
  CHECK(diff(first.gen, second.gen) == "");
  runtime::request off = r;
  off.cache_prompt = false;
  const runtime::request_result third = run_alone(s, off);
  CHECK(third.n_cached == 0);
  CHECK(diff(first.gen, third.gen) == "");
  // a request sharing only a prefix reuses that prefix
  runtime::request longer = make_request(*m, std::string(TEXTS[0]) + " named Max");
  const runtime::request_result fourth = run_alone(s, longer);
  CHECK(fourth.n_cached > 0);
  CHECK(fourth.n_cached < static_cast<int64_t>(longer.prompt.size()));
  const runtime::metrics_snapshot mt = s.metrics();
  CHECK(mt.prompt_tokens_cached == second.n_cached + fourth.n_cached);
  CHECK(mt.generated_tokens_total == static_cast<int64_t>(first.gen.tokens.size() * 3 + fourth.gen.tokens.size()));
}

TEST_CASE("serve scheduler: slot save, erase and restore keep the cache bit for bit") {
  auto m = stories();
  const std::string dir = test::scratch_dir("serve_scheduler_slots");
  runtime::scheduler_params p = sched_params(2, 512);
  p.slot_save_path = dir;
  runtime::scheduler s(m, p);
  runtime::request r = make_request(*m, TEXTS[1]);
  r.id_slot = 0;
  const runtime::request_result first = run_alone(s, r);
  CHECK(first.slot == 0);
  CHECK(slot_status([&] { s.slot_save(0, "slot0.bin"); }) == 200);
  CHECK(slot_status([&] { s.slot_erase(0); }) == 200);
  CHECK(s.slots()[0].n_cached == 0);
  CHECK(slot_status([&] { s.slot_restore(0, "slot0.bin"); }) == 200);
  CHECK(s.slots()[0].n_cached > 0);
  const runtime::request_result second = run_alone(s, r);
  CHECK(second.n_cached == static_cast<int64_t>(r.prompt.size()) - 1);
  CHECK(diff(first.gen, second.gen) == "");

  for (const std::string& bad : {std::string(), std::string("../x"), std::string("a/b"), std::string("a\\b"),
                                 std::string("a\0b", 3), std::string("..")}) {
    CAPTURE(bad);
    CHECK(slot_status([&] { s.slot_save(0, bad); }) == 400);
    CHECK(slot_status([&] { s.slot_restore(0, bad); }) == 400);
  }
  CHECK(slot_status([&] { s.slot_restore(0, "missing.bin"); }) == 404);
  CHECK(slot_status([&] { s.slot_save(7, "x.bin"); }) == 400);
  {
    // a request that runs until the client goes away (on_token returns false) keeps slot 1 busy
    collector c;
    std::atomic<bool> go_away{false};
    std::promise<void> started;
    std::atomic<bool> started_set{false};
    runtime::request busy = make_request(*m, TEXTS[2], -1);
    busy.id_slot = 1;
    runtime::request_callbacks cb = c.callbacks(0);
    cb.on_token = [&](const runtime::token_event&) {
      if (!started_set.exchange(true)) started.set_value();
      return !go_away.load();
    };
    REQUIRE(s.submit(busy, cb));
    started.get_future().wait();
    CHECK(slot_status([&] { s.slot_save(1, "x.bin"); }) == 409);
    CHECK(slot_status([&] { s.slot_erase(1); }) == 409);
    go_away = true;
    const runtime::request_result r = c.get(0);
    CHECK(r.http_status == 499);
    CHECK(r.gen.tokens.size() >= 2);
  }
  runtime::scheduler none(m, sched_params(1, 256));
  CHECK(slot_status([&] { none.slot_save(0, "x.bin"); }) == 501);
  CHECK(slot_status([&] { none.slot_restore(0, "x.bin"); }) == 501);
}

TEST_CASE("serve scheduler: n-gram speculation gives the same output and accepts drafts") {
  auto m = stories();
  const std::string text =
      "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat sat on the mat.";
  runtime::scheduler_params p = sched_params(2, 1024);
  runtime::scheduler plain(m, p);
  p.spec = runtime::SPEC_NGRAM;
  p.n_draft = 8;
  runtime::scheduler spec(m, p);
  for (float temp : {0.0f, 0.8f}) {
    CAPTURE(temp);
    runtime::request r = make_request(*m, text, 64);
    r.sampling.temp = temp;
    r.sampling.seed = 1234;
    const runtime::request_result a = run_alone(plain, r);
    const runtime::request_result b = run_alone(spec, r);
    CHECK(diff(a.gen, b.gen) == "");
    CHECK(a.n_draft_proposed == 0);
    CHECK(b.n_draft_proposed > 0);
    if (temp == 0.0f) CHECK(b.n_draft_accepted > 0);
    MESSAGE("temp " << temp << ": drafts proposed " << b.n_draft_proposed << ", accepted " << b.n_draft_accepted);
    r.speculative = false;
    const runtime::request_result c = run_alone(spec, r);
    CHECK(c.n_draft_proposed == 0);
    CHECK(diff(a.gen, c.gen) == "");
    // speculation beside other requests in the same steps
    std::vector<runtime::request> rs = {make_request(*m, TEXTS[2], 64), make_request(*m, text, 64)};
    rs[1].sampling = r.sampling;
    rs[1].speculative = true;
    const std::vector<runtime::request_result> both = run_together(spec, rs);
    CHECK(diff(a.gen, both[1].gen) == "");
  }
  CHECK(spec.metrics().draft_accepted_total > 0);
  CHECK(spec.metrics().draft_proposed_total >= spec.metrics().draft_accepted_total);
}

TEST_CASE("serve scheduler: draft-model speculation gives the same output, accepts and rejects drafts") {
  auto m = stories();
  // Two drafts: the model itself (every greedy draft is right at temperature 0; at 0.8 the target
  // samples, so some drafts are accepted and the rest rejected) and a random model sharing its
  // vocabulary (its drafts are wrong, almost always every one: the rejection path runs).
  const std::string dir = test::scratch_dir("serve_scheduler_draft");
  model::synth_options o;
  o.n_embd = 64;
  o.n_layer = 1;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 128;
  o.vocab_from = test::fixture("models/stories260K.gguf");
  model::synth_write(o, dir + "/draft.gguf");
  std::shared_ptr<const model::model> random_draft = model::model::load(dir + "/draft.gguf");
  runtime::scheduler plain(m, sched_params(2, 1024));
  for (const auto& draft : {m, random_draft}) {
    runtime::scheduler_params p = sched_params(2, 1024);
    p.spec = runtime::SPEC_DRAFT;
    p.draft = draft;
    p.n_draft = 6;
    runtime::scheduler spec(m, p);
    for (float temp : {0.0f, 0.8f}) {
      CAPTURE(temp);
      CAPTURE(draft == m);
      runtime::request r = make_request(*m, TEXTS[0], 40);
      r.sampling.temp = temp;
      r.sampling.seed = 99;
      const runtime::request_result a = run_alone(plain, r);
      const runtime::request_result b = run_alone(spec, r);
      CHECK(diff(a.gen, b.gen) == "");
      CHECK(b.n_draft_proposed > 0);
      if (draft == m && temp == 0.0f) CHECK(b.n_draft_accepted == b.n_draft_proposed);
      if (draft == m && temp != 0.0f) {
        CHECK(b.n_draft_accepted > 0);
        CHECK(b.n_draft_accepted < b.n_draft_proposed);
      }
      if (draft != m) CHECK(b.n_draft_accepted < b.n_draft_proposed);
      MESSAGE("draft " << std::string(draft == m ? "self" : "random") << ", temp " << temp << ": proposed " << b.n_draft_proposed
                       << ", accepted " << b.n_draft_accepted);
      std::vector<runtime::request> rs = {make_request(*m, TEXTS[3], 40), r};
      const std::vector<runtime::request_result> both = run_together(spec, rs);
      CHECK(diff(a.gen, both[1].gen) == "");
    }
    if (draft == m) CHECK(spec.metrics().draft_accepted_total > 0);
    CHECK(spec.metrics().draft_proposed_total > spec.metrics().draft_accepted_total);
  }
  runtime::scheduler_params d = sched_params(1, 256);
  d.spec = runtime::SPEC_DRAFT;
  CHECK_THROWS_AS(runtime::scheduler(m, d), input_error);
  model::synth_options other;
  other.n_embd = 64;
  other.n_ff = 128;
  model::synth_write(other, dir + "/other-vocab.gguf");
  d.draft = model::model::load(dir + "/other-vocab.gguf");
  CHECK_THROWS_WITH_AS(runtime::scheduler(m, d), doctest::Contains("vocabulary"), input_error);
}

TEST_CASE("serve scheduler: a full queue refuses, stop() answers waiting requests with 503") {
  auto m = stories();
  {
    runtime::scheduler_params q = sched_params(1, 256);
    q.n_queue = 0;
    runtime::scheduler s(m, q);
    collector c;
    blocker b;
    b.submit(s, c, 0);
    CHECK(s.submit(make_request(*m, TEXTS[0], 4), c.callbacks(1)));
    CHECK_FALSE(s.submit(make_request(*m, TEXTS[1], 4), c.callbacks(2)));
    CHECK(s.metrics().requests_rejected == 1);
    CHECK(s.metrics().requests_waiting == 1);
    b.release();
    CHECK(c.get(1).error == "");
    CHECK(c.done.count(2) == 0);
  }
  // The queue is far larger than what the loop below can fill, so the only refusal it can meet is
  // the one stop() causes: the blocker is released only once stop() is in effect.
  runtime::scheduler_params p = sched_params(1, 256);
  p.n_queue = 1 << 20;
  runtime::scheduler s(m, p);
  collector c;
  blocker b;
  b.submit(s, c, 0);
  CHECK(s.submit(make_request(*m, TEXTS[0], 4), c.callbacks(1)));
  CHECK(s.submit(make_request(*m, TEXTS[1], 4), c.callbacks(2)));
  std::thread stopper([&] { s.stop(); });
  int key = 10;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool refused = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!s.submit(make_request(*m, TEXTS[2], 4), c.callbacks(key))) {
      refused = true;
      break;
    }
    ++key;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(refused);
  b.release();
  stopper.join();
  CHECK(c.get(0).error == "");
  for (int k : {1, 2}) {
    const runtime::request_result r = c.get(k);
    CHECK(r.http_status == 503);
    CHECK(r.error == "server is shutting down");
  }
  CHECK_FALSE(s.submit(make_request(*m, TEXTS[0], 4), c.callbacks(99)));
}

TEST_CASE("serve scheduler: bad requests fail alone with 400") {
  auto m = stories();
  runtime::scheduler s(m, sched_params(2, 256));
  runtime::request r = make_request(*m, TEXTS[0], 4);
  r.prompt.assign(200, 403);
  CHECK(run_alone(s, r).http_status == 400);
  r = make_request(*m, TEXTS[0], 4);
  r.stop = {""};
  CHECK(run_alone(s, r).http_status == 400);
  r = make_request(*m, TEXTS[0], 4);
  r.prompt.push_back(1 << 20);
  CHECK(run_alone(s, r).http_status == 400);
  r = make_request(*m, TEXTS[0], 4);
  r.id_slot = 2;
  CHECK(run_alone(s, r).http_status == 400);
  // a slot's context full ends the request as generate() does
  r = make_request(*m, TEXTS[0], -1);
  const runtime::request_result full = run_alone(s, r);
  CHECK(full.error == "");
  if (full.gen.stop == runtime::STOP_CONTEXT)
    CHECK(static_cast<int64_t>(r.prompt.size() + full.gen.tokens.size()) == s.slot_n_ctx() + 1);
}

// Issue 47.1: an exception in one request's step (here its token callback throws, as a sampler's
// refusal would) ends that request with a 500 naming the cause; the request sharing its steps
// finishes bit for bit as alone, and the scheduler goes on serving.
TEST_CASE("serve scheduler: an exception in one request ends it alone with 500, and the server goes on") {
  auto m = stories();
  runtime::scheduler s(m, sched_params(2, 512));
  const runtime::request other = make_request(*m, TEXTS[1], 12);
  const runtime::request_result other_alone = run_alone(s, other);
  REQUIRE(other_alone.error.empty());

  collector c;
  blocker b;
  b.submit(s, c, -1);
  runtime::request_callbacks bad = c.callbacks(0);
  int seen = 0;
  bad.on_token = [&seen](const runtime::token_event&) -> bool {
    if (++seen == 3) throw std::runtime_error("crafted failure in token 3");
    return true;
  };
  REQUIRE(s.submit(make_request(*m, TEXTS[0], 12), bad));
  REQUIRE(s.submit(other, c.callbacks(1)));
  b.release();
  const runtime::request_result failed = c.get(0), fine = c.get(1);
  CHECK(failed.http_status == 500);
  CHECK(failed.error.find("crafted failure in token 3") != std::string::npos);
  CHECK(failed.error.find("generation failed after 3 token(s)") != std::string::npos);
  CHECK(fine.error.empty());
  CHECK(fine.max_seqs_in_step >= 2);  // it did share steps with the failing request
  CHECK(diff(other_alone.gen, fine.gen) == "");
  // The slot the failed request held serves again, and its cache was emptied, not left half-filled.
  const runtime::request_result again = run_alone(s, make_request(*m, TEXTS[0], 12));
  CHECK(again.error.empty());
  CHECK(again.gen.tokens.size() == 12);
  c.wait(-1);
}

// A model whose float forward overflows (a norm weight of 3e38) gives infinite or NaN logits: the
// request fails with a 500 that says so, instead of a sampler exception on the scheduler thread.
TEST_CASE("serve scheduler: non-finite logits from a float forward end the request, not the server") {
  const std::string path = test::overflow_model(test::scratch_dir("sched_nan_model"));
  auto m = std::shared_ptr<const model::model>(model::model::load(path));
  runtime::scheduler s(m, sched_params(2, 256, runtime::NUMERICS_FLOAT));
  const runtime::request_result r = run_alone(s, make_request(*m, TEXTS[0], 4));
  CHECK(r.http_status == 500);
  CHECK(r.error.find("overflowed") != std::string::npos);
  CHECK(run_alone(s, make_request(*m, TEXTS[1], 4)).http_status == 500);  // still answering
}

TEST_CASE("serve scheduler: two queued requests for the same free slot run one after the other on it") {
  auto m = stories();
  runtime::scheduler s(m, sched_params(2, 256));
  collector c;
  blocker b;
  b.submit(s, c, 0, /*id_slot=*/1);  // the scheduler thread is held: A and B are admitted in one pass
  std::mutex mu;
  std::vector<int> order;
  std::promise<void> a_done, b_done;
  auto submit = [&](int key, std::promise<void>& done) {
    runtime::request r = make_request(*m, TEXTS[key], 4);
    r.id_slot = 0;
    runtime::request_callbacks cb = c.callbacks(key);
    cb.on_done = [&, key, prev = cb.on_done](const runtime::request_result& res) {
      {
        std::lock_guard<std::mutex> lk(mu);
        order.push_back(key);
      }
      prev(res);
      done.set_value();
    };
    REQUIRE(s.submit(r, cb));
  };
  submit(1, a_done);
  submit(2, b_done);
  b.release();
  // Both promised slot 0 in one pass, the second would replace the first, which would never end.
  REQUIRE(a_done.get_future().wait_for(std::chrono::seconds(120)) == std::future_status::ready);
  REQUIRE(b_done.get_future().wait_for(std::chrono::seconds(120)) == std::future_status::ready);
  CHECK(order == std::vector<int>{1, 2});
  for (int key : {1, 2}) {
    const runtime::request_result r = c.get(key);
    CHECK(r.error == "");
    CHECK(r.slot == 0);
    CHECK(r.gen.tokens.size() == 4);
  }
}

TEST_CASE("serve scheduler: a refused request's callback may call back into the scheduler") {
  auto m = stories();
  runtime::scheduler s(m, sched_params(2, 256));
  runtime::request r = make_request(*m, TEXTS[0], 4);
  r.id_slot = 5;  // no such slot: refused with 400
  std::promise<int64_t> seen;
  runtime::request_callbacks cb;
  // Answered while the scheduler's lock were held, metrics() would wait on it forever.
  cb.on_done = [&](const runtime::request_result& res) { seen.set_value(res.http_status == 400 ? s.metrics().requests_total : -1); };
  REQUIRE(s.submit(r, cb));
  std::future<int64_t> f = seen.get_future();
  REQUIRE(f.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  CHECK(f.get() == 1);
}

TEST_CASE("serve scheduler: in float numerics a shared step changes logits") {
  const std::string dir = test::scratch_dir("serve_scheduler_float");
  model::synth_options o;
  o.n_embd = 64;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 192;
  o.vocab_from = test::fixture("models/stories260K.gguf");
  model::synth_write(o, dir + "/synth.gguf");
  std::shared_ptr<const model::model> m = model::model::load(dir + "/synth.gguf");
  std::vector<runtime::request> rs;
  for (int i = 0; i < 16; ++i) rs.push_back(make_request(*m, TEXTS[i % 8] + std::string(i >= 8 ? " again" : ""), 4));
  const int n = static_cast<int>(rs.size());
  std::vector<runtime::request_result> alone;
  {
    runtime::scheduler s(m, sched_params(n, 64 * n, runtime::NUMERICS_FLOAT));
    for (const runtime::request& r : rs) alone.push_back(run_alone(s, r));
    CHECK(s.metrics().max_tokens_in_step < 32);
  }
  runtime::scheduler s(m, sched_params(n, 64 * n, runtime::NUMERICS_FLOAT));
  const std::vector<runtime::request_result> together = run_together(s, rs);
  CHECK(s.metrics().max_tokens_in_step >= 32);
  int n_differ = 0;
  for (int i = 0; i < n; ++i) n_differ += diff(alone[static_cast<size_t>(i)].gen, together[static_cast<size_t>(i)].gen) != "" ? 1 : 0;
  MESSAGE("float numerics: " << n_differ << " of " << n << " requests differ when batched");
  CHECK(n_differ > 0);
  // the same in exact numerics: none differs
  std::vector<runtime::request_result> ex_alone;
  {
    runtime::scheduler e(m, sched_params(n, 64 * n));
    for (const runtime::request& r : rs) ex_alone.push_back(run_alone(e, r));
  }
  runtime::scheduler e(m, sched_params(n, 64 * n));
  const std::vector<runtime::request_result> ex_together = run_together(e, rs);
  for (int i = 0; i < n; ++i) CHECK(diff(ex_alone[static_cast<size_t>(i)].gen, ex_together[static_cast<size_t>(i)].gen) == "");
}

TEST_CASE("serve scheduler: max_seqs_in_step is 1 for a request alone and N for N requests that shared steps") {
  auto m = stories();
  runtime::scheduler s(m, sched_params(4, 1024));
  const runtime::request_result solo = run_alone(s, make_request(*m, TEXTS[0]));
  CHECK(solo.error.empty());
  CHECK(solo.max_seqs_in_step == 1);
  std::vector<runtime::request> rs;
  for (int i = 0; i < 4; ++i) rs.push_back(make_request(*m, TEXTS[i]));
  for (const runtime::request_result& r : run_together(s, rs)) CHECK(r.max_seqs_in_step == 4);
  CHECK(s.metrics().max_seqs_in_step == 4);
  // one after the other again: each alone
  CHECK(run_alone(s, make_request(*m, TEXTS[5])).max_seqs_in_step == 1);
}

TEST_CASE("serve scheduler: max_seqs_in_step counts a request that joins another mid-generation") {
  auto m = stories();
  runtime::scheduler s(m, sched_params(2, 1024));
  collector c;
  // A holds the scheduler thread at its first token until B is queued: B's prefill then runs in
  // A's next step, whenever B arrives
  std::promise<void> entered, gate;
  std::shared_future<void> gate_f = gate.get_future().share();
  runtime::request_callbacks cb = c.callbacks(0);
  cb.on_token = [&entered, gate_f, first = true](const runtime::token_event&) mutable {
    if (first) entered.set_value();
    if (first) gate_f.wait();
    first = false;
    return true;
  };
  REQUIRE(s.submit(make_request(*m, TEXTS[0], 32), cb));
  entered.get_future().wait();
  REQUIRE(s.submit(make_request(*m, TEXTS[1], 4), c.callbacks(1)));
  gate.set_value();
  CHECK(c.get(0).gen.tokens.size() > 1);
  CHECK(c.get(0).max_seqs_in_step == 2);
  CHECK(c.get(1).max_seqs_in_step == 2);
}

TEST_CASE("serve scheduler: max_seqs_in_step counts forward steps, not decode calls (-ub 1)") {
  auto m = stories();
  runtime::scheduler_params p = sched_params(3, 768);
  p.ctx.n_ubatch = 1;
  runtime::scheduler s(m, p);
  std::vector<runtime::request> rs;
  for (int i = 0; i < 3; ++i) rs.push_back(make_request(*m, TEXTS[i], 4));
  // one decode() holds all three, but each forward step holds one token of one request
  for (const runtime::request_result& r : run_together(s, rs)) CHECK(r.max_seqs_in_step == 1);
  CHECK(s.metrics().max_seqs_in_step == 1);
}
