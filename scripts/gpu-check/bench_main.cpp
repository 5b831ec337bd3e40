// The benchmark driver of scripts/gpu-check.sh: the 1B synthetic preset (--preset) in Q8_0 and Q4_K_M, pp512
// and tg128, on the CPU (exact and float) and the CUDA backend (exact), printed as one table.
//
//   gpu_check_bench --list                 the CUDA devices; exit status 2 and "no CUDA device"
//                                          when there is none that runs exact numerics
//   gpu_check_bench --dir DIR --synth      writes the models (one thread per type) and exits
//   gpu_check_bench --dir DIR [--reps N] [--threads N] [--n-prompt P] [--n-gen N] [--types q8_0,q4_k_m]
//                   [--float-n-prompt P] [--float-n-gen N] [--preset 1b] [--backends cpu,cuda]
//                                          the benchmark (writing the models that are missing);
//                                          --backends picks the exact rows (default both)
//
// The float rows run shorter tests (pp128, tg16) and one repetition: the CPU float path of the
// K-quant types is slow enough that pp512 / tg128 alone would take minutes per model.
//
// Goals: one short run on a GPU machine that shows the backends side by side, built from the
// engine sources alone (no CLI, no fixtures). Non-goals: assertions about speed (the tests in
// tests/backend check the bits; this only measures).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "gguf/dtype.h"
#include "kernels/gpu/gpu.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/bench.h"

using namespace detaudit;

namespace {

int list_cuda() {
  const std::vector<kernels::gpu::device_desc> devs = kernels::gpu::list_devices(kernels::gpu::api::cuda);
  int usable = 0;
  for (const kernels::gpu::device_desc& d : devs) {
    std::cout << "cuda " << d.index << ": " << d.name << " [" << d.driver << ", runtime " << d.api_version << "]"
              << (d.exact_ok ? "" : " cannot run exact numerics: " + d.refusal) << "\n";
    usable += d.exact_ok ? 1 : 0;
  }
  if (usable == 0) {
    std::cout << "no CUDA device" << std::endl;
    return 2;
  }
  return 0;
}

struct options {
  std::string dir;
  int reps = 2;
  int threads = static_cast<int>(std::thread::hardware_concurrency() ? std::thread::hardware_concurrency() : 1);
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  int64_t float_n_prompt = 128;
  int64_t float_n_gen = 16;
  // Weight types ("q8_0") or llama.cpp mixtures ("q4_k_m": model::synth_apply_mixture).
  std::vector<std::string> types{"q8_0", "q4_k_m"};
  std::string preset = "1b";
  std::vector<runtime::backend_kind> backends{runtime::BACKEND_CPU, runtime::BACKEND_CUDA};
};

// The comma-separated names of s ("a,b" -> {"a", "b"}).
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}

std::vector<runtime::backend_kind> parse_backends(const std::string& s) {
  std::vector<runtime::backend_kind> out;
  for (const std::string& name : split_commas(s)) {
    if (name == "cpu") out.push_back(runtime::BACKEND_CPU);
    else if (name == "cuda") out.push_back(runtime::BACKEND_CUDA);
    else throw std::runtime_error("unknown backend " + name + " (cpu, cuda)");
  }
  return out;
}

// Applies a weight type or mixture name to o; false when it is neither.
bool apply_type(model::synth_options& o, const std::string& name) {
  if (model::synth_apply_mixture(o, name)) return true;
  const gguf::dtype_traits* tr = gguf::dtype_from_name(name);
  if (!tr) return false;
  o.type = tr->type;
  return true;
}

