// inspect on every GGUF in the fixtures: architecture, block count and vocabulary size as their
// sources give them (docs/fixtures.md), through the CLI with --json.
#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "test_util.h"

using detaudit::test::fixture;
using detaudit::test::run_cmd;
using detaudit::test::shell_quote;

namespace {

struct expected_file {
  const char* path;
  const char* arch;
  int64_t n_layer;
  int64_t n_vocab;
  bool runnable;
};

const expected_file FILES[] = {
    {"models/stories260K.gguf", "llama", 5, 512, true},
    {"models/llama-2-tiny-random.gguf", "llama", 1, 32000, true},
    {"vocab/ggml-vocab-llama-spm.gguf", "llama", 32, 32000, false},
    {"vocab/ggml-vocab-phi-3.gguf", "phi3", 32, 32064, false},
    {"vocab/ggml-vocab-gpt-2.gguf", "gpt2", 12, 50257, false},
};

nlohmann::json inspect_json(const std::string& path, const std::string& extra = "") {
  auto r = run_cmd(shell_quote(detaudit::test::detaudit_bin()) + " inspect --json " + extra + " " + shell_quote(path));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("inspect: real fixture files") {
  for (const expected_file& e : FILES) {
    CAPTURE(e.path);
    nlohmann::json info = inspect_json(fixture(e.path));
    CHECK(info["architecture"] == e.arch);
    CHECK(info["hparams"]["n_layer"] == e.n_layer);
    CHECK(info["vocab"]["size"] == e.n_vocab);
    if (e.runnable) CHECK(info["engine"]["runnable"] == true);
    else CHECK_FALSE(info.contains("engine"));  // vocab-only: no tensors to run
  }
}

TEST_CASE("inspect: synthetic fixture files in every weight type") {
  const char* kinds[] = {"llama-f16", "llama-bf16", "llama-q8_0", "llama-q4_0", "llama-q4_1", "llama-q5_0",
                         "llama-q5_1", "llama-q2_k", "llama-q3_k_m", "llama-q4_k_m", "llama-q5_k_m", "llama-q6_k",
                         "qwen2-f16", "qwen2-q8_0", "qwen2-q4_0", "qwen2-q4_k_m", "qwen2-q5_k_m", "qwen2-q6_k",
                         "phi3-f16",  "phi3-q8_0",  "phi3-q4_k_m", "gemma2-f16", "gemma2-q8_0", "gemma2-q4_k_m",
                         "gemma3-f16", "gemma3-q8_0", "gemma3-q4_k_m", "qwen3moe-f16", "qwen3moe-q8_0", "qwen3moe-q4_k_m",
                         "gpt-oss-f16", "gpt-oss-q8_0", "gpt-oss-mxfp4"};
  for (const char* k : kinds) {
    std::string path = detaudit::test::generated(std::string("models/synthetic/tiny-") + k + ".gguf");
    CAPTURE(path);
    nlohmann::json info = inspect_json(path, "--tensors");
    const std::string kind = k;
    CHECK(info["architecture"] == kind.substr(0, kind.rfind('-')));
    CHECK(info["hparams"]["n_layer"] == 2);
    CHECK(info["hparams"]["n_embd"] == 256);
    CHECK(info["vocab"]["size"] == 543);  // detaudit synth's built-in vocabulary
    CHECK(info["engine"]["runnable"] == true);
    CHECK(info["tensors"].size() == info["n_tensors"]);
    if (kind.rfind("qwen3moe", 0) == 0 || kind.rfind("gpt-oss", 0) == 0) {
      CHECK(info["hparams"]["n_expert"] == 16);
      CHECK(info["hparams"]["n_expert_used"] == 4);
      CHECK(info["hparams"]["n_ff_exp"] == 256);
      CHECK(info["engine"]["notes"].dump().find("mixture of experts: 16 experts of width 256, 4 per token") != std::string::npos);
    }
  }
}

TEST_CASE("inspect: gemma's sliding layers, soft caps and block are explained") {
  nlohmann::json g2 = inspect_json(detaudit::test::generated("models/synthetic/tiny-gemma2-f16.gguf"), "");
  CHECK(g2["hparams"]["n_swa"] == 16);
  CHECK(g2["hparams"]["swa_period"] == 2);
  CHECK(g2["hparams"]["attn_softcap"] == 50.0);
  CHECK(g2["hparams"]["final_softcap"] == 30.0);
  CHECK(g2["engine"]["tied_output"] == true);
  const std::string n2 = g2["engine"]["notes"].dump();
  CHECK(n2.find("1 of 2 layers attend through a sliding window of 16 positions") != std::string::npos);
  CHECK(n2.find("attention scores soft-capped: 50") != std::string::npos);
  CHECK(n2.find("logits soft-capped: 30") != std::string::npos);
  CHECK(n2.find("GELU") != std::string::npos);
  nlohmann::json g3 = inspect_json(detaudit::test::generated("models/synthetic/tiny-gemma3-f16.gguf"), "");
  CHECK(g3["hparams"]["rope_freq_base_swa"] == 10000.0);
  const std::string n3 = g3["engine"]["notes"].dump();
  CHECK(n3.find("with RoPE base 10000; the others attend to every position with base 1e+06") != std::string::npos);
  CHECK(n3.find("soft-capped") == std::string::npos);
}

TEST_CASE("inspect: gpt-oss's YaRN, sinks, biases, sliding layers and mxfp4 experts are explained") {
  nlohmann::json g = inspect_json(detaudit::test::generated("models/synthetic/tiny-gpt-oss-mxfp4.gguf"), "--tensors");
  CHECK(g["architecture"] == "gpt-oss");
  CHECK(g["hparams"]["n_swa"] == 16);
  CHECK(g["hparams"]["rope_scaling"] == "yarn");
  CHECK(g["hparams"]["rope_scaling_factor"] == 32.0);
  CHECK(g["hparams"]["n_ctx_orig_yarn"] == 4096);
  const std::string n = g["engine"]["notes"].dump();
  CHECK(n.find("YaRN RoPE: factor 32 over 4096 original positions") != std::string::npos);
  CHECK(n.find("attention sink per head") != std::string::npos);
  CHECK(n.find("clamped SwiGLU") != std::string::npos);
  CHECK(n.find("1 of 2 layers attend through a sliding window of 16 positions") != std::string::npos);
  int n_mxfp4 = 0;
  for (const auto& t : g["tensors"]) {
    const std::string name = t["name"];
    if (t["type"] == "mxfp4") {
      ++n_mxfp4;
      CHECK(name.find("_exps.weight") != std::string::npos);
    }
  }
  CHECK(n_mxfp4 == 6);  // gate, up and down experts of 2 layers
}

TEST_CASE("inspect: text output, tensor table and sha256") {
  std::string path = fixture("models/stories260K.gguf");
  auto r = run_cmd(shell_quote(detaudit::test::detaudit_bin()) + " inspect --tensors --sha256 " + shell_quote(path));
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("\narchitecture      llama\n") != std::string::npos);
  CHECK(r.out.find("blk.4.ffn_down.weight") != std::string::npos);
  // stories260K's padding id is -1 written as an unsigned 32-bit number: no token, said so.
  CHECK(r.out.find("\n  padding         none (id 4294967295 is outside the vocabulary)\n") != std::string::npos);
  CHECK(r.out.find("\n  bos             1 \"<s>\"\n") != std::string::npos);
  const nlohmann::json info = inspect_json(path);
  CHECK(info["vocab"]["special"]["padding"]["unset"] == true);
  CHECK_FALSE(info["vocab"]["special"]["bos"].contains("unset"));
  // The digest scripts/fixtures.sh pins for this file.
  CHECK(r.out.find("270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d") != std::string::npos);
}

TEST_CASE("inspect: --metadata lists every key in file order with its type") {
  nlohmann::json info = inspect_json(fixture("models/stories260K.gguf"), "--metadata");
  REQUIRE(info["metadata"].size() == 19);  // as ggml-org's conversion wrote it: 19 keys
  CHECK(info["metadata"][0]["key"] == "tokenizer.ggml.tokens");
  CHECK(info["metadata"][0]["type"] == "array[string]");
  CHECK(info["metadata"][0]["value"]["count"] == 512);
  CHECK(info["metadata"][4]["key"] == "general.architecture");
  CHECK(info["metadata"][4]["value"] == "llama");
}

TEST_CASE("inspect: a truncated file is one line on stderr and exit 2") {
  std::string dir = detaudit::test::scratch_dir("inspect_bad");
  std::string path = dir + "/cut.gguf";
  auto r0 = run_cmd("head -c 5000 " + shell_quote(fixture("models/stories260K.gguf")) + " > " + shell_quote(path));
  REQUIRE(r0.exit_code == 0);
  auto r = run_cmd(shell_quote(detaudit::test::detaudit_bin()) + " inspect " + shell_quote(path));
  CHECK(r.exit_code == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(path) != std::string::npos);
}
