// Model files that are valid GGUF but lie: stories260K rewritten with a hyperparameter or a
// tensor shape that disagrees with the rest. The loader must refuse each with input_error naming
// what disagrees, before any kernel reads a weight; a claimed context far beyond what the engine
// allocates is refused, or loads and runs within the engine's own cap.
#include <doctest/doctest.h>

#include <filesystem>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "gguf/gguf.h"
#include "model/model.h"
#include "runtime/context.h"
#include "runtime/prompt.h"
#include "tokenizer/vocab.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;

namespace {

// stories260K rewritten through the writer: `meta` may replace a metadata value (return true to
// keep the entry), `shape` may change a tensor's shape (keeping its byte count).
std::string rewritten(const std::string& name, const std::function<void(gguf::kv&)>& meta,
                      const std::function<void(const std::string&, std::vector<int64_t>&)>& shape) {
  const gguf::file f = gguf::file::open(test::fixture("models/stories260K.gguf"));
  gguf::writer w(f.alignment());
  for (gguf::kv e : f.metadata()) {
    if (e.key == "general.alignment") continue;
    meta(e);
    w.set(e.key, e.val);
  }
  for (const gguf::tensor_info& t : f.tensors()) {
    std::vector<int64_t> ne = t.ne;
    shape(t.name, ne);
    w.add_tensor(t.name, t.type, ne, f.tensor_data(t), t.n_bytes);
  }
  static const std::string dir = test::process_scratch_dir("model_hostile");
  const std::string path = dir + "/" + name + ".gguf";
  w.write(path);
  return path;
}

void no_shape(const std::string&, std::vector<int64_t>&) {}

std::function<void(gguf::kv&)> set_u32(const std::string& key, uint32_t v) {
  return [key, v](gguf::kv& e) {
    if (e.key == key) e.val = gguf::value::of_u32(v);
  };
}

}  // namespace

TEST_CASE("model_hostile: hyperparameters and shapes that disagree are refused, naming the tensor") {
  struct bad {
    const char* name;
    std::string path;
    const char* expect;
  };
  const std::vector<bad> cases = {
      {"embedding length doubled", rewritten("n_embd", set_u32("llama.embedding_length", 128), no_shape),
       "tensor 'token_embd.weight': expected shape [128, "},
      {"one block more than the file has", rewritten("n_layer", set_u32("llama.block_count", 6), no_shape),
       "blk.5"},
      {"feed-forward length off by one", rewritten("n_ff", set_u32("llama.feed_forward_length", 173), no_shape),
       "expected shape"},
      {"a weight reshaped to the same bytes", rewritten("reshaped", [](gguf::kv&) {}, [](const std::string& n, std::vector<int64_t>& ne) {
         if (n == "token_embd.weight") ne = {128, 256};
       }),
       "tensor 'token_embd.weight': expected shape [64, 256], found [128, 256]"},
  };
  for (const bad& c : cases) {
    CAPTURE(c.name);
    CHECK_THROWS_WITH_AS(model::model::load(c.path), doctest::Contains(c.expect), input_error);
  }
  for (float eps : {std::numeric_limits<float>::infinity(), std::nanf(""), -1e-5f}) {
    CAPTURE(eps);
    const std::string path = rewritten("eps", [eps](gguf::kv& e) {
      if (e.key == "llama.attention.layer_norm_rms_epsilon") e.val = gguf::value::of_f32(eps);
    }, no_shape);
    CHECK_THROWS_WITH_AS(model::model::load(path), doctest::Contains("key 'llama.attention.layer_norm_rms_epsilon': expected a positive finite number"),
                         input_error);
  }
  // Head counts that cannot split the embedding: refused too (the message is the loader's own).
  CHECK_THROWS_AS(model::model::load(rewritten("n_head0", set_u32("llama.attention.head_count", 0), no_shape)), input_error);
  CHECK_THROWS_AS(model::model::load(rewritten("n_head7", set_u32("llama.attention.head_count", 7), no_shape)), input_error);
}

TEST_CASE("model_hostile: a claimed context is bounded by the loader and costs nothing until used") {
  auto with_ctx = [](const char* name, uint64_t n) {
    return rewritten(name, [n](gguf::kv& e) {
      if (e.key == "llama.context_length") e.val = gguf::value::of_u64(n);
    }, no_shape);
  };
  CHECK_THROWS_WITH_AS(model::model::load(with_ctx("ctx40", uint64_t(1) << 40)),
                       doctest::Contains("key 'llama.context_length': expected a count from 1 to 134217728"), input_error);
  const auto m = model::model::load(with_ctx("ctx27", uint64_t(1) << 27));
  runtime::context c(m, runtime::context_params{});
  CHECK(c.params().n_ctx == int64_t(1) << 24);  // the engine's cap, not the file's claim
  const int32_t s = c.seq_new();
  const auto logits = c.decode({{s, 1, true}, {s, 42, true}});
  CHECK(logits.size() == 2);
}

