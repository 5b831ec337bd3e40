// detaudit serve's connection layer against clients that misbehave on the wire (issue 17): bodies
// without a Content-Length, oversized Content-Lengths, bodies sent without the API key, request
// heads that never finish, too many connections from one client, clients that go away while a
// non-streamed answer is generated, a head begun just before a kept-alive connection's idle time
// ran out and clients that stop reading their answer. Memory is the server child's VmRSS.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "serve_util.h"
#include "test_util.h"

using json = nlohmann::json;
using namespace detaudit;

namespace {

const char* POST_HEAD = "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";

// Sends `total` bytes of filler on fd, 1 MiB at a time, until the server stops taking them or
// 10 s pass; returns the bytes sent.
size_t flood(int fd, size_t total) {
  const std::string chunk(1u << 20, 'x');
  size_t sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sent < total && std::chrono::steady_clock::now() < deadline) {
    if (!test::raw_send(fd, chunk, 2000)) break;
    sent += chunk.size();
  }
  return sent;
}

// Floods fd with `total` bytes (see flood()) and checks that the server's VmRSS grew by less
// than 32 MiB meanwhile.
void check_memory_flat(const test::serve_child& srv, int fd, size_t total) {
  const int64_t before = test::rss_kib(srv.pid);
  const size_t sent = flood(fd, total);
  ::usleep(200000);
  const int64_t after = test::rss_kib(srv.pid);
  INFO("sent " << (sent >> 20) << " MiB; VmRSS " << before << " KiB before, " << after << " KiB after");
  CHECK(before > 0);
  CHECK(after - before < 32 * 1024);
}

// A GET on a new connection; the status (0: no answer within `timeout_s`).
int get_status(int port, const char* path, int timeout_s = 20) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(timeout_s, 0);
  c.set_read_timeout(timeout_s, 0);
  auto r = c.Get(path);
  return r ? r->status : 0;
}

}  // namespace

