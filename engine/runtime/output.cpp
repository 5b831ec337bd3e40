#include "runtime/output.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "kernels/cpu/cpu.h"
#include "numerics/exact.h"
#include "runtime/hashes.h"
#include "util/error.h"

namespace detaudit::runtime {
namespace {

using json = nlohmann::json;

json top_to_json(const std::vector<token_logprob>& top) {
  json a = json::array();
  for (const token_logprob& t : top) a.push_back(json::array({t.id, t.logprob}));
  return a;
}

json timings_to_json(const run_timings& t) {
  return {{"n_prompt", t.n_prompt},   {"n_gen", t.n_gen},
          {"prompt_ms", t.prompt_ms}, {"gen_ms", t.gen_ms},
          {"prompt_tokens_per_s", t.prompt_tokens_per_s()}, {"gen_tokens_per_s", t.gen_tokens_per_s()}};
}

// A float parameter as the shortest decimal that reads back as the same float (0.95, not
// 0.949999988079071).
double short_float(float v) {
  char buf[32];
  const char* end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  double d = static_cast<double>(v);
  std::from_chars(buf, end, d);
  return d;
}

json sampling_to_json(const generate_params& p) {
  const sampling_params& s = p.sampling;
  return {{"temp", short_float(s.temp)},
          {"seed", s.seed},
          {"top_k", s.top_k},
          {"top_p", short_float(s.top_p)},
          {"min_p", short_float(s.min_p)},
          {"repeat_penalty", short_float(s.repeat_penalty)},
          {"repeat_last_n", s.penalty_last_n},
          {"presence_penalty", short_float(s.presence_penalty)},
          {"frequency_penalty", short_float(s.frequency_penalty)},
          {"n_predict", p.n_predict},
          {"stop", p.stop}};
}

std::string fmt_logprob(float lp) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(lp));
  return buf;
}

}  // namespace

json run_environment(const std::string& device) {
  std::string simd;
  try {
    simd = kernels::cpu::isa_name(kernels::cpu::isa_default());
  } catch (const input_error&) {
    simd = "invalid DETAUDIT_CPU_ISA";
  }
  json env = {{"version", DETAUDIT_VERSION}, {"precision_contract", numerics::PRECISION_CONTRACT_VERSION}, {"simd", simd},
              {"backend", device.substr(0, device.find(' '))}};
  if (device.empty()) env["backend"] = "cpu";
  else env["device"] = device;
  return env;
}

json generate_to_json(const generate_result& r, const model::model& m, numerics_mode numerics, const generate_params& p) {
  json tokens = json::array();
  for (const generated_token& t : r.tokens)
    tokens.push_back({{"id", t.id}, {"piece", t.piece}, {"top", top_to_json(t.top)}, {"logit_hash", hash_hex(t.logit_hash)}});
  json j = {{"model", {{"path", m.path()}, {"sha256", m.sha256()}}},
            {"numerics", numerics_name(numerics)},
            {"sampling", sampling_to_json(p)},
            {"prompt_tokens", r.prompt_tokens},
            {"tokens", std::move(tokens)},
            {"text", r.text},
            {"chained_hash", hash_hex(r.chained_hash)},
            {"finish_reason", finish_reason_name(r.finish)},
            {"stop_type", stop_type_name(r.stop)},
            {"timings", timings_to_json(r.timings)},
            {"environment", run_environment(r.device)}};
  if (r.stop == STOP_WORD) j["stop_word"] = r.stop_word;
  return j;
}

std::string generate_hashes_text(const generate_result& r) {
  std::string out;
  for (size_t i = 0; i < r.tokens.size(); ++i)
    out += std::to_string(i) + " " + std::to_string(r.tokens[i].id) + " " + hash_hex(r.tokens[i].logit_hash) + "\n";
  return out + "chained " + hash_hex(r.chained_hash) + "\n";
}

