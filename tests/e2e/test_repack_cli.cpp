// The CLI of repacking and mixtures: synth --type mixtures (case, with presets and
// --tensor-type), --no-repack on every command that takes it, and bench on a Q4_K_M file.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "synth_util.h"
#include "test_util.h"

using detaudit::test::detaudit_bin;
using detaudit::test::run_cmd;

TEST_CASE("cli: synth accepts Q4_K_M as it accepts Q4_K (types are case-insensitive)") {
  const std::string dir = detaudit::test::scratch_dir("cli_case");
  const std::string small = " --n-embd 256 --n-ff 512 --n-layer 2 --n-head 4 --n-head-kv 2";
  auto plain = run_cmd(detaudit_bin() + " synth -o " + dir + "/a.gguf --type Q4_K" + small);
  CHECK(plain.exit_code == 0);
  auto mix = run_cmd(detaudit_bin() + " synth -o " + dir + "/b.gguf --type Q4_K_M" + small);
  CHECK_MESSAGE(mix.exit_code == 0, mix.err);
}

TEST_CASE("cli: synth q5_k_m with a shape K-quants cannot pack names the mixture, not q5_K") {
  const std::string dir = detaudit::test::scratch_dir("cli_shape");
  auto r = run_cmd(detaudit_bin() + " synth -o " + dir + "/c.gguf --type q5_k_m --n-embd 256 --n-ff 320 --n-layer 2 --n-head 4 --n-head-kv 2");
  CHECK(r.exit_code != 0);
  CHECK(r.err.find('\n') == r.err.size() - 1);  // one line
  CHECK_MESSAGE(r.err.find("q5_k_m") != std::string::npos, r.err);
}

TEST_CASE("cli: --no-repack is accepted by generate, score, serve and bench") {
  for (const char* cmd : {"generate", "score", "serve", "bench"}) {
    CAPTURE(cmd);
    auto r = run_cmd(detaudit_bin() + " " + cmd + " --help");
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("--no-repack") != std::string::npos);
  }
}

TEST_CASE("cli: bench names a q4_k_m file Q4_K - Medium and generate's bits do not depend on repacking") {
  const std::string dir = detaudit::test::scratch_dir("cli_bench");
  const std::string path = dir + "/m.gguf";
  auto s = run_cmd(detaudit_bin() + " synth -o " + path + " --type q4_k_m --n-embd 256 --n-ff 512 --n-layer 3 --n-head 4 --n-head-kv 2");
  REQUIRE(s.exit_code == 0);
  auto b = run_cmd(detaudit_bin() + " bench -m " + path + " -p 4 -n 2 -r 1 -t 2 --json");
  REQUIRE(b.exit_code == 0);
  const auto j = nlohmann::json::parse(b.out);
  CHECK(j[0]["model_type"].get<std::string>().find("Q4_K - Medium") != std::string::npos);
  std::string h[2];
  for (int k = 0; k < 2; ++k) {
    auto g = run_cmd(detaudit_bin() + " generate -m " + path + " -p 'a b c' -n 6 -t 3 --json" + (k ? " --no-repack" : ""));
    REQUIRE(g.exit_code == 0);
    h[k] = nlohmann::json::parse(g.out)["chained_hash"];
  }
  CHECK(h[0] == h[1]);
}
