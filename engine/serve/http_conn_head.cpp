// conn_head_check: what a request head decides before any body byte is read. Headers are split
// as httplib splits them (the name is everything before the first ':', compared without case; the
// value is trimmed of spaces and tabs), so the Content-Length this check accepts is the one
// httplib reads. Anything httplib might read differently (a bare CR or LF, a NUL, a folded line, a
// line without ':') is refused instead.
#include <algorithm>
#include <cctype>
#include <vector>

#include "serve/http_conn.h"
#include "serve/http_handlers.h"

namespace detaudit::serve {
namespace {

struct header_line {
  std::string_view name, value;
};

struct parsed_head {
  std::string_view method, path;
  std::vector<header_line> headers;
};

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y)); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits the head into its request line and headers; returns "" or why it is refused.
std::string head_split(std::string_view head, parsed_head& out) {
  for (size_t i = 0; i < head.size(); ++i) {
    if (head[i] == '\0') return "request head: a NUL byte";
    if (head[i] == '\n' && (i == 0 || head[i - 1] != '\r')) return "request head: a line ends in LF without CR";
    if (head[i] == '\r' && (i + 1 >= head.size() || head[i + 1] != '\n')) return "request head: a CR not followed by LF";
  }
  size_t pos = head.find("\r\n");
  const std::string_view line = head.substr(0, pos);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == 0 || sp2 == std::string_view::npos || sp2 == sp1 + 1)
    return "request line: expected METHOD TARGET HTTP/1.1, found " + text_quote(line);
  out.method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  out.path = target.substr(0, target.find('?'));
  for (pos += 2; pos < head.size();) {
    const size_t end = head.find("\r\n", pos);
    const std::string_view h = head.substr(pos, end - pos);
    pos = end + 2;
    if (h.empty()) break;
    if (h.front() == ' ' || h.front() == '\t') return "request head: a folded header line (obsolete, RFC 9112)";
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return "request head: a header line without a name and ':'";
    out.headers.push_back({h.substr(0, colon), trim(h.substr(colon + 1))});
  }
  return "";
}

const std::string_view* header_find(const parsed_head& h, std::string_view name) {
  for (const header_line& l : h.headers)
    if (iequal(l.name, name)) return &l.value;
  return nullptr;
}

// Compares in time that depends only on the key's length.
bool key_equal(std::string_view given, std::string_view key) {
  unsigned diff = given.size() == key.size() ? 0u : 1u;
  for (size_t i = 0; i < key.size(); ++i)
    diff |= static_cast<unsigned char>(key[i]) ^ static_cast<unsigned char>(i < given.size() ? given[i] : 0);
  return diff == 0;
}

// The key a request carries: `Authorization: Bearer KEY` (the scheme in any case, RFC 7235;
// one space), else `X-Api-Key: KEY`.
std::string_view request_key(const parsed_head& h) {
  const std::string_view* auth = header_find(h, "Authorization");
  if (auth && auth->size() >= 7 && iequal(auth->substr(0, 7), "bearer ")) return auth->substr(7);
  const std::string_view* x = header_find(h, "X-Api-Key");
  return x ? *x : std::string_view();
}

head_verdict refuse(int status, std::string message) {
  head_verdict v;
  v.status = status;
  v.message = std::move(message);
  return v;
}

// Content-Length: every copy the same run of 1 to 19 digits. Returns "" or why it is refused.
std::string content_length_read(const parsed_head& h, bool& present, uint64_t& len) {
  present = false;
  for (const header_line& l : h.headers) {
    if (!iequal(l.name, "Content-Length")) continue;
    const std::string_view v = l.value;
    if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return "request head: Content-Length " + text_quote(v) + " is not a number of bytes";
    const uint64_t n = std::stoull(std::string(v));
    if (present && n != len) return "request head: two different Content-Length headers";
    present = true;
    len = n;
  }
  return "";
}

head_verdict framing_check(const parsed_head& h, const conn_params& p) {
  if (const std::string_view* te = header_find(h, "Transfer-Encoding"); te && !iequal(*te, "identity"))
    return refuse(411, "request body: Transfer-Encoding " + text_quote(*te) + " is not accepted; send the body with a Content-Length");
  if (const std::string_view* ce = header_find(h, "Content-Encoding"); ce && !iequal(*ce, "identity"))
    return refuse(415, "request body: Content-Encoding " + text_quote(*ce) + " is not accepted; send the body uncompressed");
  bool present = false;
  uint64_t len = 0;
  if (std::string err = content_length_read(h, present, len); !err.empty()) return refuse(400, err);
  if (present && len > p.max_body)
    return refuse(413, "request body: Content-Length " + std::to_string(len) + " is more than the server accepts (--max-body " +
                           std::to_string(p.max_body) + " bytes)");
  // The methods httplib reads a body for (DELETE only with a Content-Length).
  const bool body_method = h.method == "POST" || h.method == "PUT" || h.method == "PATCH" || h.method == "PRI";
  if (body_method && !present)
    return refuse(411, "request body: a " + std::string(h.method) +
                           " needs a Content-Length (a body sent without one, and not chunked, would be read until the "
                           "connection closes)");
  head_verdict v;
  if (body_method || h.method == "DELETE") v.body_len = len;
  else v.close_after = len > 0;
  return v;
}

}  // namespace

head_verdict conn_head_check(std::string_view head, const conn_params& p) {
  parsed_head h;
  if (std::string err = head_split(head, h); !err.empty()) return refuse(400, err);
  if (!p.api_key.empty() && h.path != "/health" && h.path != "/v1/health" && !key_equal(request_key(h), p.api_key))
    return refuse(401, "invalid or missing API key (Authorization: Bearer KEY)");
  return framing_check(h, p);
}

}  // namespace detaudit::serve
