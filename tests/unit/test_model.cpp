// model::load on every fixture model and on synth models of every architecture, each evaluated for
// a few tokens in every numerics mode; load errors (unsupported weight types, bad files); the
// wiring of tied output, rope_freqs factors and linear RoPE scaling.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "gguf/gguf.h"
#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "model/inspect.h"
#include "model/model.h"
#include "model/synth.h"
#include "runtime/context.h"
#include "synth_util.h"
#include "test_util.h"
#include "util/error.h"
#include "util/sha256.h"

using namespace detaudit;

namespace {

using runtime::NUMERICS_EXACT;
using runtime::NUMERICS_FLOAT;
using runtime::NUMERICS_REFERENCE;

// Logits of every position of `tokens` evaluated in one decode call.
std::vector<std::vector<float>> eval(std::shared_ptr<const model::model> m, runtime::numerics_mode mode,
                                     const std::vector<int32_t>& tokens) {
  runtime::context_params p;
  p.numerics = mode;
  runtime::context c(std::move(m), p);
  const int32_t s = c.seq_new();
  std::vector<runtime::token_in> b;
  for (int32_t t : tokens) b.push_back({s, t, true});
  return c.decode(b);
}

bool all_finite(const std::vector<std::vector<float>>& l) {
  for (const auto& v : l)
    for (float x : v)
      if (!std::isfinite(x)) return false;
  return true;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// A copy of a GGUF file with edits: metadata values replaced or added, a tensor's type label
// replaced (keeping its bytes: the types must have the same row size), extra tensors added.
struct gguf_edit {
  std::vector<gguf::kv> set;
  std::string retype_tensor;
  gguf::dtype retype_to = gguf::DTYPE_F32;
  std::vector<std::pair<std::string, std::vector<float>>> add_f32;
};

void gguf_copy(const std::string& src, const std::string& dst, const gguf_edit& e) {
  gguf::file f = gguf::file::open(src);
  gguf::writer w(f.alignment());
  for (const gguf::kv& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    bool replaced = false;
    for (const gguf::kv& s : e.set) replaced |= s.key == kv.key;
    if (!replaced) w.set(kv.key, kv.val);
  }
  for (const gguf::kv& s : e.set) w.set(s.key, s.val);
  for (const gguf::tensor_info& t : f.tensors())
    w.add_tensor(t.name, t.name == e.retype_tensor ? e.retype_to : t.type, t.ne, f.tensor_data(t), t.n_bytes);
  for (const auto& [name, v] : e.add_f32)
    w.add_tensor(name, gguf::DTYPE_F32, {static_cast<int64_t>(v.size())}, v.data(), 4 * v.size());
  w.write(dst);
}

model::synth_options small(model::arch_id a, gguf::dtype t) { return test::small_model(a, t, 7, 256); }

const std::vector<int32_t> TOKENS = {1, 17, 300, 42, 99};

}  // namespace

TEST_CASE("model: every fixture model loads and evaluates tokens in every numerics mode") {
  std::vector<std::string> paths = {test::fixture("models/stories260K.gguf"),
                                    test::fixture("models/llama-2-tiny-random.gguf")};
  for (const auto& e : std::filesystem::directory_iterator(test::generated("models/synthetic")))
    if (e.path().extension() == ".gguf") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  CHECK(paths.size() >= 20);
  for (const std::string& path : paths) {
    CAPTURE(path);
    auto m = model::model::load(path);
    CHECK(m->layers.size() == static_cast<size_t>(m->hp().n_layer));
    CHECK(m->tok_embd.n_out == m->hp().n_vocab);
    CHECK(m->output.n_in == m->hp().n_embd);
    auto exact = eval(m, NUMERICS_EXACT, TOKENS);
    auto flt = eval(m, NUMERICS_FLOAT, TOKENS);
    auto ref = eval(m, NUMERICS_REFERENCE, TOKENS);
    REQUIRE(exact.size() == TOKENS.size());
    CHECK(exact[0].size() == static_cast<size_t>(m->hp().n_vocab));
    CHECK(all_finite(exact));
    CHECK(all_finite(flt));
    CHECK(all_finite(ref));
    double max_diff = 0;
    for (size_t i = 0; i < exact.size(); ++i)
      for (size_t j = 0; j < exact[i].size(); ++j) max_diff = std::max<double>(max_diff, std::fabs(exact[i][j] - ref[i][j]));
    CAPTURE(max_diff);
    CHECK(max_diff < 0.05);  // a broken op is off by O(1); quantization noise is ~1e-3
  }
}

TEST_CASE("model: stories260K hyperparameters and weights by role") {
  auto m = model::model::load(test::fixture("models/stories260K.gguf"));
  const model::hparams& hp = m->hp();
  CHECK(hp.n_embd == 64);
  CHECK(hp.n_layer == 5);
  CHECK(hp.n_head == 8);
  CHECK(hp.n_head_kv == 4);
  CHECK(hp.n_ff == 172);
  CHECK(hp.n_vocab == 512);
  CHECK(m->vocab().size() == 512);
  CHECK(hp.tied_output == false);
  CHECK(m->layers[4].wk.name == "blk.4.attn_k.weight");
  CHECK(m->layers[4].wk.n_in == 64);
  CHECK(m->layers[4].wk.n_out == 32);
  CHECK(m->layers[0].w_down.n_in == 172);
  CHECK(m->layers[0].attn_norm.size() == 64);
  CHECK(m->layers[0].bq.empty());
  CHECK(m->rope_factors.empty());
  CHECK(m->sha256() == sha256_file(m->path()));
  CHECK(&m->sha256() == &m->sha256());
}

TEST_CASE("model: qwen3 and qwen2 synth models with tied output load and run") {
  std::string dir = test::scratch_dir("model_qwen3");
  for (model::arch_id a : {model::ARCH_QWEN3, model::ARCH_QWEN2}) {
    CAPTURE(model::arch_name(a));
    model::synth_options o = small(a, gguf::DTYPE_Q8_0);
    o.tied_output = true;
    const std::string path = dir + "/" + model::arch_name(a) + ".gguf";
    model::synth_write(o, path);
    auto m = model::model::load(path);
    CHECK(m->hp().tied_output);
    CHECK(m->output.data == m->tok_embd.data);
    if (a == model::ARCH_QWEN3) {
      CHECK(m->layers[1].q_norm.size() == static_cast<size_t>(m->hp().head_dim));
      CHECK(m->layers[1].k_norm.size() == static_cast<size_t>(m->hp().head_dim));
    } else {
      CHECK(m->layers[1].bk.size() == static_cast<size_t>(m->hp().n_head_kv * m->hp().head_dim));
    }
    auto exact = eval(m, NUMERICS_EXACT, TOKENS);
    auto ref = eval(m, NUMERICS_REFERENCE, TOKENS);
    for (size_t i = 0; i < exact.size(); ++i) CHECK(argmax(exact[i]) == argmax(ref[i]));
  }
}

TEST_CASE("model: a weight type the engine does not compute is refused, naming tensor and type") {
  std::string dir = test::scratch_dir("model_unsupported");
  model::synth_options o = small(model::ARCH_LLAMA, gguf::DTYPE_Q4_0);
  model::synth_write(o, dir + "/q4_0.gguf");
  gguf_edit e;  // iq4_nl blocks are 18 bytes per 32 elements, like q4_0
  e.retype_tensor = "blk.1.ffn_down.weight";
  e.retype_to = gguf::DTYPE_IQ4_NL;
  gguf_copy(dir + "/q4_0.gguf", dir + "/iq4_nl.gguf", e);
  try {
    model::model::load(dir + "/iq4_nl.gguf");
    FAIL("an iq4_nl tensor was accepted");
  } catch (const input_error& err) {
    const std::string msg = err.what();
    CHECK(msg.find("iq4_nl.gguf") != std::string::npos);
    CHECK(msg.find("'blk.1.ffn_down.weight' has type iq4_nl, which the engine does not compute") != std::string::npos);
  }
  CHECK_THROWS_AS(model::model::load(dir + "/missing.gguf"), input_error);
  CHECK_FALSE(model::model_type_supported(gguf::DTYPE_Q8_K));
  CHECK(model::model_type_supported(gguf::DTYPE_Q3_K));
}

TEST_CASE("model: rope_freqs factors and linear RoPE scaling reach the forward pass") {
  std::string dir = test::scratch_dir("model_rope");
  model::synth_options o = small(model::ARCH_LLAMA, gguf::DTYPE_Q8_0);
  const std::string base = dir + "/base.gguf";
  model::synth_write(o, base);
  const int64_t half = o.n_embd / o.n_head / 2;
  gguf_edit ones, twos, linear;
  ones.add_f32 = {{"rope_freqs.weight", std::vector<float>(static_cast<size_t>(half), 1.0f)}};
  twos.add_f32 = {{"rope_freqs.weight", std::vector<float>(static_cast<size_t>(half), 2.0f)}};
  linear.set = {{"llama.rope.scaling.type", gguf::value::of_string("linear")},
                {"llama.rope.scaling.factor", gguf::value::of_f32(2.0f)}};
  gguf_copy(base, dir + "/ones.gguf", ones);
  gguf_copy(base, dir + "/twos.gguf", twos);
  gguf_copy(base, dir + "/linear.gguf", linear);
  auto m_twos = model::model::load(dir + "/twos.gguf");
  CHECK(m_twos->rope_factors.size() == static_cast<size_t>(half));
  CHECK(model::model::load(dir + "/linear.gguf")->hp().rope_scale_linear == 0.5);
  for (runtime::numerics_mode mode : {NUMERICS_EXACT, NUMERICS_FLOAT, NUMERICS_REFERENCE}) {
    CAPTURE(runtime::numerics_name(mode));
    auto l_base = eval(model::model::load(base), mode, TOKENS);
    auto l_ones = eval(model::model::load(dir + "/ones.gguf"), mode, TOKENS);
    auto l_twos = eval(m_twos, mode, TOKENS);
    auto l_linear = eval(model::model::load(dir + "/linear.gguf"), mode, TOKENS);
    CHECK(l_base == l_ones);
    CHECK(l_base[0] == l_twos[0]);  // position 0 does not rotate
    CHECK(l_base.back() != l_twos.back());
    CHECK(l_twos == l_linear);  // factor 2 everywhere and linear scale 1/2: the same angles, exactly
  }
}

TEST_CASE("model: phi3's fused attn_qkv and ffn_up give the bits of the same weights as separate matrices") {
  // A phi3 file and a qwen2 file holding the same weights split into attn_q/k/v and ffn_gate/up
  // (qwen2: NEOX RoPE as phi3, with q/k/v biases, here zero) must give the same logits bit for bit:
  // the fused tensors are read as row ranges, Q then K then V, gate then up.
  const std::string dir = test::scratch_dir("model_phi3_fused");
  for (gguf::dtype t : {gguf::DTYPE_F16, gguf::DTYPE_Q8_0, gguf::DTYPE_Q4_K}) {
    CAPTURE(gguf::dtype_get(t).name);
    const std::string phi = dir + "/phi3.gguf", split = dir + "/split.gguf";
    model::synth_write(small(model::ARCH_PHI3, t), phi);
    gguf::file f = gguf::file::open(phi);
    const model::hparams hp = model::hparams_from_gguf(f);
    const int64_t q_dim = hp.n_head * hp.head_dim, kv_dim = hp.n_head_kv * hp.head_dim;
    gguf::writer w(f.alignment());
    for (const gguf::kv& kv : f.metadata()) {
      if (kv.key == "general.alignment" || kv.key == "phi3.attention.sliding_window") continue;
      if (kv.key == "general.architecture") w.set(kv.key, gguf::value::of_string("qwen2"));
      else if (kv.key.rfind("phi3.", 0) == 0) w.set("qwen2." + kv.key.substr(5), kv.val);
      else w.set(kv.key, kv.val);
    }
    std::vector<float> zeros(static_cast<size_t>(q_dim), 0.0f);
    for (const gguf::tensor_info& ti : f.tensors()) {
      const uint8_t* data = f.tensor_data(ti);
      const uint64_t row = gguf::dtype_row_bytes(ti.type, ti.ne[0]);
      auto rows = [&](const std::string& name, int64_t r0, int64_t n) {
        w.add_tensor(name, ti.type, {ti.ne[0], n}, data + row * static_cast<uint64_t>(r0), row * static_cast<uint64_t>(n));
      };
      const std::string b = ti.name.substr(0, ti.name.find('.', 4) + 1);  // "blk.N."
      if (ti.name.ends_with("attn_qkv.weight")) {
        rows(b + "attn_q.weight", 0, q_dim);
        rows(b + "attn_k.weight", q_dim, kv_dim);
        rows(b + "attn_v.weight", q_dim + kv_dim, kv_dim);
        w.add_tensor(b + "attn_q.bias", gguf::DTYPE_F32, {q_dim}, zeros.data(), 4 * static_cast<uint64_t>(q_dim));
        w.add_tensor(b + "attn_k.bias", gguf::DTYPE_F32, {kv_dim}, zeros.data(), 4 * static_cast<uint64_t>(kv_dim));
        w.add_tensor(b + "attn_v.bias", gguf::DTYPE_F32, {kv_dim}, zeros.data(), 4 * static_cast<uint64_t>(kv_dim));
      } else if (ti.name.ends_with("ffn_up.weight")) {
        rows(b + "ffn_gate.weight", 0, hp.n_ff);
        rows(b + "ffn_up.weight", hp.n_ff, hp.n_ff);
      } else {
        w.add_tensor(ti.name, ti.type, ti.ne, data, ti.n_bytes);
      }
    }
    w.write(split);
    auto a = model::model::load(phi), q = model::model::load(split);
    REQUIRE(a->hp().arch == model::ARCH_PHI3);
    REQUIRE(q->hp().arch == model::ARCH_QWEN2);
    CHECK(a->layers[1].wk.data == a->layers[1].wq.data + a->layers[1].wq.row_bytes * static_cast<uint64_t>(q_dim));
    CHECK(a->layers[1].w_up.n_out == hp.n_ff);
    for (auto mode : {NUMERICS_EXACT, NUMERICS_FLOAT, NUMERICS_REFERENCE}) {
      CAPTURE(runtime::numerics_name(mode));
      auto la = eval(a, mode, TOKENS), lq = eval(q, mode, TOKENS);
      REQUIRE(la.size() == lq.size());
      for (size_t i = 0; i < la.size(); ++i) CHECK(std::memcmp(la[i].data(), lq[i].data(), 4 * la[i].size()) == 0);
    }
  }
}

TEST_CASE("model: phi3 LongRoPE factors and a negative sliding window are refused, naming them") {
  const std::string dir = test::scratch_dir("model_phi3_refused");
  model::synth_write(small(model::ARCH_PHI3, gguf::DTYPE_F16), dir + "/phi3.gguf");
  const int64_t half = model::hparams_from_gguf(gguf::file::open(dir + "/phi3.gguf")).n_rot / 2;
  gguf_edit e;
  e.add_f32 = {{"rope_factors_long.weight", std::vector<float>(static_cast<size_t>(half), 1.0f)}};
  gguf_copy(dir + "/phi3.gguf", dir + "/longrope.gguf", e);
  CHECK_THROWS_WITH_AS(model::model::load(dir + "/longrope.gguf"), doctest::Contains("LongRoPE"), input_error);
  gguf_edit s;
  s.set = {{"phi3.attention.sliding_window", gguf::value::of_i32(-1)}};
  gguf_copy(dir + "/phi3.gguf", dir + "/swa.gguf", s);
  CHECK_THROWS_WITH_AS(model::model::load(dir + "/swa.gguf"), doctest::Contains("phi3.attention.sliding_window"), input_error);
}

namespace {

// A copy of the phi3 file src with metadata keys set, tensors reshaped (fresh f32 data of the new
// shape), tensors dropped and f32 tensors of any shape added: hostile phi3 files.
struct phi3_craft {
  std::vector<gguf::kv> set;
  std::vector<std::pair<std::string, std::vector<int64_t>>> reshape, add;
  std::vector<std::string> drop;
};

void phi3_write(const std::string& src, const std::string& dst, const phi3_craft& c) {
  gguf::file f = gguf::file::open(src);
  gguf::writer w(f.alignment());
  for (const gguf::kv& kv : f.metadata()) {
    if (kv.key == "general.alignment") continue;
    bool replaced = false;
    for (const gguf::kv& s : c.set) replaced |= s.key == kv.key;
    if (!replaced) w.set(kv.key, kv.val);
  }
  for (const gguf::kv& s : c.set) w.set(s.key, s.val);
  std::vector<std::vector<float>> keep;  // the writer may hold pointers until write()
  auto fresh = [&](const std::string& name, const std::vector<int64_t>& ne) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    keep.emplace_back(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) keep.back()[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 7 + 1);
    w.add_tensor(name, gguf::DTYPE_F32, ne, keep.back().data(), 4 * static_cast<uint64_t>(n));
  };
  for (const gguf::tensor_info& t : f.tensors()) {
    if (std::find(c.drop.begin(), c.drop.end(), t.name) != c.drop.end()) continue;
    auto r = std::find_if(c.reshape.begin(), c.reshape.end(), [&](const auto& p) { return p.first == t.name; });
    if (r != c.reshape.end()) fresh(t.name, r->second);
    else w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.n_bytes);
  }
  for (const auto& [name, ne] : c.add) fresh(name, ne);
  w.write(dst);
}

}  // namespace

