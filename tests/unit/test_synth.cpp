// synth: every architecture and weight type written, read back, checked against the unquantized
// values of the same seed, and deterministic to the byte.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/quants.h"
#include "model/arch.h"
#include "model/synth.h"
#include "synth_util.h"
#include "test_util.h"
#include "util/error.h"
#include "util/sha256.h"

using namespace detaudit;

namespace {

std::vector<float> decode(const gguf::file& f, const gguf::tensor_info& t) {
  std::vector<float> out(t.n_elements);
  const int64_t row = t.ne[0];
  const uint64_t row_bytes = gguf::dtype_row_bytes(t.type, row);
  const uint8_t* p = f.tensor_data(t);
  for (uint64_t r = 0; r < t.n_elements / static_cast<uint64_t>(row); ++r)
    gguf::quants_dequantize_row(t.type, p + r * row_bytes, out.data() + r * static_cast<uint64_t>(row), row);
  return out;
}

double rel_rms(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, s = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    s += double(want[i]) * want[i];
  }
  return std::sqrt(e / s);
}

// Relative RMS error allowed per type on these Gaussian weights. Measured values (seed 7, tiny
// shape) are well below: the bounds catch a broken quantizer or layout, not a slightly worse one.
double bound(gguf::dtype t) {
  switch (t) {
    case gguf::DTYPE_F32: return 0.0;
    case gguf::DTYPE_F16: return 1e-3;
    case gguf::DTYPE_BF16: return 5e-3;
    case gguf::DTYPE_Q8_0: return 0.01;
    case gguf::DTYPE_Q6_K: return 0.03;
    case gguf::DTYPE_Q5_0: case gguf::DTYPE_Q5_1: case gguf::DTYPE_Q5_K: return 0.06;
    case gguf::DTYPE_Q4_0: case gguf::DTYPE_Q4_1: case gguf::DTYPE_Q4_K: return 0.12;
    case gguf::DTYPE_Q3_K: return 0.25;
    case gguf::DTYPE_Q2_K: return 0.45;
    default: return 0.0;
  }
}

model::synth_options tiny(model::arch_id a, gguf::dtype t) { return test::small_model(a, t); }

}  // namespace

TEST_CASE("synth: every architecture and type reads back within the type's quantization error") {
  const gguf::dtype types[] = {gguf::DTYPE_F16,  gguf::DTYPE_BF16, gguf::DTYPE_Q8_0, gguf::DTYPE_Q4_0, gguf::DTYPE_Q4_1,
                               gguf::DTYPE_Q5_0, gguf::DTYPE_Q5_1, gguf::DTYPE_Q2_K, gguf::DTYPE_Q3_K, gguf::DTYPE_Q4_K,
                               gguf::DTYPE_Q5_K, gguf::DTYPE_Q6_K};
  std::string dir = test::scratch_dir("synth_types");
  for (model::arch_id a : {model::ARCH_LLAMA, model::ARCH_QWEN2, model::ARCH_QWEN3, model::ARCH_PHI3, model::ARCH_GEMMA2,
                           model::ARCH_GEMMA3}) {
    std::string ref_path = dir + "/" + model::arch_name(a) + "-f32.gguf";
    model::synth_write(tiny(a, gguf::DTYPE_F32), ref_path);
    gguf::file ref = gguf::file::open(ref_path);
    model::hparams ref_hp = model::hparams_from_gguf(ref);
    model::arch_check_tensors(ref, ref_hp);
    for (gguf::dtype t : types) {
      CAPTURE(model::arch_name(a));
      CAPTURE(gguf::dtype_get(t).name);
      std::string path = dir + "/" + model::arch_name(a) + "-" + gguf::dtype_get(t).name + ".gguf";
      model::synth_write(tiny(a, t), path);
      gguf::file f = gguf::file::open(path);
      model::hparams hp = model::hparams_from_gguf(f);
      model::arch_check_tensors(f, hp);
      CHECK(hp.n_layer == 2);
      CHECK(hp.n_vocab == ref_hp.n_vocab);
      CHECK(f.tensors().size() == ref.tensors().size());
      for (const gguf::tensor_info& ti : f.tensors()) {
        CAPTURE(ti.name);
        const gguf::tensor_info* rt = ref.find_tensor(ti.name);
        REQUIRE(rt);
        if (ti.ne.size() == 1) {
          REQUIRE(ti.type == gguf::DTYPE_F32);  // norms and biases stay f32, bit for bit
          CHECK(std::memcmp(f.tensor_data(ti), ref.tensor_data(*rt), ti.n_bytes) == 0);
          continue;
        }
        CHECK(ti.type == t);
        CHECK(rel_rms(decode(f, ti), decode(ref, *rt)) <= bound(t));
      }
    }
  }
}

