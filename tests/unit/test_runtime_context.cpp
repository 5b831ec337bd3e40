// runtime::context: parameters, sequence operations, errors that leave the state unchanged,
// seq_save / seq_restore validation, layer-hash traces and the batch-shape evidence counters.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "model/model.h"
#include "model/synth.h"
#include "runtime/context.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using runtime::token_in;

namespace {

std::shared_ptr<const model::model> stories() {
  static auto m = model::model::load(test::fixture("models/stories260K.gguf"));
  return m;
}

runtime::context_params params(runtime::numerics_mode mode = runtime::NUMERICS_EXACT, int64_t n_ctx = 64) {
  runtime::context_params p;
  p.numerics = mode;
  p.n_ctx = n_ctx;
  return p;
}

std::vector<token_in> entries(int32_t seq, const std::vector<int32_t>& toks, bool logits = true) {
  std::vector<token_in> b;
  for (int32_t t : toks) b.push_back({seq, t, logits});
  return b;
}

// The input_error message of f(), or "" when it does not throw.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

const std::vector<int32_t> TOKS = {1, 403, 407, 261, 378, 432};

}  // namespace

TEST_CASE("runtime: numerics names and context parameters") {
  CHECK(std::string(runtime::numerics_name(runtime::NUMERICS_FLOAT)) == "float");
  CHECK(runtime::numerics_from_name("reference") == runtime::NUMERICS_REFERENCE);
  CHECK(contains(error_of([] { runtime::numerics_from_name("fast"); }), "'fast': expected exact, float or reference"));
  runtime::context_params p;
  p.n_ubatch = 0;
  CHECK(contains(error_of([&] { runtime::context c(stories(), p); }), "n_ubatch"));
  p = {};
  p.n_threads = 0;
  CHECK(contains(error_of([&] { runtime::context c(stories(), p); }), "n_threads"));
  p = {};
  p.n_ctx = (int64_t(1) << 24) + 1;
  CHECK(contains(error_of([&] { runtime::context c(stories(), p); }), "n_ctx"));
  runtime::context c(stories(), runtime::context_params{});
  CHECK(c.params().n_ctx == 2048);  // the model's trained context
  CHECK(&c.model() == stories().get());
}

TEST_CASE("runtime: a full context or a bad token id fails the whole batch and changes nothing") {
  runtime::context c(stories(), params(runtime::NUMERICS_EXACT, 8));
  const int32_t a = c.seq_new(), b = c.seq_new();
  c.decode(entries(a, {1, 2, 3, 4, 5, 6}));
  CHECK(c.decode({}).empty());
  std::vector<token_in> batch = entries(b, {1, 2}, false);
  for (token_in t : entries(a, {7, 8, 9})) batch.push_back(t);
  CHECK(error_of([&] { c.decode(batch); }) == "sequence " + std::to_string(a) + ": context full at 8 tokens");
  CHECK(c.seq_len(a) == 6);
  CHECK(c.seq_len(b) == 0);
  batch = entries(b, {1, 2});
  batch.push_back({a, 512, true});
  CHECK(contains(error_of([&] { c.decode(batch); }), "token id 512 is out of range (vocabulary of 512)"));
  batch.back().token = -1;
  CHECK(contains(error_of([&] { c.decode(batch); }), "token id -1"));
  CHECK(contains(error_of([&] { c.decode({{99, 1, true}}); }), "sequence 99 does not exist"));
  CHECK(c.seq_len(b) == 0);
  // after the failures the state is what it was: the same logits as a fresh evaluation
  auto l = c.decode(entries(a, {7, 8}));
  runtime::context fresh(stories(), params(runtime::NUMERICS_EXACT, 8));
  const int32_t f = fresh.seq_new();
  auto lf = fresh.decode(entries(f, {1, 2, 3, 4, 5, 6, 7, 8}));
  CHECK(l[1] == lf[7]);
  CHECK(c.seq_len(a) == 8);
  CHECK(contains(error_of([&] { c.seq_fork(a, 9); }), "cannot copy 9"));
  CHECK(contains(error_of([&] { c.seq_truncate(a, 9); }), "cannot keep 9"));
  c.seq_free(b);
  CHECK_THROWS_AS(c.seq_len(b), input_error);
}

TEST_CASE("runtime: seq_truncate then re-evaluation reproduces the logits bit for bit") {
  for (auto mode : {runtime::NUMERICS_EXACT, runtime::NUMERICS_FLOAT, runtime::NUMERICS_REFERENCE}) {
    CAPTURE(runtime::numerics_name(mode));
    runtime::context c(stories(), params(mode));
    const int32_t s = c.seq_new();
    auto l1 = c.decode(entries(s, TOKS));
    c.seq_truncate(s, 3);
    CHECK(c.seq_tokens(s) == std::vector<int32_t>(TOKS.begin(), TOKS.begin() + 3));
    auto l2 = c.decode(entries(s, {TOKS[3], TOKS[4], TOKS[5]}));
    for (int i = 0; i < 3; ++i) CHECK(std::memcmp(l1[3 + i].data(), l2[i].data(), 4 * l2[i].size()) == 0);
  }
}

