#include "runtime/bench.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <thread>
#include <unistd.h>

#include "build_commit.h"
#include "gguf/dtype.h"
#include "kernels/cpu/cpu.h"
#include "util/error.h"

namespace detaudit::runtime {
namespace {

using clock_type = std::chrono::steady_clock;

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// n token ids in [0, n_vocab), the first the BOS when `bos_first` and the vocabulary has one.
std::vector<int32_t> random_tokens(const model::model& m, int64_t n, uint64_t seed, bool bos_first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  const uint64_t n_vocab = static_cast<uint64_t>(m.hp().n_vocab);
  for (int32_t& id : t) id = static_cast<int32_t>(splitmix64(seed) % n_vocab);
  const int32_t bos = m.vocab().ids().bos;
  if (bos_first && n > 0 && bos >= 0 && bos < m.hp().n_vocab) t[0] = bos;
  return t;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<token_in> batch_of(int32_t seq, const std::vector<int32_t>& tokens, bool last_logits) {
  std::vector<token_in> b;
  b.reserve(tokens.size());
  for (int32_t t : tokens) b.push_back({seq, t, false});
  if (last_logits && !b.empty()) b.back().logits = true;
  return b;
}

// One timed repetition of a pp (n_gen == 0) or tg test on a fresh sequence. Returns nanoseconds.
uint64_t bench_once(context& ctx, const bench_params& p, bool pp) {
  const model::model& m = ctx.model();
  const int32_t seq = ctx.seq_new();
  if (p.n_depth > 0) ctx.decode(batch_of(seq, random_tokens(m, p.n_depth, p.seed ^ 0xdeb7ull, true), false));
  clock_type::time_point t0;
  if (pp) {
    const std::vector<token_in> b = batch_of(seq, random_tokens(m, p.n_prompt, p.seed, p.n_depth == 0), true);
    t0 = clock_type::now();
    ctx.decode(b);
  } else {
    int32_t token = random_tokens(m, 1, p.seed, true)[0];
    t0 = clock_type::now();
    for (int64_t i = 0; i < p.n_gen; ++i) token = argmax(ctx.decode({{seq, token, true}})[0]);
  }
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now() - t0).count();
  ctx.seq_free(seq);
  return static_cast<uint64_t>(std::max<int64_t>(ns, 1));
}

void summarise(bench_result& r, int64_t n_tokens) {
  const double n = static_cast<double>(r.samples_ns.size());
  for (uint64_t ns : r.samples_ns) r.samples_ts.push_back(1e9 * static_cast<double>(n_tokens) / static_cast<double>(ns));
  auto mean_sd = [n](auto const& xs, double& mean, double& sd) {
    double s = 0;
    for (auto x : xs) s += static_cast<double>(x);
    mean = s / n;
    double ss = 0;
    for (auto x : xs) ss += (static_cast<double>(x) - mean) * (static_cast<double>(x) - mean);
    sd = n > 1 ? std::sqrt(ss / (n - 1)) : 0.0;
  };
  mean_sd(r.samples_ns, r.avg_ns, r.stddev_ns);
  mean_sd(r.samples_ts, r.avg_ts, r.stddev_ts);
}

void check_params(const bench_params& p) {
  if (p.numerics.empty()) throw input_error("bench: no numerics to measure");
  if (p.backends.empty()) throw input_error("bench: no backend to measure on");
  if (p.reps < 1) throw input_error("bench: repetitions must be at least 1, found " + std::to_string(p.reps));
  if (p.n_threads < 1) throw input_error("bench: threads must be at least 1, found " + std::to_string(p.n_threads));
  if (p.n_prompt < 0 || p.n_gen < 0 || p.n_depth < 0)
    throw input_error("bench: prompt, generation and depth sizes must be non-negative");
  if (p.n_prompt == 0 && p.n_gen == 0) throw input_error("bench: both the pp and tg sizes are 0: nothing to measure");
  if (p.n_ubatch < 1) throw input_error("bench: ubatch must be at least 1, found " + std::to_string(p.n_ubatch));
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string size_text(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fixed(b / (1024.0 * 1024 * 1024), 2) + " GiB";
  return fixed(b / (1024.0 * 1024), 2) + " MiB";
}

std::string params_text(uint64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) return fixed(v / 1e9, 2) + " B";
  if (v >= 1e6) return fixed(v / 1e6, 2) + " M";
  return fixed(v / 1e3, 2) + " K";
}

// "8M", "1B", "1.1B": the parameter count as model names round it.
std::string params_label(uint64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) {
    const std::string s = fixed(v / 1e9, 1);
    return (s.size() > 2 && s.substr(s.size() - 2) == ".0" ? s.substr(0, s.size() - 2) : s) + "B";
  }
  if (v >= 1e6) return fixed(v / 1e6, 0) + "M";
  return fixed(v / 1e3, 0) + "K";
}

// s right-aligned in `width` characters (UTF-8 aware: "±" is one character of two bytes).
std::string pad_left(const std::string& s, size_t width) {
  size_t chars = 0;
  for (char c : s) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return std::string(width > chars ? width - chars : 0, ' ') + s;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? "" : line.substr(std::min(line.size(), c + 2));
    }
  return "";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

bench_model_info bench_describe(const model::model& m) {
  bench_model_info info;
  info.filename = m.path();
  std::map<gguf::dtype, uint64_t> bytes_by_type;
  for (const gguf::tensor_info& t : m.file().tensors()) {
    info.size += t.n_bytes;
    uint64_t n = 1;
    for (int64_t d : t.ne) n *= static_cast<uint64_t>(d);
    info.n_params += n;
    if (t.ne.size() >= 2) bytes_by_type[t.type] += t.n_bytes;
    const bool embd_not_read = t.name == "token_embd.weight" && m.file().find_tensor("output.weight");
    if (!embd_not_read) info.weight_bytes_per_token += t.n_bytes;
  }
  std::string main_type = "F32";
  uint64_t most = 0;
  for (auto [type, bytes] : bytes_by_type) {
    if (bytes <= most) continue;
    most = bytes;
    main_type = upper(gguf::dtype_get(type).name);
  }
  // A K-quant mixture is named as llama-bench names it (its general.file_type), e.g. "Q4_K - Medium".
  static const std::map<int64_t, const char*> MIXTURES = {{11, "Q3_K - Small"}, {12, "Q3_K - Medium"}, {13, "Q3_K - Large"},
                                                          {14, "Q4_K - Small"}, {15, "Q4_K - Medium"}, {16, "Q5_K - Small"},
                                                          {17, "Q5_K - Medium"}, {38, "MXFP4 MoE"}};
  if (m.file().find("general.file_type")) {
    try {  // only a label: a file_type of another type leaves the main weight type's name
      auto it = MIXTURES.find(m.file().get_int("general.file_type"));
      if (it != MIXTURES.end()) main_type = it->second;
    } catch (const input_error&) {
    }
  }
  info.type = std::string(model::arch_name(m.hp().arch)) + " " + params_label(info.n_params) + " " + main_type;
  return info;
}

uint64_t bench_kv_bytes_per_pos(const model::hparams& hp, numerics_mode numerics) {
  const uint64_t n_kv = static_cast<uint64_t>(hp.n_head_kv), hd = static_cast<uint64_t>(hp.head_dim);
  const uint64_t layers = static_cast<uint64_t>(hp.n_layer);
  switch (numerics) {
    case NUMERICS_EXACT: {
      const uint64_t nb = (hd + 31) / 32;
      return layers * 2 * n_kv * (nb * 32 * sizeof(int16_t) + nb * sizeof(int32_t));
    }
    case NUMERICS_FLOAT: return layers * 2 * n_kv * hd * sizeof(uint16_t);
    case NUMERICS_REFERENCE: return layers * 2 * n_kv * hd * sizeof(double);
  }
  return 0;
}

std::vector<bench_result> bench_run(std::shared_ptr<const model::model> m, const bench_params& p) {
  check_params(p);
  std::vector<std::unique_ptr<context>> ctxs;
  std::vector<numerics_mode> modes;
  for (numerics_mode nm : p.numerics)
    for (backend_kind b : nm == NUMERICS_EXACT ? p.backends : std::vector<backend_kind>{BACKEND_CPU}) {
      context_params cp;
      cp.numerics = nm;
      cp.backend = b;
      cp.device = p.device;
      cp.n_threads = p.n_threads;
      cp.n_ubatch = p.n_ubatch;
      cp.n_ctx = p.n_depth + std::max(p.n_prompt, p.n_gen) + 1;
      cp.repack = p.repack;
      ctxs.push_back(std::make_unique<context>(m, cp));
      modes.push_back(nm);
    }
  std::vector<bench_result> rows;
  for (const bool pp : {true, false}) {
    if ((pp ? p.n_prompt : p.n_gen) == 0) continue;
    const size_t first = rows.size();
    for (size_t i = 0; i < ctxs.size(); ++i) {
      bench_result r;
      r.numerics = modes[i];
      r.backend = ctxs[i]->params().backend;
      r.device = ctxs[i]->device_description();
      r.repacked = ctxs[i]->repack_stats();
      r.n_threads = p.n_threads;
      r.n_prompt = pp ? p.n_prompt : 0;
      r.n_gen = pp ? 0 : p.n_gen;
      r.n_depth = p.n_depth;
      r.n_ubatch = p.n_ubatch;
      rows.push_back(r);
      bench_once(*ctxs[i], p, pp);
    }
    for (int rep = 0; rep < p.reps; ++rep)
      for (size_t i = 0; i < ctxs.size(); ++i) rows[first + i].samples_ns.push_back(bench_once(*ctxs[i], p, pp));
    for (size_t i = 0; i < ctxs.size(); ++i) summarise(rows[first + i], pp ? p.n_prompt : p.n_gen);
  }
  return rows;
}

uint64_t bench_default_probe_bytes() {
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const uint64_t gib = 1ull << 30;
  if (pages <= 0 || page <= 0) return gib;
  return std::min(gib, static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2);
}

double bench_read_bandwidth(int n_threads, uint64_t bytes) {
  if (n_threads < 1) throw input_error("bench: threads must be at least 1, found " + std::to_string(n_threads));
  if (bytes < (1ull << 20)) throw input_error("bench: the bandwidth buffer must be at least 1 MiB");
  const size_t per_thread = static_cast<size_t>(bytes / sizeof(uint64_t) / static_cast<uint64_t>(n_threads));
  const size_t n = per_thread * static_cast<size_t>(n_threads);
  std::vector<uint64_t> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = i * 0x9e3779b97f4a7c15ull;
  std::vector<uint64_t> sums(static_cast<size_t>(n_threads));
  double best_s = 0;
  for (int pass = 0; pass < 5; ++pass) {
    std::vector<std::thread> threads;
    const auto t0 = clock_type::now();
    for (int t = 0; t < n_threads; ++t)
      threads.emplace_back([&, t] {
        const uint64_t* p = buf.data() + per_thread * static_cast<size_t>(t);
        uint64_t s = 0;
        for (size_t i = 0; i < per_thread; ++i) s += p[i];
        sums[static_cast<size_t>(t)] = s;
      });
    for (std::thread& th : threads) th.join();
    const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (pass == 0 || s < best_s) best_s = s;
  }
  volatile uint64_t sink = 0;
  for (uint64_t s : sums) sink = sink + s;
  return static_cast<double>(n * sizeof(uint64_t)) / 1e9 / std::max(best_s, 1e-9);
}

bench_floor bench_floor_of(const bench_model_info& info, const model::hparams& hp, const bench_result& r,
                           double bandwidth_gbs) {
  bench_floor f;
  const uint64_t mean_ctx = static_cast<uint64_t>(r.n_depth + r.n_gen / 2);
  f.bytes_per_token = info.weight_bytes_per_token + mean_ctx * bench_kv_bytes_per_pos(hp, r.numerics);
  f.floor_ts = bandwidth_gbs * 1e9 / static_cast<double>(std::max<uint64_t>(f.bytes_per_token, 1));
  f.ratio = f.floor_ts > 0 ? r.avg_ts / f.floor_ts : 0.0;
  return f;
}

std::string bench_test_name(const bench_result& r) {
  std::string s = r.n_prompt > 0 ? "pp" + std::to_string(r.n_prompt) : "tg" + std::to_string(r.n_gen);
  if (r.n_depth > 0) s += " @ d" + std::to_string(r.n_depth);
  return s;
}

std::string bench_row_name(const bench_result& r) {
  std::string s = numerics_name(r.numerics);
  if (r.backend != BACKEND_CPU) s += std::string("/") + backend_name(r.backend);
  return s;
}

std::string bench_table(const bench_model_info& info, const std::vector<bench_result>& rows) {
  int w = 8;  // the numerics column: as llama-bench's backend column, wider for "exact/vulkan"
  for (const bench_result& r : rows) w = std::max(w, static_cast<int>(bench_row_name(r).size()));
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line, "| %-30s | %10s | %10s | %-*s | %7s | %13s | %20s |\n", "model", "size", "params", w,
                "numerics", "threads", "test", "t/s");
  out += line;
  out += "| ------------------------------ | ---------: | ---------: | " + std::string(static_cast<size_t>(w), '-') +
         " | ------: | ------------: | -------------------: |\n";
  for (const bench_result& r : rows) {
    const std::string ts = pad_left(fixed(r.avg_ts, 2) + " ± " + fixed(r.stddev_ts, 2), 20);
    std::snprintf(line, sizeof line, "| %-30s | %10s | %10s | %-*s | %7d | %13s | %s |\n", info.type.c_str(),
                  size_text(info.size).c_str(), params_text(info.n_params).c_str(), w, bench_row_name(r).c_str(),
                  r.n_threads, bench_test_name(r).c_str(), ts.c_str());
    out += line;
  }
  return out;
}