TEST_CASE("model: hostile phi3 files are refused with an input_error naming the tensor or key") {
  const std::string dir = test::scratch_dir("model_phi3_hostile");
  const std::string base = dir + "/phi3.gguf";
  model::synth_write(small(model::ARCH_PHI3, gguf::DTYPE_F32), base);  // n_embd 256, 4 heads of 64 (2 KV), n_ff 512
  REQUIRE_NOTHROW(model::model::load(base));
  auto refused = [&](const std::string& name, const phi3_craft& c, const std::string& needle) {
    CAPTURE(name);
    phi3_write(base, dir + "/" + name + ".gguf", c);
    CHECK_THROWS_WITH_AS(model::model::load(dir + "/" + name + ".gguf"), doctest::Contains(needle.c_str()), input_error);
  };
  // Both the fused and the separate tensors; only the separate ones.
  refused("both", {{}, {}, {{"blk.0.attn_q.weight", {256, 256}}}, {}}, "blk.0.attn_q.weight");
  refused("separate", {{}, {}, {{"blk.0.ffn_gate.weight", {256, 512}}}, {"blk.0.attn_qkv.weight"}}, "blk.0.attn_qkv.weight");
  // Fused tensors with the wrong row counts: ffn_up of n_ff rows (a llama-style up), attn_qkv without V.
  refused("up_rows", {{}, {{"blk.1.ffn_up.weight", {256, 512}}}, {}, {}}, "blk.1.ffn_up.weight");
  refused("qkv_rows", {{}, {{"blk.0.attn_qkv.weight", {256, 256 + 128}}}, {}, {}}, "blk.0.attn_qkv.weight");
  // sliding_window: not an integer, past int64, past the engine's bound.
  refused("swa_string", {{{"phi3.attention.sliding_window", gguf::value::of_string("2047")}}, {}, {}, {}}, "sliding_window");
  refused("swa_huge", {{{"phi3.attention.sliding_window", gguf::value::of_u64(uint64_t(1) << 63)}}, {}, {}, {}}, "sliding_window");
  refused("swa_big", {{{"phi3.attention.sliding_window", gguf::value::of_u64(uint64_t(1) << 40)}}, {}, {}, {}}, "sliding_window");
  // llama.cpp's phi3 puts K at row n_embd of attn_qkv (and needs attn_output n_embd x n_embd): a
  // key_length with n_head * key_length != n_embd is a file llama.cpp refuses, whose row ranges
  // the engine would otherwise read in a layout no reference shares. 6 heads of 64 (1 KV head):
  // Q 384 rows, K and V 64 each; attn_output 384 -> 256.
  phi3_craft hd{{{"phi3.attention.head_count", gguf::value::of_u32(6)},
                 {"phi3.attention.head_count_kv", gguf::value::of_u32(1)},
                 {"phi3.attention.key_length", gguf::value::of_u32(64)},
                 {"phi3.attention.value_length", gguf::value::of_u32(64)}},
                {}, {}, {}};
  for (int l = 0; l < 2; ++l) {
    hd.reshape.push_back({"blk." + std::to_string(l) + ".attn_qkv.weight", {256, 384 + 2 * 64}});
    hd.reshape.push_back({"blk." + std::to_string(l) + ".attn_output.weight", {384, 256}});
  }
  refused("head_dim", hd, "key_length");
}