TEST_CASE("serve_conn: a body with neither Content-Length nor chunked encoding is refused with 411 at once") {
  test::serve_child srv({"-np", "1", "-c", "128"});
  const int fd = test::connect_loopback(srv.port);
  // The client keeps the connection open: a server that reads to the end of the connection never answers.
  REQUIRE(test::raw_send(fd, std::string(POST_HEAD) + "\r\n{\"prompt\": \"a\", \"n_predict\": 1}"));
  const test::raw_reply r = test::raw_read_reply(fd, 10000, /*wait_close=*/true);
  ::close(fd);
  INFO(r.head << "\n" << r.body);
  CHECK(r.status == 411);
  CHECK(test::is_error_object(json::parse(r.body, nullptr, false), 411));
  CHECK(r.closed);
  CHECK(test::post_json(srv.port, "/tokenize", {{"content", "still serving"}})["tokens"].size() > 0);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_conn: 256 MiB sent without Content-Length leave the server's memory flat") {
  test::serve_child srv({"-np", "1", "-c", "128"});
  const int fd = test::connect_loopback(srv.port);
  REQUIRE(test::raw_send(fd, std::string(POST_HEAD) + "\r\n"));
  check_memory_flat(srv, fd, size_t{256} << 20);
  ::close(fd);
  CHECK(get_status(srv.port, "/health") == 200);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_conn: without the API key no body byte is kept: 401 at once, memory flat") {
  test::serve_child srv({"-np", "1", "-c", "128", "--api-key-env", "DETAUDIT_CONN_KEY"}, "", {{"DETAUDIT_CONN_KEY", "k3y-conn-0123"}});
  for (const bool with_length : {true, false}) {
    CAPTURE(with_length);
    const int fd = test::connect_loopback(srv.port);
    const std::string head = std::string(POST_HEAD) + (with_length ? "Content-Length: 209715200\r\n" : "") + "\r\n";
    REQUIRE(test::raw_send(fd, head));
    const test::raw_reply r = test::raw_read_reply(fd, 10000);
    CHECK(r.status == 401);
    check_memory_flat(srv, fd, size_t{200} << 20);
    ::close(fd);
  }
  CHECK(get_status(srv.port, "/health") == 200);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_conn: an oversized Content-Length is answered 413 before any body byte, and the connection closed") {
  test::serve_child srv({"-np", "1", "-c", "128", "--max-body", "4096"});
  const int fd = test::connect_loopback(srv.port);
  REQUIRE(test::raw_send(fd, std::string(POST_HEAD) + "Content-Length: 1073741824\r\n\r\n"));
  const test::raw_reply r = test::raw_read_reply(fd, 10000, /*wait_close=*/true);
  ::close(fd);
  INFO(r.head << "\n" << r.body);
  CHECK(r.status == 413);
  CHECK(test::is_error_object(json::parse(r.body, nullptr, false), 413));
  CHECK(r.closed);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_conn: unfinished request heads are cut off and never block /health or /metrics") {
  // One slot and one queue place, both held by generations that would take hours (streamed: their
  // clients' leaving cancels them); 12 clients send a request head one byte a second, which never
  // ends.
  test::serve_child srv({"-np", "1", "--queue", "1", "-c", "65536"});
  const int port = srv.port;
  std::vector<int> busy;
  for (const char* prompt : {"Once upon a time", "The cat"}) {
    busy.push_back(test::connect_loopback(port));
    const std::string body = json{{"prompt", prompt}, {"n_predict", -1}, {"stream", true}}.dump();
    REQUIRE(test::raw_send(busy.back(), std::string(POST_HEAD) + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
    // The first must hold the slot before the second comes: while it still waits in the queue of
    // one, the second finds the queue full and is refused (a race a loaded machine loses).
    if (busy.size() == 1) REQUIRE(test::wait_until(30, [&] { return test::metric_of(port, "requests_active") == 1; }));
  }
  REQUIRE(test::wait_until(30, [&] { return test::metric_of(port, "requests_waiting") == 1; }));
  std::vector<int> slow;
  for (int i = 0; i < 12; ++i) slow.push_back(test::connect_loopback(port));
  const std::string trickle = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(64, 's');
  std::vector<bool> cut(slow.size(), false);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t k = 0; k < trickle.size() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20); ++k) {
    for (size_t i = 0; i < slow.size(); ++i)
      if (!cut[i] && !test::raw_send(slow[i], trickle.substr(k, 1), 1000)) cut[i] = true;
    if (k == 2) {
      CHECK(get_status(port, "/health") == 200);
      CHECK(get_status(port, "/metrics") == 200);
    }
    for (size_t i = 0; i < slow.size(); ++i) {
      pollfd p{slow[i], POLLIN, 0};
      if (!cut[i] && ::poll(&p, 1, 0) > 0) cut[i] = true;  // an answer (408) or the close
    }
    if (std::all_of(cut.begin(), cut.end(), [](bool c) { return c; })) break;
    ::usleep(1000000);
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("slow heads cut off after " << waited << " s");
  CHECK(std::all_of(cut.begin(), cut.end(), [](bool c) { return c; }));
  const test::raw_reply r = test::raw_read_reply(slow[0], 2000);
  CHECK((r.status == 408 || r.status == 0));
  for (int fd : slow) ::close(fd);
  for (int fd : busy) ::close(fd);
  CHECK(get_status(port, "/health") == 200);
  // Their clients gone, both generations are cancelled; then the server stops cleanly.
  const bool idle = test::wait_until(30, [&] { return test::metric_of(port, "requests_active") == 0; });
  CHECK(idle);
  if (idle) CHECK(srv.stop() == 0);
}

TEST_CASE("serve_conn: the head deadline counts from the head's first byte, not from the end of the last answer") {
  // A kept-alive connection idles 2 s, then sends a head in two parts 2 s apart: 4 s after the
  // last answer but 2 s after the head began, within --header-timeout 3.
  test::serve_child srv({"-np", "1", "-c", "128", "--header-timeout", "3"});
  const int fd = test::connect_loopback(srv.port);
  const std::string get = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  REQUIRE(test::raw_send(fd, get));
  REQUIRE(test::raw_read_reply(fd, 10000).status == 200);
  ::usleep(2000000);
  REQUIRE(test::raw_send(fd, get.substr(0, 20)));
  ::usleep(2000000);
  REQUIRE(test::raw_send(fd, get.substr(20)));
  const test::raw_reply r = test::raw_read_reply(fd, 10000);
  ::close(fd);
  INFO(r.head << "\n" << r.body);
  CHECK(r.status == 200);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_conn: connections per client and in total are bounded, and the one beyond gets 503 at once") {
  for (const char* flag : {"--max-connections-per-client", "--max-connections"}) {
    CAPTURE(flag);
    test::serve_child srv({"-np", "1", "-c", "128", flag, "3"});
    std::vector<int> held;
    for (int i = 0; i < 3; ++i) held.push_back(test::connect_loopback(srv.port));
    const int extra = test::connect_loopback(srv.port);
    const test::raw_reply r = test::raw_read_reply(extra, 10000, /*wait_close=*/true);
    ::close(extra);
    INFO(r.head << "\n" << r.body);
    CHECK(r.status == 503);
    CHECK(test::is_error_object(json::parse(r.body, nullptr, false), 503));
    CHECK(r.closed);
    ::close(held.back());
    held.pop_back();
    CHECK(test::wait_until(10, [&] { return get_status(srv.port, "/health", 5) == 200; }));
    for (int fd : held) ::close(fd);
    CHECK(srv.stop() == 0);
  }
}

TEST_CASE("serve_conn: a client that stops reading its answer loses the connection after --timeout") {
  // The one connection the server takes is a client's that asks for a 6 MB answer and reads none
  // of it: more than the socket buffers hold, so the server's write stalls. After --timeout the
  // write gives up and the connection closes, which frees its place for the next client.
  test::serve_child srv({"-np", "1", "-c", "128", "--timeout", "2", "--max-connections", "1"});
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  const int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);  // before connect: a small window
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(srv.port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  std::string text;
  while (text.size() < 800000) text += "Once upon a time there was a cat. ";
  const std::string body = json{{"content", text}, {"with_pieces", true}}.dump();
  REQUIRE(test::raw_send(fd, "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body));
  // While that connection is held, another is refused (503); once it is dropped, /health answers.
  const bool freed = test::wait_until(60, [&] { return get_status(srv.port, "/health", 5) == 200; });
  CHECK(freed);
  ::close(fd);
  CHECK(srv.stop() == 0);
}

TEST_CASE("serve_conn: a non-streamed request whose client goes away is cancelled between steps") {
  // A 65536-token slot: without the cancellation each request would generate for hours.
  test::serve_child srv({"-np", "1", "-c", "65536", "--chat-template", "chatml"});
  const int port = srv.port;
  const std::vector<std::pair<std::string, json>> cases = {
      {"/completion", {{"prompt", "Once upon a time"}, {"n_predict", -1}}},
      {"/v1/chat/completions", {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}}},
      {"/api/generate", {{"prompt", "Once"}, {"raw", true}, {"stream", false}}},
  };
  int64_t n_cancelled = 0;
  for (const auto& [path, body] : cases) {
    CAPTURE(path);
    const int64_t generated = test::metric_of(port, "generated_tokens_total");
    const int fd = test::connect_loopback(port);
    const std::string text = body.dump();
    REQUIRE(test::raw_send(fd, "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                                   std::to_string(text.size()) + "\r\n\r\n" + text));
    REQUIRE(test::wait_until(30, [&] { return test::metric_of(port, "generated_tokens_total") > generated + 8; }));
    ::close(fd);
    ++n_cancelled;
    CHECK(test::wait_until(30, [&] { return test::metric_of(port, "requests_cancelled_total") == n_cancelled; }));
    // Otherwise the next request would wait for this one's slot for hours: stop here.
    REQUIRE(test::wait_until(30, [&] { return test::metric_of(port, "requests_active") == 0; }));
  }
  CHECK(srv.stop() == 0);
}
