#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "commands.h"
#include "model/inspect.h"
#include "runtime/bench.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

struct bench_cmd_options {
  std::string model;
  runtime::bench_params bench;
  std::vector<std::string> numerics{"exact"};
  std::vector<std::string> backends{"cpu"};
  bool roofline = false;
  int64_t roofline_mib = 0;
  bool json = false;
};

// "--numerics exact --numerics float" and "--numerics exact,float" alike; each mode once, in
// the order first given.
std::vector<runtime::numerics_mode> parse_numerics(const std::vector<std::string>& given) {
  std::vector<runtime::numerics_mode> modes;
  for (const std::string& g : given) {
    size_t start = 0;
    while (start <= g.size()) {
      const size_t comma = std::min(g.find(',', start), g.size());
      const std::string name = g.substr(start, comma - start);
      runtime::numerics_mode m;
      try {
        m = runtime::numerics_from_name(name);
      } catch (const input_error&) {
        throw input_error("bench: --numerics '" + name + "' is not one of exact, float, reference");
      }
      if (std::find(modes.begin(), modes.end(), m) == modes.end()) modes.push_back(m);
      start = comma + 1;
    }
  }
  return modes;
}

void print_roofline(const runtime::bench_model_info& info, const model::hparams& hp,
                    const std::vector<runtime::bench_result>& rows, double gbs, uint64_t probe_bytes, int n_threads) {
  std::cout << "\nmemory read bandwidth: " << std::fixed << std::setprecision(2) << gbs << " GB/s (" << n_threads
            << " threads, " << probe_bytes / (1024 * 1024) << " MiB buffer, best of 5)\n";
  for (const runtime::bench_result& r : rows) {
    if (r.n_gen == 0) continue;
    const runtime::bench_floor f = runtime::bench_floor_of(info, hp, r, gbs);
    std::cout << runtime::numerics_name(r.numerics) << " " << runtime::bench_test_name(r)
              << ": bytes per token " << f.bytes_per_token << ", bandwidth floor " << f.floor_ts
              << " t/s, measured " << r.avg_ts << " t/s, measured/floor " << std::setprecision(4) << f.ratio
              << std::setprecision(2) << "\n";
  }
}

void run_bench(const bench_cmd_options& o) {
  runtime::bench_params params = o.bench;
  params.numerics = parse_numerics(o.numerics);
  params.backends.clear();
  for (const std::string& given : o.backends) {
    std::stringstream ss(given);
    std::string name;
    while (std::getline(ss, name, ',')) {
      const runtime::backend_kind b = runtime::backend_from_name(name);
      if (std::find(params.backends.begin(), params.backends.end(), b) == params.backends.end()) params.backends.push_back(b);
    }
  }
  auto m = model::model::load(o.model);
  const runtime::bench_model_info info = runtime::bench_describe(*m);
  const std::vector<runtime::bench_result> rows = runtime::bench_run(m, params);
  if (o.json) {
    std::cout << model::safe_dump(runtime::bench_to_json(info, rows), 2) << "\n";
    return;
  }
  std::cout << runtime::bench_table(info, rows);
  // Load-time repacking, once per context (not timed): what it cost and the memory it takes.
  for (const runtime::bench_result& r : rows) {
    const bool first_test = (r.n_prompt != 0) == (rows.front().n_prompt != 0);  // one row per context
    if (r.repacked.tensors == 0 || !first_test) continue;
    std::cout << "\n" << runtime::bench_row_name(r) << ": repacked " << r.repacked.tensors << " matrices into 16-row tiles, "
              << std::fixed << std::setprecision(1) << static_cast<double>(r.repacked.bytes) / (1 << 20) << " MiB beside the mapped file, in "
              << std::setprecision(0) << r.repacked.seconds * 1000 << " ms at load";
    if (r.repacked.shared > 0) std::cout << " (" << r.repacked.shared << " shared with another context)";
    std::cout << " (--no-repack keeps the mapped layout)\n";
  }
  if (o.roofline) {
    const uint64_t bytes = o.roofline_mib > 0 ? static_cast<uint64_t>(o.roofline_mib) << 20 : runtime::bench_default_probe_bytes();
    const double gbs = runtime::bench_read_bandwidth(o.bench.n_threads, bytes);
    print_roofline(info, m->hp(), rows, gbs, bytes, o.bench.n_threads);
  }
  std::cout << std::flush;
}

}  // namespace