TEST_CASE("model: a gemma3 whose every layer slides through one position gives a token the logits it has alone") {
  // With a window of 1 each query sees only its own key: the softmax weight is exactly 1 and the
  // attention output is the token's own V, whatever came before and whatever its position (RoPE
  // rotates q and k alike; V is not rotated). So the last token of a sequence gets the bits it gets
  // as a sequence of its own; with the window switched off it does not.
  const std::string dir = test::scratch_dir("model_gemma_window1");
  model::synth_options o = small(model::ARCH_GEMMA3, gguf::DTYPE_Q8_0);
  o.sliding_window = 1;
  o.swa_period = 0;  // every layer slides
  model::synth_write(o, dir + "/w1.gguf");
  auto m = model::model::load(dir + "/w1.gguf");
  for (int l = 0; l < m->hp().n_layer; ++l) REQUIRE(model::layer_swa(m->hp(), l));
  const std::vector<int32_t> seq = {5, 77, 300, 12, 9, 41};
  for (auto mode : {NUMERICS_EXACT, NUMERICS_FLOAT, NUMERICS_REFERENCE}) {
    CAPTURE(runtime::numerics_name(mode));
    const auto whole = eval(m, mode, seq);
    const auto alone = eval(m, mode, {seq.back()});
    if (mode == NUMERICS_EXACT) CHECK(std::memcmp(whole.back().data(), alone[0].data(), 4 * alone[0].size()) == 0);
    else  // float and reference round the RoPE'd dot differently at each position: equal to a few ulp
      for (size_t i = 0; i < alone[0].size(); ++i) REQUIRE(std::fabs(whole.back()[i] - alone[0][i]) < 1e-4f);
  }
  o.sliding_window = 0;  // no sliding layers: the same weights, context matters again
  o.swa_period = -1;
  model::synth_write(o, dir + "/w0.gguf");
  auto m0 = model::model::load(dir + "/w0.gguf");
  CHECK_FALSE(m0->hp().swa);
  const auto whole0 = eval(m0, NUMERICS_EXACT, seq), alone0 = eval(m0, NUMERICS_EXACT, {seq.back()});
  CHECK(std::memcmp(whole0.back().data(), alone0[0].data(), 4 * alone0[0].size()) != 0);
}

