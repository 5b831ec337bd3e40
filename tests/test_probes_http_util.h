// For the HTTP target and ollama-route tests: the real `detaudit serve` as a child process on
// 127.0.0.1 (--port 0), a scripted HTTP responder (cpp-httplib in a thread), and a raw TCP
// listener that answers with bytes that are not HTTP.
#pragma once

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <functional>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "probes/target.h"
#include "serve_util.h"
#include "test_util.h"

namespace detaudit::test {

// A `detaudit serve -m stories260K.gguf` child; the key (if any) reaches it through the
// environment variable DETAUDIT_TEST_KEY and --api-key-env, never argv.
struct serve_proc : serve_child {
  explicit serve_proc(const std::vector<std::string>& extra, const char* key = nullptr)
      : serve_child(with_key_flag(extra, key), "",
                    key ? std::vector<std::pair<std::string, std::string>>{{"DETAUDIT_TEST_KEY", key}}
                        : std::vector<std::pair<std::string, std::string>>{}) {}

 private:
  static std::vector<std::string> with_key_flag(std::vector<std::string> extra, const char* key) {
    if (key) extra.insert(extra.end(), {"--api-key-env", "DETAUDIT_TEST_KEY"});
    return extra;
  }
};

// A cpp-httplib server on 127.0.0.1 in its own thread; routes are set before start().
struct responder {
  httplib::Server srv;
  std::thread th;
  int port = 0;
  std::atomic<bool> stopping{false};

  void start() {
    port = srv.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    th = std::thread([this] { srv.listen_after_bind(); });
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  ~responder() {
    stopping = true;
    srv.stop();
    if (th.joinable()) th.join();
  }
};

// A TCP socket listening on 127.0.0.1 at a free port (written to *port).
inline int loopback_listen(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  *port = ntohs(a.sin_port);
  REQUIRE(::listen(fd, 8) == 0);
  return fd;
}

// A TCP listener that answers every connection with `reply` (not HTTP) and closes it.
struct garbage_listener {
  int fd = -1;
  int port = 0;
  std::thread th;
  std::atomic<bool> stopping{false};

  explicit garbage_listener(std::string reply) {
    fd = loopback_listen(&port);
    th = std::thread([this, reply] {
      while (!stopping) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        const int c = ::accept(fd, nullptr, nullptr);
        if (c < 0) continue;
        char buf[1024];
        pollfd pc{c, POLLIN, 0};
        if (::poll(&pc, 1, 1000) > 0) (void)::read(c, buf, sizeof buf);
        (void)::write(c, reply.data(), reply.size());
        ::close(c);
      }
    });
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  ~garbage_listener() {
    stopping = true;
    if (th.joinable()) th.join();
    ::close(fd);
  }
};

// A port nothing listens on (bound, then closed).
inline int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The streaming tests' target options and request (tests/unit/test_probes_http_stream.cpp and
// tests/e2e/test_probes_http_stream.cpp).
namespace stream_test {

inline probes::target_options opts(const std::string& api, bool stream) {
  probes::target_options o;
  o.api = api;
  o.timeout_s = 30;
  o.retries = 0;
  o.stream = stream;
  return o;
}

inline probes::gen_request request(bool chat) {
  probes::gen_request r;
  if (chat) r.messages = {{"system", "Be brief."}, {"user", "Tell me a story."}};
  else r.prompt = "Once upon a time";
  r.n_predict = 12;
  r.seed = 42;
  r.n_probs = 3;
  r.cache_prompt = false;  // the second request must not differ by what the cache held
  return r;
}

}  // namespace stream_test

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace detaudit::test
