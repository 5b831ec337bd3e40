// Labels: bench's model description on a file whose general.file_type is not an
// integer (a cosmetic key must not stop the benchmark), and synth_apply_mixture's layer choice
// against llama.cpp's use_more_bits.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/bench.h"
#include "synth_util.h"
#include "test_util.h"

using namespace detaudit;

TEST_CASE("bench: a string general.file_type does not make bench_describe throw") {
  const std::string dir = test::process_scratch_dir("misc_ft");
  const std::string src = dir + "/src.gguf";
  model::synth_write(test::small_model(model::ARCH_LLAMA, gguf::DTYPE_Q8_0), src);
  const gguf::file f = gguf::file::open(src);
  gguf::writer w(f.alignment());
  for (gguf::kv e : f.metadata()) {
    if (e.key == "general.alignment") continue;
    if (e.key == "general.file_type") e.val = gguf::value::of_string("MOSTLY_Q8_0");
    w.set(e.key, e.val);
  }
  for (const gguf::tensor_info& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.n_bytes);
  const std::string path = dir + "/string_ft.gguf";
  w.write(path);
  auto m = model::model::load(path);  // the model itself loads and runs
  CHECK_NOTHROW(runtime::bench_describe(*m));
}

TEST_CASE("synth: the q4_k_m mixture picks llama.cpp's layers") {
  for (int64_t n : {1, 2, 3, 8, 22, 32}) {
    CAPTURE(n);
    model::synth_options o = test::small_model(model::ARCH_LLAMA, gguf::DTYPE_F16);
    o.n_layer = n;
    REQUIRE(model::synth_apply_mixture(o, "q4_k_m"));
    std::set<int64_t> got;
    for (const auto& [name, t] : o.tensor_types)
      if (name.find("attn_v") != std::string::npos) got.insert(std::stoll(name.substr(4)));
    std::set<int64_t> want;
    for (int64_t i = 0; i < n; ++i)
      if (i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2) want.insert(i);
    CHECK(got == want);
  }
}
