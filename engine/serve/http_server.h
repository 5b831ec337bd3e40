// The HTTP layer of `detaudit serve`: llama.cpp's server endpoints (/completion, /tokenize,
// /detokenize, /props, /slots, /health, /metrics) and OpenAI's (/v1/completions,
// /v1/chat/completions, /v1/models) on a runtime::scheduler.
//
// Goals: clients of llama-server and of the OpenAI API work unchanged; every answer names the
// engine, numerics and model (system_fingerprint) and can carry the per-step logit hashes.
// Every handler is wrapped once by an exception -> OpenAI error adapter: {"error": {"message",
// "type", "code"}} with the HTTP status (400 bad field, 404 route, 503 busy). The connection layer
// (serve/http_conn.h) answers in the same shape before a request reaches a handler: 401 key, 408
// slow head, 411 no Content-Length or chunked body, 413 body too large, 415 compressed body,
// 431 head too large, 503 too many connections.
// Non-goals: TLS, multimodal content, tools, grammars, n > 1. docs/serve-api.md lists the fields.
//
// Thread-safety: one http_server per scheduler; bind(), listen() and stop() may be called from
// different threads (stop() from any).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/scheduler.h"

namespace detaudit::serve {

struct http_server_params {
  std::string host = "127.0.0.1";
  int port = 8080;                              // 0: any free port (bind() returns it)
  std::string api_key;                          // "" = no key; else every route but /health needs it
  size_t max_body = 8u << 20;                   // --max-body: larger request bodies get 413
  size_t max_body_memory = size_t{1} << 30;     // --max-body-memory: parsed bodies held at once (http_handlers.h)
  int timeout_s = 600;                          // socket read / write timeout
  int header_timeout_s = 5;                     // --header-timeout: a whole request head from its first byte; idle
  int max_connections = 256;                    // --max-connections: open at once (503 beyond)
  int max_connections_per_client = 128;         // --max-connections-per-client: open at once from one address
  std::string chat_template;                    // "" = detect from the model; else chatml|qwen3|...
};

class http_server {
 public:
  // Reads the model's sha256 (the whole file) for system_fingerprint.
  http_server(runtime::scheduler& sched, const http_server_params& p);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Binds host:port. Returns the port bound. Throws input_error when it cannot bind.
  int bind();
  // Serves on the bound socket until stop(). Returns false when the server failed.
  bool listen();
  // Stops accepting and returns; listen() then returns once in-flight requests are answered.
  void stop();

  struct impl;

 private:
  std::unique_ptr<impl> p_;
};

}  // namespace detaudit::serve
