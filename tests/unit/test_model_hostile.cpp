// Model files that are valid GGUF but lie: stories260K rewritten with a hyperparameter or a
// tensor shape that disagrees with the rest. The loader must refuse each with input_error naming
// what disagrees, before any kernel reads a weight; a claimed context far beyond what the engine
// allocates is refused, or loads and runs within the engine's own cap.
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "gguf/gguf.h"
#include "model/model.h"
#include "runtime/context.h"
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
  static const std::string dir = test::scratch_dir("model_hostile");
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