namespace {

// Values a hostile file might put in a numeric key whose honest value is `v`.
std::vector<gguf::value> hostile_values(const gguf::value& v) {
  std::vector<gguf::value> out;
  if (v.type == gguf::VALUE_FLOAT32 || v.type == gguf::VALUE_FLOAT64) {
    for (float f : {0.0f, -1.0f, 1e-45f, 1e30f, std::numeric_limits<float>::infinity(), std::nanf("")})
      out.push_back(gguf::value::of_f32(f));
    return out;
  }
  const int64_t n = v.type == gguf::VALUE_INT8 || v.type == gguf::VALUE_INT16 || v.type == gguf::VALUE_INT32 ||
                            v.type == gguf::VALUE_INT64
                        ? v.i
                        : static_cast<int64_t>(v.u);
  for (int64_t x : {int64_t(0), int64_t(1), int64_t(2), int64_t(3), int64_t(7), n - 1, n + 1, 2 * n, int64_t(INT32_MAX)})
    if (x >= 0) out.push_back(gguf::value::of_u32(static_cast<uint32_t>(x)));
  out.push_back(gguf::value::of_i32(-1));
  out.push_back(gguf::value::of_u64((uint64_t(1) << 32) + static_cast<uint64_t>(n)));
  return out;
}

}  // namespace

// Every scalar key of stories260K (hyperparameters, token ids, the tokenizer's flags) set in turn
// to each hostile value, and to a string: the model either is refused with input_error or loads,
// tokenizes and evaluates two tokens. Anything else (another exception, a crash, a sanitizer
// report in the --sanitize build) fails.
TEST_CASE("model_hostile: every scalar key set to hostile values is refused or runs") {
  const gguf::file f = gguf::file::open(test::fixture("models/stories260K.gguf"));
  int refused = 0, loaded = 0;
  for (const gguf::kv& target : f.metadata()) {
    if (target.val.type == gguf::VALUE_ARRAY || target.val.type == gguf::VALUE_STRING || target.key == "general.alignment")
      continue;
    std::vector<gguf::value> values = hostile_values(target.val);
    values.push_back(gguf::value::of_string("x"));
    for (size_t k = 0; k < values.size(); ++k) {
      const std::string key = target.key;
      CAPTURE(key);
      CAPTURE(k);
      const gguf::value bad = values[k];
      const std::string path = rewritten("sweep", [&](gguf::kv& e) {
        if (e.key == key) e.val = bad;
      }, no_shape);
      try {
        const auto m = model::model::load(path);
        const std::vector<int32_t> ids = tokenizer::encode(m->vocab(), "Once upon a time", true, false);
        runtime::context c(m, runtime::context_params{});
        const int32_t s = c.seq_new();
        std::vector<runtime::token_in> batch;
        for (size_t i = 0; i < std::min<size_t>(ids.size(), 2); ++i) batch.push_back({s, ids[i], true});
        const std::vector<std::vector<float>> logits = c.decode(batch);  // input_error when the context is too small
        CHECK(logits.size() == batch.size());
        ++loaded;
      } catch (const input_error&) {
        ++refused;
      } catch (const std::exception& e) {
        FAIL_CHECK("not an input_error: " << e.what());
      }
    }
  }
  MESSAGE("hostile scalar values: " << refused << " refused, " << loaded << " loaded and ran");
  CHECK(refused > 0);
  CHECK(loaded > 0);
}

// Every 2-D weight with its dimensions swapped (the same bytes, another shape): always refused.
TEST_CASE("model_hostile: every weight with its dimensions swapped is refused") {
  const gguf::file f = gguf::file::open(test::fixture("models/stories260K.gguf"));
  int swapped = 0;
  for (const gguf::tensor_info& t : f.tensors()) {
    if (t.ne.size() != 2 || t.ne[0] == t.ne[1]) continue;
    const std::string name = t.name;
    CAPTURE(name);
    const std::string path = rewritten("swap", [](gguf::kv&) {}, [&](const std::string& n, std::vector<int64_t>& ne) {
      if (n == name) std::swap(ne[0], ne[1]);
    });
    const std::string expect = "tensor '" + name + "': expected shape";
    CHECK_THROWS_WITH_AS(model::model::load(path), doctest::Contains(expect.c_str()), input_error);
    ++swapped;
  }
  CHECK(swapped >= 10);
}

