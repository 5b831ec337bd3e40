// End to end on the GPU backend: every architecture and weight type of the synthetic models,
// and stories260K, evaluated on the CPU backend and on the GPU (the test executable's API), must
// give the same logits bit for bit (memcmp): the prompt in one step then greedy tokens one at a
// time; the prompt in chunks (n_ubatch 7); the sequence inside a batch of other sequences; and a
// KV cache saved on one backend and restored on the other. Also the command line:
// `generate --backend X --hashes` prints the CPU's per-step logit hashes.
//
// The project's build defines DETAUDIT_TEST_HAVE_FIXTURES (the fixtures folder exists) and
// DETAUDIT_TEST_HAVE_CLI (the detaudit binary is built); scripts/gpu-check.sh, which builds only
// the engine, defines neither and runs the synthetic-model cases.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "child_process.h"
#include "gpu_test_util.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/context.h"
#include "synth_util.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;

namespace {

using logits_t = std::vector<std::vector<float>>;
using runtime::token_in;

runtime::context_params params(runtime::backend_kind b, int64_t n_ubatch = 512) {
  runtime::context_params p;
  p.backend = b;
  p.device = test::gpu_test_device_index();
  p.n_ubatch = n_ubatch;
  p.n_ctx = 128;
  return p;
}

std::vector<token_in> entries(int32_t seq, const std::vector<int32_t>& toks, size_t begin, size_t end) {
  std::vector<token_in> b;
  for (size_t i = begin; i < end; ++i) b.push_back({seq, toks[i], true});
  return b;
}

// The prompt in steps of n_ubatch, then n_gen greedy tokens one at a time (appended to toks).
logits_t eval_greedy(std::shared_ptr<const model::model> m, const runtime::context_params& p, std::vector<int32_t>& toks,
                     int n_gen) {
  runtime::context c(std::move(m), p);
  const int32_t s = c.seq_new();
  logits_t out = c.decode(entries(s, toks, 0, toks.size()));
  for (int g = 0; g < n_gen; ++g) {
    const std::vector<float>& l = out.back();
    toks.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
    out.push_back(c.decode({{s, toks.back(), true}})[0]);
  }
  return out;
}

// The whole sequence in one step.
logits_t eval_whole(std::shared_ptr<const model::model> m, const runtime::context_params& p, const std::vector<int32_t>& toks) {
  runtime::context c(std::move(m), p);
  const int32_t s = c.seq_new();
  return c.decode(entries(s, toks, 0, toks.size()));
}

// The target's tokens two at a time between three other sequences of different lengths.
logits_t eval_crowd(std::shared_ptr<const model::model> m, const runtime::context_params& p, const std::vector<int32_t>& toks) {
  runtime::context c(m, p);
  const int32_t n_vocab = static_cast<int32_t>(m->hp().n_vocab);
  std::vector<int32_t> others = {c.seq_new(), c.seq_new(), c.seq_new()};
  const int32_t target = c.seq_new();
  c.decode({{others[1], 5, false}, {others[1], 9, false}, {others[1], 13, false}});
  logits_t out;
  for (size_t pos = 0, round = 0; pos < toks.size(); ++round) {
    std::vector<token_in> b;
    for (size_t k = 0; k < others.size(); ++k) {
      b.push_back({others[k], static_cast<int32_t>((7 + 31 * k + 17 * round) % n_vocab), (k + round) % 2 == 0});
      if (k == 1)
        for (size_t i = 0; i < 2 && pos < toks.size(); ++i) b.push_back({target, toks[pos++], true});
    }
    std::vector<std::vector<float>> l = c.decode(b);
    size_t li = 0;
    for (const token_in& t : b) {
      if (!t.logits) continue;
      if (t.seq == target) out.push_back(l[li]);
      ++li;
    }
  }
  return out;
}

// The first n_prefix tokens evaluated on `first` and saved; the rest on `second` after a restore.
logits_t eval_handover(std::shared_ptr<const model::model> m, const runtime::context_params& first,
                       const runtime::context_params& second, const std::vector<int32_t>& toks, size_t n_prefix,
                       const std::string& file) {
  logits_t out;
  {
    runtime::context c(m, first);
    const int32_t s = c.seq_new();
    out = c.decode(entries(s, toks, 0, n_prefix));
    c.seq_save(s, file);
  }
  runtime::context c(m, second);
  const int32_t s = c.seq_restore(file);
  for (auto& l : c.decode(entries(s, toks, n_prefix, toks.size()))) out.push_back(std::move(l));
  return out;
}

std::vector<int32_t> prompt_of(const model::model& m) {
  std::vector<int32_t> p = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};
  for (int i = 0; i < 10; ++i) p.push_back(static_cast<int32_t>((300 + 53 * i) % m.hp().n_vocab));
  return p;
}

