// Measurements of the built-in engine in the manner of llama.cpp's llama-bench: the library
// behind `detaudit bench`.
//
// Goals: prompt processing (pp: p tokens in one decode() on a fresh sequence) and generation (tg:
// n decode() calls of one token each, the first a BOS, greedy) timed over repetitions after one
// warm-up, several numerics measured side by side in one process with their repetitions
// alternating so that drift of the machine hits all of them alike; records that read like
// llama-bench's JSON so the two tools' outputs compare field by field; a memory read bandwidth
// probe and the bandwidth floor of generation (bytes read per token / bandwidth).
// Non-goals: asserting anything about speed (timing claims live in scripts/bench/), sampling
// cost, measuring other engines.
//
// Thread-safety: every function may be called from any thread; bench_run and
// bench_read_bandwidth use n_threads threads of their own.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/context.h"

namespace detaudit::runtime {

struct bench_params {
  std::vector<numerics_mode> numerics{NUMERICS_EXACT};  // one row per mode and test
  // Backends the exact rows run on, side by side (one row per backend and test; float and
  // reference rows always run on the CPU). GPU backends use device `device`.
  std::vector<backend_kind> backends{BACKEND_CPU};
  int device = 0;
  int n_threads = 1;
  int64_t n_prompt = 512;  // pp test size; 0: no pp test
  int64_t n_gen = 128;     // tg test size; 0: no tg test
  int64_t n_depth = 0;     // tokens of context filled (untimed) before each timed test
  int64_t n_ubatch = 512;  // the context's n_ubatch (llama-bench -ub, default 512)
  int reps = 5;            // timed repetitions after one warm-up
  uint64_t seed = 1234;    // of the random prompt token ids
  bool repack = true;      // load-time repacking of the CPU exact kernels' weights (context_params)
};

// One row: one test (pp or tg) under one numerics.
struct bench_result {
  numerics_mode numerics = NUMERICS_EXACT;
  backend_kind backend = BACKEND_CPU;
  std::string device;  // the context's device_description()
  int n_threads = 1;
  int64_t n_prompt = 0;  // pp rows: the prompt size, else 0
  int64_t n_gen = 0;     // tg rows: the tokens generated, else 0
  int64_t n_depth = 0;
  int64_t n_ubatch = 0;
  backends::repack_stats repacked;   // what the row's context repacked when it was created (untimed)
  std::vector<uint64_t> samples_ns;  // (reps) wall time of each repetition
  std::vector<double> samples_ts;    // (reps) tokens / second of each repetition
  double avg_ns = 0, stddev_ns = 0, avg_ts = 0, stddev_ts = 0;  // stddev: sample (n - 1)
};

// What the table and records say about the model file.
struct bench_model_info {
  std::string filename;          // as given
  std::string type;              // "llama 8M Q8_0": architecture, size, main weight type
  uint64_t size = 0;             // bytes of the tensors' data
  uint64_t n_params = 0;         // elements of all tensors
  uint64_t weight_bytes_per_token = 0;  // tensor bytes a generated token reads (see bench_floor)
};

bench_model_info bench_describe(const model::model& m);

// Bytes of KV cache one position occupies, all layers, in the layout of `numerics` (float: f16 K
// and V as llama.cpp; exact: int16 blocks of 32 plus an int32 exponent per block, see
// backends/ops_exact.cpp; reference: f64).
uint64_t bench_kv_bytes_per_pos(const model::hparams& hp, numerics_mode numerics);

// Runs the pp test then the tg test, each for every numerics. Returns the rows in that order
// (pp per numerics, then tg per numerics). Throws input_error for bad parameters (reps < 1,
// negative sizes, no numerics, n_threads < 1) or a context that cannot hold depth + test.
std::vector<bench_result> bench_run(std::shared_ptr<const model::model> m, const bench_params& p);

// Memory read bandwidth in GB/s (1e9 bytes/s): a buffer of `bytes` (rounded down to whole
// uint64 per thread) summed as uint64 by n_threads threads, each a contiguous slice; the best of
// 5 passes after the buffer is written once. Throws input_error for n_threads < 1 or a buffer
// under 1 MiB; std::bad_alloc when it cannot be allocated.
double bench_read_bandwidth(int n_threads, uint64_t bytes);

// The default probe buffer: min(1 GiB, half the memory the system reports available).
uint64_t bench_default_probe_bytes();

// The bandwidth floor of a tg row: bytes read per generated token (weight_bytes_per_token plus
// the KV cache at the row's depth + n_gen / 2, the mean context of the test) and the t/s that
// bandwidth allows.
struct bench_floor {
  uint64_t bytes_per_token = 0;
  double floor_ts = 0;  // bandwidth_gbs * 1e9 / bytes_per_token
  double ratio = 0;     // measured avg_ts / floor_ts
};
bench_floor bench_floor_of(const bench_model_info& info, const model::hparams& hp, const bench_result& r,
                           double bandwidth_gbs);

// The test name: "pp512", "tg128", with " @ d4096" when n_depth > 0.
std::string bench_test_name(const bench_result& r);

// "exact", "float", "exact/vulkan": the numerics column of the table.
std::string bench_row_name(const bench_result& r);
// The llama-bench style Markdown table (model, size, params, numerics, threads, test, t/s as
// "98.12 ± 1.30"), one line per row, with its header.
std::string bench_table(const bench_model_info& info, const std::vector<bench_result>& rows);

// The commit this binary was built from: 12 hex digits, "-dirty" when tracked files differed from
// it, or "unknown" outside a git checkout (engine/util/build_commit.cmake).
const char* build_commit();

// One llama-bench compatible record per row (model_filename, model_type, model_size,
// model_n_params, n_threads, n_prompt, n_gen, n_depth, avg_ns, stddev_ns, avg_ts, stddev_ts,
// samples_ns, samples_ts, ...) plus "numerics", "build_commit" and "detaudit_version"; an array.
nlohmann::json bench_to_json(const bench_model_info& info, const std::vector<bench_result>& rows);

}  // namespace detaudit::runtime
