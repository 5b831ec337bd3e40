// detaudit bench, the subcommand: JSON records, table, roofline, bad flags, on a small synthetic
// model. The library (rows, KV layout, table): tests/unit/test_bench.cpp. No timing assertions
// beyond "positive".
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu.h"
#include "model/synth.h"
#include "runtime/bench.h"
#include "synth_util.h"
#include "util/error.h"

using detaudit::test::count_of;
using detaudit::test::detaudit_bin;
using detaudit::test::q8_model;
using detaudit::test::run_cmd;
namespace rt = detaudit::runtime;

namespace {

std::string bench_cmd(const std::string& args) {
  return detaudit_bin() + " bench -m " + q8_model().path + " " + args;
}

}  // namespace

TEST_CASE("bench: --json prints llama-bench compatible records for each numerics asked") {
  auto r = run_cmd(bench_cmd("-p 16 -n 4 -r 2 -t 1 --numerics exact,float --json"));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 4);
  std::ifstream f(q8_model().path, std::ios::binary | std::ios::ate);
  const uint64_t file_size = static_cast<uint64_t>(f.tellg());
  const char* want_nm[] = {"exact", "float", "exact", "float"};
  for (size_t i = 0; i < 4; ++i) {
    const nlohmann::json& e = j[i];
    CAPTURE(e.dump());
    CHECK(e["numerics"] == want_nm[i]);
    CHECK(e["model_filename"] == q8_model().path);
    CHECK(e["model_type"].get<std::string>().rfind("llama ", 0) == 0);
    CHECK(e["model_type"].get<std::string>().find(" Q8_0") != std::string::npos);
    CHECK(e["model_size"].is_number_unsigned());
    CHECK(e["model_size"].get<uint64_t>() > 0);
    CHECK(e["model_size"].get<uint64_t>() < file_size);
    CHECK(e["model_n_params"] == q8_model().n_params);
    CHECK(e["n_threads"] == 1);
    CHECK(e["n_prompt"] == (i < 2 ? 16 : 0));
    CHECK(e["n_gen"] == (i < 2 ? 0 : 4));
    CHECK(e["n_depth"] == 0);
    CHECK(e["avg_ns"].is_number_unsigned());
    CHECK(e["stddev_ns"].is_number_unsigned());
    CHECK(e["avg_ts"].is_number_float());
    CHECK(e["stddev_ts"].is_number());
    CHECK(e["avg_ts"].get<double>() > 0);
    CHECK(e["build_commit"].is_string());
    CHECK(e["detaudit_version"].is_string());
    REQUIRE(e["samples_ns"].size() == 2);
    REQUIRE(e["samples_ts"].size() == 2);
    const double n_tok = i < 2 ? 16.0 : 4.0;
    double mean = 0;
    for (size_t k = 0; k < 2; ++k) {
      const double ns = static_cast<double>(e["samples_ns"][k].get<uint64_t>());
      CHECK(ns > 0);
      CHECK(e["samples_ts"][k].get<double>() == doctest::Approx(n_tok * 1e9 / ns).epsilon(1e-12));
      mean += e["samples_ts"][k].get<double>() / 2;
    }
    CHECK(e["avg_ts"].get<double>() == doctest::Approx(mean).epsilon(1e-12));
  }
}

TEST_CASE("bench: the table has a pp and a tg row per numerics and --depth names the test") {
  auto r = run_cmd(bench_cmd("-p 16 -n 4 -r 2 -t 2 --numerics exact --numerics float"));
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("| model ") == 0);
  CHECK(count_of(r.out, "| exact    |       2 |          pp16 |") == 1);
  CHECK(count_of(r.out, "| float    |       2 |          pp16 |") == 1);
  CHECK(count_of(r.out, "| exact    |       2 |           tg4 |") == 1);
  CHECK(count_of(r.out, "| float    |       2 |           tg4 |") == 1);
  CHECK(count_of(r.out, " ± ") == 4);
  auto d = run_cmd(bench_cmd("-p 0 -n 2 -r 1 -t 1 --depth 8 --json"));
  REQUIRE(d.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(d.out);
  REQUIRE(j.size() == 1);
  CHECK(j[0]["n_depth"] == 8);
  CHECK(j[0]["n_gen"] == 2);
  CHECK(j[0]["numerics"] == "exact");
}

