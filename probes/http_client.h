// A small blocking HTTP client on libcurl for the HTTP targets: GET and POST of JSON against one
// base URL, with timeouts, retries with backoff, Retry-After, and a bearer token.
//
// Goals: every failure is classified once, here: the server cannot be reached (connection refused,
// timeout, a reset or empty reply, an answer that is not HTTP) -> unreachable_error after the
// retries; the server answered with an HTTP error -> the status and body come back to the caller,
// which records them. Redirects are not followed (a 3xx comes back as a status).
// Non-goals: streaming, cookies, HTTP/2 tuning, TLS settings beyond libcurl's defaults.
//
// Secrets: the API key goes into the Authorization header only; no message, exception or response
// field ever contains a header.
//
// Thread-safety: a const http_client may be used from many threads at once (one libcurl easy
// handle per request; curl_global_init runs once).
#pragma once

#include <cstddef>
#include <string>

namespace detaudit::probes {

struct http_client_options {
  double timeout_s = 120;          // per attempt, whole transfer
  double connect_timeout_s = 10;   // per attempt (capped by timeout_s)
  int retries = 3;                 // extra attempts after the first
  double backoff_s = 0.5;          // wait before retry k (0-based): backoff_s * 2^k, at most retry_after_cap_s
  double retry_after_cap_s = 60;   // longest Retry-After honoured, and longest backoff
  std::string api_key;             // "" = no Authorization header
  // The most bytes of an answer's body kept; the transfer stops there (the answer is then that
  // request's error). Each call may lower it (what the request can need: probes/response_limits.h).
  size_t max_body = size_t(256) << 20;
};

struct http_response {
  int status = 0;            // the last attempt's HTTP status
  std::string body;
  std::string content_type;  // "" when the server sent none
  double t_start = 0;        // unix seconds: the last attempt began
  double t_end = 0;          // unix seconds: its answer was complete
  int attempts = 0;
  // Non-empty: the server answered, but its answer could not be taken whole (larger than the
  // client keeps); `body` is then empty. That request's error, not an unreachable server.
  std::string error;
  bool ok() const { return status >= 200 && status < 300 && error.empty(); }
};

class http_client {
 public:
  // base_url: "http(s)://host[:port][/prefix]" without a trailing slash.
  http_client(std::string base_url, http_client_options opt);

  // Each returns the answer of the last attempt (any status). Retried: connection errors,
  // timeouts, empty replies, 429 and 5xx. Throws unreachable_error (message names the URL and
  // libcurl's error, never a header) when no attempt got an HTTP answer. An answer too large to
  // keep comes back with its status and `error` set, not retried.
  // max_body: this call's bound on the answer (0: the options').
  http_response get(const std::string& path, size_t max_body = 0) const;
  http_response post_json(const std::string& path, const std::string& body, size_t max_body = 0) const;

  // The same as get() with no retries and this timeout (capability probes of optional routes).
  http_response get_once(const std::string& path, double timeout_s, size_t max_body = 0) const;

  const std::string& base_url() const { return base_url_; }
  const http_client_options& options() const { return opt_; }

 private:
  http_response request(const std::string& path, const std::string* post_body, const http_client_options& o) const;

  std::string base_url_;
  http_client_options opt_;
};

// The seconds a Retry-After header value asks for (delta-seconds form); < 0 when it is absent or
// not a number of seconds.
double http_retry_after_seconds(const std::string& value);

// "256 MiB", "1.4 MiB", "12 KiB", "300 bytes": a size for a message.
std::string http_size_text(size_t bytes);

}  // namespace detaudit::probes
