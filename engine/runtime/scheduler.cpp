// The scheduler thread: admission of queued requests to slots (prompt cache by longest common
// prefix, as llama-server's slot selection), one decode() per step holding every active request's
// tokens (prefill, next token, drafts from n-gram lookup or a draft model), and per-request sampling identical to
// generate(): the step counter of a request is its own number of generated tokens.
#include "runtime/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "runtime/hashes.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace detaudit::runtime {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct queued {
  request req;
  request_callbacks cb;
  std::string error;  // check_request's verdict, taken in submit() outside the lock ("" = valid)
};

// A request while it holds a slot.
struct active {
  request req;
  request_callbacks cb;
  request_result res;
  std::unique_ptr<token_step> steps;  // writes res.gen
  std::string released;           // text released by the stream since the last token event
  bool prefilled = false;
  int64_t n_prefill = 0;          // prompt tokens evaluated in the prefill step
  clock_type::time_point t_start, t_gen;
};

struct slot {
  int id = 0;
  int32_t seq = 0;
  std::unique_ptr<active> req;  // null: free
};

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// Prompt lookup (n-gram) drafting, as llama.cpp's lookup example: the most recent earlier
// occurrence of the last n tokens (n = 3, 2, 1) and up to n_draft tokens that followed it.
std::vector<int32_t> ngram_draft(const std::vector<int32_t>& h, int64_t n_draft) {
  std::vector<int32_t> out;
  if (n_draft <= 0) return out;
  for (size_t n = 3; n >= 1; --n) {
    if (h.size() <= n) continue;
    const size_t tail = h.size() - n;
    for (size_t i = tail; i-- > 0;) {
      if (!std::equal(h.begin() + static_cast<std::ptrdiff_t>(i), h.begin() + static_cast<std::ptrdiff_t>(i + n),
                      h.begin() + static_cast<std::ptrdiff_t>(tail)))
        continue;
      for (size_t j = i + n; j < h.size() && static_cast<int64_t>(out.size()) < n_draft; ++j) out.push_back(h[j]);
      return out;
    }
  }
  return out;
}

// The part of one request in a step's batch: where its logits start in decode()'s output.
struct batch_part {
  slot* s = nullptr;
  size_t first_logits = 0;
  std::vector<int32_t> drafts;
  int64_t base_len = 0;  // the sequence's length before this step
  int64_t room = 0;      // most drafts this step may propose
};

// A draft model must speak the target's vocabulary token for token.
void draft_check(const model::model& target, const model::model* draft) {
  if (!draft) throw input_error("serve: speculative decoding with a draft model needs --draft MODEL.gguf");
  const tokenizer::vocab& a = target.vocab();
  const tokenizer::vocab& b = draft->vocab();
  if (a.size() != b.size() || target.hp().n_vocab != draft->hp().n_vocab)
    throw input_error("serve: the draft model has " + std::to_string(b.size()) + " tokens, the model " +
                      std::to_string(a.size()) + ": they must share one vocabulary");
  for (int32_t i = 0; i < a.size(); ++i)
    if (a.token_text(i) != b.token_text(i))
      throw input_error("serve: the draft model's token " + std::to_string(i) + " differs from the model's ('" +
                        b.token_text(i) + "' vs '" + a.token_text(i) + "'): they must share one vocabulary");
}

// A plain file name that stays inside --slot-save-path: 1 to 255 bytes, not ".", and no slash,
// backslash, ".." or control byte (NUL included).
bool filename_ok(const std::string& f) {
  if (f.empty() || f.size() > 255 || f == "." || f.find("..") != std::string::npos) return false;
  for (unsigned char c : f)
    if (c == '/' || c == '\\' || c < 0x20 || c == 0x7f) return false;
  return true;
}