namespace {

std::string expert_list(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

std::string generate_trace_text(const generate_result& r) {
  std::string out;
  for (const token_trace& t : r.traces) {
    for (size_t l = 0; l < t.layer_hashes.size(); ++l)
      out += "trace " + std::to_string(t.pos) + " " + (l + 1 == t.layer_hashes.size() ? std::string("norm") : std::to_string(l)) +
             " " + hash_hex(t.layer_hashes[l]) + "\n";
    for (size_t l = 0; l < t.routes.size(); ++l)
      out += "route " + std::to_string(t.pos) + " " + std::to_string(l) + " " + expert_list(t.routes[l]) + "\n";
  }
  return out;
}

trace_parting trace_compare(const std::vector<token_trace>& a, const std::vector<token_trace>& b) {
  trace_parting d;
  static const token_trace none;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const token_trace& ta = i < a.size() ? a[i] : none;
    const token_trace& tb = i < b.size() ? b[i] : none;
    const int64_t pos = i < a.size() ? ta.pos : tb.pos;
    if (d.hash_pos < 0 && ta.layer_hashes != tb.layer_hashes) {
      size_t l = 0;
      while (l < ta.layer_hashes.size() && l < tb.layer_hashes.size() && ta.layer_hashes[l] == tb.layer_hashes[l]) ++l;
      d.hash_pos = pos;
      d.hash_layer = static_cast<int64_t>(l);
    }
    if (d.route_pos < 0 && ta.routes != tb.routes) {
      size_t l = 0;
      while (l < ta.routes.size() && l < tb.routes.size() && ta.routes[l] == tb.routes[l]) ++l;
      d.route_pos = pos;
      d.route_layer = static_cast<int64_t>(l);
      if (l < ta.routes.size()) d.route_a = ta.routes[l];
      if (l < tb.routes.size()) d.route_b = tb.routes[l];
    }
  }
  return d;
}

std::string trace_parting_text(const trace_parting& d) {
  std::string out = d.hash_pos < 0 ? "layers: identical\n"
                                   : "layers: first differ at position " + std::to_string(d.hash_pos) + ", layer " +
                                         std::to_string(d.hash_layer) + "\n";
  if (d.route_pos < 0) return out + "routing: identical\n";
  return out + "routing: first differs at position " + std::to_string(d.route_pos) + ", layer " + std::to_string(d.route_layer) +
         ": experts " + expert_list(d.route_a) + " vs " + expert_list(d.route_b) + "\n";
}

std::string generate_summary_text(const generate_result& r) {
  const run_timings& t = r.timings;
  char buf[256];
  std::snprintf(buf, sizeof buf, "prompt: %lld tokens in %.1f ms (%.1f tokens/s)\ngenerated: %lld tokens in %.1f ms (%.1f tokens/s)\n",
                static_cast<long long>(t.n_prompt), t.prompt_ms, t.prompt_tokens_per_s(), static_cast<long long>(t.n_gen),
                t.gen_ms, t.gen_tokens_per_s());
  std::string s = buf;
  s += std::string("finish: ") + finish_reason_name(r.finish) + " (" + stop_type_name(r.stop) + ")\n";
  return s + "chained hash: " + hash_hex(r.chained_hash) + "\n";
}

json score_to_json(const std::vector<score_result>& items) {
  json arr = json::array();
  for (const score_result& r : items) {
    json steps = json::array();
    for (const score_step& s : r.steps)
      steps.push_back({{"id", s.id}, {"logprob", s.logprob}, {"top", top_to_json(s.top)}, {"logit_hash", hash_hex(s.logit_hash)}});
    arr.push_back({{"steps", std::move(steps)}, {"chained_hash", hash_hex(r.chained_hash)}});
  }
  return {{"items", std::move(arr)}};
}

std::string score_to_text(const std::vector<score_result>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const score_result& r = items[i];
    out += "item " + std::to_string(i) + ": " + std::to_string(r.steps.size()) + " steps, chained " +
           hash_hex(r.chained_hash) + "\n";
    for (size_t k = 0; k < r.steps.size(); ++k) {
      const score_step& s = r.steps[k];
      out += "  " + std::to_string(k) + " " + std::to_string(s.id) + " " + fmt_logprob(s.logprob) + " " +
             hash_hex(s.logit_hash);
      for (const token_logprob& t : s.top) out += " " + std::to_string(t.id) + ":" + fmt_logprob(t.logprob);
      out += "\n";
    }
  }
  return out;
}

}  // namespace detaudit::runtime
