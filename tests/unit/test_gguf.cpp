// GGUF reader and writer: every fixture loads, typed getters, dtype table, writer round trip.
// Malformed files and the corruption sweep are in test_gguf_malformed.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gguf/dtype.h"
#include "gguf/gguf.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::gguf;

namespace {

// The public fixture files (models/, vocab/) and the synthetic models the build generates: the
// same set whether the public files come from ../shared or from a stranger's download.
std::vector<std::string> all_fixture_ggufs() {
  std::vector<std::string> out;
  const std::filesystem::path root = std::filesystem::path(test::fixture("models/stories260K.gguf")).parent_path().parent_path();
  const std::filesystem::path generated = test::generated("models/synthetic");
  for (const std::filesystem::path& dir : {root / "models", root / "vocab", generated}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      const std::string p = e.path().string();
      if (e.is_regular_file() && e.path().extension() == ".gguf" && std::find(out.begin(), out.end(), p) == out.end())
        out.push_back(p);
    }
  }
  return out;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

value scalar(value_type t, uint64_t u, int64_t i = 0, double f = 0) {
  value v;
  v.type = t;
  v.u = u;
  v.i = i;
  v.f = f;
  return v;
}

bool same_value(const value& a, const value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case VALUE_STRING: return a.s == b.s;
    case VALUE_FLOAT32:
    case VALUE_FLOAT64: return std::memcmp(&a.f, &b.f, sizeof(double)) == 0;
    case VALUE_ARRAY:
      if (a.elem_type != b.elem_type || a.arr.size() != b.arr.size()) return false;
      for (size_t k = 0; k < a.arr.size(); ++k) {
        if (!same_value(a.arr[k], b.arr[k])) return false;
      }
      return true;
    default: return a.u == b.u && a.i == b.i;
  }
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

}  // namespace

TEST_CASE("gguf: every fixture GGUF loads and its tensors lie inside the file") {
  std::vector<std::string> paths = all_fixture_ggufs();
  REQUIRE(paths.size() >= 20);
  for (const std::string& p : paths) {
    CAPTURE(p);
    file f = file::open(p);
    CHECK((f.version() == 2 || f.version() == 3));
    CHECK(f.find("general.architecture") != nullptr);
    for (const tensor_info& t : f.tensors()) {
      CHECK(f.tensor_data(t) >= f.data() + f.data_offset());
      CHECK(f.tensor_data(t) + t.n_bytes <= f.data() + f.size());
      CHECK(f.find_tensor(t.name) == &t);
    }
  }
}

TEST_CASE("gguf: stories260K header, metadata and tensors") {
  file f = file::open(test::fixture("models/stories260K.gguf"));
  CHECK(f.version() == 3);
  CHECK(f.tensors().size() == 48);
  CHECK(f.alignment() == 32);
  CHECK(f.data_offset() % 32 == 0);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_int("llama.block_count") == 5);
  CHECK(f.get_strings("tokenizer.ggml.tokens").size() == 512);
  CHECK(f.get_f32s("tokenizer.ggml.scores").size() == 512);
  CHECK(f.get_i32s("tokenizer.ggml.token_type").size() == 512);
  CHECK(f.get_float("llama.attention.layer_norm_rms_epsilon") > 0);
  const tensor_info* emb = f.find_tensor("token_embd.weight");
  REQUIRE(emb != nullptr);
  CHECK(emb->ne.size() == 2);
  CHECK(emb->ne[1] == 512);
  CHECK(emb->n_elements == static_cast<uint64_t>(emb->ne[0] * emb->ne[1]));
  CHECK(emb->n_bytes == dtype_row_bytes(emb->type, emb->ne[0]) * 512);
  CHECK(f.find_tensor("no.such.tensor") == nullptr);
}

TEST_CASE("gguf: open and from_memory agree") {
  std::string path = test::fixture("models/stories260K.gguf");
  file a = file::open(path);
  file b = file::from_memory(read_all(path), "stories");
  CHECK(b.path() == "stories");
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0);
  CHECK(a.data_offset() == b.data_offset());
  REQUIRE(a.metadata().size() == b.metadata().size());
  for (size_t k = 0; k < a.metadata().size(); ++k) CHECK(same_value(a.metadata()[k].val, b.metadata()[k].val));
}

