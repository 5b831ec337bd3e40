#include "runtime/generate.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "chat/chat_template.h"
#include "kernels/cpu/cpu.h"
#include "numerics/exact.h"
#include "runtime/hashes.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace detaudit::runtime {
namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// A sequence of a context, freed when the scope ends.
class seq_scope {
 public:
  explicit seq_scope(context& ctx) : ctx_(ctx), id_(ctx.seq_new()) {}
  ~seq_scope() { ctx_.seq_free(id_); }
  seq_scope(const seq_scope&) = delete;
  seq_scope& operator=(const seq_scope&) = delete;
  int32_t id() const { return id_; }

 private:
  context& ctx_;
  int32_t id_;
};

// Companion sequences running beside a request (generate_params::companions).
class companion_set {
 public:
  companion_set(context& ctx, const std::vector<std::vector<int32_t>>& prompts) : ctx_(ctx), prompts_(prompts) {
    for (size_t i = 0; i < prompts.size(); ++i) ids_.push_back(ctx.seq_new());
  }
  ~companion_set() {
    for (int32_t id : ids_) ctx_.seq_free(id);
  }
  companion_set(const companion_set&) = delete;
  companion_set& operator=(const companion_set&) = delete;
  // Appends every companion's prompt (logits at its last token) to batch.
  void add_prompts(std::vector<token_in>& batch) const {
    for (size_t i = 0; i < ids_.size(); ++i)
      for (size_t t = 0; t < prompts_[i].size(); ++t) batch.push_back({ids_[i], prompts_[i][t], t + 1 == prompts_[i].size()});
  }
  // Takes the companions' logits (the first n of `logits`, in add order) and appends each one's next
  // greedy token, while it has room in the context.
  void add_next(const std::vector<std::vector<float>>& logits, std::vector<token_in>& batch, int64_t n_ctx) {
    next_.clear();
    for (size_t i = 0; i < n_wanting_; ++i) next_.push_back(sample_greedy(logits[i]));
    n_wanting_ = 0;
    for (size_t i = 0; i < ids_.size() && i < next_.size(); ++i)
      if (ctx_.seq_len(ids_[i]) < n_ctx) {
        batch.push_back({ids_[i], next_[i], true});
        ++n_wanting_;
      }
  }
  void set_wanting(size_t n) { n_wanting_ = n; }
  size_t wanting() const { return n_wanting_; }

 private:
  context& ctx_;
  const std::vector<std::vector<int32_t>>& prompts_;
  std::vector<int32_t> ids_;
  std::vector<int32_t> next_;
  size_t n_wanting_ = 0;
};

void collect_traces(const context& ctx, int32_t seq, std::vector<token_trace>& out) {
  if (!ctx.params().trace_hashes) return;
  for (const token_trace& t : ctx.last_traces())
    if (t.seq == seq) out.push_back(t);
}

int64_t context_limit(const context& ctx) {
  return ctx.params().n_ctx > 0 ? ctx.params().n_ctx : ctx.model().hp().n_ctx_train;
}

void check_generate_params(const generate_params& p) {
  sampling_check_params(p.sampling);
  if (p.n_predict < -1) throw input_error("generate: n-predict must be >= -1 (-1: until the end), found " +
                                          std::to_string(p.n_predict));
  if (p.n_top_logprobs < 0) throw input_error("generate: top-logprobs must be >= 0, found " + std::to_string(p.n_top_logprobs));
}

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

std::vector<int32_t> json_ids(const json& item, const char* key, const std::string& where) {
  auto it = item.find(key);
  if (it == item.end() || !it->is_array())
    throw input_error(where + ": '" + key + "' is missing or not an array of token ids");
  std::vector<int32_t> ids;
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      throw input_error(where + ": '" + key + "' holds " + v.dump() + ", which is not a token id");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

std::string fmt_logprob(float lp) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(lp));
  return buf;
}

}  // namespace