// A client's file name in a message: at most its first 40 bytes, control bytes and quotes as \xHH.
std::string name_quote(const std::string& f) {
  static const char HEX[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < f.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(f[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      out += "\\x";
      out += HEX[c >> 4];
      out += HEX[c & 0x0F];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += "'";
  if (f.size() > 40) out += "... (" + std::to_string(f.size()) + " bytes)";
  return out;
}

// `msg` without the server's --slot-save-path folder (as given, absolute or canonical): a client
// names its files, never where the server keeps them ("DIR/name: ..." reads "name: ...").
std::string path_hidden(std::string msg, const std::string& dir) {
  std::error_code ec;
  for (std::string d : {dir, std::filesystem::absolute(dir, ec).string(), std::filesystem::weakly_canonical(dir, ec).string()}) {
    while (!d.empty() && d.back() == '/') d.pop_back();
    if (d.empty()) continue;
    d += '/';
    for (size_t at = msg.find(d); at != std::string::npos; at = msg.find(d, at)) msg.erase(at, d.size());
  }
  return msg;
}

}  // namespace

struct scheduler::impl {
  std::shared_ptr<const model::model> m;
  scheduler_params p;
  int64_t slot_n_ctx = 0;
  size_t queue_cap = 0;
  std::unique_ptr<context> ctx;
  std::vector<slot> slots;  // owned by the scheduler thread
  std::unique_ptr<context> draft_ctx;  // SPEC_DRAFT: the draft model, one sequence per slot
  std::vector<int32_t> draft_seqs;               // (n_slots)

  std::mutex inline_mu;   // serializes slot actions run after the thread has exited
  mutable std::mutex mu;  // guards everything below
  std::condition_variable cv;
  std::deque<queued> queue;
  std::deque<std::function<void()>> tasks;
  bool stopping = false;
  bool exited = false;
  metrics_snapshot met;
  std::vector<slot_info> info;
  std::thread thread;

  void loop();
  void admit();
  slot* pick_slot(const request& r, const std::vector<bool>& taken);
  std::string check_request(const request& r) const;
  void start(slot& s, queued q);
  void step();
  std::vector<batch_part> step_plan();
  void draft_propose(std::vector<batch_part>& parts, const std::vector<size_t>& want);
  std::vector<token_in> step_batch(std::vector<batch_part>& parts) const;
  void step_continue(batch_part& part, const std::vector<std::vector<float>>& out);
  void step_part(batch_part& part, const std::vector<std::vector<float>>& out, clock_type::time_point t0,
                 clock_type::time_point t1);
  void fail_all(const std::string& msg);
  // Ends s's request with `msg` (HTTP `status`) and empties its slot's cache; the other slots go on.
  void fail_one(slot& s, const std::string& msg, int status);
  // Processes one position's logits for s's request; returns true when the request is finished.
  bool process_logits(slot& s, const std::vector<float>& logits, int64_t evaluated_len);
  void finish(slot& s, int64_t keep_len);
  void publish();
  void run_task(const std::function<void()>& fn);
  template <class F>
  void slot_action(int id, bool needs_path, F&& body);
};

std::string scheduler::impl::check_request(const request& r) const {
  try {
    sampling_check_params(r.sampling);
  } catch (const input_error& e) {
    return e.what();
  }
  if (r.prompt.empty()) return "the prompt has no tokens";
  if (r.n_predict < -1) return "n_predict must be >= -1, found " + std::to_string(r.n_predict);
  if (r.n_probs < 0) return "n_probs must be >= 0, found " + std::to_string(r.n_probs);
  if (r.id_slot < -1 || r.id_slot >= p.n_slots)
    return "id_slot " + std::to_string(r.id_slot) + " does not exist (" + std::to_string(p.n_slots) + " slots)";
  for (const std::string& s : r.stop)
    if (s.empty()) return "a stop string is empty";
  for (int32_t t : r.prompt)
    if (t < 0 || t >= m->hp().n_vocab) return "prompt token id " + std::to_string(t) + " is outside the vocabulary";
  if (static_cast<int64_t>(r.prompt.size()) > slot_n_ctx)
    return "the prompt has " + std::to_string(r.prompt.size()) + " tokens; a slot's context holds " +
           std::to_string(slot_n_ctx);
  return "";
}

void scheduler::impl::start(slot& s, queued q) {
  auto a = std::make_unique<active>();
  a->req = std::move(q.req);
  a->cb = std::move(q.cb);
  a->t_start = clock_type::now();
  active* ap = a.get();
  const std::vector<int32_t>& prompt = a->req.prompt;
  a->steps = std::make_unique<token_step>(
      m->vocab(), prompt, a->req.sampling, a->req.n_probs, a->req.n_predict, a->req.stop,
      [ap](std::string_view t) { ap->released += t; }, a->res.gen);
  size_t keep = 0;
  if (a->req.cache_prompt) keep = std::min(common_prefix(ctx->seq_tokens(s.seq), prompt), prompt.size() - 1);
  ctx->seq_truncate(s.seq, static_cast<int64_t>(keep));
  a->res.slot = s.id;
  a->res.n_cached = static_cast<int64_t>(keep);
  a->res.gen.prompt_tokens = prompt;
  a->res.gen.timings.n_prompt = static_cast<int64_t>(prompt.size());
  a->n_prefill = static_cast<int64_t>(prompt.size() - keep);
  s.req = std::move(a);
  std::lock_guard<std::mutex> lk(mu);
  met.prompt_tokens_cached += static_cast<int64_t>(keep);
  met.prompt_tokens_total += static_cast<int64_t>(prompt.size() - keep);
}

// The free slot a request starts on: its id_slot, else the free slot whose cache shares the
// longest prefix with its prompt (the first such). `taken`: slots promised earlier in this pass.
slot* scheduler::impl::pick_slot(const request& r, const std::vector<bool>& taken) {
  const auto is_free = [&](const slot& s) { return !s.req && !taken[static_cast<size_t>(s.id)]; };
  if (r.id_slot >= 0) {
    slot& s = slots[static_cast<size_t>(r.id_slot)];
    return is_free(s) ? &s : nullptr;
  }
  slot* best = nullptr;
  size_t best_lcp = 0;
  for (slot& s : slots) {
    if (!is_free(s)) continue;
    const size_t lcp = r.cache_prompt ? common_prefix(ctx->seq_tokens(s.seq), r.prompt) : 0;
    if (!best || lcp > best_lcp) {
      best = &s;
      best_lcp = lcp;
    }
  }
  return best;
}

// Pops from the queue, under the lock, exactly the requests that start now (FIFO; a request for
// a busy id_slot stays queued without holding back the ones behind it) and the ones refused
// (invalid, or the server is stopping); then starts or answers them outside the lock, where
// callbacks may run. The queue is the one place a waiting request lives, so its bound is exact.
void scheduler::impl::admit() {
  struct refusal {
    queued q;
    std::string error;
    int status;
  };
  std::vector<std::pair<slot*, queued>> starting;
  std::vector<refusal> refused;
  {
    std::lock_guard<std::mutex> lk(mu);
    std::vector<bool> taken(slots.size(), false);
    for (auto it = queue.begin(); it != queue.end();) {
      const std::string err = stopping ? "server is shutting down" : it->error;
      slot* s = err.empty() ? pick_slot(it->req, taken) : nullptr;
      if (!err.empty()) refused.push_back({std::move(*it), err, stopping ? 503 : 400});
      else if (s) {
        taken[static_cast<size_t>(s->id)] = true;
        starting.emplace_back(s, std::move(*it));
      } else {
        ++it;
        continue;
      }
      it = queue.erase(it);
    }
    met.requests_waiting = static_cast<int64_t>(queue.size());
  }
  for (refusal& r : refused) {
    request_result res;
    res.error = r.error;
    res.http_status = r.status;
    if (r.q.cb.on_done) r.q.cb.on_done(res);
  }
  for (auto& [s, q] : starting) {
    request_callbacks cb = q.cb;  // start() takes q; a request it cannot start still gets its answer
    try {
      start(*s, std::move(q));
    } catch (const std::exception& e) {
      if (s->req) {
        fail_one(*s, std::string("the request could not start: ") + e.what(), 500);
      } else {
        request_result res;
        res.error = std::string("the request could not start: ") + e.what();
        res.http_status = 500;
        try {
          if (cb.on_done) cb.on_done(res);
        } catch (const std::exception&) {  // the client's side of the answer failed: nothing more to tell it
        }
      }
    }
  }
}

bool scheduler::impl::process_logits(slot& s, const std::vector<float>& logits, int64_t evaluated_len) {
  active& a = *s.req;
  bool done = a.steps->add(logits, evaluated_len, slot_n_ctx);
  generated_token t = a.res.gen.tokens.back();
  {
    std::lock_guard<std::mutex> lk(mu);
    ++met.generated_tokens_total;
  }
  token_event ev{std::move(t), std::move(a.released)};
  a.released.clear();
  if (a.cb.on_token && !a.cb.on_token(ev) && !done) {
    a.res.error = "the request was cancelled by the client";
    a.res.http_status = 499;
    std::lock_guard<std::mutex> lk(mu);
    ++met.requests_cancelled;
    done = true;
  }
  return done;
}

// Ends s's request: its sequence keeps the first keep_len evaluated tokens as the slot's cache.
void scheduler::impl::finish(slot& s, int64_t keep_len) {
  active& a = *s.req;
  if (ctx->seq_len(s.seq) > keep_len) ctx->seq_truncate(s.seq, keep_len);
  a.res.n_past = ctx->seq_len(s.seq);
  generate_result& g = a.res.gen;
  a.steps->end();
  g.timings.gen_ms = ms_between(a.t_gen, clock_type::now());
  std::erase_if(g.traces, [&](const token_trace& t) { return t.pos >= keep_len; });
  std::unique_ptr<active> done = std::move(s.req);
  if (done->cb.on_done) done->cb.on_done(done->res);
}

// Which requests take part in this step and what each proposes: the prompt of a new request, or
// the next token plus drafts (n-gram lookup or the draft model).
std::vector<batch_part> scheduler::impl::step_plan() {
  std::vector<batch_part> parts;
  std::vector<size_t> want_draft;
  for (slot& s : slots) {
    if (!s.req) continue;
    active& a = *s.req;
    batch_part part{&s, 0, {}, ctx->seq_len(s.seq), 0};
    if (a.prefilled && p.spec != SPEC_NONE && a.req.speculative) {
      part.room = std::min<int64_t>(p.n_draft, slot_n_ctx - part.base_len - 1);
      if (a.req.n_predict >= 0)
        part.room = std::min<int64_t>(part.room, a.req.n_predict - static_cast<int64_t>(a.res.gen.tokens.size()) - 1);
      if (p.spec == SPEC_NGRAM) part.drafts = ngram_draft(a.steps->history(), part.room);
      else if (part.room > 0) want_draft.push_back(parts.size());
    }
    parts.push_back(std::move(part));
  }
  if (!want_draft.empty()) draft_propose(parts, want_draft);
  return parts;
}

// Greedy drafts from the draft model for parts[want[i]], all slots in one draft batch per round.
// Each slot's draft sequence is first brought up to the request's history (reusing the common
// prefix it already holds). A failed draft step only means no drafts.
void scheduler::impl::draft_propose(std::vector<batch_part>& parts, const std::vector<size_t>& want) {
  std::vector<token_in> batch;
  std::vector<size_t> live;
  for (size_t w : want) {
    const slot& s = *parts[w].s;
    const std::vector<int32_t>& h = s.req->steps->history();
    const int32_t dseq = draft_seqs[static_cast<size_t>(s.id)];
    const size_t keep = std::min(common_prefix(draft_ctx->seq_tokens(dseq), h), h.size() - 1);
    draft_ctx->seq_truncate(dseq, static_cast<int64_t>(keep));
    for (size_t k = keep; k < h.size(); ++k) batch.push_back({dseq, h[k], k + 1 == h.size()});
    live.push_back(w);
  }
  try {
    while (!live.empty()) {
      const std::vector<std::vector<float>> out = draft_ctx->decode(batch);
      batch.clear();
      std::vector<size_t> next;
      for (size_t i = 0; i < live.size(); ++i) {
        batch_part& part = parts[live[i]];
        const std::vector<float>& l = out[i];
        const int32_t tok = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
        part.drafts.push_back(tok);
        if (static_cast<int64_t>(part.drafts.size()) < part.room && !m->vocab().is_eog(tok)) {
          batch.push_back({draft_seqs[static_cast<size_t>(part.s->id)], tok, true});
          next.push_back(live[i]);
        }
      }
      live.swap(next);
    }
  } catch (const std::exception&) {
    for (size_t w : want) parts[w].drafts.clear();
  }
}

// One decode() for every part: a prefill's prompt tokens (logits at its end), or the next token
// and its drafts (logits at each).
std::vector<token_in> scheduler::impl::step_batch(std::vector<batch_part>& parts) const {
  std::vector<token_in> batch;
  size_t n_logits = 0;
  for (batch_part& part : parts) {
    const slot& s = *part.s;
    const active& a = *s.req;
    part.first_logits = n_logits;
    if (!a.prefilled) {
      const size_t from = a.req.prompt.size() - static_cast<size_t>(a.n_prefill);
      for (size_t i = from; i < a.req.prompt.size(); ++i)
        batch.push_back({s.seq, a.req.prompt[i], i + 1 == a.req.prompt.size()});
      n_logits += 1;
    } else {
      batch.push_back({s.seq, a.steps->history().back(), true});
      for (int32_t d : part.drafts) batch.push_back({s.seq, d, true});
      n_logits += 1 + part.drafts.size();
    }
  }
  return batch;
}

// A continuing request's logits: position j follows the next token (j = 0) or draft j; draft j+1
// is accepted when it equals the token sampled from position j (same RNG counter as without drafts).
void scheduler::impl::step_continue(batch_part& part, const std::vector<std::vector<float>>& out) {
  slot& s = *part.s;
  active& a = *s.req;
  size_t j = 0;
  bool done = false;
  int64_t accepted = 0;
  for (;; ++j) {
    const int64_t evaluated = part.base_len + 1 + static_cast<int64_t>(j);
    done = process_logits(s, out[part.first_logits + j], evaluated);
    if (done || j >= part.drafts.size() || a.steps->history().back() != part.drafts[j]) break;
    ++accepted;
  }
  const int64_t keep = part.base_len + 1 + static_cast<int64_t>(j);
  a.res.n_draft_proposed += static_cast<int64_t>(part.drafts.size());
  a.res.n_draft_accepted += accepted;
  {
    std::lock_guard<std::mutex> lk(mu);
    met.draft_proposed_total += static_cast<int64_t>(part.drafts.size());
    met.draft_accepted_total += accepted;
  }
  if (done) {
    finish(s, keep);
  } else if (ctx->seq_len(s.seq) > keep) {
    ctx->seq_truncate(s.seq, keep);
    std::erase_if(a.res.gen.traces, [&](const token_trace& t) { return t.pos >= keep; });
  }
}

void scheduler::impl::step() {
  std::vector<batch_part> parts = step_plan();
  if (parts.empty()) return;
  const std::vector<token_in> batch = step_batch(parts);
  const auto t0 = clock_type::now();
  std::vector<std::vector<float>> out;
  try {
    out = ctx->decode(batch);
  } catch (const std::exception& e) {
    fail_all(std::string("forward step failed: ") + e.what());
    return;
  }
  const auto t1 = clock_type::now();
  {
    std::lock_guard<std::mutex> lk(mu);
    ++met.steps_total;
    met.max_seqs_in_step = std::max(met.max_seqs_in_step, ctx->max_seqs_in_step());
    met.max_tokens_in_step = std::max(met.max_tokens_in_step, ctx->max_tokens_in_step());
  }
  // One request's failure (a sampler refusing a non-finite logit, a callback that throws) ends
  // that request only: the other parts of the step go on.
  for (batch_part& part : parts) {
    slot& s = *part.s;
    try {
      step_part(part, out, t0, t1);
    } catch (const std::exception& e) {
      const size_t at = s.req ? s.req->res.gen.tokens.size() : 0;
      fail_one(s, "generation failed after " + std::to_string(at) + " token(s): " + e.what(), 500);
    }
  }
}

void scheduler::impl::step_part(batch_part& part, const std::vector<std::vector<float>>& out, clock_type::time_point t0,
                                clock_type::time_point t1) {
  slot& s = *part.s;
  active& a = *s.req;
  a.res.max_seqs_in_step = std::max(a.res.max_seqs_in_step, ctx->last_seqs_in_step(s.seq));
  if (ctx->params().trace_hashes)
    for (const token_trace& t : ctx->last_traces())
      if (t.seq == s.seq) a.res.gen.traces.push_back(t);
  if (a.prefilled) {
    step_continue(part, out);
    return;
  }
  a.prefilled = true;
  a.res.gen.timings.prompt_ms = ms_between(t0, t1);
  a.t_gen = t1;
  if (a.req.n_predict == 0) {  // the prompt is evaluated (and cached); no token is drawn
    finish(s, ctx->seq_len(s.seq));
  } else if (process_logits(s, out[part.first_logits], ctx->seq_len(s.seq))) {
    finish(s, ctx->seq_len(s.seq));
  }
}

void scheduler::impl::fail_all(const std::string& msg) {
  for (slot& s : slots) fail_one(s, msg, 500);
}

void scheduler::impl::fail_one(slot& s, const std::string& msg, int status) {
  if (!s.req) return;
  s.req->res.error = msg;
  s.req->res.http_status = status;
  std::unique_ptr<active> done = std::move(s.req);
  try {
    ctx->seq_truncate(s.seq, 0);
    if (done->cb.on_done) done->cb.on_done(done->res);
  } catch (const std::exception&) {  // the answer could not be delivered: the request is over anyway
  }
}

void scheduler::impl::publish() {
  std::lock_guard<std::mutex> lk(mu);
  int64_t n_active = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    info[i].busy = slots[i].req != nullptr;
    info[i].n_cached = ctx->seq_len(slots[i].seq);
    n_active += info[i].busy ? 1 : 0;
  }
  met.requests_active = n_active;
  met.requests_waiting = static_cast<int64_t>(queue.size());
}

void scheduler::impl::loop() {
  const auto any_active = [&] { return std::any_of(slots.begin(), slots.end(), [](const slot& s) { return s.req != nullptr; }); };
  const auto any_free = [&] { return std::any_of(slots.begin(), slots.end(), [](const slot& s) { return !s.req; }); };
  for (;;) {
    std::deque<std::function<void()>> todo;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return stopping || !tasks.empty() || any_active() || (!queue.empty() && any_free()); });
      todo.swap(tasks);
    }
    // The last net: nothing one request does may end the thread every request depends on.
    try {
      for (auto& fn : todo) fn();
      admit();
      step();
      publish();
    } catch (const std::exception& e) {
      fail_all(std::string("internal error: ") + e.what());
    }
    std::lock_guard<std::mutex> lk(mu);
    if (stopping && !any_active() && queue.empty() && tasks.empty()) {
      exited = true;
      return;
    }
  }
}

