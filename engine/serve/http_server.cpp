// The HTTP server: routes on the connection layer (serve/http_conn.h), the exception -> OpenAI
// error adapter, and the bridge from the scheduler's callbacks (on its thread) to a blocked
// handler or an SSE stream.
#include "serve/http_server.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <utility>

#include "runtime/context.h"
#include "serve/http_conn.h"
#include "serve/http_handlers.h"
#include "util/error.h"

namespace detaudit::serve {
namespace {

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

const char* BUSY = "server busy: request queue full";

}  // namespace

request_result completion_run(http_state& st, request r) {
  prompt_check(st, r);
  // Between steps: a client that closed its connection cancels the request, as a streaming one
  // does. The socket stays open while this handler waits for the result.
  const int sock = conn_request_socket();
  std::optional<request_result> out =
      st.sched.run(std::move(r), [sock](const token_event&) { return sock < 0 || !conn_peer_closed(sock); });
  if (!out) throw http_error(503, BUSY);
  request_result res = std::move(*out);
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
  if (!st.sched.submit(std::move(r), std::move(cb))) throw http_error(503, BUSY);
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
  conn_server srv;
  impl(scheduler& s, const http_server_params& p) : st{s, p, {}, {}, {1}, {}}, srv(conn_params_of(p)) {}

  static conn_params conn_params_of(const http_server_params& p) {
    conn_params c;
    c.api_key = p.api_key;
    c.max_body = p.max_body;
    c.io_timeout_s = p.timeout_s;
    c.header_timeout_s = p.header_timeout_s;
    c.max_connections = p.max_connections;
    c.max_connections_per_client = p.max_connections_per_client;
    return c;
  }
};

http_server::http_server(scheduler& sched, const http_server_params& p) : p_(std::make_unique<impl>(sched, p)) {
  http_state& st = p_->st;
  const model::model& m = sched.model();
  st.model_id = std::filesystem::path(m.path()).filename().string();
  st.fingerprint = std::string("detaudit-") + DETAUDIT_VERSION + "-" + runtime::numerics_name(sched.params().ctx.numerics) +
                   "-" + m.sha256().substr(0, 16);
  httplib::Server& srv = p_->srv;
  // Statuses httplib sets itself (404 no route, 400 bad request line, 414 long URI) get an
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

int http_server::bind() { return p_->srv.bind_socket(p_->st.params.host, p_->st.params.port); }

bool http_server::listen() { return p_->srv.serve(); }

void http_server::stop() { p_->srv.shutdown(); }

}  // namespace detaudit::serve
