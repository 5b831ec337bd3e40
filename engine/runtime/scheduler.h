// The serving core, independent of HTTP: slots, a bounded request queue, and continuous batching
// of every active request's tokens into shared forward steps on one context.
//
// Goals: llama-server's serving model (-np slots, -c total context split among them, prompt cache
// per slot, slot save/restore, speculative decoding) on the exact engine, where none of it can
// change a request's tokens, log-probs or logit hashes; counters an auditor can read to see that
// concurrency, caching and drafting really happened.
// Non-goals: HTTP (serve/), JSON (runtime/request_fields.h reads a request body into a
// request), chat templates (done before submit()).
//
// Thread-safety: submit(), cancel(), slot actions and metrics() may be called from any thread; one
// scheduler thread owns the context and runs every forward step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/context.h"
#include "runtime/generate.h"
#include "runtime/sampling.h"
#include "runtime/request_error.h"

namespace detaudit::runtime {

enum spec_kind { SPEC_NONE, SPEC_NGRAM, SPEC_DRAFT };

struct scheduler_params {
  context_params ctx;  // numerics, threads, n_ubatch; ctx.n_ctx is the TOTAL context
  int n_slots = 1;              // -np
  int n_queue = 0;              // most waiting requests; 0: n_slots (always at least n_slots)
  spec_kind spec = SPEC_NONE;   // --spec ngram | --draft MODEL.gguf
  // With SPEC_DRAFT: the draft model (same vocabulary as the target). It proposes n_draft tokens
  // greedily per step; the target verifies them in the same batch as every other request.
  std::shared_ptr<const model::model> draft;
  int n_draft = 8;              // most draft tokens proposed per step
  std::string slot_save_path;   // --slot-save-path ("" disables save/restore)
};

struct request {
  std::vector<int32_t> prompt;            // token ids, BOS included as tokenized
  int64_t n_predict = -1;                 // -1: until EOG or the slot's context is full
  sampling_params sampling;
  std::vector<std::string> stop;
  int n_probs = 0;                        // top log-probs per step (pre-sampling)
  bool cache_prompt = true;               // reuse the slot's cached prefix
  int id_slot = -1;                       // -1: any free slot (prefers the longest cached prefix)
  bool speculative = true;                // false: no drafting for this request
  bool logit_hashes = false;              // report per-step logit hashes
};

// One generated token, delivered as it is produced.
struct token_event {
  generated_token token;  // id, piece, top, logit_hash
  std::string text;                // text released by the stop-string / UTF-8 stream (may be "")
};

struct request_result {
  generate_result gen;    // tokens, text, finish/stop, timings, chained hash
  int slot = -1;
  int64_t n_cached = 0;            // prompt tokens taken from the slot's cache
  int64_t n_past = 0;              // tokens the slot's cache holds when the request ends
  int64_t n_draft_proposed = 0;
  int64_t n_draft_accepted = 0;
  // The most sequences (requests) that shared one forward step of the model with this request,
  // itself included, over all its steps (prefill too; draft-model steps are not counted): 1 when
  // it was evaluated alone throughout, >= 2 when it was batched with another request.
  int64_t max_seqs_in_step = 0;
  std::string error;               // non-empty: the request failed (message for the client)
  int http_status = 200;           // 400 (bad prompt, context), 503 (cancelled at shutdown), ...
};

// Callbacks run on the scheduler thread; they must not block. on_token returning false cancels
// the request (a streaming client went away).
struct request_callbacks {
  std::function<bool(const token_event&)> on_token;
  std::function<void(const request_result&)> on_done;  // always called exactly once
};

struct metrics_snapshot {
  int64_t requests_total = 0;
  int64_t requests_rejected = 0;        // 503: queue full
  int64_t requests_cancelled = 0;       // the client went away mid-generation
  int64_t requests_active = 0;
  int64_t requests_waiting = 0;
  int64_t prompt_tokens_total = 0;      // evaluated (not from cache)
  int64_t prompt_tokens_cached = 0;     // served from a slot's prompt cache
  int64_t generated_tokens_total = 0;
  int64_t max_seqs_in_step = 0;         // the most sequences ever evaluated in one forward step
  int64_t max_tokens_in_step = 0;
  int64_t steps_total = 0;
  int64_t draft_proposed_total = 0;
  int64_t draft_accepted_total = 0;
};

struct slot_info {
  int id = 0;
  bool busy = false;
  int64_t n_ctx = 0;          // this slot's share of the context
  int64_t n_cached = 0;       // tokens in its cache
};

class scheduler {
 public:
  // Loads nothing itself: takes loaded models. Starts the scheduler thread. Throws input_error
  // for bad parameters (n_slots < 1, a total context too small for the slots, SPEC_DRAFT without a
  // draft model or with one whose vocabulary differs from the target's).
  scheduler(std::shared_ptr<const model::model> m, const scheduler_params& p);
  ~scheduler();  // stop(), then joins
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  // Queues a request. Returns false (and calls nothing) when the queue is full: the caller answers
  // 503. Otherwise on_done is called exactly once, later, on the scheduler thread.
  bool submit(request r, request_callbacks cb);
  // submit() and wait for the result, on the caller's thread: the one way to run a request to its
  // end (serve's unstreamed answers, the engine target). `keep_going` is asked between steps (false
  // cancels). nullopt when the queue is full (the caller answers 503).
  std::optional<request_result> run(request r, std::function<bool(const token_event&)> keep_going);

  // Slot actions (llama-server's POST /slots/{id}?action=...). File names are validated: no path
  // separators, no "..", not empty. Throw request_error with the status the answer takes (400, 404,
  // 409 for a busy slot, 500, 501 without --slot-save-path) and a message without server paths.
  void slot_save(int id, const std::string& filename);
  void slot_restore(int id, const std::string& filename);
  void slot_erase(int id);

  std::vector<slot_info> slots() const;
  metrics_snapshot metrics() const;
  const scheduler_params& params() const;
  const model::model& model() const;
  int64_t slot_n_ctx() const;  // context per slot: total / n_slots
  // The context's device_description() ("cpu avx512", "vulkan 0: ..."); fixed at construction.
  const std::string& device_description() const;

  // Stops accepting; cancels waiting requests (on_done with 503) and finishes active ones.
  void stop();

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

}  // namespace detaudit::runtime