TEST_CASE("model: hostile gemma files are refused with an input_error naming the tensor or key") {
  const std::string dir = test::scratch_dir("model_gemma_hostile");
  model::synth_write(small(model::ARCH_GEMMA2, gguf::DTYPE_F32), dir + "/g2.gguf");
  model::synth_write(small(model::ARCH_GEMMA3, gguf::DTYPE_F32), dir + "/g3.gguf");
  auto refused = [&](const std::string& base, const std::string& name, const phi3_craft& c, const std::string& needle) {
    CAPTURE(name);
    phi3_write(dir + "/" + base + ".gguf", dir + "/" + name + ".gguf", c);
    CHECK_THROWS_WITH_AS(model::model::load(dir + "/" + name + ".gguf"), doctest::Contains(needle.c_str()), input_error);
  };
  const auto u32 = [](uint32_t v) { return gguf::value::of_u32(v); };
  const auto f32 = [](float v) { return gguf::value::of_f32(v); };
  refused("g2", "g2_window0", {{{"gemma2.attention.sliding_window", u32(0)}}, {}, {}, {}}, "gemma2.attention.sliding_window");
  refused("g2", "g2_cap_nan", {{{"gemma2.attn_logit_softcapping", f32(NAN)}}, {}, {}, {}}, "attn_logit_softcapping");
  refused("g2", "g2_cap_neg", {{{"gemma2.final_logit_softcapping", f32(-30)}}, {}, {}, {}}, "final_logit_softcapping");
  refused("g2", "g2_cap_inf", {{{"gemma2.attn_logit_softcapping", f32(INFINITY)}}, {}, {}, {}}, "attn_logit_softcapping");
  refused("g2", "g2_period_huge", {{{"gemma2.attention.sliding_window_pattern", u32(1u << 31)}}, {}, {}, {}}, "sliding_window_pattern");
  refused("g2", "g2_period_array",
          {{{"gemma2.attention.sliding_window_pattern", gguf::value::of_array(gguf::VALUE_BOOL, {gguf::value::of_bool(true)})}}, {}, {}, {}},
          "sliding_window_pattern");
  refused("g2", "g2_output", {{}, {}, {{"output.weight", {256, 543}}}, {}}, "unexpected tensor 'output.weight'");
  refused("g2", "g2_no_post_ffw", {{}, {}, {}, {"blk.1.post_ffw_norm.weight"}}, "blk.1.post_ffw_norm.weight");
  refused("g2", "g2_post_attn_shape", {{}, {{"blk.0.post_attention_norm.weight", {128}}}, {}, {}}, "post_attention_norm");
  refused("g3", "g3_attn_cap", {{{"gemma3.attn_logit_softcapping", f32(50)}}, {}, {}, {}}, "gemma3.attn_logit_softcapping");
  refused("g3", "g3_base_swa_zero", {{{"gemma3.rope.freq_base_swa", f32(0)}}, {}, {}, {}}, "gemma3.rope.freq_base_swa");
  refused("g3", "g3_no_q_norm", {{}, {}, {}, {"blk.0.attn_q_norm.weight"}}, "blk.0.attn_q_norm.weight");
  refused("g3", "g3_window_neg", {{{"gemma3.attention.sliding_window", gguf::value::of_i32(-4)}}, {}, {}, {}}, "sliding_window");
}

