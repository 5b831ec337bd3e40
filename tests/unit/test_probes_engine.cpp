// The engine target (probes/target_engine.cpp) on small synthetic models: in exact numerics a
// request alone and beside 7 others in the same forward steps gives the same token ids, top
// log-probs and logit hashes (compared bit for bit); the prompt cache and ubatch 1 change nothing;
// in float numerics sharing steps with other requests changes outputs.
#include <doctest/doctest.h>

#include <cstring>
#include <latch>
#include <map>
#include <thread>

#include "model/model.h"
#include "model/synth.h"
#include "probes/target_engine.h"
#include "runtime/generate.h"
#include "synth_util.h"
#include "test_util.h"
#include "util/error.h"
#include "util/sha256.h"

using namespace detaudit;
using probes::gen_request;
using reports::record;

namespace {

const char* const PROMPTS[] = {
    "Once upon a time, there was a little dog",
    "Lily liked to play in the park with her ball",
    "The sun was hot and the boy wanted",
    "Tom had a big red truck. One day",
    "A bird sat on a tree",
    "Mom said it was time for bed, but Sue",
    "There was a cat who loved milk",
    "The little girl found a shiny stone",
};

// The test models: the shared small shape (F16, n_embd 256), and a narrower Q8_0 one (n_embd
// 128) whose top logits lie close enough for float rounding to flip tokens; stories260K's vocabulary.
std::string model_path(const std::string& name) {
  static std::map<std::string, std::string> made;
  if (auto it = made.find(name); it != made.end()) return it->second;
  model::synth_options o = test::small_model(model::ARCH_LLAMA, gguf::DTYPE_F16, 7, 1024);
  if (name == "narrow") {
    o.type = gguf::DTYPE_Q8_0;
    o.n_embd = 128;
    o.n_ff = 384;
  }
  o.vocab_from = test::fixture("models/stories260K.gguf");
  const std::string path = test::process_scratch_dir("probes_engine_" + name) + "/model.gguf";
  model::synth_write(o, path);
  made[name] = path;
  return path;
}

std::unique_ptr<probes::target> engine(const std::string& query, const std::string& name = "small") {
  probes::target_options opt;
  const std::string path = name == "stories" ? test::fixture("models/stories260K.gguf") : model_path(name);
  return probes::target_make_engine("engine:" + path + "?" + query, opt);
}

gen_request raw(const std::string& prompt, int64_t n_predict = 12) {
  gen_request r;
  r.prompt = prompt;
  r.n_predict = n_predict;
  r.n_probs = 2;
  return r;
}

// Every request sent at the same moment from its own thread.
std::vector<record> together(probes::target& t, const std::vector<gen_request>& rs) {
  std::vector<record> out(rs.size());
  std::latch start(static_cast<std::ptrdiff_t>(rs.size()));
  std::vector<std::thread> th;
  for (size_t i = 0; i < rs.size(); ++i)
    th.emplace_back([&, i] {
      start.arrive_and_wait();
      out[i] = t.complete(rs[i]);
    });
  for (std::thread& x : th) x.join();
  return out;
}

uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// "" when a and b agree on token ids, top log-probs (bits), logit hashes, chained hash and text;
// else the first difference.
std::string diff(const record& a, const record& b) {
  if (!a.error.empty() || !b.error.empty()) return "error: " + a.error + b.error;
  if (a.tokens.size() != b.tokens.size()) return "token count";
  for (size_t i = 0; i < a.tokens.size(); ++i)
    if (a.tokens[i].id != b.tokens[i].id) return "token id at " + std::to_string(i);
  if (a.logit_hashes != b.logit_hashes) return "logit hashes";
  if (a.top_logprobs.size() != b.top_logprobs.size()) return "top log-prob steps";
  for (size_t i = 0; i < a.top_logprobs.size(); ++i) {
    if (a.top_logprobs[i].size() != b.top_logprobs[i].size()) return "top size at " + std::to_string(i);
    for (size_t k = 0; k < a.top_logprobs[i].size(); ++k)
      if (a.top_logprobs[i][k].id != b.top_logprobs[i][k].id || bits(a.top_logprobs[i][k].logprob) != bits(b.top_logprobs[i][k].logprob))
        return "top log-prob at " + std::to_string(i);
  }
  if (a.chained_hash != b.chained_hash) return "chained hash";
  if (a.text != b.text) return "text";
  return "";
}

bool ids_differ(const record& a, const record& b) {
  if (a.tokens.size() != b.tokens.size()) return true;
  for (size_t i = 0; i < a.tokens.size(); ++i)
    if (a.tokens[i].id != b.tokens[i].id) return true;
  return false;
}

}  // namespace

