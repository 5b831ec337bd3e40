// Fidelity of the numerics, teacher-forced so both sides see the same contexts:
//  - exact vs reference (float64) on stories260K and every synthetic fixture model;
//  - exact and float vs llama.cpp's own outputs (tests/data/llamacpp-*: llama-server b4748 and a
//    2026-08 build, on stories260K and on the synthetic models the build generates);
//  - exact vs reference at 4k tokens of context on a synthetic model.
// Each test prints its measured figures; docs/precision-contract.md records them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/synth.h"
#include "runtime/context.h"
#include "test_util.h"
#include "tokenizer/vocab.h"
#include "util/sha256.h"

using namespace detaudit;
using nlohmann::json;

namespace {

std::vector<double> log_softmax(const std::vector<float>& l) {
  const double m = *std::max_element(l.begin(), l.end());
  double s = 0;
  for (float x : l) s += std::exp(double(x) - m);
  const double lz = m + std::log(s);
  std::vector<double> out(l.size());
  for (size_t i = 0; i < l.size(); ++i) out[i] = double(l[i]) - lz;
  return out;
}

int32_t argmax(const std::vector<double>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());  // first max: lowest id
}

std::vector<int32_t> top_ids(const std::vector<double>& v, size_t k) {
  std::vector<int32_t> ids(v.size());
  for (size_t i = 0; i < v.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  ids.resize(k);
  return ids;
}

// Log-probs of the positions that predict each continuation token, teacher-forced the way a
// server computes them: the prompt in one step, then the continuation one token per step.
std::vector<std::vector<double>> teacher_forced(std::shared_ptr<const model::model> m, runtime::numerics_mode mode,
                                                const std::vector<int32_t>& prompt, const std::vector<int32_t>& cont,
                                                int64_t n_ctx = 0) {
  runtime::context_params p;
  p.numerics = mode;
  p.n_ctx = n_ctx;
  runtime::context c(std::move(m), p);
  const int32_t s = c.seq_new();
  std::vector<runtime::token_in> batch;
  for (size_t i = 0; i < prompt.size(); ++i) batch.push_back({s, prompt[i], i + 1 == prompt.size()});
  std::vector<std::vector<double>> out;
  out.push_back(log_softmax(c.decode(batch)[0]));
  for (size_t i = 0; i + 1 < cont.size(); ++i) out.push_back(log_softmax(c.decode({{s, cont[i], true}})[0]));
  return out;
}

struct lp_stats {
  double sum = 0, max = 0;
  int64_t n = 0;
  void add(double d) {
    sum += d;
    max = std::max(max, d);
    ++n;
  }
  double mean() const { return n ? sum / double(n) : 0.0; }
};

// |d log-prob| over `truth`'s top-10 ids at one step.
void compare_top10(const std::vector<double>& truth, const std::vector<double>& got, lp_stats& st) {
  for (int32_t id : top_ids(truth, 10)) st.add(std::fabs(truth[id] - got[id]));
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

const char* SYNTHETIC[] = {"llama-f16",  "llama-bf16", "llama-q8_0",   "llama-q4_0",   "llama-q4_1",   "llama-q5_0",
                             "llama-q5_1", "llama-q2_k", "llama-q3_k_m", "llama-q4_k_m", "llama-q5_k_m", "llama-q6_k",
                             "qwen2-f16",  "qwen2-q8_0", "qwen2-q4_0",   "qwen2-q4_k_m", "qwen2-q5_k_m", "qwen2-q6_k",
                             "phi3-f16",   "phi3-q8_0",  "phi3-q4_k_m",
                             "gemma2-f16", "gemma2-q8_0", "gemma2-q4_k_m",
                             "gemma3-f16", "gemma3-q8_0", "gemma3-q4_k_m"};

// llama.cpp b4748 has no gemma3, and aborts on a gemma2 whose layer count is not one of Google's
// (26, 42, 46): the tiny gemma models have 2026-08 references only.
bool has_b4748(const std::string& k) { return k.rfind("gemma", 0) != 0; }
std::string contexts_of(const std::string& k) {
  return std::string(has_b4748(k) ? "llamacpp-b4748" : "llamacpp-2026-08") + "/tiny-" + k + ".json";
}

// The mean |d logprob| allowed against llama.cpp on a synthetic model. On f16 weights llama.cpp rounds
// activations to f16, not 8 bits, and every model measures below 0.001: 0.005 there keeps the checks
// sensitive to small mistakes (gemma3-f16 with its sliding window switched off measures 0.017).
// `quantized` is the bound for the other types (8-bit activations on llama.cpp's side).
double llamacpp_bound(const std::string& k, double quantized) {
  return k.size() > 4 && k.compare(k.size() - 4, 4, "-f16") == 0 ? 0.005 : quantized;
}

// Exact vs float64 reference over every item of a reference file's contexts.
lp_stats exact_vs_reference(const std::string& model_path, const std::string& ref_path, size_t max_items) {
  auto m = model::model::load(model_path);
  json ref = read_json(ref_path);
  lp_stats st;
  for (size_t i = 0; i < ref["items"].size() && i < max_items; ++i) {
    const json& it = ref["items"][i];
    auto prompt = ids_of(it["prompt_tokens"]), cont = ids_of(it["tokens"]);
    auto truth = teacher_forced(m, runtime::NUMERICS_REFERENCE, prompt, cont);
    auto got = teacher_forced(m, runtime::NUMERICS_EXACT, prompt, cont);
    for (size_t s = 0; s < truth.size(); ++s) compare_top10(truth[s], got[s], st);
  }
  return st;
}

struct llamacpp_stats {
  lp_stats lp;            // over llama.cpp's top-10, at the steps before its first near-tie
  int64_t n_agree = 0;    // greedy tokens identical before the first near-tie
  int64_t n_checked = 0;  // steps before the first near-tie
};

// The position in `tokens` of each recorded step. llama-server leaves out the probabilities of a
// token that ends inside a UTF-8 sequence, so steps are matched to tokens by id, in order.
std::vector<size_t> align_steps(const json& steps, const std::vector<int32_t>& tokens) {
  std::vector<size_t> pos;
  size_t p = 0;
  for (const json& st : steps) {
    while (p < tokens.size() && tokens[p] != st["id"].get<int32_t>()) ++p;
    REQUIRE(p < tokens.size());
    pos.push_back(p++);
  }
  return pos;
}

// Our numerics vs llama.cpp's recorded log-probs, up to each item's first step whose top-2 margin
// is below `tie`.
llamacpp_stats vs_llamacpp(const std::string& model_path, const std::string& ref_path, runtime::numerics_mode mode,
                           double tie) {
  auto m = model::model::load(model_path);
  json ref = read_json(ref_path);
  // A reference speaks only for the file it was recorded on (tests/data/README.md): after a change
  // to synth or a quantizer, the references must be recorded again.
  REQUIRE(ref["model_sha256"].get<std::string>() == sha256_file(model_path));
  llamacpp_stats st;
  for (const json& it : ref["items"]) {
    auto cont = ids_of(it["tokens"]);
    auto got = teacher_forced(m, mode, ids_of(it["prompt_tokens"]), cont);
    std::vector<size_t> pos = align_steps(it["steps"], cont);
    for (size_t s = 0; s < pos.size(); ++s) {
      const json& top = it["steps"][s]["top"];
      if (top[0][1].get<double>() - top[1][1].get<double>() < tie) break;
      const std::vector<double>& lp = got[pos[s]];
      ++st.n_checked;
      st.n_agree += argmax(lp) == cont[pos[s]];
      for (const json& e : top) st.lp.add(std::fabs(e[1].get<double>() - lp[e[0].get<int32_t>()]));
    }
  }
  return st;
}

}  // namespace

TEST_CASE("fidelity: exact vs float64 reference on stories260K and every synthetic model") {
  lp_stats st = exact_vs_reference(test::fixture("models/stories260K.gguf"),
                                   test::test_data("llamacpp-b4748/stories260K.json"), 16);
  MESSAGE("stories260K: exact vs reference mean " << st.mean() << " max " << st.max << " nats over " << st.n);
  CHECK(st.mean() <= 0.005);
  CHECK(st.max <= 0.05);
  for (const char* k : SYNTHETIC) {
    CAPTURE(std::string(k));
    lp_stats s = exact_vs_reference(test::generated(std::string("models/synthetic/tiny-") + k + ".gguf"),
                                    test::test_data(contexts_of(k)), 4);
    MESSAGE(std::string(k) << ": exact vs reference mean " << s.mean() << " max " << s.max << " nats over " << s.n);
    CHECK(s.mean() <= 0.005);
    CHECK(s.max <= 0.05);
  }
}

TEST_CASE("fidelity: exact and float vs llama.cpp on stories260K, short and ~650-token prompts") {
  for (const char* ref : {"llamacpp-b4748/stories260K.json", "llamacpp-b4748/stories260K-long.json",
                          "llamacpp-2026-08/stories260K.json", "llamacpp-2026-08/stories260K-long.json"}) {
    for (auto mode : {runtime::NUMERICS_EXACT, runtime::NUMERICS_FLOAT}) {
      CAPTURE(std::string(ref));
      CAPTURE(std::string(runtime::numerics_name(mode)));
      llamacpp_stats st = vs_llamacpp(test::fixture("models/stories260K.gguf"), test::test_data(ref), mode, 0.05);
      MESSAGE(std::string(ref) << " " << std::string(runtime::numerics_name(mode)) << ": " << st.n_agree << "/" << st.n_checked
                  << " greedy tokens identical before llama.cpp's first margin < 0.05; mean |d logprob| "
                  << st.lp.mean() << " max " << st.lp.max);
      CHECK(st.n_checked > 0);
      CHECK(st.n_agree == st.n_checked);
      CHECK(st.lp.mean() <= 0.01);
      CHECK(st.lp.max <= 0.05);
    }
  }
}

TEST_CASE("fidelity: exact and float vs llama.cpp on every synthetic model") {
  for (const char* build : {"llamacpp-b4748", "llamacpp-2026-08"}) {
    for (const char* k : SYNTHETIC) {
      if (std::string(build) == "llamacpp-b4748" && !has_b4748(k)) continue;
      for (auto mode : {runtime::NUMERICS_EXACT, runtime::NUMERICS_FLOAT}) {
        CAPTURE(std::string(build));
        CAPTURE(std::string(k));
        CAPTURE(std::string(runtime::numerics_name(mode)));
        llamacpp_stats st = vs_llamacpp(test::generated(std::string("models/synthetic/tiny-") + k + ".gguf"),
                                        test::test_data(std::string(build) + "/tiny-" + k + ".json"), mode, 0.1);
        MESSAGE(std::string(build) << " " << std::string(k) << " " << std::string(runtime::numerics_name(mode)) << ": "
                                   << st.n_agree << "/" << st.n_checked
                                   << " greedy tokens identical before llama.cpp's first margin < 0.1; mean |d logprob| "
                                   << st.lp.mean() << " max " << st.lp.max);
        CHECK(st.n_checked > 0);
        CHECK(st.n_agree == st.n_checked);
        CHECK(st.lp.mean() <= llamacpp_bound(k, 0.03));
      }
    }
  }
}

TEST_CASE("fidelity: exact vs float64 reference at 4k tokens of context") {
  model::synth_options o;
  o.arch = model::ARCH_LLAMA;
  o.type = gguf::DTYPE_Q8_0;
  o.n_embd = 128;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 2;
  o.n_ff = 256;
  o.n_ctx = 8192;
  o.seed = 11;
  const std::string path = test::scratch_dir("fidelity_long") + "/long.gguf";
  model::synth_write(o, path);
  auto m = model::model::load(path);
  // GSM8K questions, concatenated until the context is 4096 tokens long.
  std::ifstream data(test::fixture("data/test.jsonl"));
  std::vector<int32_t> ids = {m->vocab().ids().bos};
  std::string line;
  while (ids.size() < 4096 && std::getline(data, line)) {
    auto more = tokenizer::encode(m->vocab(), json::parse(line)["question"].get<std::string>() + "\n", false, false);
    ids.insert(ids.end(), more.begin(), more.end());
  }
  REQUIRE(ids.size() >= 4096);
  ids.resize(4096);
  const std::vector<int32_t> prompt(ids.begin(), ids.end() - 16), cont(ids.end() - 16, ids.end());
  auto truth = teacher_forced(m, runtime::NUMERICS_REFERENCE, prompt, cont);
  auto got = teacher_forced(m, runtime::NUMERICS_EXACT, prompt, cont);
  lp_stats st;
  for (size_t s = 0; s < truth.size(); ++s) compare_top10(truth[s], got[s], st);
  MESSAGE("4k context (positions 4080-4095): exact vs reference mean " << st.mean() << " max " << st.max);
  CHECK(st.mean() <= 0.005);
  CHECK(st.max <= 0.05);
}

// qwen3moe and gpt-oss (mixtures of experts) appeared in llama.cpp after b4748: their references
// are the 2026-08 build's, whose prompts also serve as the contexts of the exact vs reference
// comparison. gpt-oss-mxfp4 is llama.cpp's MXFP4_MOE mixture (experts mxfp4, the rest q8_0).
// The mean bound against llama.cpp is 0.05 here, not the dense models' 0.03: when a router's 4th
// and 5th experts nearly tie, rounding picks the expert, and a step where llama.cpp's rounding and
// ours pick different experts moves by up to a nat. Measured on gpt-oss-q8_0: float mode's
// |d logprob| reaches 1.0 at one step of 23 where exact's stays below 0.4 (float mean 0.037, exact
// 0.020); a jump that size between two roundings of one context comes from a discrete choice, and
// the router's top-k is the only one in the forward pass.
const char* SYNTHETIC_MOE[] = {"qwen3moe-f16", "qwen3moe-q8_0", "qwen3moe-q4_k_m",
                               "gpt-oss-f16",  "gpt-oss-q8_0",  "gpt-oss-mxfp4"};

TEST_CASE("fidelity: qwen3moe and gpt-oss, exact vs float64 reference and exact and float vs llama.cpp 2026-08") {
  for (const char* k : SYNTHETIC_MOE) {
    CAPTURE(std::string(k));
    const std::string model = test::generated(std::string("models/synthetic/tiny-") + k + ".gguf");
    const std::string ref = test::test_data(std::string("llamacpp-2026-08/tiny-") + k + ".json");
    lp_stats s = exact_vs_reference(model, ref, 4);
    MESSAGE(std::string(k) << ": exact vs reference mean " << s.mean() << " max " << s.max << " nats over " << s.n);
    CHECK(s.mean() <= 0.005);
    CHECK(s.max <= 0.05);
    for (auto mode : {runtime::NUMERICS_EXACT, runtime::NUMERICS_FLOAT}) {
      CAPTURE(std::string(runtime::numerics_name(mode)));
      llamacpp_stats st = vs_llamacpp(model, ref, mode, 0.1);
      MESSAGE("llamacpp-2026-08 " << std::string(k) << " " << std::string(runtime::numerics_name(mode)) << ": " << st.n_agree
                                  << "/" << st.n_checked << " greedy tokens identical before llama.cpp's first margin < 0.1; mean |d logprob| "
                                  << st.lp.mean() << " max " << st.lp.max);
      CHECK(st.n_checked > 0);
      CHECK(st.n_agree == st.n_checked);
      CHECK(st.lp.mean() <= llamacpp_bound(k, 0.05));
    }
  }
}