TEST_CASE("synth: architecture specifics") {
  std::string dir = test::scratch_dir("synth_arch");
  model::synth_write(tiny(model::ARCH_QWEN2, gguf::DTYPE_F16), dir + "/q2.gguf");
  gguf::file q2 = gguf::file::open(dir + "/q2.gguf");
  CHECK(q2.find_tensor("blk.0.attn_q.bias"));
  CHECK(q2.find_tensor("blk.1.attn_v.bias"));
  CHECK(model::arch_rope_kind(model::hparams_from_gguf(q2).arch) == model::ROPE_NEOX);

  model::synth_write(tiny(model::ARCH_QWEN3, gguf::DTYPE_F16), dir + "/q3.gguf");
  gguf::file q3 = gguf::file::open(dir + "/q3.gguf");
  CHECK(q3.find_tensor("blk.0.attn_q_norm.weight")->ne == std::vector<int64_t>{64});
  CHECK(q3.get_int("qwen3.attention.key_length") == 64);

  model::synth_write(tiny(model::ARCH_PHI3, gguf::DTYPE_F16), dir + "/phi3.gguf");
  gguf::file p3 = gguf::file::open(dir + "/phi3.gguf");
  const model::hparams p3_hp = model::hparams_from_gguf(p3);
  CHECK(p3.find_tensor("blk.0.attn_qkv.weight")->ne == std::vector<int64_t>{256, 256 + 2 * 128});
  CHECK(p3.find_tensor("blk.1.ffn_up.weight")->ne == std::vector<int64_t>{256, 2 * p3_hp.n_ff});
  CHECK(p3.find_tensor("blk.0.attn_q.weight") == nullptr);
  CHECK(p3.find_tensor("blk.0.ffn_gate.weight") == nullptr);
  CHECK(p3.get_int("phi3.attention.sliding_window") == p3_hp.n_ctx_train);  // llama.cpp b4748 requires the key
  CHECK(model::arch_rope_kind(p3_hp.arch) == model::ROPE_NEOX);
  CHECK(model::arch_fused_qkv_ffn(p3_hp.arch));

  // llama.cpp looks up Phi-3's special tokens when general.name says phi3: the built-in vocabulary lacks them.
  model::synth_options named = tiny(model::ARCH_PHI3, gguf::DTYPE_F16);
  named.name = "My-PHI-3-mini";
  CHECK_THROWS_WITH_AS(model::synth_write(named, dir + "/named.gguf"), doctest::Contains("</s>"), input_error);

  // q4_k_m for phi3: the fused attn_qkv one step up (q5_K) in every layer, as llama.cpp's quantizer.
  model::synth_options mix = tiny(model::ARCH_PHI3, gguf::DTYPE_F16);
  mix.n_layer = 8;
  REQUIRE(model::synth_apply_mixture(mix, "q4_k_m"));
  for (int l = 0; l < 8; ++l) {
    CHECK(model::synth_tensor_type(mix, "blk." + std::to_string(l) + ".attn_qkv.weight") == gguf::DTYPE_Q5_K);
    // use_more_bits for 8 layers: 0, 7, and every third from 1 (3, 6)
    const bool more = l == 0 || l == 7 || l == 3 || l == 6;
    CHECK(model::synth_tensor_type(mix, "blk." + std::to_string(l) + ".ffn_down.weight") ==
          (more ? gguf::DTYPE_Q6_K : gguf::DTYPE_Q4_K));
  }
  model::synth_options mix5 = tiny(model::ARCH_PHI3, gguf::DTYPE_F16);
  REQUIRE(model::synth_apply_mixture(mix5, "q5_k_m"));
  CHECK(model::synth_tensor_type(mix5, "blk.0.attn_qkv.weight") == gguf::DTYPE_Q6_K);

  model::synth_options o = tiny(model::ARCH_LLAMA, gguf::DTYPE_Q8_0);
  o.tied_output = true;
  model::synth_write(o, dir + "/tied.gguf");
  gguf::file tied = gguf::file::open(dir + "/tied.gguf");
  CHECK(tied.find_tensor("output.weight") == nullptr);
  CHECK(model::hparams_from_gguf(tied).tied_output);
  CHECK(model::arch_rope_kind(model::hparams_from_gguf(tied).arch) == model::ROPE_NORM);
}

