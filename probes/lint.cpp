// Lint: request settings and prompt contents that make outputs differ between runs, or make a
// comparison meaningless, found before anything is sent.
//
// Request: temperature 0 together with top_p < 1 or top_k > 1 (servers disagree on whether the
// filters still apply), n > 1 or best_of > 1, non-zero penalties. Prompt: a byte-order mark,
// zero-width characters, CR line endings, timestamps and ids that change from run to run.
// Non-goals: judging the prompt's content; fixing anything (findings only).
#include <cstdio>
#include <iterator>
#include <memory>

#include "probes/runner.h"
#include "reports/audit/regex.h"

namespace detaudit::probes {
namespace {

// The value a request will carry for `key`: gen_request::extra wins over the typed field.
std::optional<double> effective(const gen_request& r, const char* key, std::optional<double> typed) {
  if (auto it = r.extra.find(key); it != r.extra.end() && it->is_number()) return it->get<double>();
  return typed;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void lint_request(const gen_request& r, std::vector<lint_finding>& out) {
  const double temp = effective(r, "temperature", r.temperature).value_or(0);
  const std::optional<double> top_p = effective(r, "top_p", r.top_p);
  const std::optional<double> top_k =
      effective(r, "top_k", r.top_k ? std::optional<double>(static_cast<double>(*r.top_k)) : std::nullopt);
  if (temp == 0 && top_p && *top_p < 1)
    out.push_back({"warning", "temp0-top-p", "",
                   "temperature 0 with top_p " + num(*top_p) +
                       ": some servers still apply top_p at temperature 0 and others go greedy; send top_p 1 or leave it out"});
  if (temp == 0 && top_k && *top_k > 1)
    out.push_back({"warning", "temp0-top-k", "",
                   "temperature 0 with top_k " + num(*top_k) +
                       ": some servers still sample from the top k at temperature 0 and others go greedy; leave top_k out"});
  for (const char* key : {"n", "best_of"}) {
    const std::optional<double> n = effective(r, key, std::nullopt);
    if (n && *n > 1)
      out.push_back({"warning", "n-gt-1", "",
                     std::string(key) + " = " + num(*n) +
                         ": several choices are generated side by side in one batch, which is itself a condition that can "
                         "change outputs; ask for one choice per request"});
  }
  const std::pair<const char*, double> penalties[] = {
      {"repeat_penalty", 1}, {"presence_penalty", 0}, {"frequency_penalty", 0}};
  for (const auto& [key, neutral] : penalties) {
    const std::optional<double> v = effective(r, key, std::nullopt);
    if (v && *v != neutral)
      out.push_back({"warning", "penalty", "",
                     std::string(key) + " = " + num(*v) +
                         ": penalties depend on the tokens generated so far, so one flipped token changes every later "
                         "step; audit with neutral penalties unless they are what you ship"});
  }
}

struct pattern {
  const char* code;
  const char* re;
  const char* why;
};

const pattern PATTERNS[] = {
    {"timestamp", R"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?|\b\d{2}:\d{2}:\d{2}\b)",
     "a timestamp: a prompt that changes with the clock defeats the prompt cache and makes runs incomparable"},
    {"uuid", R"(\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)",
     "a UUID: an id that changes per request makes runs incomparable"},
};

const reports::regex& compiled(size_t i) {
  static const std::vector<std::unique_ptr<reports::regex>> re = [] {
    std::vector<std::unique_ptr<reports::regex>> v;
    for (const pattern& p : PATTERNS) v.push_back(std::make_unique<reports::regex>(p.re, std::string("lint pattern ") + p.code));
    return v;
  }();
  return *re[i];
}

// Zero-width and invisible characters, by their UTF-8 bytes.
const std::pair<const char*, const char*> INVISIBLE[] = {
    {"\xE2\x80\x8B", "U+200B ZERO WIDTH SPACE"},      {"\xE2\x80\x8C", "U+200C ZERO WIDTH NON-JOINER"},
    {"\xE2\x80\x8D", "U+200D ZERO WIDTH JOINER"},     {"\xE2\x81\xA0", "U+2060 WORD JOINER"},
    {"\xEF\xBB\xBF", "U+FEFF ZERO WIDTH NO-BREAK SPACE"}, {"\xC2\xAD", "U+00AD SOFT HYPHEN"},
};

void lint_item(const item& it, std::vector<lint_finding>& out) {
  const std::string& p = it.prompt;
  const std::string bom = "\xEF\xBB\xBF";
  if (p.rfind(bom, 0) == 0)
    out.push_back({"warning", "bom", it.id,
                   "the prompt starts with a byte-order mark (U+FEFF): it is sent and tokenized as text; save the file "
                   "without a BOM"});
  for (const auto& [bytes, name] : INVISIBLE) {
    const size_t at = p.find(bytes, p.rfind(bom, 0) == 0 && std::string(bytes) == bom ? bom.size() : 0);
    if (at != std::string::npos)
      out.push_back({"warning", "zero-width", it.id,
                     std::string("invisible character ") + name + " at byte " + std::to_string(at) +
                         ": it changes the tokens without changing what the prompt looks like"});
  }
  if (const size_t at = p.find('\r'); at != std::string::npos)
    out.push_back({"warning", "crlf", it.id,
                   std::string(p.compare(at, 2, "\r\n") == 0 ? "CRLF" : "CR") + " line ending at byte " + std::to_string(at) +
                       ": \\r\\n and \\n tokenize differently; normalise line endings before comparing runs"});
  for (size_t i = 0; i < std::size(PATTERNS); ++i)
    if (const auto m = compiled(i).first(p))
      out.push_back({"warning", PATTERNS[i].code, it.id,
                     "'" + m->second + "' at byte " + std::to_string(m->first) + ": " + PATTERNS[i].why});
}

}  // namespace

std::vector<lint_finding> lint(const std::vector<item>& items, const gen_request& base) {
  std::vector<lint_finding> out;
  lint_request(base, out);
  for (const item& it : items) lint_item(it, out);
  return out;
}

}  // namespace detaudit::probes
