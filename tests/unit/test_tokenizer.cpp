// Tokenizer behaviour beyond the vector files: the built-in vocabulary, special tokens, BOS/EOS,
// detokenizer options, load and import errors. The tokenize / vocab import commands:
// tests/e2e/test_tokenizer.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"
#include "tokenizer/vocab_import.h"
#include "util/error.h"

namespace tk = detaudit::tokenizer;
namespace gguf = detaudit::gguf;
using detaudit::test::fixture;

namespace {

tk::vocab load_fixture(const std::string& rel) { return tk::vocab_load(gguf::file::open(fixture(rel))); }

tk::vocab load_bytes(const gguf::writer& w, const std::string& name) {
  return tk::vocab_load(gguf::file::from_memory(w.to_bytes(), name));
}

// A tiny valid "gpt2" vocabulary: the 256 byte tokens, "ab", and the merge "a b".
gguf::writer tiny_bpe_writer() {
  gguf::writer w;
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(tk::byte_to_unicode(static_cast<uint8_t>(b)));
  tokens.push_back("ab");
  w.set("general.architecture", gguf::value::of_string("gpt2"));
  w.set("tokenizer.ggml.model", gguf::value::of_string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::value::of_string("gpt-2"));
  w.set("tokenizer.ggml.tokens", gguf::value::of_strings(tokens));
  return w;
}

// The message of the input_error `f` throws ("" if it throws none).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const detaudit::input_error& e) {
    return e.what();
  }
  return "";
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Random valid UTF-8: ASCII, Latin, CJK, emoji and a few joiners / combining marks.
std::string random_utf8(std::mt19937& rng, size_t n_cpts) {
  static const uint32_t ranges[][2] = {{0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x17F}, {0x400, 0x4FF}, {0x300, 0x36F},
                                       {0x4E00, 0x9FFF}, {0x3040, 0x30FF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F},
                                       {0x200B, 0x200D}, {0x10000, 0x10FFFF}};
  std::string s;
  for (size_t i = 0; i < n_cpts; ++i) {
    const auto& r = ranges[rng() % std::size(ranges)];
    uint32_t cpt = r[0] + rng() % (r[1] - r[0] + 1);
    if (cpt >= 0xD800 && cpt <= 0xDFFF) cpt = 'x';
    tk::utf8_append(s, cpt);
  }
  return s;
}

}  // namespace

TEST_CASE("tokenizer builtin: a small byte-level BPE that round-trips any UTF-8") {
  const tk::vocab v = tk::vocab_builtin();
  CHECK(v.kind() == tk::VOCAB_BPE);
  CHECK(std::string(v.kind_name()) == "bpe");
  CHECK(v.pre() == "gpt-2");
  CHECK(v.size() >= 512);
  CHECK(v.size() <= 1024);
  CHECK(v.n_merges() + 256 + 2 == static_cast<size_t>(v.size()));
  CHECK(v.is_control(v.ids().bos));
  CHECK(v.is_eog(v.ids().eos));
  CHECK(v.token_text(v.ids().bos) == "<|bos|>");
  CHECK(v.special_tokens() == std::vector<int32_t>{v.ids().bos, v.ids().eos});
  MESSAGE("built-in vocabulary: " << v.size() << " tokens, " << v.n_merges() << " merges");

  const std::string prompt = "Question: Janet has 16 eggs and sells 9 of them for $2 each. How much money does she make?";
  const std::vector<int32_t> ids = tk::encode(v, prompt, false, false);
  CHECK(ids.size() < prompt.size() / 2);  // learned merges cover words and numbers
  CHECK(tk::decode(v, ids) == prompt);

  for (const std::string& s : {std::string("héllo wörld ½ — “quotes”"), std::string("日本語のテキスト、中文文本"),
                               std::string("emoji 🦙🚀 😶‍🌫️ flags 🇫🇷 and ZWJ 👩‍👩‍👧"), std::string("\t\n\r\v\f  spaces   "),
                               std::string("\0nul\x01\x7f", 7), std::string("")})
    CHECK(tk::decode(v, tk::encode(v, s, false, false)) == s);

  std::mt19937 rng(1234);
  for (int i = 0; i < 200; ++i) {
    const std::string s = random_utf8(rng, 1 + rng() % 40);
    const std::vector<int32_t> got = tk::encode(v, s, false, false);
    REQUIRE_MESSAGE(tk::decode(v, got) == s, "case " << i << ": '" << tk::piece_escape(s) << "'");
  }

  const std::vector<int32_t> with_bos = tk::encode(v, "Hello", true, false);
  REQUIRE(!with_bos.empty());
  CHECK(with_bos.front() == v.ids().bos);
  CHECK(tk::decode(v, with_bos, {.remove_special = true}) == "Hello");
  CHECK(tk::decode(v, with_bos, {.unparse_special = true}) == "<|bos|>Hello");
}