std::vector<std::string> parse_types(const std::string& s) {
  std::vector<std::string> out;
  for (const std::string& name : split_commas(s)) {
    model::synth_options probe;
    if (!apply_type(probe, name))
      throw std::runtime_error("unknown weight type or mixture " + name + " (e.g. q8_0, q4_K, " +
                               model::synth_mixture_names() + ")");
    out.push_back(name);
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string model_path(const options& o, const std::string& type) {
  return o.dir + "/synth-" + o.preset + "-" + type + ".gguf";
}

// Writes the preset in `type` (a weight type or mixture) unless the file exists (written under a
// temporary name first, so an interrupted run leaves no partial model behind).
void synth_model(const options& o, const std::string& type) {
  const std::string path = model_path(o, type);
  if (std::filesystem::exists(path)) return;
  model::synth_options so;
  const model::synth_preset* preset = model::synth_find_preset(o.preset);
  if (!preset) throw std::runtime_error("unknown preset " + o.preset + " (" + model::synth_preset_names() + ")");
  synth_apply_preset(so, *preset);
  if (!apply_type(so, type)) throw std::runtime_error("unknown weight type or mixture " + type);
  model::synth_write(so, path + ".part");
  std::filesystem::rename(path + ".part", path);
}

int synth_all(const options& o) {
  std::filesystem::create_directories(o.dir);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(o.types.size());
  for (size_t i = 0; i < o.types.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        synth_model(o, o.types[i]);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& e : errors) {
    if (!e.empty()) throw std::runtime_error(e);
  }
  std::printf("models written in %.1f s\n", seconds_since(t0));
  return 0;
}

int run(const options& o) {
  std::filesystem::create_directories(o.dir);
  for (const std::string& t : o.types) {
    const auto t0 = std::chrono::steady_clock::now();
    synth_model(o, t);
    const std::string path = model_path(o, t);
    auto m = model::model::load(path);
    std::printf("%s: ready in %.1f s\n", path.c_str(), seconds_since(t0));
    runtime::bench_params p;
    p.numerics = {runtime::NUMERICS_EXACT};
    p.backends = o.backends;
    p.n_threads = o.threads;
    p.n_prompt = o.n_prompt;
    p.n_gen = o.n_gen;
    p.reps = o.reps;
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<runtime::bench_result> rows = runtime::bench_run(m, p);
    if (o.float_n_prompt > 0 || o.float_n_gen > 0) {
      runtime::bench_params pf = p;
      pf.numerics = {runtime::NUMERICS_FLOAT};
      pf.backends = {runtime::BACKEND_CPU};
      pf.n_prompt = o.float_n_prompt;
      pf.n_gen = o.float_n_gen;
      pf.reps = 1;
      const std::vector<runtime::bench_result> float_rows = runtime::bench_run(m, pf);
      rows.insert(rows.end(), float_rows.begin(), float_rows.end());
    }
    std::cout << runtime::bench_table(runtime::bench_describe(*m), rows);
    for (const runtime::bench_result& r : rows) {
      if (r.backend == runtime::BACKEND_CPU) continue;
      std::cout << "device: " << r.device << "\n";
      break;
    }
    std::printf("measured in %.1f s\n\n", seconds_since(t1));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    options o;
    bool synth_only = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--list") return list_cuda();
      if (a == "--synth") synth_only = true;
      else if (a == "--dir") o.dir = value();
      else if (a == "--reps") o.reps = std::atoi(value().c_str());
      else if (a == "--threads") o.threads = std::atoi(value().c_str());
      else if (a == "--n-prompt") o.n_prompt = std::atoll(value().c_str());
      else if (a == "--n-gen") o.n_gen = std::atoll(value().c_str());
      else if (a == "--float-n-prompt") o.float_n_prompt = std::atoll(value().c_str());
      else if (a == "--float-n-gen") o.float_n_gen = std::atoll(value().c_str());
      else if (a == "--types") o.types = parse_types(value());
      else if (a == "--preset") o.preset = value();
      else if (a == "--backends") o.backends = parse_backends(value());
      else throw std::runtime_error("unknown argument " + a);
    }
    if (o.dir.empty()) throw std::runtime_error("--dir DIR is required (where the synthetic models are written)");
    return synth_only ? synth_all(o) : run(o);
  } catch (const std::exception& e) {
    std::cerr << "gpu_check_bench: " << e.what() << "\n";
    return 1;
  }
}