TEST_CASE("gguf: vocab-only gpt-2 file loads without tensors or padding") {
  file f = file::open(test::fixture("vocab/ggml-vocab-gpt-2.gguf"));
  CHECK(f.tensors().empty());
  CHECK(f.get_strings("tokenizer.ggml.tokens").size() == 50257);
  CHECK(f.get_strings("tokenizer.ggml.merges").size() == 50000);
  CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
}

TEST_CASE("gguf: typed getters report missing keys and wrong types") {
  writer w;
  w.set("s", value::of_string("text"));
  w.set("n", value::of_u32(7));
  w.set("big", value::of_u64(UINT64_MAX));
  w.set("neg", value::of_i32(-3));
  w.set("x", value::of_f32(0.5f));
  w.set("b", value::of_bool(true));
  w.set("ints", value::of_i32s({1, -2, 3}));
  w.set("u64s", value::of_array(VALUE_UINT64, {value::of_u64(1), value::of_u64(1ull << 40)}));
  file f = file::from_memory(w.to_bytes(), "getters.gguf");

  CHECK(f.get_string("s") == "text");
  CHECK(f.get_string("missing", "dflt") == "dflt");
  CHECK(f.get_int("n") == 7);
  CHECK(f.get_int("neg") == -3);
  CHECK(f.get_int("missing", 42) == 42);
  CHECK(f.get_float("x") == 0.5);
  CHECK(f.get_float("n") == 7.0);
  CHECK(f.get_float("missing", 1.5) == 1.5);
  CHECK(f.get_bool("b", false));
  CHECK(f.get_bool("missing", true));
  CHECK(f.get_i32s("ints") == std::vector<int32_t>{1, -2, 3});

  CHECK_THROWS_WITH_AS(f.get_int("s"), doctest::Contains("key 's': expected an integer, found string"), input_error);
  CHECK_THROWS_WITH_AS(f.get_int("s", 1), doctest::Contains("expected an integer, found string"), input_error);
  CHECK_THROWS_WITH_AS(f.get_int("missing"), doctest::Contains("getters.gguf: key 'missing'"), input_error);
  CHECK_THROWS_WITH_AS(f.get_int("big"), doctest::Contains("does not fit in int64"), input_error);
  CHECK_THROWS_WITH_AS(f.get_string("n"), doctest::Contains("expected a string, found uint32"), input_error);
  CHECK_THROWS_WITH_AS(f.get_float("s"), doctest::Contains("expected a number, found string"), input_error);
  CHECK_THROWS_WITH_AS(f.get_bool("n", false), doctest::Contains("expected a bool, found uint32"), input_error);
  CHECK_THROWS_WITH_AS(f.get_strings("ints"), doctest::Contains("found array of int32"), input_error);
  CHECK_THROWS_WITH_AS(f.get_strings("missing"), doctest::Contains("no such key"), input_error);
  CHECK_THROWS_WITH_AS(f.get_f32s("n"), doctest::Contains("expected an array of float32, found uint32"), input_error);
  CHECK_THROWS_WITH_AS(f.get_i32s("u64s"), doctest::Contains("expected an int32, found 1099511627776"), input_error);
}

TEST_CASE("gguf: value helpers") {
  CHECK(std::string(value_type_name(VALUE_FLOAT64)) == "float64");
  CHECK(value_type_name(13) == nullptr);
  CHECK(value::of_u32(5).as_int("k") == 5);
  CHECK(value::of_f32(3.0f).as_int("k") == 3);
  CHECK(value::of_i32(-4).as_double("k") == -4.0);
  CHECK_THROWS_WITH_AS(value::of_f32(2.5f).as_int("key 'r'"), doctest::Contains("key 'r': expected an integer"),
                       input_error);
  CHECK_THROWS_WITH_AS(value::of_string("a").as_double("key 's'"), doctest::Contains("expected a number, found string"),
                       input_error);
  CHECK_FALSE(value::of_bool(true).is_integer());
  CHECK(value::of_u64(1).is_integer());
  CHECK_THROWS_AS(value::of_array(VALUE_INT32, {value::of_u32(1)}), std::invalid_argument);
}

