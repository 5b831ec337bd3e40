// The tokenize and vocab import commands through the binary. Tokenizer behaviour in-process:
// tests/unit/test_tokenizer.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/vocab.h"
#include "tokenizer/vocab_import.h"

namespace tk = detaudit::tokenizer;
namespace gguf = detaudit::gguf;
using detaudit::test::fixture;
using detaudit::test::write_file;

namespace {

std::string binary() { return detaudit::test::detaudit_bin(); }

}  // namespace

TEST_CASE("tokenizer cli: tokenize --ids, errors, and vocab import") {
  using detaudit::test::run_cmd;
  using detaudit::test::shell_quote;
  const std::string bin = shell_quote(binary());
  const std::string gpt2 = shell_quote(fixture("vocab/ggml-vocab-gpt-2.gguf"));

  auto r = run_cmd(bin + " tokenize -m " + gpt2 + " --text 'Hello world' --ids");
  CHECK(r.exit_code == 0);
  CHECK(r.out == "15496 995\n");

  r = run_cmd(bin + " tokenize -m " + gpt2 + " --text 'Hi\n'");
  CHECK(r.exit_code == 0);
  CHECK(r.out == "17250\tHi\n198\t\\n\n");

  r = run_cmd(bin + " tokenize -m /nonexistent/model.gguf --text x");
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  CHECK(r.err.find("/nonexistent/model.gguf") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  r = run_cmd(bin + " tokenize -m " + gpt2 + " --text a --file b");
  CHECK(r.exit_code == 2);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);

  const std::string dir = detaudit::test::scratch_dir("tokenizer_cli");
  write_file(dir + "/encoder.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}");
  write_file(dir + "/vocab.bpe", "a b\n");
  r = run_cmd(bin + " vocab import --encoder " + dir + "/encoder.json --merges " + dir + "/vocab.bpe --pre gpt-2 -o " + dir +
              "/v.gguf");
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  r = run_cmd(bin + " tokenize -m " + dir + "/v.gguf --text ab --ids");
  CHECK(r.out == "2\n");
  const tk::vocab v = tk::vocab_load(gguf::file::open(dir + "/v.gguf"));
  CHECK(tk::vocab_architecture(v) == "gpt2");

  r = run_cmd(bin + " vocab import --tiktoken x --encoder y --merges z --pre gpt-2 -o " + dir + "/w.gguf");
  CHECK(r.exit_code == 2);
  r = run_cmd(bin + " vocab");
  CHECK(r.exit_code == 2);
}