TEST_CASE("tokenizer builtin: deterministic and identical after a GGUF round trip") {
  const tk::vocab a = tk::vocab_builtin();
  gguf::writer w;
  w.set("general.architecture", gguf::value::of_string("llama"));
  tk::vocab_write(w, a);
  const tk::vocab b = load_bytes(w, "builtin.gguf");
  CHECK(b.spec().tokens == a.spec().tokens);
  CHECK(b.spec().merges == a.spec().merges);
  CHECK(b.add_bos());
  CHECK(b.ids().bos == a.ids().bos);
  CHECK(b.ids().eos == a.ids().eos);
  const std::string text = "Tom buys 3 apples for $1.25 each. How much does he pay?";
  CHECK(tk::encode(a, text, true, false) == tk::encode(b, text, true, false));
}

TEST_CASE("tokenizer special tokens: parse_special, user-defined tokens and phi-3 rstrip") {
  const tk::vocab gpt2 = load_fixture("vocab/ggml-vocab-gpt-2.gguf");
  const int32_t eot = gpt2.find("<|endoftext|>");
  REQUIRE(eot == 50256);
  CHECK(gpt2.is_control(eot));
  CHECK(gpt2.is_eog(eot));
  CHECK(tk::encode(gpt2, "Hi<|endoftext|>", false, true) == std::vector<int32_t>{gpt2.find("Hi"), eot});
  const std::vector<int32_t> plain = tk::encode(gpt2, "Hi<|endoftext|>", false, false);
  CHECK(plain.size() > 2);
  CHECK(std::find(plain.begin(), plain.end(), eot) == plain.end());
  CHECK(tk::token_to_piece(gpt2, eot) == "<|endoftext|>");
  CHECK(tk::token_to_piece(gpt2, eot, false).empty());

  // phi-3: "</s>" is user-defined (split even without parse_special), and spaces after it are
  // stripped; SPM then puts the space prefix back on the next fragment.
  const tk::vocab phi3 = load_fixture("vocab/ggml-vocab-phi-3.gguf");
  const int32_t end_s = phi3.find("</s>");
  REQUIRE(end_s == 2);
  const std::vector<int32_t> expect = {phi3.find("\xE2\x96\x81" "a"), end_s, phi3.find("\xE2\x96\x81" "b")};
  CHECK(tk::encode(phi3, "a</s>   b", false, false) == expect);
  const int32_t user = phi3.find("<|user|>");
  REQUIRE(user >= 0);
  CHECK(tk::encode(phi3, "<|user|>\nHi", false, true).front() == user);
  CHECK(tk::encode(phi3, "<|user|>", false, false).front() != user);
  CHECK(!phi3.chat_template().empty());
}

