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

#include "test_util.h"

namespace detaudit::test {

// A `detaudit serve -m stories260K.gguf` child; the key (if any) reaches it through the
// environment variable DETAUDIT_TEST_KEY and --api-key-env, never argv.
struct serve_proc {
  pid_t pid = -1;
  int port = 0;

  explicit serve_proc(const std::vector<std::string>& extra, const char* key = nullptr) {
    const std::string err_path = scratch_dir("probes_http_serve_" + std::to_string(::getpid())) + "/stderr";
    std::vector<std::string> args = {detaudit_bin(), "serve", "-m", fixture("models/stories260K.gguf"), "--host", "127.0.0.1",
                                     "--port", "0", "-t", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    if (key) args.insert(args.end(), {"--api-key-env", "DETAUDIT_TEST_KEY"});
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(fds[1], 1);
      const int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (e >= 0) ::dup2(e, 2);
      ::close(fds[0]);
      if (key) ::setenv("DETAUDIT_TEST_KEY", key, 1);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (out.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(fds[0]);
    const std::string prefix = "listening on http://127.0.0.1:";
    INFO("server stdout: " << out);
    REQUIRE(out.rfind(prefix, 0) == 0);
    port = std::stoi(out.substr(prefix.size()));
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }

  int stop() {
    if (pid < 0) return -1;
    ::kill(pid, SIGTERM);
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  ~serve_proc() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
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

// A TCP listener that answers every connection with `reply` (not HTTP) and closes it.
struct garbage_listener {
  int fd = -1;
  int port = 0;
  std::thread th;
  std::atomic<bool> stopping{false};

  explicit garbage_listener(std::string reply) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    REQUIRE(::listen(fd, 8) == 0);
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

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace detaudit::test