// The scale rule of engine/model/synth.cpp, restated with libm's sqrt: every matrix N(0, 1/fan_in),
// the projections back into the residual stream a further 1/sqrt(2 n_layer), the output 2.5/sqrt(n_embd),
// an untied token_embd N(0, 1). Widths of the form 4^k and 3 * 4^k are the ones a Newton start outside
// the iteration's basin got wrong (3 * 4^k gave exactly 0: ffn_down of the tiny preset was all zeros).
TEST_CASE("synth: every matrix has the spread its fan-in asks for, at every width") {
  std::string dir = test::scratch_dir("synth_scale");
  struct shape {
    int64_t n_embd, n_ff, n_layer;
  };
  for (shape sh : {shape{256, 768, 2}, shape{192, 1024, 8}, shape{64, 3072, 6}, shape{128, 12288, 1}, shape{96, 320, 22}}) {
    CAPTURE(sh.n_embd);
    CAPTURE(sh.n_ff);
    model::synth_options o = tiny(model::ARCH_LLAMA, gguf::DTYPE_F32);
    o.n_embd = sh.n_embd;
    o.n_ff = sh.n_ff;
    o.n_layer = sh.n_layer;
    o.n_head = 4;
    o.n_head_kv = 2;
    o.n_ctx = 256;
    const std::string path = dir + "/w" + std::to_string(sh.n_embd) + ".gguf";
    model::synth_write(o, path);
    gguf::file f = gguf::file::open(path);
    int checked = 0;
    for (const gguf::tensor_info& ti : f.tensors()) {
      if (ti.ne.size() != 2) continue;
      CAPTURE(ti.name);
      const std::string& n = ti.name;
      auto ends = [&](const std::string& s) { return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0; };
      double want = 1.0 / std::sqrt(double(ti.ne[0]));
      if (n == "token_embd.weight") want = 1.0;
      if (n == "output.weight") want = 2.5 / std::sqrt(double(sh.n_embd));
      if (ends("attn_output.weight") || ends("ffn_down.weight")) want /= std::sqrt(2.0 * double(sh.n_layer));
      const std::vector<float> v = decode(f, ti);
      double ss = 0;
      for (float x : v) ss += double(x) * x;
      const double rms = std::sqrt(ss / double(v.size()));
      // 2048 values or more each (seed 7, fixed): the sample RMS lies within a few percent of the spread.
      CHECK(rms >= 0.93 * want);
      CHECK(rms <= 1.07 * want);
      ++checked;
    }
    CHECK(checked == 2 + 7 * sh.n_layer);
  }
}

TEST_CASE("synth: the same options give the same bytes and another seed does not") {
  std::string dir = test::scratch_dir("synth_det");
  model::synth_options o = tiny(model::ARCH_LLAMA, gguf::DTYPE_Q4_K);
  model::synth_write(o, dir + "/a.gguf");
  model::synth_write(o, dir + "/b.gguf");
  o.seed = 8;
  model::synth_write(o, dir + "/c.gguf");
  CHECK(sha256_file(dir + "/a.gguf") == sha256_file(dir + "/b.gguf"));
  CHECK(sha256_file(dir + "/a.gguf") != sha256_file(dir + "/c.gguf"));
}

TEST_CASE("synth: the thread count that quantizes the rows never changes a byte") {
  // One thread against 3 and 7 (partitions that do not divide the row counts) on K-quant,
  // legacy and float matrices of a mixture; the rows of every tensor must all be quantized, in
  // place, whatever the split.
  std::string dir = test::scratch_dir("synth_threads");
  model::synth_options o = tiny(model::ARCH_LLAMA, gguf::DTYPE_Q4_K);
  o.tensor_types = {{"attn_v", gguf::DTYPE_Q6_K}, {"ffn_down", gguf::DTYPE_Q5_0}, {"output.weight", gguf::DTYPE_F16}};
  o.threads = 1;
  model::synth_write(o, dir + "/t1.gguf");
  for (int64_t t : {3, 7}) {
    CAPTURE(t);
    o.threads = t;
    model::synth_write(o, dir + "/tn.gguf");
    CHECK(sha256_file(dir + "/tn.gguf") == sha256_file(dir + "/t1.gguf"));
  }
}

TEST_CASE("synth: shapes the type cannot pack are refused with the flag to change") {
  model::synth_options o = tiny(model::ARCH_LLAMA, gguf::DTYPE_Q4_K);
  o.n_ff = 172;
  std::string dir = test::scratch_dir("synth_bad");
  CHECK_THROWS_WITH_AS(model::synth_write(o, dir + "/x.gguf"), doctest::Contains("--n-ff = 172"), input_error);
  o = tiny(model::ARCH_LLAMA, gguf::DTYPE_F16);
  o.n_head_kv = 3;
  CHECK_THROWS_WITH_AS(model::synth_write(o, dir + "/x.gguf"), doctest::Contains("--n-head-kv"), input_error);
}