TEST_CASE("tokenizer BOS/EOS: vocabulary flags and defaults") {
  const tk::vocab spm = load_fixture("vocab/ggml-vocab-llama-spm.gguf");
  CHECK(spm.add_bos());
  CHECK(!spm.add_eos());
  CHECK(spm.add_space_prefix());
  CHECK(tk::encode(spm, "Hello", true, false) == std::vector<int32_t>{1, spm.find("\xE2\x96\x81Hello")});
  CHECK(tk::encode(spm, "", true, false) == std::vector<int32_t>{1});
  CHECK(tk::encode(spm, "", false, false).empty());
  CHECK(tk::decode(spm, tk::encode(spm, " Hello", false, false)) == " Hello");
  // llama.cpp keeps the prefix space when remove_special drops the BOS in front of it.
  CHECK(tk::decode(spm, tk::encode(spm, "Hello", true, false), {.remove_special = true}) == " Hello");

  const tk::vocab gpt2 = load_fixture("vocab/ggml-vocab-gpt-2.gguf");
  CHECK(!gpt2.add_bos());  // BPE: no BOS unless the pre-tokenizer family (llama3) or the file says so
  CHECK(tk::encode(gpt2, "Hello", true, false) == tk::encode(gpt2, "Hello", false, false));

  tk::vocab_spec s = tk::vocab_builtin().spec();
  s.add_eos = true;
  const tk::vocab with_eos = tk::vocab_build(s, "test");
  const std::vector<int32_t> ids = tk::encode(with_eos, "x", true, false);
  CHECK(ids.front() == with_eos.ids().bos);
  CHECK(ids.back() == with_eos.ids().eos);
  CHECK(tk::decode(with_eos, ids, {.remove_special = true}) == "x");

  s.pre = "llama-bpe";
  s.add_bos.reset();
  CHECK(tk::vocab_build(s, "test").add_bos());  // llama3 family default
  s.pre = "qwen2";
  CHECK(!tk::vocab_build(s, "test").add_bos());
}

TEST_CASE("tokenizer decode: pieces, byte tokens and llama.cpp's clean-up option") {
  const tk::vocab spm = load_fixture("vocab/ggml-vocab-llama-spm.gguf");
  CHECK(tk::token_to_piece(spm, spm.find("<0x0A>")) == "\n");
  CHECK(tk::token_to_piece(spm, spm.find("\xE2\x96\x81Hello")) == " Hello");
  // A character outside the vocabulary falls back to byte tokens and is reassembled.
  const std::vector<int32_t> llama = tk::encode(spm, "🦙", false, false);
  CHECK(llama.size() == 5);  // "▁" + 4 byte tokens
  CHECK(tk::decode(spm, llama) == "🦙");

  const tk::vocab gpt2 = load_fixture("vocab/ggml-vocab-gpt-2.gguf");
  const std::vector<int32_t> ids = tk::encode(gpt2, "Hello , world . It 's", false, false);
  CHECK(tk::decode(gpt2, ids) == "Hello , world . It 's");
  CHECK(gpt2.clean_spaces());
  CHECK(tk::decode(gpt2, ids, {.clean_spaces = true}) == "Hello, world. It's");
  CHECK_THROWS_AS(tk::token_to_piece(gpt2, gpt2.size()), std::out_of_range);

  CHECK(tk::piece_escape("a\n\t\"\\\x01") == "a\\n\\t\\\"\\\\\\u0001");
  CHECK(tk::piece_escape("é\xFF") == "é\\xFF");
}