namespace {

gguf::value f64_value(double v) {
  gguf::value out;
  out.type = gguf::VALUE_FLOAT64;
  out.f = v;
  return out;
}

// stories260K with each of `keys` set: replaced where the file has it, else added.
std::string with_keys(const std::string& name, const std::vector<gguf::kv>& keys) {
  const gguf::file f = gguf::file::open(test::fixture("models/stories260K.gguf"));
  gguf::writer w(f.alignment());
  for (gguf::kv e : f.metadata()) {
    if (e.key == "general.alignment") continue;
    for (const gguf::kv& k : keys)
      if (k.key == e.key) e.val = k.val;
    w.set(e.key, e.val);
  }
  for (const gguf::kv& k : keys)
    if (!f.find(k.key)) w.set(k.key, k.val);
  for (const gguf::tensor_info& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.n_bytes);
  static const std::string dir = test::process_scratch_dir("model_hostile_keys");
  const std::string path = dir + "/" + name + ".gguf";
  w.write(path);
  return path;
}

}  // namespace

// stories260K's vocabulary cut to 500 of its 512 entries: the sampler picked an id past the end of
// the vocabulary on the first request and `std::out_of_range` aborted serve and the engine target
// (exit 134, 0 records). Refused at load, naming both sizes.
TEST_CASE("model_hostile: a vocabulary smaller than the embedding rows is refused at load, naming both sizes") {
  const std::string path = rewritten("short_vocab", [](gguf::kv& e) {
    if (e.val.type == gguf::VALUE_ARRAY && e.key.rfind("tokenizer.ggml.", 0) == 0 && e.val.arr.size() == 512) e.val.arr.resize(500);
  }, no_shape);
  CHECK_THROWS_WITH_AS(model::model::load(path), doctest::Contains("'tokenizer.ggml.tokens' holds 500 tokens"), input_error);
  CHECK_THROWS_WITH_AS(model::model::load(path), doctest::Contains("512 rows of tensor 'token_embd.weight'"), input_error);
}

// stories260K's vocabulary grown to 520 entries over its 512 embedding rows: a prompt or a
// record could hold a token the model has no row for, and `report --oracle` aborted on one.
// Refused at load, as llama.cpp refuses it.
TEST_CASE("model_hostile: a vocabulary larger than the embedding rows is refused at load, naming both sizes") {
  const std::string path = rewritten("long_vocab", [](gguf::kv& e) {
    if (e.val.type != gguf::VALUE_ARRAY || e.key.rfind("tokenizer.ggml.", 0) != 0 || e.val.arr.size() != 512) return;
    for (int k = 0; k < 8; ++k)
      e.val.arr.push_back(e.key == "tokenizer.ggml.tokens" ? gguf::value::of_string("<extra_" + std::to_string(k) + ">")
                                                           : e.val.arr.back());
  }, no_shape);
  CHECK_THROWS_WITH_AS(model::model::load(path), doctest::Contains("'tokenizer.ggml.tokens' holds 520 tokens, more than the 512 rows"),
                       input_error);
}

// A chat template past CHAT_TEMPLATE_MAX_BYTES: the model loads (raw prompts need no template),
// the template is not read, and a chat prompt is refused naming its size unless --chat-template
// names a family.
TEST_CASE("model_hostile: a 2 MB chat template loads, is not read, and chat without --chat-template is refused") {
  const std::string path = rewritten("big_template", [](gguf::kv&) {}, no_shape);
  const gguf::file f = gguf::file::open(path);
  gguf::writer w(f.alignment());
  for (const gguf::kv& e : f.metadata())
    if (e.key != "general.alignment") w.set(e.key, e.val);
  w.set("tokenizer.chat_template", gguf::value::of_string(std::string(2 * 1000 * 1000, ' ') + "<|im_start|>x<|im_end|>"));
  for (const gguf::tensor_info& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.n_bytes);
  const std::string big = path + ".big.gguf";
  w.write(big);
  const auto m = model::model::load(big);
  CHECK(m->chat_template().too_large);
  CHECK_THROWS_WITH_AS(runtime::generate_chat_tokens(*m, {{"user", "Hi"}}, "", true, ""),
                       doctest::Contains("chat template is 2000023 bytes, more than the 1048576 detaudit reads"), input_error);
  CHECK_FALSE(runtime::generate_chat_tokens(*m, {{"user", "Hi"}}, "chatml", true, "").empty());
  // The message names the file, not where it lives: a server sends it to its clients.
  try {
    runtime::generate_chat_tokens(*m, {{"user", "Hi"}}, "", true, "");
    FAIL("expected an input_error");
  } catch (const input_error& e) {
    const std::string msg = e.what();
    CHECK(msg.rfind(std::filesystem::path(big).filename().string() + ": chat template is", 0) == 0);
    CHECK(msg.find('/') == std::string::npos);
  }
}

