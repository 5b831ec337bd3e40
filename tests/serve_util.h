// The real `detaudit serve` as a child process on 127.0.0.1 with a free port (--port 0), for every
// test that talks HTTP to it (child_process.h's serve_process). The port is read from its first
// stdout line; stderr goes to a file (err_path), one per child.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <csignal>
#include <fcntl.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <poll.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <utility>
#include <vector>

#include "child_process.h"
#include "test_util.h"

namespace detaudit::test {

// A TCP connection to 127.0.0.1:port (for tests that write raw HTTP).
inline int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

struct serve_child {
  std::string err_path;  // the child's stderr
  std::optional<serve_process> proc;
  int port = 0;
  pid_t pid = -1;  // while it runs

  // `detaudit serve -m MODEL --host 127.0.0.1 --port 0 -t 1 EXTRA...` (MODEL: stories260K when
  // empty), with `env` set in the child only (how API keys reach it: never through argv).
  explicit serve_child(const std::vector<std::string>& extra, const std::string& model = "",
                       const std::vector<std::pair<std::string, std::string>>& env = {}) {
    static int n_children = 0;  // each child its own file: scratch_dir() empties a reused one
    err_path = scratch_dir("serve_child_" + std::to_string(::getpid()) + "_" + std::to_string(n_children++)) + "/stderr";
    std::vector<std::string> args = {"-t", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    try {
      proc.emplace(detaudit_bin(), model.empty() ? fixture("models/stories260K.gguf") : model, args, err_path, env);
    } catch (const std::exception& e) {
      FAIL(e.what());
    }
    port = proc->port;
    pid = proc->proc.pid();
  }
  serve_child(const serve_child&) = delete;
  serve_child& operator=(const serve_child&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }

  // SIGTERM, then the exit status (a clean shutdown is 0).
  int stop() {
    pid = -1;
    return proc->proc.stop();
  }
  // SIGKILL: a server that dies mid-run.
  void kill9() {
    pid = -1;
    proc->proc.kill9();
  }
};

// A client for 127.0.0.1:port with a read timeout long enough for a slow (sanitizer) build.
inline httplib::Client http_client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  return c;
}

// POSTs `body` as JSON, checks the status, returns the parsed answer.
inline nlohmann::json post_json(int port, const std::string& path, const nlohmann::json& body, int expect = 200) {
  auto c = http_client(port);
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  REQUIRE(r);
  INFO(path << " " << body.dump() << " -> " << r->body);
  CHECK(r->status == expect);
  return nlohmann::json::parse(r->body);
}

// ---- raw HTTP on one connection, for tests that must control every byte and every pause ----

// The OpenAI error object of `status`: {"error": {"message": non-empty, "code": status, ...}}.
inline bool is_error_object(const nlohmann::json& j, int status) {
  return j.is_object() && j.contains("error") && j["error"].is_object() && j["error"]["message"].is_string() &&
         !j["error"]["message"].get<std::string>().empty() && j["error"]["code"] == status;
}

// Sends all of `data` on fd within `timeout_ms`; false when the peer closed or the time ran out.
inline bool raw_send(int fd, const std::string& data, int timeout_ms = 10000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t off = 0;
  while (off < data.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200))) <= 0) continue;
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

struct raw_reply {
  int status = 0;          // 0: no status line arrived
  std::string head, body;  // body: as much as arrived (all of it when Content-Length was met)
  bool closed = false;     // the server closed the connection after it
};

// Reads one answer on fd: up to its Content-Length, then (when `wait_close`) until the server
// closes the connection, all within `timeout_ms`.
inline raw_reply raw_read_reply(int fd, int timeout_ms, bool wait_close = false) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string got;
  raw_reply r;
  for (;;) {
    const size_t end = got.find("\r\n\r\n");
    if (end != std::string::npos && !wait_close) {
      const size_t cl = got.find("Content-Length: ");
      if (cl != std::string::npos && cl < end && got.size() >= end + 4 + std::stoul(got.substr(cl + 16))) break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 200))) <= 0) continue;
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      r.closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  if (got.rfind("HTTP/1.1 ", 0) == 0 && got.size() >= 12) r.status = std::atoi(got.substr(9, 3).c_str());
  const size_t end = got.find("\r\n\r\n");
  r.head = got.substr(0, end);
  if (end != std::string::npos) r.body = got.substr(end + 4);
  return r;
}

// The resident set of a process in KiB (VmRSS), or -1.
inline int64_t rss_kib(pid_t pid) {
  const std::string s = file_text("/proc/" + std::to_string(pid) + "/status");
  const size_t at = s.find("VmRSS:");
  return at == std::string::npos ? -1 : std::atoll(s.c_str() + at + 6);
}

// `detaudit_NAME VALUE` from GET /metrics, or -1 when there is no answer or no such line.
inline int64_t metric_of(int port, const std::string& name) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  auto r = c.Get("/metrics");
  if (!r || r->status != 200) return -1;
  const std::string key = "\ndetaudit_" + name + " ";
  const size_t p = r->body.find(key);
  return p == std::string::npos ? -1 : std::atoll(r->body.c_str() + p + key.size());
}

// Polls `pred` every 20 ms for up to `seconds`; true as soon as it holds.
template <class Pred>
bool wait_until(double seconds, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    ::usleep(20000);
  }
  return pred();
}

}  // namespace detaudit::test