TEST_CASE("synth: --vocab-from copies another file's vocabulary") {
  std::string dir = test::scratch_dir("synth_vocab");
  model::synth_options o = tiny(model::ARCH_LLAMA, gguf::DTYPE_Q8_0);
  o.vocab_from = test::fixture("models/stories260K.gguf");
  model::synth_write(o, dir + "/v.gguf");
  gguf::file f = gguf::file::open(dir + "/v.gguf");
  gguf::file src = gguf::file::open(o.vocab_from);
  CHECK(f.get_strings("tokenizer.ggml.tokens") == src.get_strings("tokenizer.ggml.tokens"));
  CHECK(f.get_string("tokenizer.ggml.model") == "llama");
  CHECK(model::hparams_from_gguf(f).n_vocab == 512);
}

TEST_CASE("synth: --tensor-type writes the named matrices in another type and leaves the rest byte-identical") {
  std::string dir = test::scratch_dir("synth_tensor_type");
  model::synth_options plain = tiny(model::ARCH_LLAMA, gguf::DTYPE_Q4_K);
  model::synth_options mixed = plain;
  mixed.tensor_types = {{"output.weight", gguf::DTYPE_Q6_K},
                        {"attn_v", gguf::DTYPE_Q8_0},
                        {"blk.1.attn_v.weight", gguf::DTYPE_F16}};  // later wins for block 1
  model::synth_write(plain, dir + "/plain.gguf");
  model::synth_write(mixed, dir + "/mixed.gguf");
  gguf::file p = gguf::file::open(dir + "/plain.gguf");
  gguf::file m = gguf::file::open(dir + "/mixed.gguf");
  auto type_of = [&](const char* name) {
    const gguf::tensor_info* t = m.find_tensor(name);
    REQUIRE(t != nullptr);
    return t->type;
  };
  CHECK(type_of("output.weight") == gguf::DTYPE_Q6_K);
  CHECK(type_of("blk.0.attn_v.weight") == gguf::DTYPE_Q8_0);
  CHECK(type_of("blk.1.attn_v.weight") == gguf::DTYPE_F16);
  CHECK(type_of("blk.0.attn_q.weight") == gguf::DTYPE_Q4_K);
  CHECK(type_of("blk.1.ffn_down.weight") == gguf::DTYPE_Q4_K);
  CHECK(type_of("blk.0.attn_norm.weight") == gguf::DTYPE_F32);
  for (const gguf::tensor_info& t : m.tensors()) {
    CAPTURE(t.name);
    const gguf::tensor_info* q = p.find_tensor(t.name);
    REQUIRE(q != nullptr);
    if (t.type == q->type) {  // not overridden: the same bytes as the plain file
      REQUIRE(t.n_bytes == q->n_bytes);
      CHECK(std::memcmp(m.tensor_data(t), p.tensor_data(*q), t.n_bytes) == 0);
    } else {  // overridden: the same values, quantized in its own type
      CHECK(rel_rms(decode(m, t), decode(p, *q)) <= bound(q->type) + bound(t.type));
    }
  }
}

TEST_CASE("synth: --tensor-type is refused when it names nothing or its type cannot pack the rows") {
  std::string dir = test::scratch_dir("synth_tensor_type_bad");
  model::synth_options o = tiny(model::ARCH_LLAMA, gguf::DTYPE_F16);
  o.tensor_types = {{"attn_vv", gguf::DTYPE_Q8_0}};
  CHECK_THROWS_WITH_AS(model::synth_write(o, dir + "/x.gguf"), doctest::Contains("'attn_vv' names no weight matrix"),
                       input_error);
  o.tensor_types = {{"blk.7.attn_v", gguf::DTYPE_Q8_0}};  // only blocks 0 and 1 exist
  CHECK_THROWS_AS(model::synth_write(o, dir + "/x.gguf"), input_error);
  o.tensor_types = {{"ffn_down", gguf::DTYPE_Q4_K}};
  o.n_ff = 160;  // ffn_down's rows are n_ff long: a multiple of 32, not of Q4_K's 256
  CHECK_THROWS_WITH_AS(model::synth_write(o, dir + "/x.gguf"), doctest::Contains("ffn_down.weight has rows of 160"),
                       input_error);
  o.n_ff = 512;
  model::synth_write(o, dir + "/ok.gguf");  // an F16 file with quantized matrices says its quantization version
  gguf::file f = gguf::file::open(dir + "/ok.gguf");
  CHECK(f.find_tensor("blk.0.ffn_down.weight")->type == gguf::DTYPE_Q4_K);
  CHECK(f.get_int("general.quantization_version", -1) == 2);
}