TEST_CASE("gguf: dtype table") {
  struct row {
    dtype t;
    const char* name;
    int64_t block;
    uint64_t size;
  };
  const row rows[] = {
      {DTYPE_F32, "f32", 1, 4},          {DTYPE_F16, "f16", 1, 2},          {DTYPE_BF16, "bf16", 1, 2},
      {DTYPE_Q4_0, "q4_0", 32, 18},      {DTYPE_Q4_1, "q4_1", 32, 20},      {DTYPE_Q5_0, "q5_0", 32, 22},
      {DTYPE_Q5_1, "q5_1", 32, 24},      {DTYPE_Q8_0, "q8_0", 32, 34},      {DTYPE_Q8_1, "q8_1", 32, 36},
      {DTYPE_Q2_K, "q2_K", 256, 84},     {DTYPE_Q3_K, "q3_K", 256, 110},    {DTYPE_Q4_K, "q4_K", 256, 144},
      {DTYPE_Q5_K, "q5_K", 256, 176},    {DTYPE_Q6_K, "q6_K", 256, 210},    {DTYPE_Q8_K, "q8_K", 256, 292},
      {DTYPE_IQ2_XXS, "iq2_xxs", 256, 66}, {DTYPE_IQ2_XS, "iq2_xs", 256, 74}, {DTYPE_IQ3_XXS, "iq3_xxs", 256, 98},
      {DTYPE_IQ1_S, "iq1_s", 256, 50},   {DTYPE_IQ4_NL, "iq4_nl", 32, 18},  {DTYPE_IQ3_S, "iq3_s", 256, 110},
      {DTYPE_IQ2_S, "iq2_s", 256, 82},   {DTYPE_IQ4_XS, "iq4_xs", 256, 136}, {DTYPE_I8, "i8", 1, 1},
      {DTYPE_I16, "i16", 1, 2},          {DTYPE_I32, "i32", 1, 4},          {DTYPE_I64, "i64", 1, 8},
      {DTYPE_F64, "f64", 1, 8},          {DTYPE_IQ1_M, "iq1_m", 256, 56},   {DTYPE_TQ1_0, "tq1_0", 256, 54},
      {DTYPE_TQ2_0, "tq2_0", 256, 66},   {DTYPE_MXFP4, "mxfp4", 32, 17},
  };
  for (const row& r : rows) {
    CAPTURE(r.name);
    const dtype_traits* t = dtype_find(r.t);
    REQUIRE(t != nullptr);
    CHECK(std::string(t->name) == r.name);
    CHECK(t->block_size == r.block);
    CHECK(t->type_size == r.size);
    CHECK(dtype_from_name(r.name) == t);
    CHECK(&dtype_get(r.t) == t);
  }
  CHECK(dtype_from_name("Q4_K") == dtype_find(DTYPE_Q4_K));
  CHECK(dtype_from_name("IQ2_XXS") == dtype_find(DTYPE_IQ2_XXS));
  CHECK(dtype_from_name("q4_k_m") == nullptr);
  for (uint32_t retired : {4u, 5u, 31u, 32u, 33u, 36u, 1000u}) CHECK(dtype_find(retired) == nullptr);
  CHECK_THROWS_AS(dtype_get(static_cast<dtype>(4)), std::logic_error);
  CHECK(dtype_row_bytes(DTYPE_Q4_0, 64) == 36);
  CHECK(dtype_row_bytes(DTYPE_Q6_K, 512) == 420);
  CHECK(dtype_row_bytes(DTYPE_F16, 7) == 14);
  CHECK_THROWS_WITH_AS(dtype_row_bytes(DTYPE_Q4_0, 33), doctest::Contains("block size 32"), input_error);
}

