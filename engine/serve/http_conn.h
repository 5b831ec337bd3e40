// The connection layer of `detaudit serve`: its own listening socket and accept loop under
// httplib's request parsing, routing and response writing (httplib::Server::process_request).
//
// Goals: no client holds the server's memory or threads beyond fixed bounds.
//   - Every connection has its own thread, so a handler waiting for a generation slot never
//     delays /health or /metrics on another connection (a fixed pool was starved by them).
//   - Connections are bounded per client address and in total; the one beyond gets 503 at once.
//   - A request head must arrive whole within header_timeout_s of its first byte, in all (not per
//     byte; 408 after), and hold at most MAX_HEAD bytes (431). A connection with no request
//     begun is closed after header_timeout_s idle.
//   - Each read and write of an admitted request waits at most io_timeout_s (SO_RCVTIMEO,
//     SO_SNDTIMEO and poll), so a client that stops reading its answer loses the connection.
//   - The API key and the body's framing are decided on the head, before any body byte is read:
//     401 without the key, 411 for a body with no Content-Length (or with Transfer-Encoding), 413
//     for a Content-Length over max_body, 415 for a compressed body. Such a refusal closes the
//     connection; the bytes the client was still sending are read and dropped for a short while
//     (a lingering close), so it can read the answer, and never stored.
//   - httplib then reads exactly Content-Length body bytes: the stream it reads ends there.
// Non-goals: TLS, HTTP/2, request pipelining beyond reading requests in order.
//
//   accept loop ──(limits, else 503)──► connection thread, per request:
//     head (deadline, size) ─► conn_head_check (key, framing) ─► conn_stream = head + body bytes
//     ─► process_request (parse, route, answer) ─► next request on the same connection
//
// Thread-safety: conn_head_check, conn_request_socket and conn_peer_closed may be called from any
// thread; bind_socket() before serve(); shutdown() from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <httplib.h>
#include <memory>
#include <string>
#include <string_view>

namespace detaudit::serve {

struct conn_params {
  std::string api_key;                // "" = none; else required on every path but /health, /v1/health
  size_t max_body = 8u << 20;         // --max-body: a larger Content-Length is 413
  int io_timeout_s = 600;             // --timeout: each read or write of an admitted request
  int header_timeout_s = 5;           // --header-timeout: a whole request head from its first byte; idle
  int max_connections = 256;             // --max-connections: open at once, all clients
  int max_connections_per_client = 128;  // --max-connections-per-client: open at once, one address
};

// The most bytes of a request head (request line, headers, blank line).
inline constexpr size_t MAX_HEAD = 64 * 1024;

// What a complete request head decides before any body byte is read.
struct head_verdict {
  int status = 0;            // 0: accepted; else the status of the refusal
  std::string message;       // the refusal's message (OpenAI error object)
  uint64_t body_len = 0;     // body bytes httplib will read (its Content-Length, or 0)
  bool close_after = false;  // a body httplib will not read (a GET with a Content-Length): close after
};

// Checks a complete request head (ending in an empty line): bare CR, LF or NUL (400), the API key
// (401), Transfer-Encoding (411), Content-Encoding (415), Content-Length (400 malformed or
// conflicting, 413 over max_body, 411 missing on POST, PUT, PATCH). Pure.
head_verdict conn_head_check(std::string_view head, const conn_params& p);

// The socket of the request this thread is answering, or -1 outside one.
int conn_request_socket();
// True when the peer of `fd` has closed the connection or reset it; bytes it sent and that are
// not read yet do not count as closed. Does not block.
bool conn_peer_closed(int fd);

class conn_server : public httplib::Server {
 public:
  explicit conn_server(const conn_params& p);
  ~conn_server() override;
  conn_server(const conn_server&) = delete;
  conn_server& operator=(const conn_server&) = delete;

  // Binds and listens (backlog SOMAXCONN) on host:port; returns the port (port 0: any free one).
  // Throws input_error when it cannot.
  int bind_socket(const std::string& host, int port);
  // Accepts and serves until shutdown(); returns once every connection has ended (requests in
  // flight are answered). False when accepting failed.
  bool serve();
  // Stops accepting; idle connections close, requests in flight finish. Returns at once.
  void shutdown();

  struct impl;

 private:
  std::unique_ptr<impl> d_;
};

}  // namespace detaudit::serve
