// Load-time repacking through runtime::context: the same logits
// with and without it, contexts sharing packs destroyed while another decodes, models reloaded
// (possibly at the same address), and a non-finite scale reported by tensor name.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "gguf/gguf.h"
#include "kernels/cpu/cpu.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/context.h"
#include "synth_util.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using runtime::token_in;

namespace {

runtime::context_params params(bool repack, int threads) {
  runtime::context_params p;
  p.numerics = runtime::NUMERICS_EXACT;
  p.n_ctx = 64;
  p.n_threads = threads;
  p.repack = repack;
  return p;
}

// Logits of a prompt then two single-token steps (the generation path, where packs are used).
std::vector<std::vector<float>> run(runtime::context& c) {
  const int32_t s = c.seq_new();
  std::vector<token_in> b;
  for (int32_t t : {1, 5, 9, 13, 17}) b.push_back({s, t, true});
  std::vector<std::vector<float>> out = c.decode(b);
  for (int32_t t : {21, 33}) {
    auto l = c.decode({{s, t, true}});
    out.push_back(l[0]);
  }
  c.seq_free(s);
  return out;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4) != 0) return false;
  return true;
}

std::string write_model(const std::string& dir, const std::string& name, uint64_t seed, int64_t n_ff = 512) {
  model::synth_options o = test::small_model(model::ARCH_LLAMA, gguf::DTYPE_Q4_K, seed);
  o.n_ff = n_ff;
  const std::string p = dir + "/" + name;
  model::synth_write(o, p);
  return p;
}

}  // namespace

TEST_CASE("repack: contexts share packs and one is destroyed while another decodes with the same bits") {
  const std::string dir = test::process_scratch_dir("repack_share");
  auto m = model::model::load(write_model(dir, "a.gguf", 7));
  runtime::context plain(m, params(false, 2));
  const auto want = run(plain);
  auto a = std::make_unique<runtime::context>(m, params(true, 2));
  runtime::context b(m, params(true, 3));
  if (kernels::cpu::row_pack_kernel(gguf::DTYPE_Q4_K, kernels::cpu::isa_default())) {
    CHECK(a->repack_stats().tensors > 0);
    CHECK(b.repack_stats().tensors == a->repack_stats().tensors);
  }
  CHECK(same_bits(run(*a), want));
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, n{0};
  std::thread t([&] {
    while (!stop.load() || n.load() < 3) {
      if (!same_bits(run(b), want)) bad.fetch_add(1);
      n.fetch_add(1);
    }
  });
  a.reset();  // its packs are b's too
  for (int k = 0; k < 3; ++k) {
    runtime::context c(m, params(true, 2));  // takes b's packs
    CHECK(same_bits(run(c), want));
  }
  stop = true;
  t.join();
  CHECK(bad.load() == 0);
}

TEST_CASE("repack: models reloaded one after another (addresses reused) never see a stale pack") {
  const std::string dir = test::process_scratch_dir("repack_reload");
  const std::string pa = write_model(dir, "a.gguf", 7), pb = write_model(dir, "b.gguf", 8), pc = write_model(dir, "c.gguf", 9, 768);
  std::vector<std::vector<std::vector<float>>> want;
  for (const std::string& p : {pa, pb, pc}) {
    runtime::context plain(model::model::load(p), params(false, 1));
    want.push_back(run(plain));
  }
  for (int round = 0; round < 6; ++round) {
    const int k = round % 3;
    const std::string& p = k == 0 ? pa : k == 1 ? pb : pc;
    CAPTURE(round);
    runtime::context c(model::model::load(p), params(true, 2));
    CHECK(same_bits(run(c), want[static_cast<size_t>(k)]));
  }
  // A context of model a kept alive while b is loaded and run, then the reverse.
  auto ma = model::model::load(pa);
  runtime::context ca(ma, params(true, 2));
  {
    runtime::context cb(model::model::load(pb), params(true, 2));
    CHECK(same_bits(run(cb), want[1]));
  }
  CHECK(same_bits(run(ca), want[0]));
}

TEST_CASE("repack: a non-finite q4_K scale fails the decode naming the tensor, repack or not, 1 or 4 tokens") {
  const std::string dir = test::process_scratch_dir("repack_inf");
  const std::string src = write_model(dir, "ok.gguf", 7);
  gguf::file f = gguf::file::open(src);
  const gguf::tensor_info* ti = f.find_tensor("blk.1.ffn_up.weight");
  REQUIRE(ti);
  const uint64_t off = f.data_offset() + ti->offset + 37 * 144;  // row 37's d (rows of n_embd 256: one super-block)
  std::ifstream in(src, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
  const uint16_t inf = 0x7c00;
  std::memcpy(bytes.data() + off, &inf, 2);
  const std::string bad = dir + "/inf.gguf";
  std::ofstream(bad, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto m = model::model::load(bad);
  for (bool repack : {true, false})
    for (int threads : {1, 2}) {
      CAPTURE(repack);
      CAPTURE(threads);
      runtime::context c(m, params(repack, threads));
      const int32_t s = c.seq_new();
      for (int n_tok : {1, 3, 7}) {
        std::vector<token_in> b;
        for (int i = 0; i < n_tok; ++i) b.push_back({s, 3 + i, true});
        std::string err;
        try {
          c.decode(b);
        } catch (const input_error& e) {
          err = e.what();
        }
        CAPTURE(n_tok);
        CHECK(err.find("blk.1.ffn_up.weight") != std::string::npos);
      }
    }
}
