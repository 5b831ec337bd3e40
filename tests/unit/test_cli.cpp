// The command line in-process: llama.cpp flag rewriting. Exit codes, one-line errors and --config,
// through the binary: tests/e2e/test_cli.cpp.
#include <doctest/doctest.h>

#include "app.h"

TEST_CASE("cli: llama.cpp multi-letter short flags become long options") {
  using detaudit::cli::cli_rewrite_args;
  std::vector<std::string> in = {"serve", "-np", "8", "-ub", "512", "-ngl", "99", "-m", "x.gguf", "-c", "4096"};
  std::vector<std::string> want = {"serve", "--parallel", "8", "--ubatch", "512", "--n-gpu-layers", "99",
                                   "-m", "x.gguf", "-c", "4096"};
  CHECK(cli_rewrite_args(in) == want);
  // After a bare "--" nothing is rewritten (it may be a prompt or a file name).
  std::vector<std::string> pass = {"run", "--", "-np"};
  CHECK(cli_rewrite_args(pass) == pass);
  // Unknown multi-letter flags are left for CLI11 to reject.
  CHECK(cli_rewrite_args({"-xyz"}) == std::vector<std::string>{"-xyz"});
}