void scheduler::impl::run_task(const std::function<void()>& fn) {
  std::packaged_task<void()> task(fn);
  std::future<void> f = task.get_future();
  bool inline_run = false;
  {
    std::lock_guard<std::mutex> lk(mu);
    inline_run = exited;  // the thread is gone: nothing can race this
    if (!inline_run) tasks.push_back([&task] { task(); });
  }
  if (inline_run) {
    std::lock_guard<std::mutex> lk(inline_mu);
    task();
  } else {
    cv.notify_all();
  }
  f.get();
}

template <class F>
void scheduler::impl::slot_action(int id, bool needs_path, F&& body) {
  int st = 200;
  std::string err;
  if (id < 0 || id >= p.n_slots) {
    st = 400;
    err = "slot " + std::to_string(id) + " does not exist (" + std::to_string(p.n_slots) + " slots)";
  } else if (needs_path && p.slot_save_path.empty()) {
    st = 501;
    err = "slot save/restore is disabled: start the server with --slot-save-path";
  } else {
    run_task([&] {
      slot& s = slots[static_cast<size_t>(id)];
      if (s.req) {
        st = 409;
        err = "slot " + std::to_string(id) + " is busy";
        return;
      }
      try {
        body(s, st, err);
      } catch (const input_error& e) {
        st = 400;
        err = path_hidden(e.what(), p.slot_save_path);
      } catch (const std::exception& e) {
        st = 500;
        err = path_hidden(e.what(), p.slot_save_path);
      }
      publish();
    });
  }
  if (!err.empty()) throw request_error(st, err);
}