TEST_CASE("runtime: seq_restore validates the file and names what is wrong") {
  const std::string dir = test::scratch_dir("runtime_restore");
  const std::string good = dir + "/good.bin";
  {
    runtime::context c(stories(), params());
    const int32_t s = c.seq_new();
    c.decode(entries(s, TOKS));
    c.seq_save(s, good);
  }
  const std::vector<uint8_t> bytes = read_bytes(good);
  CHECK_FALSE(std::filesystem::exists(good + ".tmp"));
  auto restore_error = [&](runtime::numerics_mode mode, const std::vector<uint8_t>& b) {
    write_bytes(dir + "/bad.bin", b);
    runtime::context c(stories(), params(mode));
    return error_of([&] { c.seq_restore(dir + "/bad.bin"); });
  };
  CHECK(restore_error(runtime::NUMERICS_EXACT, bytes) == "");
  CHECK(contains(restore_error(runtime::NUMERICS_FLOAT, bytes), "numerics: expected float, found exact"));
  auto edit = [&](size_t off, uint8_t v) {
    std::vector<uint8_t> b = bytes;
    b[off] = v;
    return b;
  };
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, edit(0, 'X')), "magic"));
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, edit(8, 2)), "version: expected 1, found 2"));
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, edit(20, 'z')), "model sha256: expected"));
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, edit(80, 9)), "n_layer: expected 5, found 9"));
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, edit(88, 1)), "cell_bytes"));
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, edit(96, 200)), "n_tokens: expected at most n_ctx 64"));
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, edit(96, 5)), "file size"));
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, edit(112 + 4 * 2 + 1, 7)), "token 2: id"));
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, edit(bytes.size() - 3, bytes.back() ^ 0x55)), "checksum"));
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, longer), "file size"));
  CHECK(contains(restore_error(runtime::NUMERICS_EXACT, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 50)),
                 "header: expected 112 bytes, found 50"));
  runtime::context c(stories(), params());
  CHECK(contains(error_of([&] { c.seq_restore(dir + "/missing.bin"); }), "cannot open"));

  // another model with the same shapes (different weights) is refused by its sha256
  model::synth_options o;
  o.n_embd = 64;
  o.n_layer = 5;
  o.n_head = 8;
  o.n_head_kv = 4;
  o.n_ff = 192;
  o.vocab_from = test::fixture("models/stories260K.gguf");
  model::synth_write(o, dir + "/other.gguf");
  runtime::context other(model::model::load(dir + "/other.gguf"), params());
  CHECK(contains(error_of([&] { other.seq_restore(good); }), "model sha256: expected"));
}

TEST_CASE("runtime: layer-hash traces are per token and name the first differing layer") {
  auto traced = [](runtime::numerics_mode mode, int64_t n_ubatch, int n_threads) {
    runtime::context_params p = params(mode);
    p.trace_hashes = true;
    p.n_ubatch = n_ubatch;
    p.n_threads = n_threads;
    runtime::context c(stories(), p);
    const int32_t other = c.seq_new(), s = c.seq_new();
    std::vector<token_in> b;
    for (size_t i = 0; i < TOKS.size(); ++i) {
      b.push_back({other, TOKS[TOKS.size() - 1 - i], false});
      b.push_back({s, TOKS[i], false});
    }
    c.decode(b);
    std::vector<runtime::token_trace> mine;
    for (const runtime::token_trace& t : c.last_traces())
      if (t.seq == s) mine.push_back(t);
    CHECK(c.last_traces().size() == 2 * TOKS.size());
    CHECK(c.max_tokens_in_step() == std::min<int64_t>(n_ubatch, 12));
    CHECK(c.max_seqs_in_step() == (n_ubatch == 1 ? 1 : 2));
    return mine;
  };
  auto a = traced(runtime::NUMERICS_EXACT, 512, 1), b = traced(runtime::NUMERICS_EXACT, 1, 2);
  REQUIRE(a.size() == TOKS.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].pos == static_cast<int64_t>(i));
    CHECK(a[i].layer_hashes.size() == 6);  // 5 blocks and the final norm
    CHECK(a[i].layer_hashes == b[i].layer_hashes);
  }
  CHECK(a[1].layer_hashes[0] != a[2].layer_hashes[0]);
  auto fa = traced(runtime::NUMERICS_FLOAT, 512, 1), fb = traced(runtime::NUMERICS_FLOAT, 1, 2);
  size_t first = 99;
  for (size_t l = 0; l < 6 && first == 99; ++l)
    if (fa.back().layer_hashes[l] != fb.back().layer_hashes[l]) first = l;
  MESSAGE("float numerics, one step vs n_ubatch 1 with 2 threads: first differing layer " << first);
  CHECK(first < 6);
}
