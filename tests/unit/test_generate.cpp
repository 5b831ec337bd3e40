// generate in-process on stories260K: token id lists, streaming and stop strings. The subcommands
// generate and score through the binary (the JSON shape, --hashes identical across runs, threads
// and --ubatch in exact mode, teacher-forced scoring, the golden token ids and chained hash):
// tests/e2e/test_generate.cpp.
#include <doctest/doctest.h>

#include "model/model.h"
#include "runtime/generate.h"
#include "test_util.h"
#include "util/error.h"

TEST_CASE("generate: token id lists parse with commas and spaces") {
  using detaudit::runtime::token_ids_parse;
  CHECK(token_ids_parse("1,403 407,, 261\n378", "--tokens") == std::vector<int32_t>{1, 403, 407, 261, 378});
  CHECK(token_ids_parse("0", "--tokens") == std::vector<int32_t>{0});
  CHECK(token_ids_parse("2147483647", "--tokens") == std::vector<int32_t>{2147483647});
  for (const char* bad : {"", " , ", "1,x", "-1", "2147483648", "1.5", "99999999999"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(token_ids_parse(bad, "--tokens"), detaudit::input_error);
  }
}

TEST_CASE("generate: streaming holds back incomplete UTF-8 and possible stop strings") {
  using detaudit::runtime::text_stream;
  using detaudit::runtime::utf8_incomplete_tail;
  CHECK(utf8_incomplete_tail("abc") == 0);
  CHECK(utf8_incomplete_tail("a\xc3") == 1);          // first byte of a 2-byte sequence
  CHECK(utf8_incomplete_tail("a\xc3\xa9") == 0);      // complete
  CHECK(utf8_incomplete_tail("\xe2\x82") == 2);       // 2 of 3 bytes
  CHECK(utf8_incomplete_tail("\xf0\x9f\x98") == 3);  // 3 of 4 bytes
  CHECK(utf8_incomplete_tail("\xf0\x9f\x98\x80") == 0);
  CHECK(utf8_incomplete_tail("\x80") == 0);            // a stray continuation byte waits for nothing

  std::vector<std::string> out;
  text_stream s({}, [&](std::string_view p) { out.emplace_back(p); });
  CHECK_FALSE(s.add("caf"));
  CHECK_FALSE(s.add("\xc3"));  // held back
  CHECK(out == std::vector<std::string>{"caf"});
  CHECK_FALSE(s.add("\xa9!"));
  CHECK(out == std::vector<std::string>{"caf", "\xc3\xa9!"});
  s.finish();
  CHECK(s.text() == "caf\xc3\xa9!");

  out.clear();
  text_stream t({"\n\nUser:", "END"}, [&](std::string_view p) { out.emplace_back(p); });
  CHECK_FALSE(t.add("Hello\n"));
  CHECK(out == std::vector<std::string>{"Hello"});  // "\n" may begin "\n\nUser:"
  CHECK_FALSE(t.add("\nUs"));
  CHECK(out.size() == 1);
  CHECK_FALSE(t.add("ually"));                     // not the stop string after all: released
  CHECK(out.back() == "\n\nUsually");
  CHECK(t.add(" fine.\n\nUser: more"));
  CHECK(t.text() == "Hello\n\nUsually fine.");
  CHECK(t.stop_word() == "\n\nUser:");
  CHECK(t.add("ignored"));
  t.finish();
  std::string all;
  for (const std::string& p : out) all += p;
  CHECK(all == t.text());
  // A stop string split across pieces, earliest match wins.
  text_stream u({"ab", "b"}, {});
  CHECK_FALSE(u.add("xa"));
  CHECK(u.add("b"));
  CHECK(u.text() == "x");
  CHECK(u.stop_word() == "ab");
  CHECK_THROWS_AS(text_stream({""}, {}), detaudit::input_error);
}

TEST_CASE("generate: streamed pieces concatenate to the text and a stop string cuts it") {
  auto m = detaudit::model::model::load(detaudit::test::fixture("models/stories260K.gguf"));
  detaudit::runtime::context ctx(m, {});
  const std::vector<int32_t> prompt = detaudit::runtime::generate_tokenize(m->vocab(), "Once upon a time");
  detaudit::runtime::generate_params p;
  p.n_predict = 40;
  std::string streamed;
  auto r = detaudit::runtime::generate(ctx, prompt, p, [&](std::string_view s) { streamed += s; });
  CHECK(streamed == r.text);
  CHECK(r.text.rfind(", there was a little girl named Lily.", 0) == 0);

  p.stop = {"Lily", "zzz"};
  streamed.clear();
  r = detaudit::runtime::generate(ctx, prompt, p, [&](std::string_view s) { streamed += s; });
  CHECK(r.text == ", there was a little girl named ");
  CHECK(streamed == r.text);
  CHECK(r.finish == detaudit::runtime::FINISH_STOP);
  CHECK(r.stop == detaudit::runtime::STOP_WORD);
  CHECK(r.stop_word == "Lily");
  CHECK_THROWS_AS(detaudit::runtime::generate(ctx, std::vector<int32_t>{}, p), detaudit::input_error);
}