scheduler::scheduler(std::shared_ptr<const model::model> m, const scheduler_params& p) : p_(std::make_unique<impl>()) {
  if (!m) throw input_error("serve: no model");
  if (p.n_slots < 1) throw input_error("serve: --parallel must be >= 1, found " + std::to_string(p.n_slots));
  if (p.n_queue < 0) throw input_error("serve: the queue size must be >= 0, found " + std::to_string(p.n_queue));
  if (p.n_draft < 0) throw input_error("serve: --draft-max must be >= 0, found " + std::to_string(p.n_draft));
  if (p.spec == SPEC_DRAFT) draft_check(*m, p.draft.get());
  const int64_t total = p.ctx.n_ctx > 0 ? p.ctx.n_ctx : m->hp().n_ctx_train;
  const int64_t per_slot = total / p.n_slots;
  if (per_slot < 2)
    throw input_error("serve: a context of " + std::to_string(total) + " tokens is too small for " +
                      std::to_string(p.n_slots) + " slots");
  impl& d = *p_;
  d.m = std::move(m);
  d.p = p;
  d.slot_n_ctx = per_slot;
  d.queue_cap = static_cast<size_t>(std::max(p.n_queue, p.n_slots));
  context_params cp = p.ctx;
  cp.n_ctx = per_slot;
  d.ctx = std::make_unique<context>(d.m, cp);
  for (int i = 0; i < p.n_slots; ++i) {
    d.slots.push_back(slot{i, d.ctx->seq_new(), nullptr});
    d.info.push_back(slot_info{i, false, per_slot, 0});
  }
  if (p.spec == SPEC_DRAFT) {
    d.draft_ctx = std::make_unique<context>(p.draft, cp);
    for (int i = 0; i < p.n_slots; ++i) d.draft_seqs.push_back(d.draft_ctx->seq_new());
  }
  d.thread = std::thread([&d] { d.loop(); });
}

