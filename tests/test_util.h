// Helpers shared by the tests: where the fixtures, the built binary and scratch space are; small
// text helpers; the search for API keys; running a command.
#pragma once

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace detaudit::test {

// An environment variable, else the default CMake compiled in, else "".
inline std::string setting(const char* env, const char* dflt) {
  const char* v = std::getenv(env);
  return (v && *v) ? v : dflt;
}

#ifndef DETAUDIT_FIXTURES_DEFAULT
#define DETAUDIT_FIXTURES_DEFAULT ""
#endif
#ifndef DETAUDIT_GENERATED_DEFAULT
#define DETAUDIT_GENERATED_DEFAULT ""
#endif
#ifndef DETAUDIT_TEST_DATA_DEFAULT
#define DETAUDIT_TEST_DATA_DEFAULT ""
#endif
#ifndef DETAUDIT_BIN_DEFAULT
#define DETAUDIT_BIN_DEFAULT ""
#endif
#ifndef DETAUDIT_TEST_TMP_DEFAULT
#define DETAUDIT_TEST_TMP_DEFAULT ""
#endif

// The exit status CTest counts as "skipped" for every test of this project (SKIP_RETURN_CODE).
inline constexpr int SKIP_EXIT = 77;

// A public fixture (docs/fixtures.md), such as "models/stories260K.gguf": a file with a public
// source that scripts/fixtures.sh finds or downloads. When it is not there (no copy, no network)
// the test cannot run: it says which file is missing and exits with SKIP_EXIT, which CTest
// reports as "Not Run (Skipped)" and counts. It never passes without having run.
inline std::string fixture(const std::string& rel) {
  const std::string dir = setting("DETAUDIT_FIXTURES", DETAUDIT_FIXTURES_DEFAULT);
  const std::filesystem::path p = std::filesystem::path(dir.empty() ? "." : dir) / rel;
  if (dir.empty() || !std::filesystem::exists(p)) {
    std::fprintf(stderr, "SKIPPED: public fixture %s is not available (%s); scripts/fixtures.sh downloads it\n",
                 rel.c_str(), dir.empty() ? "no fixtures folder is known" : ("not in " + dir).c_str());
    std::fflush(stderr);
    std::_Exit(SKIP_EXIT);
  }
  return p.string();
}

// A fixture the build generates (tests/data/synthetic.list, written by `detaudit synth` in the
// setup test "fixtures: ..."), such as "models/synthetic/tiny-llama-f16.gguf". Missing means the
// setup test failed: the test fails too.
inline std::string generated(const std::string& rel) {
  const std::string dir = setting("DETAUDIT_GENERATED", DETAUDIT_GENERATED_DEFAULT);
  if (dir.empty()) throw std::runtime_error("DETAUDIT_GENERATED is not set and no default was configured");
  const std::filesystem::path p = std::filesystem::path(dir) / rel;
  if (!std::filesystem::exists(p))
    throw std::runtime_error("generated fixture missing: " + p.string() + " (the setup test 'fixtures: ...' writes it)");
  return p.string();
}

// Test data committed under tests/data, such as "llamacpp-b4748/stories260K.json".
inline std::string test_data(const std::string& rel) {
  const std::string dir = setting("DETAUDIT_TEST_DATA", DETAUDIT_TEST_DATA_DEFAULT);
  if (dir.empty()) throw std::runtime_error("DETAUDIT_TEST_DATA is not set and no default was configured");
  const std::filesystem::path p = std::filesystem::path(dir) / rel;
  if (!std::filesystem::exists(p)) throw std::runtime_error("test data missing: " + p.string());
  return p.string();
}

// The detaudit binary under test.
inline std::string detaudit_bin() {
  std::string b = setting("DETAUDIT_BIN", DETAUDIT_BIN_DEFAULT);
  if (b.empty()) throw std::runtime_error("DETAUDIT_BIN is not set and no default was configured");
  return b;
}

// A whole file's bytes ("" when it cannot be read).
inline std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `text` to `path` (replacing it); returns the path.
inline std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Reads `fd` until a line ends (or EOF, or timeout_s seconds); returns what was read, which may
// run past the line end. How the tests learn the port a `detaudit serve --port 0` child printed.
inline std::string read_first_line(int fd, int timeout_s) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (out.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Whether `part` occurs in `s`.
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// How many times `what` occurs in `s` (overlapping occurrences count).
inline size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// A fresh scratch directory for one test, removed and recreated on each call.
inline std::string scratch_dir(const std::string& name) {
  std::string t = setting("DETAUDIT_TEST_TMP", DETAUDIT_TEST_TMP_DEFAULT);
  std::filesystem::path base = !t.empty() ? std::filesystem::path(t) : std::filesystem::temp_directory_path() / "detaudit-test";
  std::filesystem::path p = base / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// A scratch directory of this test process only. CTest runs test cases as parallel processes, and
// scratch_dir() recreates a directory: one shared by name across test cases (a model written once
// per process) would be removed under another process's feet.
inline std::string process_scratch_dir(const std::string& name) {
  return scratch_dir(name + "_" + std::to_string(::getpid()));
}

// The text of the exception of type E that f() throws, "(nothing thrown)" when it returns; any
// other exception goes through.
template <class E, class F>
std::string thrown_text(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

// API keys and the search for them in everything a run wrote or printed (test_secrets.cpp in
// tests/unit and tests/e2e).
namespace secrets {

// "sk-" + 40 random hex digits: a string no fixture or output contains by chance.
inline std::string random_key(const char* tag, bool upper = false) {
  std::random_device rd;
  std::string k = std::string("sk-") + tag + "-";
  const char* hex = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  for (int i = 0; i < 40; ++i) k += hex[rd() % 16];
  return k;
}

// The key, "Bearer KEY", and its first and last 16 characters (a truncated copy is a leak too).
inline std::vector<std::string> needles(const std::string& key) {
  return {key, "Bearer " + key, key.substr(0, 16), key.substr(key.size() - 16)};
}

inline std::string lowered(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Names each text that contains a needle, or, in any case, any 12 consecutive characters of a key
// (the redaction rule: reports/audit/redact.h).
inline std::vector<std::string> leaks(const std::vector<std::pair<std::string, std::string>>& texts, const std::vector<std::string>& keys) {
  std::vector<std::string> found;
  for (const auto& [name, text] : texts) {
    for (const std::string& k : keys)
      for (const std::string& n : needles(k))
        if (text.find(n) != std::string::npos) found.push_back(name + " contains '" + n + "'");
    const std::string low = lowered(text);
    for (const std::string& k : keys) {
      const std::string lk = lowered(k);
      for (size_t i = 0; i + 12 <= lk.size(); ++i)
        if (low.find(lk.substr(i, 12)) != std::string::npos) {
          found.push_back(name + " contains '" + lk.substr(i, 12) + "' (12 characters of a key, any case)");
          break;
        }
    }
  }
  return found;
}

}  // namespace secrets

}  // namespace detaudit::test

#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

namespace detaudit::test {

struct cmd_result {
  int exit_code = -1;    // exit status; 128+N when killed by signal N
  bool signaled = false;
  std::string out;       // stdout
  std::string err;       // stderr
};

// Runs a shell command line, capturing stdout and stderr separately.
inline cmd_result run_cmd(const std::string& cmdline) {
  static int counter = 0;
  std::string errfile = scratch_dir("run_cmd_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)) + "/stderr";
  std::string full = cmdline + " 2>" + errfile;
  cmd_result r;
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + cmdline);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  if (WIFEXITED(st)) {
    r.exit_code = WEXITSTATUS(st);
    // sh reports a child killed by a signal as 128+N
    r.signaled = r.exit_code > 128;
  } else if (WIFSIGNALED(st)) {
    r.signaled = true;
    r.exit_code = 128 + WTERMSIG(st);
  }
  std::ifstream ef(errfile);
  std::stringstream ss;
  ss << ef.rdbuf();
  r.err = ss.str();
  return r;
}

// Quotes a string for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

}  // namespace detaudit::test

namespace detaudit::test {

// splitmix64: the same numbers on every platform (std:: distributions are not portable).
struct test_rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(next() % uint64_t(hi - lo + 1)); }
  float uniform() { return float(next() >> 40) / float(1 << 24); }  // [0, 1)
  float normal() {  // Irwin-Hall: close to N(0, 1), no libm
    float s12 = 0;
    for (int i = 0; i < 12; ++i) s12 += uniform();
    return s12 - 6.0f;
  }
};

}  // namespace detaudit::test