// ---- prompts ----

std::vector<int32_t> generate_tokenize(const tokenizer::vocab& v, std::string_view text) {
  return tokenizer::encode(v, text, /*add_special=*/true, /*parse_special=*/true);
}

namespace {

chat::chat_options chat_options_for(const model::model& m, bool enable_thinking) {
  const tokenizer::vocab& v = m.vocab();
  chat::chat_options opt = chat::chat_options_from_template(v.chat_template());
  opt.enable_thinking = enable_thinking;
  if (v.ids().bos != tokenizer::TOKEN_NONE) opt.bos_token = v.token_text(v.ids().bos);
  if (v.ids().eos != tokenizer::TOKEN_NONE) opt.eos_token = v.token_text(v.ids().eos);
  opt.leading_bos = !v.add_bos();
  return opt;
}

}  // namespace

std::string generate_render_chat(const model::model& m, const chat_request& req) {
  const chat::template_family f = chat::chat_resolve_family(req.template_name, m.vocab().chat_template(), m.path());
  std::vector<chat::chat_message> msgs;
  if (!req.system.empty()) msgs.push_back({"system", req.system});
  msgs.push_back({"user", req.user});
  return chat::chat_render(f, msgs, /*add_generation_prompt=*/true, chat_options_for(m, req.enable_thinking));
}

std::vector<int32_t> generate_chat_tokens(const model::model& m, const std::vector<chat::chat_message>& msgs,
                                          const std::string& template_name, bool enable_thinking) {
  const chat::template_family f = chat::chat_resolve_family(template_name, m.vocab().chat_template(), m.path());
  return generate_tokenize(m.vocab(),
                           chat::chat_render(f, msgs, /*add_generation_prompt=*/true, chat_options_for(m, enable_thinking)));
}

