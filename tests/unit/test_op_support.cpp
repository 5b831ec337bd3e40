// backends/op_support.h: the table of what each backend computes. The parts each architecture
// needs (from synthetic models of every architecture, the table's rows being what forward.cpp
// calls), what each GPU backend lacks for them, and the table in docs/backends.md, which must be
// the table the code declares, row for row.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backends/op_support.h"
#include "gguf/weight_types.h"
#include "model/model.h"
#include "model/synth.h"
#include "synth_util.h"
#include "test_util.h"

using namespace detaudit;

namespace {

std::shared_ptr<const model::model> synth_model(model::arch_id a, const std::string& dir,
                                                const std::vector<std::pair<std::string, gguf::dtype>>& types = {}) {
  model::synth_options o = test::small_model(a, gguf::DTYPE_Q8_0, 5, 256);
  o.n_expert = 4;
  o.n_expert_used = 2;
  o.tensor_types = types;
  const std::string path = dir + "/" + model::arch_name(a) + (types.empty() ? "" : "-mixed") + ".gguf";
  model::synth_write(o, path);
  return model::model::load(path);
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

TEST_CASE("op support: each architecture needs the parts forward.cpp calls for it, and the GPUs lack none of them") {
  const std::string dir = test::scratch_dir("op_support_arch");
  struct want {
    model::arch_id arch;
    std::vector<std::string> needs, not_needs, gpu_missing;
  };
  const want cases[] = {
      {model::ARCH_LLAMA, {"swiglu", "weights: q8_0", "weights: f32"}, {"geglu", "add_bias", "moe_route", "softcap"}, {}},
      {model::ARCH_QWEN2, {"swiglu", "add_bias"}, {"attention: sinks"}, {}},
      {model::ARCH_PHI3, {"swiglu"}, {"attention: sliding window"}, {}},
      {model::ARCH_QWEN3MOE, {"swiglu", "moe_route", "scale_rows"}, {"swiglu_oai"}, {}},
      {model::ARCH_GEMMA2,
       {"geglu", "scale", "softcap", "attention: sliding window", "attention: soft cap"},
       {"swiglu", "attention: sinks"},
       {}},
      {model::ARCH_GEMMA3, {"geglu", "scale", "attention: sliding window"}, {"softcap", "attention: soft cap"}, {}},
      {model::ARCH_GPT_OSS,
       {"swiglu_oai", "add_bias", "attention: sinks", "attention: sliding window", "moe_route", "scale_rows"},
       {"swiglu", "geglu"},
       {}},
  };
  for (const want& w : cases) {
    CAPTURE(model::arch_name(w.arch));
    const auto m = synth_model(w.arch, dir);
    const std::vector<std::string> needed = backends::parts_needed(*m);
    for (const std::string& p : w.needs) CHECK_MESSAGE(has(needed, p), p);
    for (const std::string& p : w.not_needs) CHECK_MESSAGE(!has(needed, p), p);
    CHECK(backends::parts_missing(backends::BACKEND_CPU, *m).empty());
    for (backends::backend_kind b : {backends::BACKEND_VULKAN, backends::BACKEND_CUDA}) {
      std::vector<std::string> missing = backends::parts_missing(b, *m), expected = w.gpu_missing;
      std::sort(missing.begin(), missing.end());
      std::sort(expected.begin(), expected.end());
      CHECK(missing == expected);
    }
  }
  // gpt-oss's experts in mxfp4 (llama.cpp's MXFP4_MOE).
  const auto oss = synth_model(model::ARCH_GPT_OSS, dir, {{"ffn_gate_exps", gguf::DTYPE_MXFP4},
                                                          {"ffn_up_exps", gguf::DTYPE_MXFP4},
                                                          {"ffn_down_exps", gguf::DTYPE_MXFP4}});
  CHECK(has(backends::parts_needed(*oss), "weights: mxfp4"));
  CHECK(backends::parts_missing(backends::BACKEND_VULKAN, *oss).empty());
  CHECK(backends::parts_missing(backends::BACKEND_CUDA, *oss).empty());
}

TEST_CASE("op support: every part a model can need is a row, once, and every weight type the engine computes has one") {
  std::set<std::string> parts;
  for (const backends::op_support_row& r : backends::op_support()) {
    CHECK_MESSAGE(parts.insert(r.part).second, "row given twice: " << r.part);
    CHECK(r.cpu == backends::support::device);  // the CPU computes everything
    CHECK_FALSE(r.used_by.empty());
  }
  for (const gguf::weight_type& t : gguf::weight_types())
    CHECK_MESSAGE(parts.count(std::string("weights: ") + gguf::dtype_get(t.type).name), gguf::dtype_get(t.type).name);
  for (const char* p : {"matmul", "rms_norm", "rope", "add", "add_bias", "kv_store", "attention", "attention: sliding window",
                        "attention: soft cap", "attention: sinks", "swiglu", "geglu", "swiglu_oai", "scale", "softcap",
                        "moe_route", "scale_rows"})
    CHECK_MESSAGE(parts.count(p), p);
}

TEST_CASE("op support: docs/backends.md holds the table the code declares, row for row") {
  const std::string doc = test::file_text(test::test_data("../../docs/backends.md"));
  const std::string open = "<!-- op-support: detaudit devices --ops -->\n", close = "<!-- /op-support -->";
  const size_t a = doc.find(open), b = doc.find(close);
  REQUIRE_MESSAGE(a != std::string::npos, "docs/backends.md has no " << open);
  REQUIRE(b != std::string::npos);
  REQUIRE(b > a);
  const std::string table = doc.substr(a + open.size(), b - a - open.size());
  // The text `detaudit devices --ops` prints; paste it between the markers when a row changes.
  CHECK(table == backends::op_support_markdown());
}
