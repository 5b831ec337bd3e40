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

#include <nlohmann/json.hpp>

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

namespace {

// tiny-llama-f16's built-in vocabulary with tokenizer.ggml.pre = `pre`.
tk::vocab builtin_with_pre(const std::string& pre) {
  const detaudit::gguf::file f = detaudit::gguf::file::open(detaudit::test::generated("models/synthetic/tiny-llama-f16.gguf"));
  detaudit::gguf::writer w;
  for (const detaudit::gguf::kv& e : f.metadata())
    if ((e.key.rfind("tokenizer.", 0) == 0 && e.key != "tokenizer.ggml.pre") || e.key == "general.architecture") w.set(e.key, e.val);
  w.set("tokenizer.ggml.pre", detaudit::gguf::value::of_string(pre));
  return tk::vocab_load(detaudit::gguf::file::from_memory(w.to_bytes(), "builtin-" + pre + ".gguf"));
}

}  // namespace

// gpt-oss's o200k tokenizer is "gpt-4o" to llama.cpp. No public vocabulary file of it is a fixture
// here, so the pre-tokenizer is checked on detaudit's built-in byte-level vocabulary, where every
// split shows in the ids: llama.cpp 2026-08's /tokenize of the llama-bpe vector inputs and of
// strings aimed at the regex (case changes, contractions, non-ASCII capitals, digits, slashes),
// recorded in tests/data/llamacpp-2026-08/tokenize-gpt-4o.json (tests/data/README.md).
TEST_CASE("tokenizer vectors: gpt-4o pre-tokenizer (gpt-oss) on the built-in vocabulary, against llama.cpp 2026-08") {
  std::ifstream in(detaudit::test::test_data("llamacpp-2026-08/tokenize-gpt-4o.json"));
  REQUIRE(in.good());
  const nlohmann::json ref = nlohmann::json::parse(in);
  const std::vector<vector_case> inp = read_cases("ggml-vocab-llama-bpe.gguf");  // the texts; their ids are llama3's
  REQUIRE(ref["inp_cases"].size() == inp.size());
  std::vector<vector_case> cases;
  for (size_t i = 0; i < inp.size(); ++i) cases.push_back({inp[i].text, ref["inp_cases"][i].get<std::vector<int32_t>>()});
  for (const auto& e : ref["extra"]) cases.push_back({e["text"].get<std::string>(), e["ids"].get<std::vector<int32_t>>()});
  const tk::vocab v = builtin_with_pre("gpt-4o"), gpt2 = builtin_with_pre("gpt-2");
  CHECK(v.pre() == "gpt-4o");
  size_t ok = 0, differ_from_gpt2 = 0, shown = 0;
  for (const vector_case& c : cases) {
    const std::vector<int32_t> got = tk::encode(v, c.text, false, false);
    if (got == c.ids) ++ok;
    else if (shown++ < 5)
      MESSAGE("'" << tk::piece_escape(c.text) << "'\n  llama.cpp: " << ids_text(c.ids) << "\n  detaudit:  " << ids_text(got));
    if (tk::encode(gpt2, c.text, false, false) != c.ids) ++differ_from_gpt2;
    CHECK(tk::decode(v, got) == c.text);
  }
  MESSAGE("gpt-4o: " << ok << "/" << cases.size() << " match llama.cpp; " << differ_from_gpt2
                     << " of them split differently under gpt-2's regex");
  CHECK(ok == cases.size());
  CHECK(differ_from_gpt2 >= 5);  // the cases tell the two regexes apart
}

// gpt-oss's harmony tokens, as the current llama.cpp sets them (llama-vocab.cpp): <|return|> and
// <|call|> end generation; with both present <|end|> does not (it closes an analysis message); the
// channel markers are user-defined, so they are written into the output text.
TEST_CASE("tokenizer: harmony's end-of-generation and user-defined tokens follow llama.cpp") {
  const detaudit::gguf::file f = detaudit::gguf::file::open(detaudit::test::generated("models/synthetic/tiny-llama-f16.gguf"));
  auto with_tokens = [&](const std::vector<std::string>& extra) {
    detaudit::gguf::writer w;
    std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens");
    std::vector<int32_t> types = f.get_i32s("tokenizer.ggml.token_type");
    for (const std::string& t : extra) {
      tokens.push_back(t);
      types.push_back(3);  // control, as the converter writes them
    }
    for (const detaudit::gguf::kv& e : f.metadata())
      if (e.key.rfind("tokenizer.", 0) == 0 && e.key != "tokenizer.ggml.tokens" && e.key != "tokenizer.ggml.token_type")
        w.set(e.key, e.val);
    w.set("tokenizer.ggml.tokens", detaudit::gguf::value::of_strings(tokens));
    w.set("tokenizer.ggml.token_type", detaudit::gguf::value::of_i32s(types));
    return tk::vocab_load(detaudit::gguf::file::from_memory(w.to_bytes(), "harmony.gguf"));
  };
  const tk::vocab h = with_tokens({"<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>"});
  CHECK(h.is_eog(h.find("<|return|>")));
  CHECK(h.is_eog(h.find("<|call|>")));
  CHECK_FALSE(h.is_eog(h.find("<|end|>")));
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|end|>"}) {
    CAPTURE(t);
    CHECK(tk::decode(h, std::vector<int32_t>{h.find(t)}) == t);  // user-defined: rendered in the text
    CHECK(tk::encode(h, t, false, true) == std::vector<int32_t>{h.find(t)});  // and parsed as one token
  }
  // Without <|return|> and <|call|> (Phi-3's <|end|>), <|end|> still ends generation.
  const tk::vocab p = with_tokens({"<|end|>", "<|channel|>"});
  CHECK(p.is_eog(p.find("<|end|>")));
}
