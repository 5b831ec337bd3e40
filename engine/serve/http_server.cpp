// The HTTP server: httplib wiring, the API key check, the exception -> OpenAI error adapter, and
// the bridge from the scheduler's callbacks (on its thread) to a blocked handler or an SSE stream.
#include "serve/http_server.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <sys/socket.h>
#include <utility>

#include "runtime/context.h"
#include "serve/http_handlers.h"
#include "util/error.h"

namespace detaudit::serve {
namespace {

// Compares in time that depends only on the key's length.
bool key_equal(const std::string& given, const std::string& key) {
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < key.size(); ++i)
    diff |= static_cast<unsigned char>(key[i]) ^ static_cast<unsigned char>(i < given.size() ? given[i] : 0);
  return diff == 0;
}

std::string request_key(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (auth.compare(0, bearer.size(), bearer) == 0) return auth.substr(bearer.size());
  return req.get_header_value("X-Api-Key");
}

// Request bodies are read only with a Content-Length that --max-body bounds: httplib bounds
// nothing else, so a chunked body, or a compressed one (inflated while it is read), could grow
// without limit. Returns the status and message of a refusal, or 0 when the framing is accepted.
std::pair<int, std::string> body_framing_check(const httplib::Request& req) {
  std::string te = req.get_header_value("Transfer-Encoding");
  std::transform(te.begin(), te.end(), te.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!te.empty() && te != "identity")
    return {411, "request body: Transfer-Encoding '" + te + "' is not accepted; send the body with a Content-Length"};
  std::string ce = req.get_header_value("Content-Encoding");
  std::transform(ce.begin(), ce.end(), ce.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!ce.empty() && ce != "identity")
    return {415, "request body: Content-Encoding '" + ce + "' is not accepted; send the body uncompressed"};
  return {0, ""};
}

// The adapter every handler is wrapped in once (as llama.cpp's ex_wrapper).
httplib::Server::Handler error_adapter(httplib::Server::Handler fn) {
  return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const http_error& e) {
      error_send(res, e.status(), e.what());
    } catch (const input_error& e) {
      error_send(res, 400, e.what());
    } catch (const json::exception& e) {
      error_send(res, 400, std::string("request body: ") + e.what());
    } catch (const std::bad_alloc&) {
      error_send(res, 500, "out of memory");
    } catch (const std::exception& e) {
      error_send(res, 500, e.what());
    }
  };
}

void prompt_check(const http_state& st, const request& r) {
  const int64_t n_ctx = st.sched.slot_n_ctx();
  if (static_cast<int64_t>(r.prompt.size()) >= n_ctx)
    throw http_error(400, "prompt has " + std::to_string(r.prompt.size()) + " tokens, more than fit the slot context of " +
                              std::to_string(n_ctx) + " (one token is left for generation)");
}

const char* k_busy = "server busy: request queue full";

}  // namespace

request_result completion_run(http_state& st, request r) {
  prompt_check(st, r);
  auto done = std::make_shared<std::promise<request_result>>();
  std::future<request_result> fut = done->get_future();
  request_callbacks cb;
  cb.on_token = [](const token_event&) { return true; };
  cb.on_done = [done](const request_result& res) { done->set_value(res); };
  if (!st.sched.submit(std::move(r), std::move(cb))) throw http_error(503, k_busy);
  request_result res = fut.get();
  if (!res.error.empty()) throw http_error(res.http_status >= 400 ? res.http_status : 500, res.error);
  return res;
}

namespace {

struct stream_state {
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;  // SSE text not yet written
  bool done = false;
  std::atomic<bool> cancelled{false};
};

}  // namespace

void completion_stream(http_state& st, request r, stream_format fmt, httplib::Response& res) {
  prompt_check(st, r);
  auto ss = std::make_shared<stream_state>();
  auto push = [ss](std::string text, bool last) {
    std::lock_guard<std::mutex> lk(ss->mu);
    ss->pending += text;
    ss->done = ss->done || last;
    ss->cv.notify_all();
  };
  request_callbacks cb;
  cb.on_token = [ss, push, fmt](const token_event& ev) {
    if (ss->cancelled) return false;
    push(fmt.token(ev), false);
    return true;
  };
  cb.on_done = [push, fmt](const request_result& out) {
    if (!out.error.empty())
      push(sse_event(error_json(out.http_status >= 400 ? out.http_status : 500, out.error)), true);
    else
      push(fmt.done(out), true);
  };
  if (!st.sched.submit(std::move(r), std::move(cb))) throw http_error(503, k_busy);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [ss](size_t, httplib::DataSink& sink) {
        std::string out;
        bool last = false;
        {
          std::unique_lock<std::mutex> lk(ss->mu);
          while (ss->pending.empty() && !ss->done) {
            ss->cv.wait_for(lk, std::chrono::milliseconds(200));
            if (ss->pending.empty() && !ss->done && !sink.is_writable()) {
              ss->cancelled = true;
              return false;
            }
          }
          out.swap(ss->pending);
          last = ss->done;
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          ss->cancelled = true;
          return false;
        }
        if (last) sink.done();
        return true;
      },
      [ss](bool success) {
        if (!success) ss->cancelled = true;
      });
}