namespace {

value every_value_type() {
  std::vector<value> scalars = {
      scalar(VALUE_UINT8, 250),           scalar(VALUE_INT8, 0, -120),   scalar(VALUE_UINT16, 65000),
      scalar(VALUE_INT16, 0, -32000),     value::of_u32(4000000000u),   value::of_i32(-2000000000),
      value::of_f32(-1.25f),              value::of_bool(true),          value::of_string(std::string("a\0b\xc3\xa9", 5)),
      value::of_u64(UINT64_MAX),          scalar(VALUE_INT64, 0, INT64_MIN), scalar(VALUE_FLOAT64, 0, 0, 1e300),
  };
  std::vector<value> arrays;
  for (const value& s : scalars) arrays.push_back(value::of_array(s.type, {s, s}));
  arrays.push_back(value::of_array(VALUE_UINT8, {}));
  std::vector<value> nested = {value::of_array(VALUE_ARRAY, {}), value::of_array(VALUE_ARRAY, arrays)};
  return value::of_array(VALUE_ARRAY, nested);
}

}  // namespace

TEST_CASE("gguf: writer round trip of every value type and several dtypes") {
  for (uint64_t alignment : {32ull, 64ull, 1ull}) {
    CAPTURE(alignment);
    writer w(alignment);
    value nested = every_value_type();
    w.set("general.architecture", value::of_string("llama"));
    w.set("nested", nested);
    for (const value& a : nested.arr[1].arr) w.set("scalar." + std::string(value_type_name(a.elem_type)) +
                                                       std::to_string(a.arr.size()), a.arr.empty() ? a : a.arr[0]);
    w.set("empty_strings", value::of_strings({}));
    struct spec {
      const char* name;
      dtype t;
      std::vector<int64_t> ne;
    };
    const spec specs[] = {{"a", DTYPE_F32, {3, 5}},    {"b", DTYPE_F16, {7}},  {"c", DTYPE_Q4_0, {64, 3}},
                          {"d", DTYPE_BF16, {1, 1, 1, 1}}, {"e", DTYPE_Q6_K, {256, 2}}, {"f", DTYPE_I8, {13}}};
    std::vector<std::vector<uint8_t>> datas;
    for (const spec& s : specs) {
      uint64_t n = dtype_row_bytes(s.t, s.ne[0]);
      for (size_t d = 1; d < s.ne.size(); ++d) n *= static_cast<uint64_t>(s.ne[d]);
      datas.push_back(random_bytes(n, datas.size() + 1));
      w.add_tensor(s.name, s.t, s.ne, datas.back().data(), n);
    }
    std::vector<uint8_t> bytes = w.to_bytes();
    file f = file::from_memory(bytes, "roundtrip.gguf");
    CHECK(f.version() == 3);
    CHECK(f.alignment() == alignment);
    CHECK(f.size() % alignment == 0);
    CHECK(f.get_int("general.alignment", 32) == static_cast<int64_t>(alignment));
    REQUIRE(f.find("nested") != nullptr);
    CHECK(same_value(*f.find("nested"), nested));
    CHECK(f.metadata()[0].key == "general.architecture");
    CHECK(f.metadata()[1].key == "nested");
    REQUIRE(f.tensors().size() == std::size(specs));
    for (size_t k = 0; k < std::size(specs); ++k) {
      const tensor_info& t = f.tensors()[k];
      CAPTURE(t.name);
      CHECK(t.name == specs[k].name);
      CHECK(t.type == specs[k].t);
      CHECK(t.ne == specs[k].ne);
      CHECK(t.offset % alignment == 0);
      CHECK((f.data_offset() + t.offset) % alignment == 0);
      REQUIRE(t.n_bytes == datas[k].size());
      CHECK(std::memcmp(f.tensor_data(t), datas[k].data(), t.n_bytes) == 0);
    }
  }
}

TEST_CASE("gguf: writer reproduces every fixture byte for byte") {
  for (const std::string& p : all_fixture_ggufs()) {
    CAPTURE(p);
    file src = file::open(p);
    writer w(src.alignment());
    for (const kv& e : src.metadata()) w.set(e.key, e.val);
    for (const tensor_info& t : src.tensors()) w.add_tensor(t.name, t.type, t.ne, src.tensor_data(t), t.n_bytes);
    std::vector<uint8_t> out = w.to_bytes();
    REQUIRE(out.size() >= src.size());
    CHECK(std::memcmp(out.data(), src.data(), src.size()) == 0);
    if (!src.tensors().empty()) CHECK(out.size() == src.size());
    CHECK(out.size() - src.size() < src.alignment());
    CHECK(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(src.size()), out.end(), [](uint8_t b) { return b == 0; }));
  }
}

