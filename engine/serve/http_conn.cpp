// The connection layer: listening socket, accept loop with the connection bounds, one thread per
// connection reading each request head under its deadline, the stream httplib reads a request
// from (the head, then exactly Content-Length body bytes), refusals written here, and lingering
// closes run by the accept loop.
#include "serve/http_conn.h"

#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "serve/http_handlers.h"
#include "util/error.h"

namespace detaudit::serve {
namespace {

using clock_type = std::chrono::steady_clock;

thread_local int t_request_socket = -1;

// Requests on one connection before the server closes it (httplib's default is 5; a connection
// no longer holds a pooled thread, so there is no need to turn connections over that often).
constexpr size_t KEEP_ALIVE_MAX = 100;
// A refused connection is read and dropped for at most this long, or this many bytes, then closed.
constexpr auto LINGER_TIME = std::chrono::seconds(2);
constexpr size_t LINGER_BYTES = size_t{64} << 20;
// The most refused connections lingering at once; beyond it the oldest is closed at once.
constexpr size_t LINGER_MAX = 64;

// poll() on one descriptor, retried on EINTR; > 0 when ready.
int poll_one(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

// A whole answer with an OpenAI error object, for the refusals written before httplib sees a byte.
std::string refusal_text(int status, const std::string& message) {
  const std::string body = json_text(error_json(status, message));
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// Writes `text` within timeout_ms (a refusal is small: it fits the socket's buffer at once).
void send_all(int fd, const std::string& text, int timeout_ms) {
  size_t off = 0;
  while (off < text.size()) {
    if (poll_one(fd, POLLOUT, timeout_ms) <= 0) return;
    const ssize_t n = ::send(fd, text.data() + off, text.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string address_text(const sockaddr_storage& a, int* port) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
    if (port) *port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
    if (port) *port = ntohs(v6->sin6_port);
  }
  return buf;
}

// What httplib reads one request from: the head read by the connection, then the body: bytes
// already read past the head (`pending`), then the socket, never past Content-Length. Bytes read
// beyond the body stay in `pending` for the next request.
class conn_stream final : public httplib::Stream {
 public:
  conn_stream(int fd, std::string& pending, std::string head, uint64_t body_len, int timeout_s)
      : fd_(fd), pending_(pending), head_(std::move(head)), body_left_(body_len), timeout_ms_(timeout_s * 1000) {}

  bool is_readable() const override {
    if (head_at_ < head_.size()) return true;
    return body_left_ > 0 && (!pending_.empty() || poll_one(fd_, POLLIN, timeout_ms_) > 0);
  }
  bool is_writable() const override { return !conn_peer_closed(fd_) && poll_one(fd_, POLLOUT, timeout_ms_) > 0; }

  ssize_t read(char* ptr, size_t size) override {
    if (head_at_ < head_.size()) {
      const size_t n = std::min(size, head_.size() - head_at_);
      std::memcpy(ptr, head_.data() + head_at_, n);
      head_at_ += n;
      return static_cast<ssize_t>(n);
    }
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size, body_left_));
    if (want == 0) return 0;
    if (!pending_.empty()) {
      const size_t n = std::min(want, pending_.size());
      std::memcpy(ptr, pending_.data(), n);
      pending_.erase(0, n);
      body_left_ -= n;
      return static_cast<ssize_t>(n);
    }
    if (poll_one(fd_, POLLIN, timeout_ms_) <= 0) return -1;
    ssize_t n;
    do n = ::recv(fd_, ptr, want, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0) body_left_ -= static_cast<uint64_t>(n);
    return n;
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (poll_one(fd_, POLLOUT, timeout_ms_) <= 0) return -1;
    ssize_t n;
    do n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { endpoint(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { endpoint(false, ip, port); }
  socket_t socket() const override { return fd_; }

  // True when httplib read the whole request: nothing of it is left to mistake for the next one.
  bool done() const { return head_at_ == head_.size() && body_left_ == 0; }

 private:
  void endpoint(bool remote, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    port = 0;
    if ((remote ? ::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len)
                : ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len)) == 0)
      ip = address_text(a, &port);
  }

  int fd_;
  std::string& pending_;
  std::string head_;
  size_t head_at_ = 0;
  uint64_t body_left_;
  int timeout_ms_;
};

enum head_status { HEAD_OK, HEAD_NONE, HEAD_TIMEOUT, HEAD_TOO_LARGE };

// A refused connection being read and dropped until the client closes, or its time runs out.
struct lingering {
  int fd;
  clock_type::time_point until;
  size_t n_read = 0;
};

}  // namespace

int conn_request_socket() { return t_request_socket; }

bool conn_peer_closed(int fd) {
  if (fd < 0) return true;
  pollfd p{fd, POLLIN, 0};
  const int r = ::poll(&p, 1, 0);
  if (r <= 0) return false;
  if (p.revents & (POLLERR | POLLNVAL)) return true;
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

struct conn_server::impl {
  conn_server& owner;
  conn_params p;
  int listen_fd = -1;
  std::atomic<bool> stopping{false};

  std::mutex mu;  // guards everything below
  std::condition_variable cv;
  int n_open = 0;                       // connections with a thread
  std::map<std::string, int> per_client;  // open connections per client address
  std::vector<int> to_linger;           // refused sockets handed to the accept loop

  std::vector<lingering> lingers;  // owned by the accept loop

  impl(conn_server& o, const conn_params& params) : owner(o), p(params) {}

  void admit(int fd, const std::string& client);
  void connection_run(int fd);
  head_status head_read(int fd, std::string& pending, std::string& head) const;
  void refuse(int fd, int status, const std::string& message);
  void lingers_add(int fd);
  void lingers_run(std::vector<pollfd>& fds, int n_ready);
  void release(const std::string& client);
};

void conn_server::impl::release(const std::string& client) {
  std::lock_guard<std::mutex> lk(mu);
  --n_open;
  if (--per_client[client] == 0) per_client.erase(client);
  cv.notify_all();
}

// Writes the refusal and hands the socket to the accept loop, which reads and drops what the
// client still sends for a while before it closes: closing a socket with unread bytes resets the
// connection, and the client could lose the answer.
void conn_server::impl::refuse(int fd, int status, const std::string& message) {
  send_all(fd, refusal_text(status, message), 1000);
  ::shutdown(fd, SHUT_WR);
  std::lock_guard<std::mutex> lk(mu);
  to_linger.push_back(fd);
}

void conn_server::impl::admit(int fd, const std::string& client) {
  std::string why;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (n_open >= p.max_connections)
      why = "server busy: " + std::to_string(n_open) + " connections are open, the most it takes (--max-connections)";
    else if (per_client[client] >= p.max_connections_per_client)
      why = "too many connections from this client: " + std::to_string(per_client[client]) +
            " are open, the most one address may hold (--max-connections-per-client)";
    if (why.empty()) {
      ++n_open;
      ++per_client[client];
    } else if (per_client[client] == 0) {
      per_client.erase(client);
    }
  }
  if (why.empty()) {
    try {
      std::thread([this, fd, client] {
        connection_run(fd);
        release(client);
      }).detach();
      return;
    } catch (const std::system_error&) {
      release(client);
      why = "server busy: cannot start a thread for another connection";
    }
  }
  send_all(fd, refusal_text(503, why), 0);
  ::shutdown(fd, SHUT_WR);
  lingers_add(fd);
}

// Reads until the head's empty line, the deadline, the size limit or shutdown. The deadline is
// header_timeout_s in all from the head's first byte (not per byte); before it, an idle connection
// waits header_timeout_s for that byte, then closes without an answer. Counting the head from its
// first byte keeps a kept-alive connection from answering 408 to a head that began just before
// its idle time ran out. Bytes after the head stay in `pending`.
head_status conn_server::impl::head_read(int fd, std::string& pending, std::string& head) const {
  const auto limit = std::chrono::seconds(p.header_timeout_s);
  auto deadline = clock_type::now() + limit;
  bool started = !pending.empty();
  size_t scanned = 0;
  for (;;) {
    const size_t at = pending.find("\r\n\r\n", scanned >= 3 ? scanned - 3 : 0);
    if (at != std::string::npos) {
      if (at + 4 > MAX_HEAD) return HEAD_TOO_LARGE;
      head = pending.substr(0, at + 4);
      pending.erase(0, at + 4);
      return HEAD_OK;
    }
    scanned = pending.size();
    if (pending.size() >= MAX_HEAD) return HEAD_TOO_LARGE;
    if (stopping && pending.empty()) return HEAD_NONE;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    if (left <= 0) return pending.empty() ? HEAD_NONE : HEAD_TIMEOUT;
    if (poll_one(fd, POLLIN, static_cast<int>(std::min<int64_t>(left, 100))) <= 0) continue;
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return HEAD_NONE;  // the client closed (or reset) before a whole head: nobody to answer
    if (!started) {
      started = true;
      deadline = clock_type::now() + limit;
    }
    pending.append(buf, static_cast<size_t>(n));
  }
}

void conn_server::impl::connection_run(int fd) {
  // A form-encoded or multipart Content-Type would make httplib parse the body as form fields (and
  // refuse a form over 8 KiB as "too large"); the body is JSON whatever its label (`curl -d`
  // labels it a form), so the label is dropped before httplib reads the body.
  const auto setup = [](httplib::Request& req) {
    const std::string ct = req.get_header_value("Content-Type");
    if (ct.rfind("application/x-www-form-urlencoded", 0) == 0 || ct.rfind("multipart/form-data", 0) == 0)
      req.headers.erase("Content-Type");
  };
  std::string pending;
  bool clean = true;
  for (size_t n = 0; n < KEEP_ALIVE_MAX; ++n) {
    std::string head;
    const head_status hs = head_read(fd, pending, head);
    if (hs == HEAD_NONE) break;
    if (hs != HEAD_OK) {
      refuse(fd, hs == HEAD_TIMEOUT ? 408 : 431,
             hs == HEAD_TIMEOUT ? "request head not complete within " + std::to_string(p.header_timeout_s) + " s (--header-timeout)"
                                : "request head larger than " + std::to_string(MAX_HEAD) + " bytes");
      return;
    }
    const head_verdict v = conn_head_check(head, p);
    if (v.status != 0) {
      refuse(fd, v.status, v.message);
      return;
    }
    conn_stream strm(fd, pending, std::move(head), v.body_len, p.io_timeout_s);
    const bool last = v.close_after || n + 1 == KEEP_ALIVE_MAX || stopping;
    bool closed = false;
    t_request_socket = fd;
    const bool ok = owner.process_request(strm, last, closed, setup);
    t_request_socket = -1;
    clean = strm.done() && pending.empty();
    if (!ok || closed || last || !clean || stopping) break;
  }
  if (!clean) {
    ::shutdown(fd, SHUT_WR);
    std::lock_guard<std::mutex> lk(mu);
    to_linger.push_back(fd);
    return;
  }
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

void conn_server::impl::lingers_add(int fd) {
  if (lingers.size() >= LINGER_MAX) {
    ::close(lingers.front().fd);
    lingers.erase(lingers.begin());
  }
  lingers.push_back({fd, clock_type::now() + LINGER_TIME, 0});
}

// Reads and drops what lingering clients send; closes each at its end of input, error, time or
// byte limit. `fds[1..]` are the lingering sockets polled with the listening one.
void conn_server::impl::lingers_run(std::vector<pollfd>& fds, int n_ready) {
  const auto now = clock_type::now();
  std::vector<lingering> keep;
  for (size_t i = 0; i < lingers.size(); ++i) {
    lingering& l = lingers[i];
    bool done = now >= l.until || stopping;
    if (!done && n_ready > 0 && fds[i + 1].revents != 0) {
      char buf[65536];
      const ssize_t n = ::recv(l.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) l.n_read += static_cast<size_t>(n);
      done = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || l.n_read >= LINGER_BYTES;
    }
    if (done) ::close(l.fd);
    else keep.push_back(l);
  }
  lingers.swap(keep);
}

conn_server::conn_server(const conn_params& p) : d_(std::make_unique<impl>(*this, p)) {
  set_keep_alive_max_count(KEEP_ALIVE_MAX);
  set_keep_alive_timeout(p.header_timeout_s);
  set_read_timeout(p.io_timeout_s, 0);
  set_write_timeout(p.io_timeout_s, 0);
  set_payload_max_length(p.max_body);
}

conn_server::~conn_server() {
  shutdown();
  std::unique_lock<std::mutex> lk(d_->mu);
  d_->cv.wait(lk, [&] { return d_->n_open == 0; });
  for (int fd : d_->to_linger) ::close(fd);
  for (const lingering& l : d_->lingers) ::close(l.fd);
  if (d_->listen_fd >= 0) ::close(d_->listen_fd);
}

int conn_server::bind_socket(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
    throw input_error("serve: cannot listen on " + where + ": unknown address");
  int fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    // httplib listened with a backlog of 5: a burst of new connections overflowed it and the
    // kernel dropped handshakes. SOMAXCONN (capped by net.core.somaxconn) takes the burst.
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) throw input_error("serve: cannot listen on " + where + ": " + std::strerror(errno));
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  int bound = port;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) address_text(a, &bound);
  d_->listen_fd = fd;
  svr_sock_ = fd;  // httplib ends a streamed answer once this is INVALID_SOCKET (shutdown())
  return bound;
}

bool conn_server::serve() {
  impl& d = *d_;
  bool ok = d.listen_fd >= 0;
  std::vector<pollfd> fds;
  while (ok && !d.stopping) {
    {
      std::lock_guard<std::mutex> lk(d.mu);
      for (int fd : d.to_linger) d.lingers_add(fd);
      d.to_linger.clear();
    }
    fds.assign(1, pollfd{d.listen_fd, POLLIN, 0});
    for (const lingering& l : d.lingers) fds.push_back(pollfd{l.fd, POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), 50);
    if (n < 0 && errno != EINTR) ok = false;
    d.lingers_run(fds, n);
    if (n <= 0 || !(fds[0].revents & POLLIN)) continue;
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    const int fd = ::accept4(d.listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    const int yes = 1;
    // A response is written as headers, then body: with Nagle's algorithm the body waited for
    // the client's delayed ACK, about 40 ms on every keep-alive answer.
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    // A write larger than the free send buffer blocks inside send() after poll() said writable: a
    // client that stops reading would hold its connection and thread for good. The timeouts end
    // such a send (and any read) after --timeout, as httplib's own accept loop set them.
    const timeval tv{d.p.io_timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    d.admit(fd, address_text(a, nullptr));
  }
  if (d.listen_fd >= 0) ::close(d.listen_fd);
  d.listen_fd = -1;
  std::unique_lock<std::mutex> lk(d.mu);
  d.cv.wait(lk, [&] { return d.n_open == 0; });
  for (int fd : d.to_linger) ::close(fd);
  d.to_linger.clear();
  for (const lingering& l : d.lingers) ::close(l.fd);
  d.lingers.clear();
  return ok;
}

void conn_server::shutdown() {
  d_->stopping = true;
  svr_sock_ = INVALID_SOCKET;
}

}  // namespace detaudit::serve