TEST_CASE("probes_engine: alone and 8 concurrent complete() calls agree bit for bit in exact numerics") {
  auto t = engine("threads=1&np=8");
  std::vector<gen_request> rs;
  for (const char* p : PROMPTS) rs.push_back(raw(p));
  std::vector<record> alone;
  for (const gen_request& r : rs) alone.push_back(t->complete(r));
  const int64_t width_alone = t->metrics()["max_seqs_in_step"].get<int64_t>();
  CHECK(width_alone == 1);
  const std::vector<record> both = together(*t, rs);
  CHECK(t->metrics()["max_seqs_in_step"].get<int64_t>() > 1);
  for (size_t i = 0; i < rs.size(); ++i) {
    INFO("prompt " << i);
    REQUIRE(alone[i].tokens.size() == 12);
    CHECK(alone[i].logit_hashes.size() == 12);
    CHECK(alone[i].top_logprobs.size() == 12);
    CHECK(diff(alone[i], both[i]) == "");
  }
}

TEST_CASE("probes_engine: a record carries the request, tokens, usage, timings and evidence") {
  auto t = engine("threads=1&np=2");
  const probes::capabilities c = t->probe();
  CHECK(c.token_ids);
  CHECK(c.cache_control);
  CHECK(c.logit_hashes);
  CHECK(c.metrics);
  CHECK(c.logprobs_kind == "pre-sampling");
  CHECK(c.build == std::string("detaudit ") + DETAUDIT_VERSION);
  CHECK(c.model_sha256 == sha256_file(model_path("small")));
  CHECK(c.fingerprint.find(c.model_sha256.substr(0, 16)) != std::string::npos);
  CHECK(t->dialect() == "engine");
  CHECK(t->spec() == "engine:" + model_path("small") + "?threads=1&np=2");

  const record r = t->complete(raw(PROMPTS[0], 6));
  REQUIRE(r.error.empty());
  CHECK(r.request["prompt"] == PROMPTS[0]);
  CHECK(r.request["n_predict"] == 6);
  CHECK(r.request["n_probs"] == 2);
  CHECK(r.request["engine"]["numerics"] == "exact");
  CHECK(r.request["engine"]["ubatch"] == 512);
  CHECK(r.request["engine"]["np"] == 2);
  CHECK(r.request["engine"]["spec"] == "none");
  auto m = model::model::load(model_path("small"));
  const std::vector<int32_t> prompt = runtime::generate_tokenize(m->vocab(), PROMPTS[0]);
  CHECK(r.usage["prompt_tokens"] == prompt.size());
  CHECK(r.usage["completion_tokens"] == 6);
  REQUIRE(r.tokens.size() == 6);
  std::string joined;
  for (const reports::token_rec& tok : r.tokens) {
    CHECK(tok.text == tokenizer::token_to_piece(m->vocab(), tok.id, true));
    joined += tok.text;
  }
  CHECK(joined == r.text);
  REQUIRE(r.top_logprobs.size() == 6);
  CHECK(r.top_logprobs[0].size() == 2);
  CHECK(r.top_logprobs[0][0].id == r.tokens[0].id);  // greedy: the top entry is the token taken
  CHECK(r.logprobs_kind == "pre-sampling");
  CHECK(r.chained_hash.size() == 16);
  CHECK(r.finish_reason == "length");
  CHECK(r.timings["t_start"].get<double>() <= r.timings["t_end"].get<double>());
  CHECK(r.timings["latency_ms"].get<double>() >= 0);
  CHECK(r.evidence.contains("cached_tokens"));
  CHECK(r.evidence["draft_accepted"] == 0);
}

