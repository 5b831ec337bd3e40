// Targets: what the audit sends requests to. One interface over the in-process engine and the HTTP
// dialects (openai-chat, openai-completions, llamacpp, ollama); every response is normalised into a
// reports::record (text, tokens, top log-probs, hashes, finish reason, usage, timings, evidence).
//
// Thread-safety: complete() may be called from many threads at once (that is how concurrency is
// produced); everything else from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "reports/audit/record.h"

namespace detaudit::probes {

using json = nlohmann::json;

// The target cannot be reached (connection refused, DNS, timeouts after every retry). The run
// stops, keeps what it has, and exits 3.
class unreachable_error : public std::runtime_error {
 public:
  explicit unreachable_error(const std::string& what) : std::runtime_error(what) {}
};

// The run was interrupted (SIGINT/SIGTERM) while a request was in flight: the request is dropped,
// not recorded (--resume sends it again).
class interrupted_error : public std::runtime_error {
 public:
  explicit interrupted_error(const std::string& what) : std::runtime_error(what) {}
};

// Ctrl-C. run_interrupt() only sets a lock-free flag, so a signal handler may call it; every
// request in flight is ended as soon as it can be (HTTP transfers abort, the engine cancels) and
// no new one is sent. run_interrupt_reset() clears it (tests, a second run in one process).
void run_interrupt() noexcept;
bool run_interrupted() noexcept;
void run_interrupt_reset() noexcept;

struct chat_message {
  std::string role;
  std::string content;
};

// One generation request, dialect-neutral.
struct gen_request {
  std::string prompt;                  // raw completion prompt (when messages is empty)
  std::vector<chat_message> messages;  // chat request when non-empty
  int64_t n_predict = 64;
  double temperature = 0;
  std::optional<uint64_t> seed;        // nullopt: none sent
  std::optional<double> top_p;         // nullopt: the target's default is not overridden
  std::optional<int64_t> top_k;
  int n_probs = 2;                     // top log-probs per step (0: none asked)
  std::optional<bool> cache_prompt;    // nullopt: the target's default
  std::optional<bool> speculative;     // nullopt: the target's default
  int id_slot = -1;
  std::vector<std::string> stop;       // stop strings (none: the target's default)
  json extra = json::object();         // merged into the request body last (from --config "request")
};

// The request's generation settings under llama.cpp's /completion field names (n_predict,
// temperature, seed, top_p, top_k, cache_prompt, speculative, id_slot, stop), each only when set;
// the one owner of these names for the llamacpp dialect and the engine target. The prompt or
// messages, n_probs and transport fields are the caller's.
json llamacpp_settings(const gen_request& r);

struct capabilities {
  bool reachable = false;
  bool token_ids = false;        // responses carry token ids
  bool cache_control = false;    // per-request prompt-cache switch (llamacpp cache_prompt)
  bool logit_hashes = false;     // per-step logit hashes (engine, detaudit serve)
  bool metrics = false;          // /metrics readable (batch width, cache and draft counters)
  bool seed = true;              // honours a per-request seed
  int logprob_cap = 0;           // most top log-probs per step (0: none)
  std::string logprobs_kind;     // "pre-sampling" | "post-sampling" | ""
  std::string build;             // server build / version
  std::string fingerprint;       // system_fingerprint or equivalent
  std::string model;             // model name or file
  std::string model_sha256;      // when known
  int n_slots = 0;               // parallel slots when the target says (llama.cpp /props)
  // Where the number of slots processing at a moment can be read during a burst ("/slots",
  // "/metrics"; "" nowhere): the concurrency probe's evidence on servers that do not report a
  // request's own batch width.
  std::string busy_source;
  std::string chat_template;           // the server's chat template as /props gives it ("" unknown)
  std::string chat_template_fallback;  // the template used because the model has none ("chatml"), or ""
  std::string eos_token;               // the end-of-sequence token's text (llama.cpp /props, the engine's vocabulary), "" unknown
  json raw = json::object();     // what the probe read (/props, /v1/models, /api/version), no secrets
};

json capabilities_to_json(const capabilities& c);

struct target_options {
  double timeout_s = 120;        // per request
  int retries = 3;               // for connection errors, 5xx and 429 (Retry-After honoured)
  double backoff_s = 0.5;        // first backoff; doubles per retry
  std::string api_key;           // the bearer token's value (from --api-key-env); never recorded
  std::string api;               // --api: force a dialect ("" = detect)
  std::string model;             // model name to send (OpenAI/ollama "model"); "" = the target's first
  int n_parallel = 8;            // engine targets: slots (at least the run's concurrency)
  bool stream = false;           // HTTP targets: ask for server-sent events and assemble them
};

class target {
 public:
  virtual ~target() = default;
  virtual std::string spec() const = 0;     // as given (secrets never part of it)
  virtual std::string dialect() const = 0;  // engine | openai-chat | openai-completions | llamacpp | ollama
  // Reads what the target supports. Throws unreachable_error.
  virtual capabilities probe() = 0;
  // One request. Returns a record with the response fields filled (text, tokens, top_logprobs,
  // logprobs_kind, logit_hashes, chained_hash, finish_reason, usage, timings incl. t_start/t_end,
  // evidence.cached_tokens when known, request = body as sent with secrets redacted, error and
  // http_status for a failed request after retries). Throws unreachable_error only when the target
  // cannot be reached at all.
  virtual reports::record complete(const gen_request& r) = 0;
  // Server counters (/metrics) as {"name": value}; empty when not available.
  virtual json metrics() { return json::object(); }
  // How many slots are processing a request right now (capabilities::busy_source), or -1 when it
  // cannot be read; `ids`, when given and the source names them (/slots), receives the ids of the
  // busy slots. Called from a second thread while complete() runs.
  virtual int busy_now(std::vector<int>* ids = nullptr) {
    (void)ids;
    return -1;
  }
  // A target of the same kind with some settings changed (engine: "ubatch", "spec", "numerics",
  // "threads"); nullptr when the target cannot be varied that way (HTTP servers).
  virtual std::unique_ptr<target> variant(const std::string& key, const std::string& value) const {
    (void)key;
    (void)value;
    return nullptr;
  }
};

// "engine:PATH.gguf[?numerics=float&threads=2&ubatch=512&spec=ngram&ctx=N]", or an http(s) URL
// (dialect from opt.api, else detected: /props -> llamacpp, /api/version -> ollama,
// /v1/models -> openai-chat). Throws input_error for a bad spec, unreachable_error when detection
// cannot reach the URL.
std::unique_ptr<target> target_make(const std::string& spec, const target_options& opt);

// One line per HTTP dialect ("  NAME  summary"), for --help: the rows of the dialect table.
std::string dialects_help();

// `c` with the secret redacted from every string (reports/audit/redact.h: the one rule for all
// artefacts), raw included.
capabilities capabilities_redact(capabilities c, const std::string& secret);

}  // namespace detaudit::probes