TEST_CASE("tokenizer load: missing or inconsistent vocabularies are rejected with the key named") {
  gguf::writer none;
  none.set("general.architecture", gguf::value::of_string("llama"));
  CHECK(error_of([&] { load_bytes(none, "none.gguf"); }).find("none.gguf: no vocabulary: key 'tokenizer.ggml.model'") == 0);

  gguf::writer bert;
  bert.set("tokenizer.ggml.model", gguf::value::of_string("bert"));
  CHECK(error_of([&] { load_bytes(bert, "bert.gguf"); }).find("tokenizer model 'bert' is not supported") != std::string::npos);

  gguf::writer no_merges = tiny_bpe_writer();
  CHECK(error_of([&] { load_bytes(no_merges, "m.gguf"); }).find("tokenizer.ggml.merges' is missing") != std::string::npos);

  gguf::writer ok = tiny_bpe_writer();
  ok.set("tokenizer.ggml.merges", gguf::value::of_strings({"a b"}));
  const tk::vocab v = load_bytes(ok, "ok.gguf");
  CHECK(tk::encode(v, "ab", false, false) == std::vector<int32_t>{256});
  CHECK(v.n_merges() == 1);

  gguf::writer bad_merge = tiny_bpe_writer();
  bad_merge.set("tokenizer.ggml.merges", gguf::value::of_strings({"a b", "ab zz"}));
  CHECK(error_of([&] { load_bytes(bad_merge, "bm.gguf"); })
            .find("bm.gguf: tokenizer.ggml.merges[1] 'ab zz': names 'zz', which is not a token") == 0);

  gguf::writer bad_scores = tiny_bpe_writer();
  bad_scores.set("tokenizer.ggml.merges", gguf::value::of_strings({"a b"}));
  bad_scores.set("tokenizer.ggml.scores", gguf::value::of_f32s({0.0f, 1.0f}));
  CHECK(error_of([&] { load_bytes(bad_scores, "bs.gguf"); })
            .find("bs.gguf: tokenizer.ggml.scores has 2 entries, expected one per token (257)") == 0);

  tk::vocab_spec s = v.spec();
  s.pre = "no-such-pre";
  CHECK(error_of([&] { tk::vocab_build(s, "bp.gguf"); }).find("bp.gguf: tokenizer.ggml.pre: unknown pre-tokenizer 'no-such-pre'") == 0);

  s = v.spec();
  s.tokens[5] = s.tokens[6];
  CHECK(error_of([&] { tk::vocab_build(s, "dup.gguf"); }).find("duplicates token 5") != std::string::npos);
}

TEST_CASE("tokenizer import: tiktoken and encoder.json errors and small files") {
  const std::string dir = detaudit::test::scratch_dir("tokenizer_import");
  write_file(dir + "/ok.tiktoken", "YQ== 0\r\nYg== 1\r\nYWI= 2\r\n");  // a, b, ab
  // Only three tokens: not byte-level complete, but consistent.
  const tk::vocab t = tk::vocab_import_tiktoken(dir + "/ok.tiktoken", "gpt-2");
  CHECK(t.size() == 3);
  CHECK(t.spec().merges == std::vector<std::string>{"a b"});
  CHECK(tk::encode(t, "ab", false, false) == std::vector<int32_t>{2});

  write_file(dir + "/order.tiktoken", "YQ== 0\nYg== 2\n");
  CHECK(error_of([&] { tk::vocab_import_tiktoken(dir + "/order.tiktoken", "gpt-2"); })
            .find("order.tiktoken:2: rank '2', expected 1") != std::string::npos);
  write_file(dir + "/b64.tiktoken", "Y$== 0\n");
  CHECK(error_of([&] { tk::vocab_import_tiktoken(dir + "/b64.tiktoken", "gpt-2"); }).find("b64.tiktoken:1:") != std::string::npos);
  CHECK(error_of([&] { tk::vocab_import_tiktoken(dir + "/missing.tiktoken", "gpt-2"); }).find("cannot open") != std::string::npos);

  write_file(dir + "/encoder.json", "{\"a\": 0, \"b\": 1, \"\\u0061b\": 2}");
  write_file(dir + "/vocab.bpe", "#version: 0.2\na b\n");
  const tk::vocab h = tk::vocab_import_hf(dir + "/encoder.json", dir + "/vocab.bpe", "gpt-2");
  CHECK(h.token_text(2) == "ab");
  CHECK(tk::encode(h, "ab", false, false) == std::vector<int32_t>{2});
  write_file(dir + "/gap.json", "{\"a\": 0, \"b\": 5}");
  CHECK(error_of([&] { tk::vocab_import_hf(dir + "/gap.json", dir + "/vocab.bpe", "gpt-2"); }).find("has id 5") != std::string::npos);
  write_file(dir + "/bad.json", "{\"a\": 0,, }");
  CHECK(error_of([&] { tk::vocab_import_hf(dir + "/bad.json", dir + "/vocab.bpe", "gpt-2"); }).find("bad.json: offset 8: expected '\"'") != std::string::npos);
}