TEST_CASE("probes_engine: a chat request is rendered with the model's chat template as serve does") {
  auto t = engine("threads=1&np=1&chat_template=chatml");
  gen_request r = raw("", 4);
  r.messages = {{"user", "Tell me a story"}};
  const record out = t->complete(r);
  REQUIRE(out.error.empty());
  CHECK(out.request["messages"][0]["content"] == "Tell me a story");
  CHECK_FALSE(out.request.contains("prompt"));
  auto m = model::model::load(model_path("small"));
  const std::string text = runtime::generate_render_chat(*m, {"", "Tell me a story", "chatml", true});
  CHECK(text.find("<|im_start|>user\nTell me a story<|im_end|>") != std::string::npos);
  CHECK(out.usage["prompt_tokens"] == runtime::generate_tokenize(m->vocab(), text).size());
}

TEST_CASE("probes_engine: the warm cache request reports cached tokens and changes nothing") {
  auto t = engine("threads=1&np=2");
  gen_request r = raw(PROMPTS[3]);
  r.cache_prompt = false;
  const record off = t->complete(r);
  CHECK(off.evidence["cached_tokens"] == 0);
  r.cache_prompt = true;
  t->complete(r);
  const record warm = t->complete(r);
  CHECK(warm.evidence["cached_tokens"].get<int64_t>() > 0);
  CHECK(warm.usage["cached_tokens"] == warm.evidence["cached_tokens"]);
  CHECK(diff(off, warm) == "");
}

TEST_CASE("probes_engine: variants ubatch 1 and 8192 and n-gram speculation agree bit for bit in exact numerics") {
  auto t = engine("threads=1&np=2", "stories");
  auto u1 = t->variant("ubatch", "1");
  auto u8k = t->variant("ubatch", "8192");
  auto spec = t->variant("spec", "ngram");
  REQUIRE(u1);
  REQUIRE(u8k);
  REQUIRE(spec);
  CHECK(u1->spec() == t->spec() + "&ubatch=1");
  CHECK(u1->variant("ubatch", "4")->spec() == t->spec() + "&ubatch=4");
  CHECK(t->variant("color", "red") == nullptr);
  CHECK(u1->complete(raw(PROMPTS[0])).request["engine"]["ubatch"] == 1);
  const std::string repetitive = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat.";
  for (const std::string& p : {std::string(PROMPTS[1]), repetitive}) {
    const record base = t->complete(raw(p, 32));
    CHECK(diff(base, u1->complete(raw(p, 32))) == "");
    CHECK(diff(base, u8k->complete(raw(p, 32))) == "");
    CHECK(diff(base, spec->complete(raw(p, 32))) == "");
  }
  CHECK(t->metrics()["draft_proposed_total"] == 0);
  CHECK(spec->metrics()["draft_accepted_total"].get<int64_t>() > 0);
}

TEST_CASE("probes_engine: a fixed seed repeats at temperature 0.8") {
  auto t = engine("threads=1&np=2");
  gen_request r = raw(PROMPTS[4], 16);
  r.temperature = 0.8;
  r.seed = 42;
  const record a = t->complete(r);
  const record b = t->complete(r);
  CHECK(a.request["seed"] == 42);
  CHECK_FALSE(a.evidence.contains("seed_drawn"));
  CHECK(diff(a, b) == "");
  r.seed.reset();
  const record c = t->complete(r);
  CHECK_FALSE(c.request.contains("seed"));
  CHECK(c.evidence.contains("seed_drawn"));
}