TEST_CASE("model: gemma files llama.cpp refuses or computes otherwise are refused, and inspect describes them") {
  const std::string dir = test::scratch_dir("model_gemma_review");
  model::synth_write(small(model::ARCH_GEMMA2, gguf::DTYPE_F32), dir + "/g2.gguf");
  model::synth_write(small(model::ARCH_GEMMA3, gguf::DTYPE_F32), dir + "/g3.gguf");
  const auto u32 = [](uint32_t v) { return gguf::value::of_u32(v); };
  const auto f32 = [](float v) { return gguf::value::of_f32(v); };
  struct bad {
    const char* base;
    const char* name;
    phi3_craft craft;
    const char* needle;
  };
  const bad cases[] = {
      // period 1: no layer slides, and llama.cpp asserts on a sliding model without sliding layers
      {"g2", "period1", {{{"gemma2.attention.sliding_window_pattern", u32(1)}}, {}, {}, {}}, "sliding_window_pattern"},
      // llama.cpp reads per-sliding-layer sizes and applies them to every layer; the engine has none
      {"g3", "rot_swa", {{{"gemma3.rope.dimension_count_swa", u32(32)}}, {}, {}, {}}, "rope.dimension_count_swa"},
      {"g3", "keylen_swa", {{{"gemma3.attention.key_length_swa", u32(32)}}, {}, {}, {}}, "attention.key_length_swa"},
      // gemma2 divides by its final cap: 0 is no "none" there; caps beyond 1000 lose the exact tanh's precision
      {"g2", "final_cap0", {{{"gemma2.final_logit_softcapping", f32(0)}}, {}, {}, {}}, "final_logit_softcapping"},
      {"g2", "final_cap_big", {{{"gemma2.final_logit_softcapping", f32(1e8f)}}, {}, {}, {}}, "final_logit_softcapping"},
      {"g2", "attn_cap_big", {{{"gemma2.attn_logit_softcapping", f32(5000)}}, {}, {}, {}}, "attn_logit_softcapping"},
      {"g3", "g3_final_cap_big", {{{"gemma3.final_logit_softcapping", f32(2e4f)}}, {}, {}, {}}, "final_logit_softcapping"},
  };
  for (const bad& b : cases) {
    CAPTURE(b.name);
    const std::string path = dir + "/" + b.name + ".gguf";
    phi3_write(dir + "/" + b.base + ".gguf", path, b.craft);
    CHECK_THROWS_WITH_AS(model::model::load(path), doctest::Contains(b.needle), input_error);
  }
  // The same sizes as the full layers are fine.
  phi3_write(dir + "/g3.gguf", dir + "/rot_swa_same.gguf", {{{"gemma3.rope.dimension_count_swa", u32(64)}}, {}, {}, {}});
  CHECK_NOTHROW(model::model::load(dir + "/rot_swa_same.gguf"));
  // inspect describes a file whose gemma keys have the wrong type instead of failing on it
  for (const char* key : {"gemma3.rope.freq_base_swa", "gemma3.final_logit_softcapping", "gemma3.attention.sliding_window_pattern"}) {
    CAPTURE(key);
    const std::string path = dir + "/typed.gguf";
    phi3_write(dir + "/g3.gguf", path, {{{key, gguf::value::of_string("x")}}, {}, {}, {}});
    nlohmann::json info;
    REQUIRE_NOTHROW(info = model::inspect_file(path, {}));
    CHECK(info["engine"]["runnable"] == false);
    CHECK(info["engine"]["reason"].get<std::string>().find(key) != std::string::npos);
  }
  // llama.cpp's 27B rule with n_embd / n_head = 0 would make the attention scale infinite
  model::synth_options o = small(model::ARCH_GEMMA2, gguf::DTYPE_F32);
  o.n_layer = 46;
  o.n_embd = 64;
  o.n_head = 128;
  o.n_head_kv = 1;
  o.head_dim = 2;
  o.n_ff = 64;
  o.n_ctx = 64;
  o.sliding_window = 4;
  model::synth_write(o, dir + "/g2_46.gguf");
  CHECK_THROWS_WITH_AS(model::model::load(dir + "/g2_46.gguf"), doctest::Contains("would be infinite"), input_error);
  // synth refuses the options that would write such files
  model::synth_options p1 = small(model::ARCH_GEMMA3, gguf::DTYPE_F16);
  p1.swa_period = 1;
  CHECK_THROWS_WITH_AS(model::synth_write(p1, dir + "/x.gguf"), doctest::Contains("--swa-period 1"), input_error);
  p1.swa_period = -5;
  CHECK_THROWS_WITH_AS(model::synth_write(p1, dir + "/x.gguf"), doctest::Contains("negative"), input_error);
}