scheduler::~scheduler() { stop(); }

bool scheduler::submit(request r, request_callbacks cb) {
  std::string err = p_->check_request(r);  // pure: checked here, so the scheduler's lock is not held for it
  {
    std::lock_guard<std::mutex> lk(p_->mu);
    if (p_->stopping || p_->queue.size() >= p_->queue_cap) {
      ++p_->met.requests_rejected;
      return false;
    }
    ++p_->met.requests_total;
    p_->queue.push_back({std::move(r), std::move(cb), std::move(err)});
    p_->met.requests_waiting = static_cast<int64_t>(p_->queue.size());
  }
  p_->cv.notify_all();
  return true;
}

std::optional<request_result> scheduler::run(request r, std::function<bool(const token_event&)> keep_going) {
  auto done = std::make_shared<std::promise<request_result>>();
  std::future<request_result> fut = done->get_future();
  request_callbacks cb;
  cb.on_token = std::move(keep_going);
  cb.on_done = [done](const request_result& res) { done->set_value(res); };
  if (!submit(std::move(r), std::move(cb))) return std::nullopt;
  return fut.get();
}

void scheduler::slot_save(int id, const std::string& filename) {
  if (!filename_ok(filename)) throw request_error(400, "invalid file name " + name_quote(filename));
  impl& d = *p_;
  d.slot_action(id, true, [&](slot& s, int& st, std::string& err) {
    const std::filesystem::path path = std::filesystem::path(d.p.slot_save_path) / filename;
    std::error_code ec;
    const std::filesystem::file_status fs = std::filesystem::status(path, ec);
    if (std::filesystem::exists(fs) && !std::filesystem::is_regular_file(fs)) {
      st = 409;
      err = "slot file " + name_quote(filename) + " exists and is not a regular file";
      return;
    }
    d.ctx->seq_save(s.seq, path.string());
  });
}

