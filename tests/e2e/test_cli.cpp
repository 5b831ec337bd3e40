// The command line through the binary: exit codes, one-line errors, --config, devices. llama.cpp
// flag rewriting: tests/unit/test_cli.cpp.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/gpu/gpu.h"
#include "test_util.h"

using detaudit::test::run_cmd;
using detaudit::test::shell_quote;

namespace {

std::string bin() { return shell_quote(detaudit::test::detaudit_bin()); }

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("cli: usage errors exit 2 with exactly one line on stderr") {
  const std::vector<std::string> bad = {
      "",                                   // no subcommand
      "frobnicate",                         // unknown subcommand
      "inspect",                            // missing positional
      "inspect /nonexistent/file.gguf",     // file does not exist
      "inspect --no-such-flag x",           // unknown flag
      "synth --type q4_k",                  // missing -o
      "synth -o /tmp/x.gguf --type q9_9",   // unknown type (input_error from the callback)
      "synth -o /tmp/x.gguf --n-embd abc",  // not a number
      "generate -m " + shell_quote(detaudit::test::fixture("models/stories260K.gguf")) + " -p x --backend tpu",
      "generate -m " + shell_quote(detaudit::test::fixture("models/stories260K.gguf")) +
          " -p x --backend vulkan --numerics float",  // GPUs run exact only
      "generate -m " + shell_quote(detaudit::test::fixture("models/stories260K.gguf")) + " -p x --backend cuda --device 77",
  };
  for (const std::string& args : bad) {
    CAPTURE(args);
    auto r = run_cmd(bin() + " " + args);
    CHECK(r.exit_code == 2);
    CHECK_FALSE(r.signaled);
    CHECK(count_lines(r.err) == 1);
    CHECK(r.err.rfind("detaudit", 0) == 0);
  }
}

TEST_CASE("cli: an unknown option is named as typed, with the closest real one") {
  auto r = run_cmd(bin() + " run --n-predic 5 --fail-onn any");
  CHECK(r.exit_code == 2);
  CHECK(r.err == "detaudit run: error: unknown option --n-predic (did you mean --n-predict?); unknown option --fail-onn "
                 "(did you mean --fail-on?) (see 'detaudit run --help')\n");
  auto far = run_cmd(bin() + " report --zzzzzzzz x");
  CHECK(far.err == "detaudit report: error: unknown option --zzzzzzzz (see 'detaudit report --help')\n");
  auto eq = run_cmd(bin() + " report --formt=json x");
  CHECK(eq.err.find("unknown option --formt (did you mean --format?)") != std::string::npos);
  // A llama.cpp flag rewritten before parsing is named as the user typed it.
  auto np = run_cmd(bin() + " serve -np lots");
  CHECK(np.exit_code == 2);
  CHECK(np.err.find("-np") != std::string::npos);
  CHECK(np.err.find("--parallel") == std::string::npos);
  auto m = run_cmd(bin() + " serve -m /nonexistent/x.gguf");
  CHECK(m.err.find("-m: File does not exist") != std::string::npos);
  CHECK(m.err.find("--model") == std::string::npos);
  // -n is the number of tokens to predict on run, as on generate.
  auto help = run_cmd(bin() + " run --help");
  CHECK(help.out.find("-n,--n-predict") != std::string::npos);
}

TEST_CASE("cli: --help and --version exit 0 and teach") {
  auto r = run_cmd(bin() + " --help");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("inspect") != std::string::npos);
  CHECK(r.out.find("synth") != std::string::npos);
  auto s = run_cmd(bin() + " synth --help");
  CHECK(s.exit_code == 0);
  CHECK(s.out.find("--preset") != std::string::npos);
  CHECK(s.out.find("Examples") != std::string::npos);
  auto v = run_cmd(bin() + " --version");
  CHECK(v.exit_code == 0);
  CHECK(v.out.find("detaudit ") == 0);
  // The commit the binary was built from: a commit of the source tree (HEAD when freshly built), or
  // "unknown" outside a checkout.
  const std::string src = detaudit::test::test_data("../..");
  const size_t at = v.out.find("(commit ");
  REQUIRE(at != std::string::npos);
  const std::string commit = v.out.substr(at + 8, v.out.find_first_of("-)", at + 8) - (at + 8));
  if (run_cmd("git -C " + shell_quote(src) + " rev-parse HEAD >/dev/null 2>&1").exit_code == 0) {
    CHECK(commit.size() == 12);
    CHECK(run_cmd("git -C " + shell_quote(src) + " cat-file -e " + shell_quote(commit + "^{commit}") + " 2>/dev/null").exit_code == 0);
  } else {
    CHECK(commit == "unknown");
  }
}