TEST_CASE("kernels: soft caps outside softcap_f32's range are refused alike by the reference, the CPU and attention") {
  const float x[3] = {5.0f, 1e37f, 1.0f};
  float out[3];
  for (float cap : {0.0f, -1.0f, NAN, INFINITY, 1e-40f, 1e38f, 3.4e38f, 3.40282347e38f}) {
    CAPTURE(cap);
    if (cap != 0.0f) CHECK_FALSE(numerics::softcap_cap_ok(cap));
    CHECK_THROWS_AS(kernels::softcap_f32_ref(x, 3, cap, out), input_error);
    for (kernels::cpu::isa i : kernels::cpu::isa_all_supported())
      CHECK_THROWS_AS(kernels::cpu::softcap_f32_cpu(i, x, 3, cap, out), input_error);
    if (cap == 0.0f) continue;  // 0 is "no cap" for attention
    const int16_t kq[32] = {100};
    const int32_t ke[1] = {-10};
    const kernels::kv_head_view kv{kq, ke, 32, 1};
    float q[32] = {1.0f}, o[32];
    CHECK_THROWS_AS(kernels::attention_exact_ref(q, 32, kv, kv, 1, 0.125f, o, cap), input_error);
    for (kernels::cpu::isa i : kernels::cpu::isa_all_supported())
      CHECK_THROWS_AS(kernels::cpu::attention_exact_cpu(i, q, 32, kv, kv, 1, 0.125f, o, cap), input_error);
  }
  CHECK(numerics::softcap_cap_ok(30.0f));
  CHECK(numerics::softcap_cap_ok(1e-30f));
}