std::vector<int32_t> token_ids_parse(std::string_view text, const std::string& what) {
  std::vector<int32_t> ids;
  size_t i = 0;
  auto is_sep = [](char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (i < text.size()) {
    if (is_sep(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !is_sep(text[j])) ++j;
    const std::string_view tok = text.substr(i, j - i);
    int64_t v = 0;
    bool ok = tok.size() <= 10;
    for (char c : tok) {
      ok = ok && c >= '0' && c <= '9';
      if (ok) v = v * 10 + (c - '0');
    }
    if (!ok || v > std::numeric_limits<int32_t>::max())
      throw input_error(what + ": '" + std::string(tok) + "' is not a token id (a non-negative integer)");
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (ids.empty()) throw input_error(what + ": no token ids given");
  return ids;
}

// ---- streaming ----

size_t utf8_incomplete_tail(std::string_view s) {
  for (size_t k = 1; k <= std::min<size_t>(3, s.size()); ++k) {
    const auto c = static_cast<unsigned char>(s[s.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    if (c >= 0xF8) return 0;           // not a lead byte: nothing to wait for
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > k ? k : 0;
  }
  return 0;
}

text_stream::text_stream(std::vector<std::string> stop, text_callback cb) : stop_(std::move(stop)), cb_(std::move(cb)) {
  for (const std::string& s : stop_) {
    if (s.empty()) throw input_error("generate: a stop string is empty");
    max_stop_ = std::max(max_stop_, s.size());
  }
}

bool text_stream::add(std::string_view piece) {
  if (stopped_) return true;
  const size_t from = text_.size() >= max_stop_ ? text_.size() - max_stop_ + 1 : 0;
  text_ += piece;
  size_t best = std::string::npos;
  for (const std::string& s : stop_) {
    const size_t p = text_.find(s, from);
    if (p < best) {
      best = p;
      stop_word_ = s;
    }
  }
  if (best != std::string::npos) {
    text_.resize(best);
    stopped_ = true;
    emit(text_.size());
    return true;
  }
  emit(text_.size() - std::max(utf8_incomplete_tail(text_), partial_stop_tail()));
  return false;
}

void text_stream::finish() { emit(text_.size()); }

size_t text_stream::partial_stop_tail() const {
  size_t best = 0;
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, text_.size()); k > best; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        best = k;
        break;
      }
  return best;
}

void text_stream::emit(size_t upto) {
  if (upto <= emitted_) return;
  if (cb_) cb_(std::string_view(text_).substr(emitted_, upto - emitted_));
  emitted_ = upto;
}

// ---- generation ----

const char* finish_reason_name(finish_reason f) { return f == FINISH_STOP ? "stop" : "length"; }

const char* stop_type_name(stop_type s) {
  switch (s) {
    case STOP_EOG: return "eog";
    case STOP_WORD: return "word";
    case STOP_LIMIT: return "limit";
    case STOP_CONTEXT: return "context";
  }
  return "unknown";
}

generate_result generate(context& ctx, std::span<const int32_t> prompt, const generate_params& p,
                         const text_callback& on_text) {
  check_generate_params(p);
  if (prompt.empty()) throw input_error("generate: the prompt has no tokens (the vocabulary adds no BOS to an empty text)");
  const tokenizer::vocab& v = ctx.model().vocab();
  const int64_t n_ctx = context_limit(ctx);
  text_stream stream(p.stop, on_text);
  seq_scope seq(ctx);
  generate_result r;
  r.device = ctx.device_description();
  r.prompt_tokens.assign(prompt.begin(), prompt.end());
  r.timings.n_prompt = static_cast<int64_t>(prompt.size());

  for (const auto& c : p.companions)
    if (c.empty()) throw input_error("generate: a companion sequence has an empty prompt");
  companion_set others(ctx, p.companions);
  std::vector<token_in> batch;
  others.add_prompts(batch);
  others.set_wanting(p.companions.size());
  for (size_t i = 0; i < prompt.size(); ++i) batch.push_back({seq.id(), prompt[i], i + 1 == prompt.size()});
  auto t0 = clock_type::now();
  std::vector<std::vector<float>> out = ctx.decode(batch);
  std::vector<float> logits = std::move(out.back());
  r.timings.prompt_ms = ms_since(t0);
  collect_traces(ctx, seq.id(), r.traces);

  t0 = clock_type::now();
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  hash_chain chain;
  for (uint64_t step = 0; p.n_predict < 0 || step < static_cast<uint64_t>(p.n_predict); ++step) {
    generated_token t;
    t.logit_hash = logit_hash(logits);
    chain.add(t.logit_hash);
    t.top = top_logprobs(logits, p.n_top_logprobs);
    t.id = sample_token(logits, history, p.sampling, step);
    t.piece = tokenizer::token_to_piece(v, t.id, /*special=*/true);
    r.tokens.push_back(std::move(t));
    history.push_back(r.tokens.back().id);
    const int32_t id = r.tokens.back().id;
    if (v.is_eog(id)) {
      r.finish = FINISH_STOP;
      r.stop = STOP_EOG;
      break;
    }
    if (stream.add(tokenizer::token_to_piece(v, id, /*special=*/false))) {
      r.finish = FINISH_STOP;
      r.stop = STOP_WORD;
      r.stop_word = stream.stop_word();
      break;
    }
    if (p.n_predict >= 0 && step + 1 >= static_cast<uint64_t>(p.n_predict)) break;  // no decode for an unused token
    if (ctx.seq_len(seq.id()) >= n_ctx) {
      r.stop = STOP_CONTEXT;
      break;
    }
    batch.clear();
    others.add_next(out, batch, n_ctx);
    batch.push_back({seq.id(), id, true});
    out = ctx.decode(batch);
    logits = std::move(out.back());
    collect_traces(ctx, seq.id(), r.traces);
  }
  stream.finish();
  r.text = stream.text();
  r.chained_hash = chain.value();
  r.timings.n_gen = static_cast<int64_t>(r.tokens.size());
  r.timings.gen_ms = ms_since(t0);
  return r;
}

std::vector<std::vector<int32_t>> generate_filler_prompts(const tokenizer::vocab& v, int n) {
  static const char* const k_fillers[] = {
      "Tell a short story about a lighthouse keeper and a storm.",
      "List ten facts about octopuses.",
      "Explain how a hash table handles collisions.",
      "Summarise the rules of chess in a few sentences.",
      "Describe how bread rises.",
      "Write four short poems about autumn leaves.",
      "Explain the difference between a list and a set.",
  };
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    const char* text = k_fillers[static_cast<size_t>(i) % std::size(k_fillers)];
    out.push_back(tokenizer::encode(v, std::string(text) + (i >= 7 ? " (" + std::to_string(i) + ")" : ""), true, false));
  }
  return out;
}

// ---- teacher-forced scoring ----

score_result score(context& ctx, std::span<const int32_t> prompt, std::span<const int32_t> continuation, int top_k) {
  if (prompt.empty()) throw input_error("score: the prompt has no tokens; at least one (usually BOS) is needed");
  if (continuation.empty()) throw input_error("score: no continuation tokens to score");
  const int64_t n_vocab = ctx.model().hp().n_vocab;
  for (std::span<const int32_t> ids : {prompt, continuation})
    for (int32_t id : ids)
      if (id < 0 || id >= n_vocab)
        throw input_error("score: token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                          std::to_string(n_vocab - 1) + ")");
  seq_scope seq(ctx);
  std::vector<token_in> batch;
  const size_t n_eval = prompt.size() + continuation.size() - 1;
  batch.reserve(n_eval);
  for (size_t i = 0; i < n_eval; ++i) {
    const int32_t tok = i < prompt.size() ? prompt[i] : continuation[i - prompt.size()];
    batch.push_back({seq.id(), tok, i + 1 >= prompt.size()});
  }
  score_result r;
  r.timings.n_prompt = static_cast<int64_t>(n_eval);
  const auto t0 = clock_type::now();
  const std::vector<std::vector<float>> logits = ctx.decode(batch);
  r.timings.prompt_ms = ms_since(t0);
  hash_chain chain;
  for (size_t k = 0; k < continuation.size(); ++k) {
    const std::vector<float>& l = logits.at(k);
    score_step s;
    s.id = continuation[k];
    s.logprob = log_softmax_normalizer(l).logprob(l[static_cast<size_t>(s.id)]);
    s.top = top_logprobs(l, top_k);
    s.logit_hash = logit_hash(l);
    chain.add(s.logit_hash);
    r.steps.push_back(std::move(s));
  }
  r.chained_hash = chain.value();
  return r;
}

std::vector<score_item> score_read_reference(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw input_error(path + ": cannot open the reference file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw input_error(path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  if (!j.is_object() || !j.contains("items") || !j["items"].is_array())
    throw input_error(path + ": expected a JSON object with an \"items\" array (a llama.cpp reference file)");
  std::vector<score_item> items;
  for (size_t i = 0; i < j["items"].size(); ++i) {
    const json& it = j["items"][i];
    const std::string where = path + ": item " + std::to_string(i);
    if (!it.is_object()) throw input_error(where + ": expected an object");
    items.push_back({json_ids(it, "prompt_tokens", where), json_ids(it, "tokens", where)});
  }
  return items;
}

// ---- results ----

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

std::string generate_trace_text(const generate_result& r) {
  std::string out;
  for (const token_trace& t : r.traces)
    for (size_t l = 0; l < t.layer_hashes.size(); ++l)
      out += "trace " + std::to_string(t.pos) + " " + (l + 1 == t.layer_hashes.size() ? std::string("norm") : std::to_string(l)) +
             " " + hash_hex(t.layer_hashes[l]) + "\n";
  return out;
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