TEST_CASE("gguf: writer writes stories260K to a file that reads back the same") {
  file src = file::open(test::fixture("models/stories260K.gguf"));
  writer w(src.alignment());
  for (const kv& e : src.metadata()) w.set(e.key, e.val);
  for (const tensor_info& t : src.tensors()) w.add_tensor(t.name, t.type, t.ne, src.tensor_data(t), t.n_bytes);
  std::string path = test::scratch_dir("gguf_rewrite") + "/stories.gguf";
  w.write(path);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  std::vector<uint8_t> written = read_all(path);
  CHECK(written == w.to_bytes());
  file back = file::open(path);
  REQUIRE(back.metadata().size() == src.metadata().size());
  for (size_t k = 0; k < src.metadata().size(); ++k) {
    CHECK(back.metadata()[k].key == src.metadata()[k].key);
    CHECK(same_value(back.metadata()[k].val, src.metadata()[k].val));
  }
  REQUIRE(back.tensors().size() == src.tensors().size());
  for (size_t k = 0; k < src.tensors().size(); ++k) {
    const tensor_info& a = src.tensors()[k];
    const tensor_info& b = back.tensors()[k];
    CHECK(a.name == b.name);
    CHECK(a.ne == b.ne);
    CHECK(a.offset == b.offset);
    REQUIRE(a.n_bytes == b.n_bytes);
    CHECK(std::memcmp(src.tensor_data(a), back.tensor_data(b), a.n_bytes) == 0);
  }
}

TEST_CASE("gguf: writer rejects misuse") {
  writer w;
  w.set("k", value::of_u32(1));
  CHECK_THROWS_AS(w.set("k", value::of_u32(2)), std::invalid_argument);
  CHECK_THROWS_AS(w.set("general.alignment", value::of_u32(64)), std::invalid_argument);
  value deep = value::of_array(VALUE_UINT8, {});
  for (int k = 0; k < 8; ++k) deep = value::of_array(VALUE_ARRAY, {deep});
  CHECK_THROWS_AS(w.set("deep", deep), std::invalid_argument);
  float x[4] = {};
  CHECK_THROWS_AS(w.add_tensor("t", DTYPE_F32, {4}, x, 8), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("t", DTYPE_F32, {0}, x, 0), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("t", DTYPE_F32, {1, 1, 1, 1, 1}, x, 4), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor(std::string(64, 'n'), DTYPE_F32, {4}, x, 16), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("t", DTYPE_Q4_0, {4}, x, 16), input_error);
  w.add_tensor("t", DTYPE_F32, {4}, x, 16);
  CHECK_THROWS_AS(w.add_tensor("t", DTYPE_F32, {4}, x, 16), std::invalid_argument);
  CHECK_THROWS_AS(writer(48), std::invalid_argument);
  CHECK_THROWS_AS(writer(0), std::invalid_argument);
}

TEST_CASE("gguf: I/O errors are input_errors naming the path") {
  std::string dir = test::scratch_dir("gguf_io");
  CHECK_THROWS_WITH_AS(file::open(dir + "/missing.gguf"), doctest::Contains("missing.gguf: cannot open"), input_error);
  CHECK_THROWS_WITH_AS(file::open(dir), doctest::Contains("expected a regular file"), input_error);
  { std::ofstream(dir + "/empty.gguf"); }
  CHECK_THROWS_WITH_AS(file::open(dir + "/empty.gguf"), doctest::Contains("empty.gguf: unexpected end of file at offset 0"),
                       input_error);
  writer w;
  CHECK_THROWS_WITH_AS(w.write(dir + "/no/such/dir/out.gguf"), doctest::Contains("out.gguf.tmp: cannot create"),
                       input_error);
}
