// libcurl easy handles, one per attempt; retries and their waits; failure classification.
#include "probes/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>

#include "probes/target.h"

namespace detaudit::probes {
namespace {

void curl_init_once() {
  static const bool done = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  if (!done) throw unreachable_error("libcurl could not be initialised");
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct attempt {
  size_t max_body = 0;
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  std::string content_type;
  std::string retry_after;  // the header's value of the final response
  std::string curl_error;
  bool too_large = false;
  double t_start = 0, t_end = 0;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  attempt* a = static_cast<attempt*>(user);
  const size_t len = size * n;
  if (a->body.size() + len > a->max_body) {
    a->too_large = true;
    return 0;
  }
  a->body.append(data, len);
  return len;
}

// Keeps Retry-After of the last response (a 100 Continue or a redirect has its own headers).
size_t on_header(char* data, size_t size, size_t n, void* user) {
  attempt* a = static_cast<attempt*>(user);
  const size_t len = size * n;
  std::string line(data, len);
  if (line.rfind("HTTP/", 0) == 0) a->retry_after.clear();
  const std::string name = "retry-after:";
  if (line.size() > name.size()) {
    std::string head = line.substr(0, name.size());
    std::transform(head.begin(), head.end(), head.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (head == name) {
      std::string v = line.substr(name.size());
      const size_t b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t\r\n");
      a->retry_after = b == std::string::npos ? "" : v.substr(b, e - b + 1);
    }
  }
  return len;
}

// Ends a transfer as soon as the run is interrupted (Ctrl-C): libcurl then returns
// CURLE_ABORTED_BY_CALLBACK, which request() turns into interrupted_error.
int on_progress(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t) { return run_interrupted() ? 1 : 0; }

struct curl_deleter {
  void operator()(CURL* h) const { curl_easy_cleanup(h); }
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

attempt attempt_once(const std::string& url, const std::string* post_body, const http_client_options& o) {
  curl_init_once();
  std::unique_ptr<CURL, curl_deleter> h(curl_easy_init());
  if (!h) throw unreachable_error(url + ": libcurl could not create a handle");
  curl_slist* raw = curl_slist_append(nullptr, "Accept: application/json");
  std::unique_ptr<curl_slist, curl_deleter> headers(raw);
  if (post_body) curl_slist_append(raw, "Content-Type: application/json");
  curl_slist_append(raw, "Expect:");
  if (!o.api_key.empty()) curl_slist_append(raw, ("Authorization: Bearer " + o.api_key).c_str());
  attempt a;
  a.max_body = o.max_body;
  char errbuf[CURL_ERROR_SIZE] = {0};
  CURL* c = h.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max(1.0, o.timeout_s * 1000)));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::max(1.0, std::min(o.connect_timeout_s, o.timeout_s) * 1000)));
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "127.0.0.1,localhost,::1");
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, raw);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &a);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  if (post_body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, post_body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(post_body->size()));
  } else {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  a.t_start = unix_now();
  a.code = curl_easy_perform(c);
  a.t_end = unix_now();
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
  char* ct = nullptr;
  if (curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct) a.content_type = ct;
  a.curl_error = errbuf[0] ? errbuf : curl_easy_strerror(a.code);
  return a;
}

// Transport failures worth another attempt: the server may come back or answer next time.
bool transport_retryable(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
      return true;
    default:
      return false;
  }
}

bool status_retryable(long status) { return status == 429 || status >= 500; }

// Why an attempt that got no HTTP answer failed, in words.
std::string transport_message(const attempt& a) {
  if (a.too_large) return "the answer is larger than " + http_size_text(a.max_body);
  if (a.code == CURLE_UNSUPPORTED_PROTOCOL || a.code == CURLE_WEIRD_SERVER_REPLY)
    return "the answer is not HTTP (" + a.curl_error + ")";
  return a.curl_error;
}

}  // namespace

double http_retry_after_seconds(const std::string& value) {
  if (value.empty() || value.size() > 9 || value.find_first_not_of("0123456789") != std::string::npos) return -1;
  return static_cast<double>(std::stol(value));
}

std::string http_size_text(size_t bytes) {
  char buf[64];
  if (bytes >= (size_t(1) << 20)) {
    if (bytes % (size_t(1) << 20) == 0) std::snprintf(buf, sizeof buf, "%zu MiB", bytes >> 20);
    else std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof buf, "%zu KiB", bytes >> 10);
  } else {
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  }
  return buf;
}

http_client::http_client(std::string base_url, http_client_options opt) : base_url_(std::move(base_url)), opt_(std::move(opt)) {}

namespace {

http_client_options with_max_body(http_client_options o, size_t max_body) {
  if (max_body > 0) o.max_body = std::min(o.max_body, max_body);
  return o;
}

}  // namespace

http_response http_client::get(const std::string& path, size_t max_body) const {
  return request(path, nullptr, with_max_body(opt_, max_body));
}

http_response http_client::post_json(const std::string& path, const std::string& body, size_t max_body) const {
  return request(path, &body, with_max_body(opt_, max_body));
}

http_response http_client::get_once(const std::string& path, double timeout_s, size_t max_body) const {
  http_client_options o = with_max_body(opt_, max_body);
  o.retries = 0;
  o.timeout_s = timeout_s;
  return request(path, nullptr, o);
}

http_response http_client::request(const std::string& path, const std::string* post_body, const http_client_options& o) const {
  const std::string url = base_url_ + path;
  const int n_attempts = std::max(0, o.retries) + 1;
  for (int k = 0;; ++k) {
    if (run_interrupted()) throw interrupted_error(url + ": interrupted");
    attempt a = attempt_once(url, post_body, o);
    if (a.code == CURLE_ABORTED_BY_CALLBACK || run_interrupted()) throw interrupted_error(url + ": interrupted");
    if (a.too_large && a.status > 0) {  // the server answered: too much, which is this request's failure
      http_response r;
      r.status = static_cast<int>(a.status);
      r.content_type = a.content_type;
      r.t_start = a.t_start;
      r.t_end = a.t_end;
      r.attempts = k + 1;
      r.error = transport_message(a);
      return r;
    }
    const bool answered = a.code == CURLE_OK;
    const bool last = k + 1 >= n_attempts;
    if (!answered && (last || a.too_large || !transport_retryable(a.code)))
      throw unreachable_error(std::string(post_body ? "POST " : "GET ") + url + ": " + transport_message(a) + " (after " +
                              std::to_string(k + 1) + (k == 0 ? " attempt)" : " attempts)"));
    if (answered && (last || !status_retryable(a.status))) {
      http_response r;
      r.status = static_cast<int>(a.status);
      r.body = std::move(a.body);
      r.content_type = a.content_type;
      r.t_start = a.t_start;
      r.t_end = a.t_end;
      r.attempts = k + 1;
      return r;
    }
    double wait = std::min(o.backoff_s * std::ldexp(1.0, k), o.retry_after_cap_s);
    const double asked = http_retry_after_seconds(a.retry_after);
    if (answered && (a.status == 429 || a.status == 503) && asked >= 0) wait = std::min(asked, o.retry_after_cap_s);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, wait));
    while (std::chrono::steady_clock::now() < until && !run_interrupted())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace detaudit::probes