struct http_server::impl {
  http_state st;
  httplib::Server srv;
  socket_t listen_fd = INVALID_SOCKET;  // the last socket httplib created to bind; see bind()
  impl(scheduler& s, const http_server_params& p) : st{s, p, {}, {}, {1}} {}
};

http_server::http_server(scheduler& sched, const http_server_params& p) : p_(std::make_unique<impl>(sched, p)) {
  http_state& st = p_->st;
  const model::model& m = sched.model();
  st.model_id = std::filesystem::path(m.path()).filename().string();
  st.fingerprint = std::string("detaudit-") + DETAUDIT_VERSION + "-" + runtime::numerics_name(sched.params().ctx.numerics) +
                   "-" + m.sha256().substr(0, 16);
  httplib::Server& srv = p_->srv;
  const size_t n_queue = static_cast<size_t>(std::max(sched.params().n_queue, sched.params().n_slots));
  const size_t n_threads = static_cast<size_t>(sched.params().n_slots) + n_queue + 4;
  srv.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  srv.set_socket_options([impl = p_.get()](socket_t sock) {
    httplib::default_socket_options(sock);
    impl->listen_fd = sock;
  });
  // A response is written as headers, then body: with Nagle's algorithm the body waited for the
  // client's delayed ACK, ~40 ms on every keep-alive answer, holding a server thread meanwhile.
  srv.set_tcp_nodelay(true);
  srv.set_payload_max_length(p.max_body);
  srv.set_read_timeout(p.timeout_s, 0);
  srv.set_write_timeout(p.timeout_s, 0);
  srv.set_pre_routing_handler([&st](const httplib::Request& req, httplib::Response& res) {
    if (const auto [status, msg] = body_framing_check(req); status != 0) {
      res.set_header("Connection", "close");
      error_send(res, status, msg);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (st.params.api_key.empty() || req.path == "/health" || req.path == "/v1/health")
      return httplib::Server::HandlerResponse::Unhandled;
    if (key_equal(request_key(req), st.params.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("Connection", "close");
    error_send(res, 401, "invalid or missing API key (Authorization: Bearer KEY)");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets itself (404 no route, 413 body too large, 400 bad request line) get an
  // OpenAI error body; bodies written by handlers are left alone.
  srv.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.status < 400) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg;
    if (res.status == 404) msg = "unknown route: " + text_quote(req.method) + " " + text_quote(req.path);
    else if (res.status == 413) msg = "request body too large";
    else msg = "HTTP error " + std::to_string(res.status);
    json_send(res, error_json(res.status, msg));
    return httplib::Server::HandlerResponse::Handled;
  }));
  auto wrap = [](httplib::Server::Handler h) { return error_adapter(std::move(h)); };
  routes_llamacpp(srv, st, wrap);
  routes_openai(srv, st, wrap);
  routes_ollama(srv, st, wrap);
}

http_server::~http_server() { stop(); }

int http_server::bind() {
  const http_server_params& p = p_->st.params;
  const int port = p.port == 0 ? p_->srv.bind_to_any_port(p.host) : (p_->srv.bind_to_port(p.host, p.port) ? p.port : -1);
  if (port < 0) throw input_error("serve: cannot listen on " + p.host + ":" + std::to_string(p.port));
  // httplib 0.11 listens with a backlog of 5: a burst of new connections (64 clients starting,
  // or reconnecting after their 5th keep-alive request) overflowed it, and the kernel answered
  // with dropped handshakes (1-3 s retransmits) and reset connections. Listening again on the
  // bound socket raises the backlog (the kernel caps it at net.core.somaxconn).
  if (p_->listen_fd != INVALID_SOCKET) ::listen(p_->listen_fd, SOMAXCONN);
  return port;
}

bool http_server::listen() { return p_->srv.listen_after_bind(); }

void http_server::stop() { p_->srv.stop(); }

}  // namespace detaudit::serve