TEST_CASE("cli: --config JSON supplies options and the command line overrides it") {
  std::string dir = detaudit::test::scratch_dir("cli_config");
  std::string cfg = dir + "/synth.json";
  std::ofstream(cfg) << nlohmann::json{{"output", dir + "/from-config.gguf"}, {"preset", "tiny"}, {"type", "q8_0"},
                                       {"n-layer", 1}, {"tied-output", true}}
                            .dump();
  auto r = run_cmd(bin() + " synth --config " + shell_quote(cfg) + " --type q4_0");
  REQUIRE(r.exit_code == 0);
  auto i = run_cmd(bin() + " inspect --json " + shell_quote(dir + "/from-config.gguf"));
  REQUIRE(i.exit_code == 0);
  auto info = nlohmann::json::parse(i.out);
  CHECK(info["hparams"]["n_layer"] == 1);                 // from the config
  CHECK(info["hparams"]["n_embd"] == 256);                // from the preset the config named
  CHECK(info["file_type"]["name"] == "MOSTLY_Q4_0");      // the command line won over "q8_0"
  CHECK(info["engine"]["tied_output"] == true);           // a boolean flag from the config

  std::ofstream(dir + "/bad.json") << "{\"preset\": ";
  auto b = run_cmd(bin() + " synth -o x.gguf --config " + shell_quote(dir + "/bad.json"));
  CHECK(b.exit_code == 2);
  CHECK(b.err.find("not valid JSON") != std::string::npos);
  std::ofstream(dir + "/unknown.json") << R"({"no-such-option": 1})";
  auto u = run_cmd(bin() + " synth -o x.gguf --config " + shell_quote(dir + "/unknown.json"));
  CHECK(u.exit_code == 2);
  CHECK(u.err.find("unknown option 'no-such-option'") != std::string::npos);
  CHECK(count_lines(u.err) == 1);
}

TEST_CASE("cli: devices lists the CPU and every GPU API with what this build has") {
  // Listing loads the Vulkan driver; under AddressSanitizer its own allocations (from code the
  // loader unloads before exit) would be reported as leaks of this process (tests/CMakeLists.txt).
  const std::string env = "ASAN_OPTIONS=detect_leaks=0 ";
  auto r = run_cmd(env + bin() + " devices --json");
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["cpu"]["simd"].is_string());
  REQUIRE(j["gpu"].size() == 2);
  for (const nlohmann::json& a : j["gpu"]) {
    const std::string name = a["api"];
    CAPTURE(name);
    CHECK(a["compiled"].get<bool>() ==
          detaudit::kernels::gpu::api_compiled(name == "vulkan" ? detaudit::kernels::gpu::api::vulkan : detaudit::kernels::gpu::api::cuda));
    for (const nlohmann::json& d : a["devices"]) {
      CHECK(d["name"].is_string());
      CHECK(d["exact"].is_boolean());
      if (!d["exact"].get<bool>()) CHECK_FALSE(d["refusal"].get<std::string>().empty());
    }
  }
  auto t = run_cmd(env + bin() + " devices");
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.rfind("cpu: ", 0) == 0);
  CHECK(t.out.find("\nvulkan") != std::string::npos);
  CHECK(t.out.find("\ncuda") != std::string::npos);
}