TEST_CASE("tokenizer encode: one vocab serves several threads") {
  const tk::vocab v = load_fixture("vocab/ggml-vocab-gpt-2.gguf");
  const std::string text = "Concurrent sessions share the immutable vocabulary: 12345 apples, 🦙 and 中文.";
  const std::vector<int32_t> expect = tk::encode(v, text, true, false);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k) got[i] = tk::encode(v, text, true, false);
    });
  for (auto& t : threads) t.join();
  for (const auto& g : got) CHECK(g == expect);
}

// llama.cpp's server (builds b4748 and 2026-08, tests/data/README.md) tokenized these prompts
// (add_special and parse_special on) and
// generated these tokens; its "content" is the concatenation of their pieces.
TEST_CASE("tokenizer reference: prompt tokens and content of llama.cpp server runs") {
  const std::pair<const char*, const char*> runs[] = {
      {"llamacpp-b4748/stories260K.json", "models/stories260K.gguf"},
      {"llamacpp-b4748/stories260K-long.json", "models/stories260K.gguf"},
      {"llamacpp-b4748/tiny-qwen2-f16.json", "models/synthetic/tiny-qwen2-f16.gguf"},
      {"llamacpp-2026-08/stories260K.json", "models/stories260K.gguf"},
      {"llamacpp-2026-08/tiny-llama-f16.json", "models/synthetic/tiny-llama-f16.gguf"},
  };
  for (auto [ref, model] : runs) {
    const std::string m = model;
    const tk::vocab v = tk::vocab_load(
        gguf::file::open(m.starts_with("models/synthetic/") ? detaudit::test::generated(m) : fixture(m)));
    std::ifstream in(detaudit::test::test_data(ref));
    const nlohmann::json j = nlohmann::json::parse(in);
    size_t n = 0;
    for (const auto& item : j.at("items")) {
      const std::string prompt = item.at("prompt");
      CHECK_MESSAGE(tk::encode(v, prompt, true, true) == item.at("prompt_tokens").get<std::vector<int32_t>>(),
                    ref << ": '" << prompt.substr(0, 40) << "'");
      if (std::string(model) == "models/stories260K.gguf") {  // trained model: its output is valid UTF-8
        std::string content;
        for (int32_t id : item.at("tokens").get<std::vector<int32_t>>()) content += tk::token_to_piece(v, id, false);
        CHECK(content == item.at("content").get<std::string>());
      }
      ++n;
    }
    CHECK(n > 0);
  }
}

// Arbitrary bytes: byte-level BPE sees invalid UTF-8 as U+FFFD (as llama.cpp does), SentencePiece
// falls back to byte tokens and gives the bytes back unchanged.
TEST_CASE("tokenizer encode: random bytes, including invalid UTF-8") {
  const tk::vocab bpe = tk::vocab_builtin();
  const tk::vocab gpt2 = load_fixture("vocab/ggml-vocab-gpt-2.gguf");
  const tk::vocab spm = load_fixture("vocab/ggml-vocab-llama-spm.gguf");
  std::mt19937 rng(99);
  for (int i = 0; i < 300; ++i) {
    std::string s(1 + rng() % 24, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? rng() % 128 : 0x80 + rng() % 128);
    const std::string clean = tk::utf8_sanitize(s);
    REQUIRE(tk::decode(bpe, tk::encode(bpe, s, true, true)) == clean);
    REQUIRE(tk::decode(gpt2, tk::encode(gpt2, s, false, true)) == clean);
    REQUIRE(tk::decode(spm, tk::encode(spm, s, false, true)) == s);
  }
  CHECK(tk::utf8_sanitize("a\xFF" "b\xC3") == "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
}