const char* build_commit() { return DETAUDIT_BUILD_COMMIT; }

nlohmann::json bench_to_json(const bench_model_info& info, const std::vector<bench_result>& rows) {
  nlohmann::json arr = nlohmann::json::array();
  const std::string cpu = cpu_model_name(), now = utc_now();
  const std::string commit = build_commit();
  for (const bench_result& r : rows) {
    arr.push_back({{"build_commit", commit},
                   {"detaudit_version", DETAUDIT_VERSION},
                   {"cpu_info", cpu},
                   {"backends", "CPU"},
                   {"simd", kernels::cpu::isa_name(kernels::cpu::isa_default())},
                   {"model_filename", info.filename},
                   {"model_type", info.type},
                   {"model_size", info.size},
                   {"model_n_params", info.n_params},
                   {"numerics", numerics_name(r.numerics)},
                   {"backend", backend_name(r.backend)},
                   {"device", r.device},
                   {"repacked_tensors", r.repacked.tensors},
                   {"repacked_shared", r.repacked.shared},
                   {"repacked_bytes", r.repacked.bytes},
                   {"repack_seconds", r.repacked.seconds},
                   {"n_batch", r.n_ubatch},
                   {"n_ubatch", r.n_ubatch},
                   {"n_threads", r.n_threads},
                   {"n_prompt", r.n_prompt},
                   {"n_gen", r.n_gen},
                   {"n_depth", r.n_depth},
                   {"test_time", now},
                   {"avg_ns", static_cast<uint64_t>(std::llround(r.avg_ns))},
                   {"stddev_ns", static_cast<uint64_t>(std::llround(r.stddev_ns))},
                   {"avg_ts", r.avg_ts},
                   {"stddev_ts", r.stddev_ts},
                   {"samples_ns", r.samples_ns},
                   {"samples_ts", r.samples_ts}});
  }
  return arr;
}

}  // namespace detaudit::runtime