TEST_CASE("bench: --roofline prints a positive bandwidth and a floor per tg row") {
  auto r = run_cmd(bench_cmd("-p 8 -n 2 -r 1 -t 2 --numerics exact,float --roofline --roofline-mib 64"));
  REQUIRE(r.exit_code == 0);
  const size_t at = r.out.find("memory read bandwidth: ");
  REQUIRE(at != std::string::npos);
  const double gbs = std::stod(r.out.substr(at + std::strlen("memory read bandwidth: ")));
  CHECK(gbs > 0);
  CHECK(count_of(r.out, "bandwidth floor") == 2);
  CHECK(r.out.find("exact tg2: bytes per token ") != std::string::npos);
  CHECK(r.out.find("float tg2: bytes per token ") != std::string::npos);
  CHECK_THROWS_AS(rt::bench_read_bandwidth(0, 1 << 26), detaudit::input_error);
  CHECK_THROWS_AS(rt::bench_read_bandwidth(1, 1024), detaudit::input_error);
}

TEST_CASE("bench: bad flags exit 2 with one line on stderr") {
  const std::string bad[] = {
      "--numerics bogus", "--numerics exact,", "-r 0", "-p -1", "-n -3", "-t 0", "-p 0 -n 0", "--ubatch 0",
      "--depth -1", "--no-such-flag", "--json --roofline",
  };
  for (const std::string& args : bad) {
    CAPTURE(args);
    auto r = run_cmd(bench_cmd(args));
    CHECK(r.exit_code == 2);
    CHECK(count_of(r.err, "\n") == 1);
  }
  auto missing = run_cmd(detaudit_bin() + " bench -m /nonexistent/model.gguf");
  CHECK(missing.exit_code == 2);
  auto no_model = run_cmd(detaudit_bin() + " bench -p 8");
  CHECK(no_model.exit_code == 2);
}

TEST_CASE("bench and generate: load-time repacking of q4_K changes no bit, and --no-repack turns it off") {
  // A Q4_K_M mixture (q4_K with q6_K in output and some attn_v / ffn_down) of the small shape.
  const std::string dir = detaudit::test::scratch_dir("bench_repack");
  const std::string path = dir + "/q4_k_m.gguf";
  detaudit::model::synth_options o = detaudit::test::small_model(detaudit::model::ARCH_LLAMA, detaudit::gguf::DTYPE_F16);
  REQUIRE(detaudit::model::synth_apply_mixture(o, "q4_k_m"));
  detaudit::model::synth_write(o, path);
  const bool simd = detaudit::kernels::cpu::isa_default() != detaudit::kernels::cpu::isa::scalar;
  for (const char* flag : {"", " --no-repack"}) {
    CAPTURE(flag);
    auto r = run_cmd(detaudit_bin() + " bench -m " + path + " -p 8 -n 4 -r 1 -t 2 --json" + flag);
    REQUIRE(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    REQUIRE(j.size() == 2);
    const bool on = simd && std::strlen(flag) == 0;
    // Repacking runs where a packed q4_K kernel exists (AVX2, AVX-512) unless --no-repack.
    CHECK((j[0]["repacked_tensors"].get<int64_t>() > 0) == on);
    CHECK((j[0]["repacked_bytes"].get<uint64_t>() > 0) == on);
    CHECK(j[0]["repack_seconds"].get<double>() >= 0.0);
    auto t = run_cmd(detaudit_bin() + " bench -m " + path + " -p 0 -n 2 -r 1 -t 2" + flag);
    REQUIRE(t.exit_code == 0);
    CHECK((t.out.find("repacked ") != std::string::npos) == on);
  }
  std::string hashes[2];
  for (int k = 0; k < 2; ++k) {
    for (const char* threads : {"1", "2"}) {
      auto g = run_cmd(detaudit_bin() + " generate -m " + path + " -p 'one two three' -n 12 -t " + threads + " --json" +
                       (k ? " --no-repack" : ""));
      REQUIRE(g.exit_code == 0);
      const std::string h = nlohmann::json::parse(g.out)["chained_hash"];
      if (hashes[k].empty()) hashes[k] = h;
      CHECK(h == hashes[k]);
    }
  }
  CHECK(hashes[0] == hashes[1]);
}
