// Hundreds of corrupted copies of stories260K.gguf through `detaudit inspect`: each exits 0 (the
// corruption left a valid file) or 2 with one line on stderr, never a signal or another code.
// Truncated copies must always be rejected.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

#include "test_util.h"

using detaudit::test::run_cmd;
using detaudit::test::shell_quote;

namespace {

struct lcg {
  uint64_t s;
  uint64_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 17;
  }
};

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::vector<char>& bytes, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(n));
}

// Runs inspect; returns its exit code after checking the one-line rule.
int inspect(const std::string& path, const std::string& what) {
  auto r = run_cmd(shell_quote(detaudit::test::detaudit_bin()) + " inspect --json " + shell_quote(path) + " >/dev/null");
  INFO(what << ": exit " << r.exit_code << ", stderr: " << r.err);
  CHECK_FALSE(r.signaled);
  CHECK((r.exit_code == 0 || r.exit_code == 2));
  if (r.exit_code == 2) CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  return r.exit_code;
}

}  // namespace

TEST_CASE("inspect: corrupted copies of stories260K.gguf never crash") {
  const std::vector<char> orig = read_all(detaudit::test::fixture("models/stories260K.gguf"));
  REQUIRE(orig.size() == 1185376);
  const std::string path = detaudit::test::scratch_dir("inspect_corrupt") + "/c.gguf";
  lcg rng{20261129};
  // Where the metadata and tensor infos end (the header region worth corrupting): a generous
  // bound, since 512 tokens and 48 tensor infos fit well inside 16 KiB.
  const size_t header = 16384;
  int rejected = 0, total = 0;

  for (int i = 0; i < 120; ++i) {  // truncations: header region densely, then the rest
    size_t n = i < 80 ? rng.next() % header : header + rng.next() % (orig.size() - header - 1);
    write_all(path, orig, n);
    CHECK(inspect(path, "truncated to " + std::to_string(n)) == 2);
    ++total;
  }
  for (int i = 0; i < 150; ++i) {  // flipped bytes in the header region
    std::vector<char> c = orig;
    size_t at = i < 40 ? rng.next() % 64 : rng.next() % header;
    c[at] = static_cast<char>(c[at] ^ (1 + rng.next() % 255));
    write_all(path, c, c.size());
    rejected += inspect(path, "byte " + std::to_string(at) + " flipped") == 2;
    ++total;
  }
  for (size_t at : {size_t(8), size_t(16)}) {  // n_tensors and n_kv set to absurd counts
    for (uint64_t huge : {uint64_t(1) << 62, ~uint64_t(0), uint64_t(1) << 32, uint64_t(100000)}) {
      std::vector<char> c = orig;
      std::copy_n(reinterpret_cast<const char*>(&huge), 8, c.begin() + static_cast<long>(at));
      write_all(path, c, c.size());
      CHECK(inspect(path, "count at " + std::to_string(at) + " = " + std::to_string(huge)) == 2);
      ++total;
    }
  }
  MESSAGE(total << " corrupted copies; " << rejected << " of 150 byte flips rejected, the rest still valid files");
  CHECK(rejected > 50);  // most header flips must be caught, or validation is not looking
}