void setup_bench(CLI::App& app) {
  auto opt = std::make_shared<bench_cmd_options>();
  runtime::bench_params& b = opt->bench;
  b.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CLI::App* sub = app.add_subcommand(
      "bench",
      "Measure the built-in engine as llama.cpp's llama-bench does: prompt processing (ppP: P tokens in one\n"
      "decode on a fresh sequence) and generation (tgN: N one-token decodes after a BOS), each repeated -r times\n"
      "after one warm-up; t/s is the mean over repetitions ± their standard deviation. Several --numerics are\n"
      "measured side by side, their repetitions alternating, so the ratio between them is robust to drift.");
  sub->add_option("-m,--model", opt->model, "GGUF model file")->required()->check(CLI::ExistingFile)->type_name("FILE.gguf");
  sub->add_option("-p,--n-prompt", b.n_prompt, "Prompt tokens of the pp test (random ids, BOS first); 0: no pp test")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("-n,--n-gen", b.n_gen, "Tokens of the tg test; 0: no tg test")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("-t,--threads", b.n_threads, "Threads used by the engine (and by --roofline)")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  sub->add_option("--numerics", opt->numerics,
                  "exact, float or reference; repeat it or write exact,float for one row per mode, measured side "
                  "by side")
      ->capture_default_str()->type_name("MODE[,MODE]");
  sub->add_option("--backend", opt->backends,
                  "cpu, vulkan or cuda; cpu,vulkan measures the exact rows on both side by side (float and reference "
                  "rows run on the CPU)")
      ->capture_default_str()->type_name("NAME[,NAME]");
  sub->add_option("--device", b.device, "GPU device index, as 'detaudit devices' lists them")->capture_default_str()->type_name("N");
  sub->add_option("-r,--repetitions", b.reps, "Timed repetitions of each test")->capture_default_str()->check(CLI::Range(1, 1000000));
  sub->add_option("-d,--depth", b.n_depth, "Tokens of context filled (untimed) before each test: 'tg128 @ d4096'")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--ubatch", b.n_ubatch,
                  "Most tokens per forward step (-ub; llama-bench's default 512, so pp512 is one step)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  CLI::Option* roofline = sub->add_flag("--roofline", opt->roofline,
                "Also measure memory read bandwidth with the same threads and print, per tg row, the bandwidth floor:\n"
                "(weight bytes + KV bytes read per token) / bandwidth, and measured / floor");
  sub->add_option("--roofline-mib", opt->roofline_mib,
                  "Bandwidth probe buffer in MiB; 0: min(1024, half the available memory). Keep it at least 4x the "
                  "last-level cache")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  sub->add_flag("--no-repack", [&b](int64_t) { b.repack = false; },
                "Keep the weights in the mapped file's layout (no load-time repacking into 16-row tiles for the generation kernels; "
                "the same bits, measured without it)");
  sub->add_flag("--json", opt->json,
                "Print one JSON array of llama-bench compatible records (n_prompt, n_gen, n_threads, avg_ts, "
                "stddev_ts, samples_ts, ...) plus numerics, and nothing else")
      ->excludes(roofline);
  sub->footer(
      "Examples:\n"
      "  detaudit bench -m model.gguf -t 2 --numerics exact,float\n"
      "  detaudit bench -m model.gguf -p 0 -n 128 --depth 4096 --roofline\n"
      "  detaudit bench -m model.gguf -p 512 -n 128 -t 2 --json > detaudit.json\n"
      "  llama-bench -m model.gguf -p 512 -n 128 -t 2 -o json > llama.json   # the same fields, side by side\n"
      "  DETAUDIT_CPU_ISA=avx2 detaudit bench -m model.gguf   # exact kernels of another instruction set\n"
      "                                                       # (scalar, avx2, avx512; same bits, other speed)");
  sub->callback([opt] { run_bench(*opt); });
}

}  // namespace detaudit::cli
