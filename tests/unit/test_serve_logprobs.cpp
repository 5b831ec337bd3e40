// Log-probs of tokens that are not valid UTF-8 on their own (byte tokens of a split character):
// written as OpenAI does, "bytes:\xHH...", never through U+FFFD, so the bytes can be recovered.
// /v1/completions of the real `detaudit serve`: tests/e2e/test_serve_logprobs.cpp.
#include <doctest/doctest.h>

#include "serve/http_handlers.h"

using namespace detaudit;

TEST_CASE("serve_logprobs: token_text_openai escapes exactly the pieces that are not UTF-8") {
  using serve::token_text_openai;
  CHECK(token_text_openai("abc") == "abc");
  CHECK(token_text_openai(" caf\xc3\xa9") == " caf\xc3\xa9");
  CHECK(token_text_openai("\xe2\x80\x9c") == "\xe2\x80\x9c");
  CHECK(token_text_openai("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");
  CHECK(token_text_openai("") == "");
  CHECK(token_text_openai("\xe2\x80") == "bytes:\\xe2\\x80");  // a split character
  CHECK(token_text_openai("\xd1") == "bytes:\\xd1");
  CHECK(token_text_openai("\x9e") == "bytes:\\x9e");           // a continuation byte alone
  CHECK(token_text_openai("a\xff") == "bytes:\\x61\\xff");
  CHECK(token_text_openai("\xc0\xaf") == "bytes:\\xc0\\xaf");  // overlong '/'
  CHECK(token_text_openai("\xed\xa0\x80") == "bytes:\\xed\\xa0\\x80");  // a surrogate
  CHECK(token_text_openai("\xf4\x90\x80\x80") == "bytes:\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(serve::utf8_is_valid("\xf4\x8f\xbf\xbf"));  // U+10FFFF itself
  CHECK_FALSE(serve::utf8_is_valid("\xe0\x9f\xbf"));  // overlong
}