TEST_CASE("probes_engine: in float numerics sharing forward steps with other requests changes outputs") {
  auto t = engine("threads=1&np=8&numerics=float", "narrow");
  CHECK(t->complete(raw(PROMPTS[0], 1)).request["engine"]["numerics"] == "float");
  int hash_differ = 0, id_differ = 0;
  for (int round = 0; round < 2; ++round) {
    std::vector<gen_request> rs;
    for (int i = 0; i < 8; ++i) {
      rs.push_back(raw(std::string(PROMPTS[i]) + (round ? " again" : ""), 64));
      rs.back().cache_prompt = false;  // each prefill is evaluated: alone in a step of its own, else beside 7 others
    }
    std::vector<record> alone;
    for (const gen_request& r : rs) alone.push_back(t->complete(r));
    const std::vector<record> both = together(*t, rs);
    for (size_t i = 0; i < rs.size(); ++i) {
      hash_differ += alone[i].logit_hashes != both[i].logit_hashes ? 1 : 0;
      id_differ += ids_differ(alone[i], both[i]) ? 1 : 0;
    }
  }
  MESSAGE("float numerics: " << hash_differ << " of 16 differ in logit hashes, " << id_differ << " in token ids");
  CHECK(t->metrics()["max_tokens_in_step"].get<int64_t>() >= 32);  // llama.cpp's switch to the batched kernel
  CHECK(hash_differ > 0);
  CHECK(id_differ > 0);
}

TEST_CASE("probes_engine: bad specs are rejected naming the setting") {
  probes::target_options opt;
  const std::string path = model_path("small");
  CHECK_THROWS_WITH_AS(probes::target_make_engine("engine:" + path + "?color=red", opt), doctest::Contains("unknown engine setting 'color'"),
                       input_error);
  CHECK_THROWS_WITH_AS(probes::target_make_engine("engine:" + path + "?threads=0", opt), doctest::Contains("threads must be"),
                       input_error);
  CHECK_THROWS_WITH_AS(probes::target_make_engine("engine:" + path + "?spec=draft", opt), doctest::Contains("spec must be ngram or none"),
                       input_error);
  CHECK_THROWS_WITH_AS(probes::target_make_engine("engine:" + path + "?numerics=fast", opt), doctest::Contains("fast"), input_error);
  CHECK_THROWS_WITH_AS(probes::target_make_engine("engine:" + path + "?ubatch", opt), doctest::Contains("KEY=VALUE"), input_error);
  CHECK_THROWS_WITH_AS(probes::target_make_engine("engine:/nonexistent/m.gguf", opt), doctest::Contains("not found"), input_error);
  CHECK_THROWS_AS(probes::target_make_engine("engine:", opt), input_error);
}

// Issue 48.4: the engine target read its recorded /completion body with a parser of its own, which
// disagreed with detaudit serve's: it ignored speculative.n_max and took n_probs up to the
// vocabulary size. Both now read it with runtime::completion_fields_parse.
TEST_CASE("probes_engine: the engine target reads a request's fields as detaudit serve's /completion does") {
  auto t = engine("threads=1&np=2&spec=ngram", "stories");
  const std::string repetitive = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat.";
  gen_request off = raw(repetitive, 32);
  off.extra = {{"speculative.n_max", 0}};
  const record r_off = t->complete(off);
  REQUIRE(r_off.error.empty());
  CHECK(r_off.evidence["draft_proposed"] == 0);
  const record r_on = t->complete(raw(repetitive, 32));
  REQUIRE(r_on.error.empty());
  CHECK(r_on.evidence["draft_proposed"].get<int64_t>() > 0);
  CHECK(diff(r_off, r_on) == "");  // exact numerics: the same tokens either way
  gen_request many = raw(PROMPTS[0], 4);
  many.n_probs = 101;
  const record r_many = t->complete(many);
  CHECK(r_many.http_status == 400);
  CHECK(r_many.error.find("'n_probs'") != std::string::npos);
}
