#include <iomanip>
#include <iostream>
#include <memory>

#include "backends/op_support.h"
#include "commands.h"
#include "kernels/cpu/cpu.h"
#include "kernels/gpu/gpu.h"
#include "model/inspect.h"
#include "util/error.h"

namespace detaudit::cli {
namespace {

struct devices_options {
  bool json = false;
  bool ops = false;
};

// One API's devices as JSON: {"api", "compiled", "devices": [...]}.
nlohmann::json api_json(kernels::gpu::api a) {
  nlohmann::json j = {{"api", kernels::gpu::api_name(a)}, {"compiled", kernels::gpu::api_compiled(a)}};
  nlohmann::json devs = nlohmann::json::array();
  if (kernels::gpu::api_compiled(a))
    for (const kernels::gpu::device_desc& d : kernels::gpu::list_devices(a))
      devs.push_back({{"index", d.index}, {"name", d.name}, {"kind", d.kind}, {"api_version", d.api_version},
                      {"driver", d.driver}, {"exact", d.exact_ok}, {"refusal", d.refusal}, {"features", d.features}});
  j["devices"] = devs;
  return j;
}

void print_api(const nlohmann::json& j) {
  const std::string name = j["api"];
  if (!j["compiled"].get<bool>()) {
    std::cout << name << ": not built (configure with -DDETAUDIT_" << (name == "vulkan" ? "VULKAN" : "CUDA") << "=ON)\n";
    return;
  }
  if (j["devices"].empty()) {
    std::cout << name << ": no device found\n";
    return;
  }
  for (const nlohmann::json& d : j["devices"]) {
    std::cout << name << " " << d["index"].get<int>() << ": " << d["name"].get<std::string>() << " ("
              << d["kind"].get<std::string>() << ", " << name << " " << d["api_version"].get<std::string>() << ", "
              << d["driver"].get<std::string>() << ")";
    const std::string features = d["features"];
    if (d["exact"].get<bool>()) std::cout << "  exact: yes" << (features.empty() ? "" : ", " + features) << "\n";
    else std::cout << "  exact: no, " << d["refusal"].get<std::string>() << "\n";
  }
}

// --ops: what each backend computes (backends/op_support.h).
void print_ops(bool json) {
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const backends::op_support_row& r : backends::op_support())
      rows.push_back({{"part", r.part}, {"used_by", r.used_by}, {"cpu", backends::support_name(r.cpu)},
                      {"vulkan", backends::support_name(r.vulkan)}, {"cuda", backends::support_name(r.cuda)}});
    std::cout << rows.dump() << "\n";
    return;
  }
  std::cout << backends::op_support_markdown();
}

void run_devices(const devices_options& o) {
  if (o.ops) return print_ops(o.json);
  std::string isa;
  try {
    isa = kernels::cpu::isa_name(kernels::cpu::isa_default());
  } catch (const input_error& e) {
    isa = e.what();
  }
  const nlohmann::json apis = {api_json(kernels::gpu::api::vulkan), api_json(kernels::gpu::api::cuda)};
  if (o.json) {
    std::cout << model::safe_dump({{"cpu", {{"simd", isa}}}, {"gpu", apis}}) << "\n";
    return;
  }
  std::cout << "cpu: " << isa << "  exact: yes\n";
  for (const nlohmann::json& a : apis) print_api(a);
}

}  // namespace

void add_backend_options(CLI::App* sub, backend_options& o) {
  sub->add_option("--backend", o.backend,
                  "Where the forward pass runs: cpu, vulkan or cuda (GPU backends: --numerics exact only, the CPU's bits)")
      ->capture_default_str()->type_name("NAME");
  sub->add_option("--device", o.device, "GPU device index, as 'detaudit devices' lists them")->capture_default_str()->type_name("N");
}

void apply_backend_options(const backend_options& o, runtime::context_params& cp) {
  cp.backend = runtime::backend_from_name(o.backend);
  cp.device = o.device;
}

void setup_devices(CLI::App& app) {
  auto opt = std::make_shared<devices_options>();
  CLI::App* sub = app.add_subcommand(
      "devices",
      "List the backends this build has and their devices, with whether each can run --numerics exact.\n"
      "A GPU device runs exact numerics when it can promise the rounding the precision contract needs (Vulkan:\n"
      "RTE rounding for float32 and 64-bit integers in shaders; CUDA: compute capability 8.0 or newer). Pass\n"
      "the index to --device with --backend vulkan or cuda.");
  sub->add_flag("--json", opt->json, "One JSON object instead of the text listing (with --ops: one array of rows)");
  sub->add_flag("--ops", opt->ops,
                "Print what each backend computes instead: one row per op, attention variant and weight type, with "
                "yes (the backend's kernels), host (a GPU backend runs the CPU's function between device ops) or "
                "no per backend; a GPU backend refuses a model that needs a 'no' when it is loaded, naming it");
  sub->footer("Examples:\n  detaudit devices\n  detaudit devices --ops\n  detaudit generate -m model.gguf -p 'Hello' --backend vulkan --device 0 --hashes");
  sub->callback([opt] { run_devices(*opt); });
}

}  // namespace detaudit::cli
