// detaudit bench, the library: rows, KV layout, table, on a small synthetic model. The subcommand
// (JSON records, table, roofline, bad flags): tests/e2e/test_bench.cpp. No timing assertions
// beyond "positive".
#include <doctest/doctest.h>

#include <fstream>

#include "model/model.h"
#include "runtime/bench.h"
#include "synth_util.h"
#include "util/error.h"

using detaudit::test::count_of;
using detaudit::test::q8_model;
namespace rt = detaudit::runtime;
namespace model = detaudit::model;

namespace {

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

