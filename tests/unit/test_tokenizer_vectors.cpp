// llama.cpp's tokenizer test vectors (models/ggml-vocab-*.gguf.inp / .out), one test case per
// vocabulary, run as llama.cpp's test-tokenizer-0 runs them: add_special = false,
// parse_special = false. Each case also checks decode(encode(x)) == x where the vocabulary can.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/vocab.h"
#include "tokenizer/vocab_import.h"

namespace tk = detaudit::tokenizer;
using detaudit::test::fixture;

namespace {

struct vector_case {
  std::string text;
  std::vector<int32_t> ids;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// .inp: cases separated by "\n__ggml_vocab_test__\n" (the file ends with one); .out: one line of
// space-separated ids per case.
std::vector<vector_case> read_cases(const std::string& name) {
  const std::string inp = slurp(fixture("vocab/" + name + ".inp"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<vector_case> cases;
  for (size_t pos = 0; pos < inp.size();) {
    size_t next = inp.find(sep, pos);
    if (next == std::string::npos) next = inp.size();
    cases.push_back({inp.substr(pos, next - pos), {}});
    pos = next == inp.size() ? next : next + sep.size();
  }
  std::istringstream out(slurp(fixture("vocab/" + name + ".out")));
  std::string line;
  size_t i = 0;
  for (; std::getline(out, line); ++i) {
    REQUIRE(i < cases.size());
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) cases[i].ids.push_back(id);
  }
  REQUIRE(i == cases.size());
  return cases;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// Runs every case; returns the number that match and prints the first mismatches.
// Round-trip failures are collected for the cases not in `no_round_trip`.
void check_vectors(const tk::vocab& v, const std::string& name, const std::vector<size_t>& no_round_trip = {}) {
  const std::vector<vector_case> cases = read_cases(name);
  CHECK(cases.size() == 46);
  size_t ok = 0, rt_ok = 0, rt_checked = 0, shown = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> got = tk::encode(v, cases[i].text, false, false);
    if (got == cases[i].ids) {
      ++ok;
    } else if (shown++ < 5) {
      MESSAGE(name << " case " << i << " '" << tk::piece_escape(cases[i].text) << "'\n  expected: " << ids_text(cases[i].ids)
                   << "\n  got:      " << ids_text(got));
    }
    if (std::find(no_round_trip.begin(), no_round_trip.end(), i) != no_round_trip.end()) continue;
    ++rt_checked;
    const std::string back = tk::decode(v, got);
    if (back == cases[i].text) ++rt_ok;
    else MESSAGE(name << " case " << i << " does not round-trip: '" << tk::piece_escape(back) << "'");
  }
  MESSAGE(name << ": " << ok << "/" << cases.size() << " vectors match; round trip " << rt_ok << "/" << rt_checked);
  CHECK(ok == cases.size());
  CHECK(rt_ok == rt_checked);
}

tk::vocab load_fixture(const std::string& rel) {
  return tk::vocab_load(detaudit::gguf::file::open(fixture(rel)));
}

// Writes `v` to an in-memory GGUF and reads it back, so the writer and loader are exercised.
tk::vocab through_gguf(const tk::vocab& v, const std::string& name) {
  detaudit::gguf::writer w;
  w.set("general.architecture", detaudit::gguf::value::of_string("gpt2"));
  tk::vocab_write(w, v);
  return tk::vocab_load(detaudit::gguf::file::from_memory(w.to_bytes(), name));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("tokenizer vectors: llama-spm") {
  check_vectors(load_fixture("vocab/ggml-vocab-llama-spm.gguf"), "ggml-vocab-llama-spm.gguf");
}

TEST_CASE("tokenizer vectors: phi-3") {
  check_vectors(load_fixture("vocab/ggml-vocab-phi-3.gguf"), "ggml-vocab-phi-3.gguf");
}

TEST_CASE("tokenizer vectors: gpt-2") {
  check_vectors(load_fixture("vocab/ggml-vocab-gpt-2.gguf"), "ggml-vocab-gpt-2.gguf");
}

TEST_CASE("tokenizer vectors: qwen2 (imported from qwen.tiktoken)") {
  auto t0 = std::chrono::steady_clock::now();
  tk::vocab imported = tk::vocab_import_tiktoken(fixture("vocab/qwen/qwen.tiktoken"), "qwen2");
  MESSAGE("qwen2 tiktoken import: " << seconds_since(t0) << " s");
  tk::vocab v = through_gguf(imported, "qwen2-import.gguf");
  MESSAGE("qwen2 import + GGUF round trip: " << seconds_since(t0) << " s");
  check_vectors(v, "ggml-vocab-qwen2.gguf");
}

TEST_CASE("tokenizer vectors: deepseek-r1-qwen (imported from qwen.tiktoken)") {
  tk::vocab v = through_gguf(tk::vocab_import_tiktoken(fixture("vocab/qwen/qwen.tiktoken"), "deepseek-r1-qwen"),
                             "deepseek-r1-qwen-import.gguf");
  CHECK(v.pre() == "deepseek-r1-qwen");
  check_vectors(v, "ggml-vocab-deepseek-r1-qwen.gguf");
}

TEST_CASE("tokenizer vectors: llama-bpe (imported from llama3.2 encoder.json + vocab.bpe)") {
  auto t0 = std::chrono::steady_clock::now();
  tk::vocab imported = tk::vocab_import_hf(fixture("vocab/llama3.2/encoder.json"), fixture("vocab/llama3.2/vocab.bpe"),
                                           "llama-bpe");
  MESSAGE("llama3.2 HF import: " << seconds_since(t0) << " s");
  tk::vocab v = through_gguf(imported, "llama-bpe-import.gguf");
  MESSAGE("llama3.2 import + GGUF round trip: " << seconds_since(t0) << " s");
  check_vectors(v, "ggml-vocab-llama-bpe.gguf");
}