void scheduler::slot_restore(int id, const std::string& filename) {
  if (!filename_ok(filename)) throw request_error(400, "invalid file name " + name_quote(filename));
  impl& d = *p_;
  d.slot_action(id, true, [&](slot& s, int& st, std::string& err) {
    const std::string path = (std::filesystem::path(d.p.slot_save_path) / filename).string();
    if (!std::filesystem::is_regular_file(path)) {
      st = 404;
      err = "slot file " + name_quote(filename) + " not found";
      return;
    }
    const int32_t seq = d.ctx->seq_restore(path);
    d.ctx->seq_free(s.seq);
    s.seq = seq;
  });
}

void scheduler::slot_erase(int id) {
  impl& d = *p_;
  d.slot_action(id, false, [&](slot& s, int&, std::string&) { d.ctx->seq_truncate(s.seq, 0); });
}

std::vector<slot_info> scheduler::slots() const {
  std::lock_guard<std::mutex> lk(p_->mu);
  return p_->info;
}

metrics_snapshot scheduler::metrics() const {
  std::lock_guard<std::mutex> lk(p_->mu);
  return p_->met;
}

const scheduler_params& scheduler::params() const { return p_->p; }
const model::model& scheduler::model() const { return *p_->m; }
int64_t scheduler::slot_n_ctx() const { return p_->slot_n_ctx; }
const std::string& scheduler::device_description() const { return p_->ctx->device_description(); }

void scheduler::stop() {
  {
    std::lock_guard<std::mutex> lk(p_->mu);
    p_->stopping = true;
  }
  p_->cv.notify_all();
  if (p_->thread.joinable() && p_->thread.get_id() != std::this_thread::get_id()) p_->thread.join();
}

}  // namespace detaudit::runtime