// Numbers that passed the loader and failed later (inf or 0 inside RoPE or RMSNorm, a server
// answering 500 forever): each refused at load, naming the key.
TEST_CASE("model_hostile: hostile RoPE and RMSNorm numbers are refused at load, naming the key") {
  const gguf::kv linear = {"llama.rope.scaling.type", gguf::value::of_string("linear")};
  CHECK_NOTHROW(model::model::load(with_keys("linear", {linear})));  // no factor: 1
  CHECK_NOTHROW(model::model::load(with_keys("linear4", {linear, {"llama.rope.scaling.factor", gguf::value::of_f32(4)}})));
  for (float factor : {0.0f, -2.0f, 1e38f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    CAPTURE(factor);
    const std::string path = with_keys("scaling", {linear, {"llama.rope.scaling.factor", gguf::value::of_f32(factor)}});
    CHECK_THROWS_WITH_AS(model::model::load(path), doctest::Contains("key 'llama.rope.scaling.factor'"), input_error);
  }
  CHECK_THROWS_WITH_AS(model::model::load(with_keys("freq_base", {{"llama.rope.freq_base", f64_value(5e-324)}})),
                       doctest::Contains("key 'llama.rope.freq_base'"), input_error);
  CHECK_THROWS_WITH_AS(model::model::load(with_keys("eps_f64", {{"llama.attention.layer_norm_rms_epsilon", f64_value(5e-324)}})),
                       doctest::Contains("key 'llama.attention.layer_norm_rms_epsilon'"), input_error);
  CHECK_THROWS_WITH_AS(model::model::load(with_keys("eps_sub", {{"llama.attention.layer_norm_rms_epsilon", gguf::value::of_f32(1e-40f)}})),
                       doctest::Contains("key 'llama.attention.layer_norm_rms_epsilon'"), input_error);
}

// One NaN in a weight used to surface as "exact numerics: non-finite value nan (expected a
// finite float)" at the first request, with nothing saying where it came from: each tensor of
// stories260K with a NaN in its first element (every row's, for the embedding) is refused naming it,
// at load or at the first evaluation.
TEST_CASE("model_hostile: a NaN in any weight is refused naming the tensor") {
  const gguf::file f = gguf::file::open(test::fixture("models/stories260K.gguf"));
  int checked = 0;
  for (const gguf::tensor_info& t : f.tensors()) {
    REQUIRE(t.type == gguf::DTYPE_F32);
    const std::string name = t.name;
    CAPTURE(name);
    std::vector<float> data(static_cast<size_t>(t.n_elements));
    std::memcpy(data.data(), f.tensor_data(t), t.n_bytes);
    const uint64_t row = static_cast<uint64_t>(t.ne[0]);
    for (uint64_t r = 0; r < (name == "token_embd.weight" ? t.n_elements / row : 1); ++r) data[r * row] = std::nanf("");
    gguf::writer w(f.alignment());
    for (const gguf::kv& e : f.metadata())
      if (e.key != "general.alignment") w.set(e.key, e.val);
    for (const gguf::tensor_info& u : f.tensors())
      w.add_tensor(u.name, u.type, u.ne, u.name == name ? reinterpret_cast<const uint8_t*>(data.data()) : f.tensor_data(u), u.n_bytes);
    static const std::string dir = test::process_scratch_dir("model_hostile_nan");
    const std::string path = dir + "/nan.gguf";
    w.write(path);
    try {
      const auto m = model::model::load(path);
      runtime::context c(m, runtime::context_params{});
      const int32_t s = c.seq_new();
      c.decode({{s, 1, true}, {s, 42, true}});
      FAIL_CHECK("a NaN in " << name << " was not refused");
    } catch (const input_error& e) {
      CHECK_MESSAGE(std::string(e.what()).find("tensor '" + name + "'") != std::string::npos, std::string(e.what()));
    }
    ++checked;
  }
  CHECK(checked > 40);
}
