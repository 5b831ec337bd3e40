// detaudit bench: the library (rows, KV layout, table) and the subcommand (JSON records, table,
// roofline, bad flags) on a small synthetic model. No timing assertions beyond "positive".
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "model/model.h"
#include "runtime/bench.h"
#include "synth_util.h"
#include "util/error.h"

using detaudit::test::detaudit_bin;
using detaudit::test::run_cmd;
using detaudit::test::scratch_dir;
using detaudit::test::small_model;
namespace rt = detaudit::runtime;
namespace model = detaudit::model;

namespace {

// The small Q8_0 model (n_embd 256, 2 layers, 4 heads, 2 KV heads, head_dim 64), written once per
// process into its own folder (test cases may run as parallel processes), removed at exit.
struct bench_model {
  std::string dir, path;
  uint64_t n_params = 0;
  bench_model() : dir(scratch_dir("bench_model_" + std::to_string(::getpid()))), path(dir + "/small-q8_0.gguf") {
    n_params = model::synth_write(small_model(model::ARCH_LLAMA, detaudit::gguf::DTYPE_Q8_0), path);
  }
  ~bench_model() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const bench_model& q8_model() {
  static const bench_model m;
  return m;
}

std::string bench_cmd(const std::string& args) {
  return detaudit_bin() + " bench -m " + q8_model().path + " " + args;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

uint64_t le64(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  return v;
}

}  // namespace

TEST_CASE("bench: KV bytes per position match the cache layout the context saves") {
  auto m = model::model::load(q8_model().path);
  // Hand-computed for 2 layers x 2 KV heads x head_dim 64: exact holds 2 blocks of 32 int16 plus
  // 2 int32 exponents per head for K and for V; float holds f16 K and V.
  CHECK(rt::bench_kv_bytes_per_pos(m->hp(), rt::NUMERICS_EXACT) == 2 * 2 * 2 * (64 * 2 + 2 * 4));
  CHECK(rt::bench_kv_bytes_per_pos(m->hp(), rt::NUMERICS_FLOAT) == 2 * 2 * 2 * 64 * 2);
  const std::string dir = q8_model().dir;
  for (rt::numerics_mode nm : {rt::NUMERICS_EXACT, rt::NUMERICS_FLOAT, rt::NUMERICS_REFERENCE}) {
    rt::context_params cp;
    cp.numerics = nm;
    rt::context ctx(m, cp);
    const int32_t seq = ctx.seq_new();
    ctx.decode({{seq, 1, false}});
    const std::string path = dir + "/" + rt::numerics_name(nm) + ".seq";
    ctx.seq_save(seq, path);
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(bytes.size() > 96);
    CAPTURE(rt::numerics_name(nm));
    CHECK(rt::bench_kv_bytes_per_pos(m->hp(), nm) == static_cast<uint64_t>(m->hp().n_layer) * le64(bytes, 88));
  }
}

TEST_CASE("bench: bench_run gives one row per test and numerics with r samples each") {
  auto m = model::model::load(q8_model().path);
  rt::bench_params p;
  p.numerics = {rt::NUMERICS_FLOAT, rt::NUMERICS_EXACT};
  p.n_prompt = 8;
  p.n_gen = 3;
  p.n_depth = 5;
  p.reps = 3;
  p.n_threads = 2;
  const std::vector<rt::bench_result> rows = rt::bench_run(m, p);
  REQUIRE(rows.size() == 4);
  const rt::numerics_mode want_nm[] = {rt::NUMERICS_FLOAT, rt::NUMERICS_EXACT, rt::NUMERICS_FLOAT, rt::NUMERICS_EXACT};
  const char* want_name[] = {"pp8 @ d5", "pp8 @ d5", "tg3 @ d5", "tg3 @ d5"};
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    CHECK(rows[i].numerics == want_nm[i]);
    CHECK(rt::bench_test_name(rows[i]) == want_name[i]);
    CHECK(rows[i].samples_ns.size() == 3);
    CHECK(rows[i].samples_ts.size() == 3);
    CHECK(rows[i].avg_ts > 0);
    CHECK(rows[i].n_threads == 2);
  }
  p.reps = 0;
  CHECK_THROWS_AS(rt::bench_run(m, p), detaudit::input_error);
}

TEST_CASE("bench: the table reads like llama-bench") {
  rt::bench_model_info info;
  info.type = "llama 1.1B Q8_0";
  info.size = 1170378588;     // 1.09 GiB
  info.n_params = 1100048384;  // 1.10 B
  rt::bench_result pp;
  pp.numerics = rt::NUMERICS_EXACT;
  pp.n_threads = 2;
  pp.n_prompt = 512;
  pp.avg_ts = 98.123;
  pp.stddev_ts = 1.3;
  rt::bench_result tg = pp;
  tg.numerics = rt::NUMERICS_FLOAT;
  tg.n_prompt = 0;
  tg.n_gen = 128;
  tg.n_depth = 4096;
  tg.avg_ts = 25.0;
  tg.stddev_ts = 0.25;
  const std::string t = rt::bench_table(info, {pp, tg});
  CHECK(t.find("| model ") == 0);
  CHECK(t.find("| llama 1.1B Q8_0                |   1.09 GiB |     1.10 B | exact    |       2 |         pp512 |"
               "         98.12 ± 1.30 |") != std::string::npos);
  CHECK(t.find("| float    |       2 | tg128 @ d4096 |         25.00 ± 0.25 |") != std::string::npos);
  CHECK(count_of(t, "\n") == 4);
  rt::bench_result gpu = pp;
  gpu.backend = rt::BACKEND_VULKAN;
  const std::string t2 = rt::bench_table(info, {pp, gpu});
  CHECK(t2.find("| exact/vulkan |       2 |         pp512 |") != std::string::npos);
  CHECK(t2.find("| exact        |       2 |         pp512 |") != std::string::npos);
  CHECK(t2.find("| ------------ | ------: |") != std::string::npos);
}

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