// Every condition on the GPU against the CPU baseline; returns the names of those that differ.
std::vector<std::string> differing_conditions(const std::string& path, const std::string& scratch) {
  test::gpu_test_device();  // fails loudly when there is no device
  auto m = model::model::load(path);
  const runtime::backend_kind gpu = test::gpu_test_backend();
  std::vector<int32_t> toks = prompt_of(*m);
  const size_t n_prompt = toks.size();
  const logits_t base = eval_greedy(m, params(runtime::BACKEND_CPU), toks, 4);
  std::vector<int32_t> prompt(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(n_prompt));
  std::vector<std::string> differ;
  auto check = [&](const std::string& name, const logits_t& l) {
    if (!test::same_logit_bits(base, l)) differ.push_back(name);
  };
  check("prompt in one step, then token by token", eval_greedy(m, params(gpu), prompt, 4));
  CHECK(prompt == toks);
  check("whole sequence in one step", eval_whole(m, params(gpu), toks));
  check("chunked prefill, n_ubatch 7", eval_whole(m, params(gpu, 7), toks));
  check("inside a batch of 4 sequences", eval_crowd(m, params(gpu, 5), toks));
  check("saved on the GPU, restored on the CPU",
        eval_handover(m, params(gpu), params(runtime::BACKEND_CPU), toks, n_prompt, scratch + "/g2c.seq"));
  check("saved on the CPU, restored on the GPU",
        eval_handover(m, params(runtime::BACKEND_CPU), params(gpu), toks, n_prompt, scratch + "/c2g.seq"));
  return differ;
}

// Every condition must equal the CPU baseline; a failure names the conditions that differ.
void check_same(const std::string& path, const std::string& scratch) {
  const std::vector<std::string> differ = differing_conditions(path, scratch);
  std::string names;
  for (const std::string& d : differ) names += (names.empty() ? "" : "; ") + d;
  CHECK_MESSAGE(differ.empty(), "conditions that differ from the CPU backend: " << names);
}

std::string synth_path(model::arch_id a, gguf::dtype t, const std::string& dir) {
  const std::string path = dir + "/" + model::arch_name(a) + "-" + gguf::dtype_get(t).name + ".gguf";
  model::synth_options o = test::small_model(a, t, 13, 128);
  model::synth_write(o, path);
  return path;
}

// One test case per weight type, each over llama, qwen2, qwen3, phi3 and qwen3moe, and one of gemma2,
// gemma3 and gpt-oss in turn (by the type's id) with a sliding window of 5 positions, shorter than
// the prompt, so that the rows of one step start their windows at different positions.
void check_type(gguf::dtype t) {
  const std::string dir = test::scratch_dir(std::string("gpu_e2e_") + gguf::dtype_get(t).name);
  for (model::arch_id a : {model::ARCH_LLAMA, model::ARCH_QWEN2, model::ARCH_QWEN3, model::ARCH_PHI3, model::ARCH_QWEN3MOE}) {
    CAPTURE(model::arch_name(a));
    CAPTURE(gguf::dtype_get(t).name);
    check_same(synth_path(a, t, dir), dir);
  }
  const model::arch_id windowed[] = {model::ARCH_GEMMA2, model::ARCH_GEMMA3, model::ARCH_GPT_OSS};
  const model::arch_id a = windowed[static_cast<size_t>(t) % 3];
  CAPTURE(model::arch_name(a));
  CAPTURE(gguf::dtype_get(t).name);
  const std::string path = dir + "/" + model::arch_name(a) + "-window5.gguf";
  model::synth_options o = test::small_model(a, t, 17, 128);
  o.sliding_window = 5;
  model::synth_write(o, path);
  check_same(path, dir);
}

}  // namespace

