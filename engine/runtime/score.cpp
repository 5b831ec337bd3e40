#include "runtime/score.h"

#include <chrono>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace detaudit::runtime {
namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
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

}  // namespace

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

}  // namespace detaudit::runtime
