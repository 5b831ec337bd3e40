// Support for detaudit_load (load_test.cpp): clients that never finish a request head, and a
// /health probe beside them.
//
// Goals: the load keeps N connections (12 by default) whose request heads trickle in one byte
// every ~2 s and never end, as a slow or hostile client's would; a connection the server cuts off
// (408, or a close) is opened again at once, so N stay open throughout. Meanwhile a probe sends
// GET /health on a new connection every 250 ms and times the answer: with the request-head
// deadline (`--header-timeout`) and a thread per connection, slow heads must never delay it.
// Non-goals: the per-client and total connection bounds (tests/unit/test_serve_conn.cpp).
#pragma once

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <poll.h>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace detaudit::load {

// What the slow-head clients saw.
struct slow_result {
  int64_t connections = 0;  // opened, reopenings included
  int64_t answered_408 = 0;
  int64_t answered_other = 0;  // a status other than 408 (the server read a head that never ended)
  int64_t closed_silent = 0;   // closed by the server without an answer
  int64_t connect_failed = 0;
  double longest_held_s = 0;  // the longest a connection stayed open (those still open at the end included)
};

// N connections to 127.0.0.1:port, each sent the next byte of a never-ending request head every
// `interval_ms` (spread over the interval) until `stop`. Thread-compatible: run() on one thread.
class slow_heads {
 public:
  slow_heads(int port, int n, int interval_ms) : port_(port), n_(n), interval_ms_(interval_ms) {}

  // Opens the connections; returns once each has been sent its first byte (or failed to connect).
  void open_all(slow_result& r) {
    conns_.resize(static_cast<size_t>(n_));
    const auto now = clock_type::now();
    for (int i = 0; i < n_; ++i) open_one(conns_[static_cast<size_t>(i)], now + offset(i), r);
  }

  void run(const std::atomic<bool>& stop, slow_result& r) {
    while (!stop) {
      std::vector<pollfd> fds;
      for (const conn& c : conns_) fds.push_back(pollfd{c.fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 50);
      const auto now = clock_type::now();
      for (size_t i = 0; i < conns_.size(); ++i) {
        conn& c = conns_[i];
        if (c.fd < 0) {
          open_one(c, now, r);
          continue;
        }
        if (fds[i].revents != 0) {
          ended(c, now, r);
          open_one(c, now, r);
          continue;
        }
        if (now >= c.next_send) {
          const char b = HEAD[c.sent < HEAD.size() ? c.sent : HEAD.size() - 1];  // then 's' forever
          if (::send(c.fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) ++c.sent;
          c.next_send = now + std::chrono::milliseconds(interval_ms_);
        }
      }
    }
    // Still open at the end: held as long as it has been, though not ended yet.
    const auto end = clock_type::now();
    for (conn& c : conns_) {
      if (c.fd < 0) continue;
      r.longest_held_s = std::max(r.longest_held_s, std::chrono::duration<double>(end - c.opened).count());
      ::close(c.fd);
    }
  }

 private:
  using clock_type = std::chrono::steady_clock;
  // Never ends: after the last byte the header value goes on with 's' and no blank line comes.
  static inline const std::string HEAD = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: s";

  struct conn {
    int fd = -1;
    size_t sent = 0;
    clock_type::time_point opened, next_send;
  };

  std::chrono::milliseconds offset(int i) const { return std::chrono::milliseconds(interval_ms_ * i / std::max(n_, 1)); }

  void open_one(conn& c, clock_type::time_point first_send, slow_result& r) {
    c = conn{};
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      if (fd >= 0) ::close(fd);
      ++r.connect_failed;
      return;
    }
    ++r.connections;
    c.fd = fd;
    c.opened = clock_type::now();
    c.next_send = first_send;
    if (::send(fd, HEAD.data(), 1, MSG_NOSIGNAL) == 1) c.sent = 1;
  }

  // The server answered or closed: reads what came (briefly) and counts it.
  static void ended(conn& c, clock_type::time_point now, slow_result& r) {
    r.longest_held_s = std::max(r.longest_held_s, std::chrono::duration<double>(now - c.opened).count());
    std::string got;
    char buf[4096];
    for (int i = 0; i < 20; ++i) {
      pollfd p{c.fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) break;
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    ::close(c.fd);
    c.fd = -1;
    if (got.rfind("HTTP/1.1 408", 0) == 0) ++r.answered_408;
    else if (got.empty()) ++r.closed_silent;
    else ++r.answered_other;
  }

  int port_, n_, interval_ms_;
  std::vector<conn> conns_;
};

// What the /health probe saw.
struct probe_result {
  int64_t probes = 0;
  int64_t late_or_failed = 0;  // no 200 within the limit
  double max_ms = 0;
  std::string first_failure;
};

// GET /health on a new connection every `every_ms` until `stop`; each must answer 200 within
// `limit_ms` (connection included).
inline void health_probe(int port, int every_ms, int limit_ms, const std::atomic<bool>& stop, probe_result& r) {
  using clock_type = std::chrono::steady_clock;
  while (!stop) {
    const auto t0 = clock_type::now();
    httplib::Client c("127.0.0.1", port);
    c.set_keep_alive(false);
    c.set_connection_timeout(limit_ms / 1000 + 5, 0);
    c.set_read_timeout(limit_ms / 1000 + 5, 0);
    httplib::Result h = c.Get("/health");
    const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    ++r.probes;
    r.max_ms = std::max(r.max_ms, ms);
    if (!h || h->status != 200 || ms > limit_ms) {
      ++r.late_or_failed;
      if (r.first_failure.empty())
        r.first_failure = "GET /health (probe beside the slow heads): " +
                          (h ? "status " + std::to_string(h->status) : "no answer: " + httplib::to_string(h.error())) +
                          " after " + std::to_string(static_cast<int64_t>(ms)) + " ms (limit " + std::to_string(limit_ms) + " ms)";
    }
    const auto next = t0 + std::chrono::milliseconds(every_ms);
    while (!stop && clock_type::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace detaudit::load