TEST_CASE("gpu e2e: F32 models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_F32); }
TEST_CASE("gpu e2e: F16 models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_F16); }
TEST_CASE("gpu e2e: BF16 models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_BF16); }
TEST_CASE("gpu e2e: Q4_0 models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q4_0); }
TEST_CASE("gpu e2e: Q4_1 models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q4_1); }
TEST_CASE("gpu e2e: Q5_0 models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q5_0); }
TEST_CASE("gpu e2e: Q5_1 models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q5_1); }
TEST_CASE("gpu e2e: Q8_0 models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q8_0); }
TEST_CASE("gpu e2e: Q2_K models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q2_K); }
TEST_CASE("gpu e2e: Q3_K models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q3_K); }
TEST_CASE("gpu e2e: Q4_K models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q4_K); }
TEST_CASE("gpu e2e: Q5_K models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q5_K); }
TEST_CASE("gpu e2e: Q6_K models equal the CPU backend bit for bit") { check_type(gguf::DTYPE_Q6_K); }

#ifdef DETAUDIT_TEST_HAVE_FIXTURES
TEST_CASE("gpu e2e: stories260K (head_dim 8, n_ff 172) equals the CPU backend bit for bit") {
  const std::string dir = test::scratch_dir("gpu_e2e_stories");
  check_same(test::fixture("models/stories260K.gguf"), dir);
}
#endif

TEST_CASE("gpu e2e: a GPU backend refuses float numerics with a clear error") {
  test::gpu_test_device();
  const std::string dir = test::scratch_dir("gpu_e2e_refuse");
  auto m = model::model::load(synth_path(model::ARCH_LLAMA, gguf::DTYPE_Q8_0, dir));
  runtime::context_params p = params(test::gpu_test_backend());
  p.numerics = runtime::NUMERICS_FLOAT;
  CHECK_THROWS_WITH_AS(runtime::context(m, p), doctest::Contains("runs --numerics exact only"), input_error);
  p.numerics = runtime::NUMERICS_EXACT;
  p.device = 99;
  CHECK_THROWS_WITH_AS(runtime::context(m, p), doctest::Contains("no such"), input_error);
}

// gpt-oss as llama.cpp's MXFP4_MOE writes it: the experts in mxfp4 (E8M0 block scales), the rest q8_0.
TEST_CASE("gpu e2e: gpt-oss with mxfp4 experts equals the CPU backend bit for bit") {
  test::gpu_test_device();
  const std::string dir = test::scratch_dir("gpu_e2e_mxfp4");
  const std::string path = dir + "/gpt-oss-mxfp4.gguf";
  model::synth_options o = test::small_model(model::ARCH_GPT_OSS, gguf::DTYPE_Q8_0, 13, 128);
  o.sliding_window = 5;
  for (const char* t : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) o.tensor_types.emplace_back(t, gguf::DTYPE_MXFP4);
  model::synth_write(o, path);
  check_same(path, dir);
}

#ifdef DETAUDIT_TEST_HAVE_CLI
// The command line end to end: the same text, per-step logit hashes and chained hash from both
// backends, for a synthetic model of every weight type (the architectures in turn); one of them
// beside three companion sequences.
TEST_CASE("gpu e2e: detaudit generate --hashes prints the same lines on the GPU as on the CPU for every weight type") {
  test::gpu_test_device();
  const std::string dir = test::scratch_dir("gpu_e2e_cli");
  const gguf::dtype types[] = {gguf::DTYPE_F32,  gguf::DTYPE_F16,  gguf::DTYPE_BF16, gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_1,
                               gguf::DTYPE_Q5_0, gguf::DTYPE_Q5_1, gguf::DTYPE_Q8_0, gguf::DTYPE_Q2_K, gguf::DTYPE_Q3_K,
                               gguf::DTYPE_Q4_K, gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K};
  const model::arch_id archs[] = {model::ARCH_LLAMA, model::ARCH_QWEN2, model::ARCH_QWEN3, model::ARCH_PHI3, model::ARCH_QWEN3MOE};
  for (size_t i = 0; i < std::size(types); ++i) {
    const std::string model = synth_path(archs[i % std::size(archs)], types[i], dir);
    CAPTURE(model);
    const std::string base = test::shell_quote(test::detaudit_bin()) + " generate -m " + test::shell_quote(model) +
                             " -p 'Once upon a time' -n 8 --hashes -t 1" + (i == 10 ? " --batch-with 3" : "");
    const test::cmd_result cpu = test::run_cmd(base + " --backend cpu");
    const test::cmd_result gpu = test::run_cmd(base + " --backend " + kernels::gpu::api_name(test::gpu_test_api()));
    REQUIRE_MESSAGE(cpu.exit_code == 0, cpu.err);
    REQUIRE_MESSAGE(gpu.exit_code == 0, gpu.err);
    CHECK(cpu.out.find("chained ") != std::string::npos);
    CHECK(gpu.out == cpu.out);
  }
}

// `detaudit serve --backend GPU` audited by `detaudit run` under concurrency and the prompt cache,
// and the same against `serve --backend cpu`: every condition identical within each run (the
// probes' verdict, exit 0 under --fail-on any), and the two runs identical item by item (compare).
TEST_CASE("gpu e2e: serve on the GPU answers as serve on the CPU, under concurrency and the cache") {
  test::gpu_test_device();
  const std::string dir = test::scratch_dir("gpu_e2e_serve");
  const std::string path = dir + "/gemma2-window5.gguf";
  model::synth_options o = test::small_model(model::ARCH_GEMMA2, gguf::DTYPE_Q4_K, 17, 256);
  o.sliding_window = 5;
  model::synth_write(o, path);
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time there was\nThe cat sat on the\n");
  const std::string bin = test::shell_quote(test::detaudit_bin());
  auto audit = [&](const char* backend) {
    std::vector<std::string> extra = {"-t", "1", "-np", "4", "--backend", backend};
    if (std::string(backend) != "cpu") extra.insert(extra.end(), {"--device", std::to_string(test::gpu_test_device_index())});
    test::serve_process server(test::detaudit_bin(), path, extra, dir + "/serve-" + backend + ".err");
    const std::string out = dir + "/run-" + backend;
    const test::cmd_result r =
        test::run_cmd(bin + " run --target http://127.0.0.1:" + std::to_string(server.port) + " --prompts " + prompts +
                      " --raw -n 8 --probe concurrency,cache --concurrency 4 --fail-on any --out " + out);
    CHECK_MESSAGE(r.exit_code == 0, backend << ": " << r.err);
    CHECK(server.proc.stop() == 0);
    return out;
  };
  const std::string gpu = audit(kernels::gpu::api_name(test::gpu_test_api()));
  const std::string cpu = audit("cpu");
  const test::cmd_result c = test::run_cmd(bin + " compare " + cpu + " " + gpu + " --fail-on any --format json");
  INFO(c.err);
  CHECK(c.exit_code == 0);
  const nlohmann::json rep = nlohmann::json::parse(c.out);
  REQUIRE(rep["pairs"].is_array());
  REQUIRE_FALSE(rep["pairs"].empty());
  for (const nlohmann::json& pair : rep["pairs"]) {
    CHECK(pair["differ"] == 0);
    CHECK(pair["items"].get<int64_t>() > 0);
  }
}

// `--oracle engine:MODEL.gguf?backend=GPU`: an audit arbitrated on the GPU gets the CPU oracle's
// figures, every step's ids, ranks and log-probs equal (JSON equality: the doubles bit for bit).
TEST_CASE("gpu e2e: --oracle engine:MODEL.gguf?backend=GPU writes the CPU oracle's figures") {
  test::gpu_test_device();
  const std::string dir = test::scratch_dir("gpu_e2e_oracle");
  const std::string model = synth_path(model::ARCH_GEMMA2, gguf::DTYPE_Q8_0, dir);
  const std::string prompts = test::write_file(dir + "/p.txt", "Once upon a time\nThe cat sat\n");
  const std::string bin = test::shell_quote(test::detaudit_bin());
  const test::cmd_result run = test::run_cmd(bin + " run --target 'engine:" + model + "?threads=1' --prompts " + prompts +
                                             " --raw -n 6 --fail-on none --out " + dir + "/run");
  REQUIRE_MESSAGE(run.exit_code == 0, run.err);
  auto oracle_of = [&](const std::string& query) {
    const test::cmd_result r = test::run_cmd(bin + " report " + dir + "/run --fail-on none --oracle 'engine:" + model + query + "'");
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return nlohmann::json::parse(test::file_text(dir + "/run/oracle.json"));
  };
  const nlohmann::json cpu = oracle_of("");
  const nlohmann::json gpu = oracle_of(std::string("?backend=") + kernels::gpu::api_name(test::gpu_test_api()) +
                                       "&device=" + std::to_string(test::gpu_test_device_index()));
  REQUIRE(cpu["responses"].size() >= 4);  // alone and control of each prompt, at least
  CHECK(gpu["model"]["sha256"] == cpu["model"]["sha256"]);
  CHECK(gpu["model"]["spec"].get<std::string>().find("backend=") != std::string::npos);
  CHECK(gpu["responses"] == cpu["responses"]);
}
#endif
