// The backends' activation caches (backends/ops_storage.h): what ops_exact derives from an
// activation (its quantized rows for the reference kernel, its packed rows for the fast kernels)
// is keyed on the activation's write generation, so an op that rewrites an activation in place
// can never leave a later matmul reading the old rows.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/synth.h"
#include "synth_util.h"
#include "test_util.h"

using namespace detaudit;

namespace {

std::vector<float> read(model::ops& o, model::act a) {
  std::vector<float> v(static_cast<size_t>(a.rows * a.cols));
  o.read_f32(a, v.data());
  return v;
}

// wq · x, where x is the embedding of `toks` rewritten in place by add(x, x, x) when `doubled`;
// `before`, when given, receives wq · x computed before the rewrite on the same ops.
std::vector<float> project(const model::model& m, const std::vector<model::step_token>& toks, bool doubled,
                           std::vector<float>* before) {
  std::unique_ptr<model::ops> o = backends::ops_create(backends::NUMERICS_EXACT, m, nullptr);
  o->begin_step(toks);
  const model::weight& wq = m.layers[0].wq;
  const model::act x = o->alloc(static_cast<int64_t>(toks.size()), m.hp().n_embd);
  o->embed(m.tok_embd, x);
  if (before) {
    const model::act y0 = o->alloc(x.rows, wq.n_out);
    o->matmul(wq, x, y0);
    *before = read(*o, y0);
  }
  if (doubled) o->add(x, x, x);
  const model::act y = o->alloc(x.rows, wq.n_out);
  o->matmul(wq, x, y);
  return read(*o, y);
}

}  // namespace

TEST_CASE("backends: a matmul after an in-place write to its input uses the new rows, on both exact matmul paths") {
  // Q8_0: the packed fast path; F16: the quantize-then-reference path.
  for (gguf::dtype t : {gguf::DTYPE_Q8_0, gguf::DTYPE_F16}) {
    CAPTURE(std::string(gguf::dtype_get(t).name));
    const std::string path = test::process_scratch_dir("backends_ops") + "/" + std::string(gguf::dtype_get(t).name) + ".gguf";
    model::synth_write(test::small_model(model::ARCH_LLAMA, t, 7, 256), path);
    std::shared_ptr<const model::model> m = model::model::load(path);
    const std::vector<model::step_token> toks = {{nullptr, 0, 5, false}, {nullptr, 1, 77, false}};

    std::vector<float> before;
    const std::vector<float> after = project(*m, toks, true, &before);
    const std::vector<float> fresh = project(*m, toks, true, nullptr);
    const std::vector<float> undoubled = project(*m, toks, false, nullptr);
    REQUIRE(after.size() == fresh.size());
    // The same ops instance, its cache warm from the first matmul, gives a fresh instance's bits...
    CHECK(std::memcmp(after.data(), fresh.data(), after.size() * sizeof(float)) == 0);
    // ...and those bits are not the pre-write ones (the rewrite changed the input).
    CHECK(std::memcmp(before.data(), undoubled.data(), before.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(after.data(), before.data(), after.size() * sizeof(float)) != 0);
  }
}
