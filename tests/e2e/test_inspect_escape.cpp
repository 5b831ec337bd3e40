// Strings a file controls reach the terminal escaped: a model's general.name, tokenizer model and
// RoPE scaling type (printed by `inspect`, and by `generate`, `serve` and `run` when they refuse
// the model), and a records file's condition names (printed by `report` and `compare`). A raw
// ESC or BEL there would let a downloaded file clear the screen, set the window title or hide
// lines of the report.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "test_util.h"

using namespace detaudit;
using test::run_cmd;
using test::shell_quote;

namespace {

const std::string EVIL = "x\x1b[2J\x1b]0;pwned\x07\r";

// The first control byte other than a newline in `s`, or -1.
int first_control(const std::string& s) {
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\n') || c == 0x7f) return c;
  return -1;
}

// stories260K with `key` set to the string `v` (added when absent).
std::string model_with(const std::string& name, const std::string& key, const std::string& v) {
  const gguf::file f = gguf::file::open(test::fixture("models/stories260K.gguf"));
  gguf::writer w(f.alignment());
  for (gguf::kv e : f.metadata()) {
    if (e.key == "general.alignment") continue;
    if (e.key == key) e.val = gguf::value::of_string(v);
    w.set(e.key, e.val);
  }
  if (!f.find(key)) w.set(key, gguf::value::of_string(v));
  for (const gguf::tensor_info& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.n_bytes);
  const std::string path = test::process_scratch_dir("inspect_escape") + "/" + name + ".gguf";
  w.write(path);
  return path;
}

void check_clean(const std::string& what, const test::cmd_result& r) {
  INFO(what << ": exit " << r.exit_code << "\nstdout: " << r.out << "\nstderr: " << r.err);
  CHECK(first_control(r.out) == -1);
  CHECK(first_control(r.err) == -1);
  CHECK((r.out + r.err).find("\\x1b") != std::string::npos);  // shown, escaped
}

}  // namespace

TEST_CASE("terminal: control bytes from a model file reach the terminal escaped") {
  const std::string bin = shell_quote(test::detaudit_bin());
  const std::string named = model_with("name", "general.name", "tiny" + EVIL);
  const test::cmd_result inspect = run_cmd(bin + " inspect " + shell_quote(named));
  CHECK(inspect.exit_code == 0);
  check_clean("inspect general.name", inspect);
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"tokenizer.ggml.model", "llama" + EVIL},
                                   {"llama.rope.scaling.type", "linear" + EVIL}}) {
    CAPTURE(key);
    const std::string path = model_with("bad", key, value);
    check_clean("inspect " + key, run_cmd(bin + " inspect " + shell_quote(path)));
    const test::cmd_result gen = run_cmd(bin + " generate -m " + shell_quote(path) + " -p hi -n 1");
    CHECK(gen.exit_code == 2);
    check_clean("generate " + key, gen);
    const test::cmd_result serve = run_cmd(bin + " serve -m " + shell_quote(path) + " --port 0");
    CHECK(serve.exit_code == 2);
    check_clean("serve " + key, serve);
  }
}

TEST_CASE("terminal: condition names and run.json strings reach the report's terminal escaped") {
  const std::string dir = test::scratch_dir("report_escape");
  std::string lines;
  const std::pair<std::string, std::string> recs[] = {
      {"alone", "x y"}, {"control", "x z"}, {"concurrent-8" + EVIL, "x q"}, {"alone" + EVIL, "x w"}, {"control" + EVIL, "x v"}};
  for (const auto& [cond, text] : recs) {
    const nlohmann::json r = {{"schema", 1}, {"item_id", "1" + EVIL}, {"probe", "repeat" + EVIL}, {"condition", cond}, {"text", text},
                              {"tokens", {{{"id", -1}, {"text", text}}}}, {"target", {{"label", "A" + EVIL}}}};
    lines += r.dump() + "\n";
  }
  const nlohmann::json manifest = {{"run_id", "r" + EVIL}, {"targets", {{{"label", "A" + EVIL}, {"spec", "http://h" + EVIL}}}}};
  for (const char* side : {"/a", "/b"}) {
    std::filesystem::create_directories(dir + side);
    test::write_file(dir + side + "/records.jsonl", lines);
    test::write_file(dir + side + "/run.json", manifest.dump());
  }
  const std::string bin = shell_quote(test::detaudit_bin());
  const test::cmd_result report = run_cmd(bin + " report " + shell_quote(dir + "/a") + " --format text --fail-on none");
  CHECK(report.exit_code == 0);
  check_clean("report", report);
  const test::cmd_result compare = run_cmd(bin + " compare " + shell_quote(dir + "/a") + " " + shell_quote(dir + "/b") +
                                           " --format text --fail-on none");
  CHECK(compare.exit_code == 0);
  check_clean("compare", compare);
}