TEST_CASE("synth: the q4_k_m and q5_k_m mixtures put q6_K where llama.cpp's quantizer does") {
  std::string dir = test::scratch_dir("synth_mixture");
  // llama.cpp's rule for 8 layers: more bits for i < 8/8, i >= 7*8/8 and (i - 1) % 3 == 2, i.e.
  // layers 0, 3, 6 and 7 (worked out by hand from llama-quant.cpp's use_more_bits).
  const bool more[8] = {true, false, false, true, false, false, true, true};
  for (const char* name : {"q4_k_m", "q5_k_m"}) {
    CAPTURE(name);
    model::synth_options o = tiny(model::ARCH_LLAMA, gguf::DTYPE_F16);
    o.n_layer = 8;
    o.tensor_types = {{"blk.2.ffn_gate", gguf::DTYPE_Q8_0}};  // given before the mixture: still wins
    REQUIRE(model::synth_apply_mixture(o, name));
    const gguf::dtype base = std::string(name) == "q4_k_m" ? gguf::DTYPE_Q4_K : gguf::DTYPE_Q5_K;
    const std::string path = dir + "/" + name + ".gguf";
    model::synth_write(o, path);
    gguf::file f = gguf::file::open(path);
    CHECK(f.get_int("general.file_type", -1) == (base == gguf::DTYPE_Q4_K ? 15 : 17));
    auto type_of = [&](const std::string& t) {
      const gguf::tensor_info* i = f.find_tensor(t);
      REQUIRE(i != nullptr);
      return i->type;
    };
    CHECK(type_of("output.weight") == gguf::DTYPE_Q6_K);
    CHECK(type_of("token_embd.weight") == base);
    CHECK(type_of("blk.2.ffn_gate.weight") == gguf::DTYPE_Q8_0);
    for (int i = 0; i < 8; ++i) {
      CAPTURE(i);
      const std::string b = "blk." + std::to_string(i) + ".";
      CHECK(type_of(b + "attn_v.weight") == (more[i] ? gguf::DTYPE_Q6_K : base));
      CHECK(type_of(b + "ffn_down.weight") == (more[i] ? gguf::DTYPE_Q6_K : base));
      CHECK(type_of(b + "attn_q.weight") == base);
      CHECK(type_of(b + "ffn_up.weight") == base);
    }
  }
  model::synth_options tied = tiny(model::ARCH_LLAMA, gguf::DTYPE_F16);
  tied.tied_output = true;
  REQUIRE(model::synth_apply_mixture(tied, "q4_k_m"));
  model::synth_write(tied, dir + "/tied.gguf");
  CHECK(gguf::file::open(dir + "/tied.gguf").find_tensor("token_embd.weight")->type == gguf::DTYPE_Q6_K);
  model::synth_options other = tiny(model::ARCH_LLAMA, gguf::DTYPE_F16);
  CHECK_FALSE(model::synth_apply_mixture(other, "q4_k_s"));
  CHECK(other.tensor_types.empty());
}

TEST_CASE("synth: phi3 refuses a head dimension with n_head x head_dim != n_embd (llama.cpp's fused layout)") {
  // llama.cpp's phi3 reads attn_qkv as {n_embd, n_embd + 2 n_embd_gqa} and attn_output as
  // {n_embd, n_embd}: a file whose Q has n_head x key_length != n_embd rows does not load there,
  // so synth, which promises files llama.cpp loads, must refuse it.
  const std::string dir = test::scratch_dir("synth_phi3_head_dim");
  model::synth_options o = tiny(model::ARCH_PHI3, gguf::DTYPE_F16);
  o.head_dim = 32;  // 4 heads of 32: Q 128 rows, n_embd 256
  CHECK_THROWS_WITH_AS(model::synth_write(o, dir + "/hd.gguf"), doctest::Contains("head"), input_error);
  o.head_dim = 64;  // n_embd / n_head: fine
  CHECK_NOTHROW(model::synth_write(o, dir + "/ok.gguf"));
  model::synth_options l = tiny(model::ARCH_LLAMA, gguf::DTYPE_F16);
  l.head_dim = 32;  // llama.cpp's llama takes any key_length
  CHECK_NOTHROW(model::synth_write(l, dir + "/llama.gguf"));
}
