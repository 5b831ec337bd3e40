// GGUF validation: a table of hand-made malformed files, each rejected with its own message, and a
// deterministic corruption sweep over stories260K.gguf (every outcome is a load or an input_error).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::gguf;

namespace {

constexpr uint64_t HUGE_COUNT = 1ull << 60;

struct bytes {
  std::vector<uint8_t> b;

  bytes& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  bytes& u8(uint8_t v) { return raw(&v, 1); }
  bytes& u32(uint32_t v) { return raw(&v, 4); }
  bytes& u64(uint64_t v) { return raw(&v, 8); }
  bytes& str(const std::string& s) { return u64(s.size()).raw(s.data(), s.size()); }
  bytes& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
  bytes& pad(size_t a) { return zeros((a - b.size() % a) % a); }
  bytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(VALUE_UINT32).u32(v); }
  bytes& tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
};

bytes header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  bytes out;
  out.raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
  return out;
}

// A file with one tensor info, padded, followed by data_bytes of data.
std::vector<uint8_t> one_tensor(const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset, size_t data_bytes) {
  return header(3, 1, 0).tensor("w", ne, type, offset).pad(32).zeros(data_bytes).b;
}

std::vector<uint8_t> nested_arrays(int levels) {
  bytes out = header(3, 0, 1).str("a").u32(VALUE_ARRAY);
  for (int k = 1; k < levels; ++k) out.u32(VALUE_ARRAY).u64(1);
  return out.u32(VALUE_UINT8).u64(0).b;
}

// Metadata arrays a0, a1, ... of uint8 with these element counts (all zero bytes).
std::vector<uint8_t> byte_arrays(const std::vector<uint64_t>& counts) {
  bytes out = header(3, 0, counts.size());
  for (size_t i = 0; i < counts.size(); ++i)
    out.str("a" + std::to_string(i)).u32(VALUE_ARRAY).u32(VALUE_UINT8).u64(counts[i]).zeros(counts[i]);
  return out.b;
}

struct bad_case {
  const char* name;
  std::vector<uint8_t> file;
  const char* expect;
};

std::vector<bad_case> bad_cases() {
  const std::string long_name(40, 'n');
  return {
      {"empty file", {}, "unexpected end of file at offset 0 while reading the magic"},
      {"bad magic", bytes().raw("GGML", 4).u32(3).u64(0).u64(0).b, "bad magic at offset 0: expected \"GGUF\", found \"GGML\""},
      {"version 1", header(1, 0, 0).b, "unsupported version 1 at offset 4: expected 2 or 3"},
      {"version 4", header(4, 0, 0).b, "unsupported version 4 at offset 4: expected 2 or 3"},
      {"big-endian", header(0x03000000u, 0, 0).b, "big-endian"},
      {"truncated header", bytes().raw("GGUF", 4).u32(3).u32(0).b,
       "unexpected end of file at offset 8 while reading the tensor count"},
      {"truncated in a key", header(3, 0, 1).u64(20).raw("general.ar", 10).b,
       "unexpected end of file at offset 32 while reading the key of metadata entry 0"},
      {"truncated in a value", header(3, 0, 1).str("a").u32(VALUE_UINT32).u8(1).u8(2).b,
       "unexpected end of file at offset 37 while reading a uint32 value of key 'a'"},
      {"truncated in a tensor info", header(3, 1, 0).str(long_name).u32(2).u64(4).b,
       "unexpected end of file at offset 84 while reading a dimension of tensor 'nnnn"},
      {"huge n_kv", header(3, 0, HUGE_COUNT).zeros(64).b, "metadata count 1152921504606846976 at offset 16 needs at least 13 bytes per entry"},
      {"huge n_tensors", header(3, HUGE_COUNT, 0).zeros(64).b, "tensor count 1152921504606846976 at offset 8 needs at least 32 bytes per tensor info"},
      {"huge string length", header(3, 0, 1).str("a").u32(VALUE_STRING).u64(1ull << 62).raw("xyz", 3).b,
       "a string of 4611686018427387904 bytes"},
      {"huge key length", header(3, 0, 1).u64(UINT64_MAX).zeros(16).b,
       "while reading the key of metadata entry 0: a string of 18446744073709551615 bytes"},
      {"key over 64 KiB", header(3, 0, 1).str(std::string(70000, 'k')).u32(VALUE_UINT8).u8(0).b,
       "the key of metadata entry 0 at offset 24: expected at most 65536 bytes, found a string of 70000 bytes"},
      {"huge array count", header(3, 0, 1).str("a").u32(VALUE_ARRAY).u32(VALUE_UINT32).u64(HUGE_COUNT).zeros(64).b,
       "array count of key 'a' 1152921504606846976 at offset 41 needs at least 4 bytes per uint32 element"},
      {"huge array-of-arrays count", header(3, 0, 1).str("a").u32(VALUE_ARRAY).u32(VALUE_ARRAY).u64(1ull << 40).zeros(64).b,
       "needs at least 12 bytes per array element"},
      {"arrays nested too deep", nested_arrays(9), "arrays nested too deep"},
      {"one array over the element cap", byte_arrays({(1u << 22) + 1}),
       "too many array elements at offset 42 in key 'a0': expected at most 4194304 in the whole file, found 4194305"},
      {"arrays together over the element cap", byte_arrays({1u << 21, 1u << 21, 1}),
       "in key 'a2': expected at most 4194304 in the whole file, found 4194305"},
      {"duplicate key", header(3, 0, 2).kv_u32("x", 1).kv_u32("x", 2).b, "duplicate key 'x' at offset 41"},
      {"unknown value type", header(3, 0, 1).str("a").u32(13).u32(0).b, "unknown value type 13 at offset 33 in key 'a'"},
      {"unknown array element type", header(3, 0, 1).str("a").u32(VALUE_ARRAY).u32(99).u64(0).b,
       "unknown array element type 99 at offset 37 in key 'a'"},
      {"unknown tensor type", one_tensor({32}, 4, 0, 128), "tensor 'w': unknown tensor type 4"},
      {"zero dim", one_tensor({32, 0}, DTYPE_F32, 0, 128), "ne[1] at offset 45: expected a dimension > 0, found 0"},
      {"negative dim", one_tensor({static_cast<uint64_t>(-5)}, DTYPE_F32, 0, 128),
       "ne[0] at offset 37: expected a dimension > 0, found -5"},
      {"n_dims 0", one_tensor({}, DTYPE_F32, 0, 128), "tensor 'w': n_dims at offset 33: expected 1 to 4, found 0"},
      {"n_dims 5", one_tensor({1, 1, 1, 1, 1}, DTYPE_F32, 0, 128), "n_dims at offset 33: expected 1 to 4, found 5"},
      {"element count overflow", one_tensor({1ull << 32, 1ull << 32}, DTYPE_F32, 0, 128), "element count overflows int64"},
      {"byte size overflow", one_tensor({1ull << 62}, DTYPE_F32, 0, 128), "byte size overflows 64 bits"},
      {"ne[0] not a block multiple", one_tensor({33}, DTYPE_Q4_0, 0, 128),
       "expected ne[0] to be a multiple of the q4_0 block size 32, found 33"},
      {"tensor data past EOF", one_tensor({16}, DTYPE_F32, 0, 32),
       "unexpected end of file at offset 96 while reading the data of tensor 'w' (info at offset 24): expected 64 bytes"},
      {"tensor offset past EOF", one_tensor({8}, DTYPE_F32, UINT64_MAX - 31, 32),
       "expected 32 bytes at data offset 18446744073709551584, found a data section of 32 bytes from offset 64"},
      {"no data section", header(3, 1, 0).tensor("w", {8}, DTYPE_F32, 0).b,
       "unexpected end of file at offset 57 while reading the data of tensor 'w'"},
      {"misaligned tensor offset", one_tensor({8}, DTYPE_F32, 16, 128),
       "tensor 'w': data offset 16 at offset 49: expected a multiple of the alignment 32"},
      {"alignment 0", header(3, 0, 1).kv_u32("general.alignment", 0).b,
       "general.alignment at offset 24: expected a nonzero power of two, found 0"},
      {"alignment 48", header(3, 0, 1).kv_u32("general.alignment", 48).b, "expected a nonzero power of two, found 48"},
      {"alignment of the wrong type", header(3, 0, 1).str("general.alignment").u32(VALUE_UINT64).u64(32).b,
       "general.alignment at offset 24: expected a uint32, found uint64"},
      {"duplicate tensor name",
       header(3, 2, 0).tensor("w", {8}, DTYPE_F32, 0).tensor("w", {8}, DTYPE_F32, 32).pad(32).zeros(64).b,
       "duplicate tensor name 'w' at offset 57"},
      {"overlapping tensors",
       header(3, 2, 0).tensor("a", {16}, DTYPE_F32, 0).tensor("b", {8}, DTYPE_F32, 32).pad(32).zeros(128).b,
       "tensor 'b' at data offset 32 overlaps tensor 'a'"},
      {"unprintable key", header(3, 0, 2).kv_u32("\x01\xff", 1).kv_u32("\x01\xff", 1).b, "duplicate key '\\x01\\xff'"},
  };
}

}  // namespace

TEST_CASE("gguf: malformed files are rejected with a specific message") {
  for (const bad_case& c : bad_cases()) {
    CAPTURE(c.name);
    CHECK_THROWS_WITH_AS(file::from_memory(c.file, "bad.gguf"), doctest::Contains(c.expect), input_error);
    CHECK_THROWS_WITH_AS(file::from_memory(c.file, "bad.gguf"), doctest::Contains("bad.gguf: "), input_error);
  }
}

TEST_CASE("gguf: edge cases that must load") {
  SUBCASE("vocab-only file ending right after the metadata") {
    file f = file::from_memory(header(3, 0, 1).kv_u32("n", 5).b, "vocab.gguf");
    CHECK(f.size() == 41);
    CHECK(f.data_offset() == 64);
    CHECK(f.tensors().empty());
  }
  SUBCASE("version 2") { CHECK(file::from_memory(header(2, 0, 0).b, "v2.gguf").version() == 2); }
  SUBCASE("arrays nested eight deep") {
    file f = file::from_memory(nested_arrays(8), "deep.gguf");
    CHECK(f.find("a")->arr[0].arr[0].arr[0].arr[0].arr[0].arr[0].arr[0].elem_type == VALUE_UINT8);
  }
  SUBCASE("alignment 64") {
    bytes b = header(3, 2, 1).kv_u32("general.alignment", 64);
    b.tensor("a", {4}, DTYPE_F32, 0).tensor("b", {4}, DTYPE_F32, 64).pad(64).zeros(80);
    file f = file::from_memory(b.b, "a64.gguf");
    CHECK(f.alignment() == 64);
    CHECK(f.data_offset() % 64 == 0);
    CHECK(f.tensor_data(f.tensors()[1]) == f.data() + f.data_offset() + 64);
  }
  SUBCASE("unpadded last tensor") {
    file f = file::from_memory(one_tensor({3}, DTYPE_F32, 0, 12), "tight.gguf");
    CHECK(f.tensors()[0].n_bytes == 12);
  }
}

namespace {

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct sweep_stats {
  int loaded = 0;
  int rejected = 0;
};

// Loads a corrupted copy; anything but success or input_error fails the test. Returns the
// input_error's message, or "" when the copy loaded.
std::string try_load(std::vector<uint8_t> b, const std::string& what, sweep_stats& st) {
  try {
    file::from_memory(std::move(b), what);
    ++st.loaded;
    return "";
  } catch (const input_error& e) {
    CHECK_MESSAGE(std::string(e.what()).rfind(what + ": ", 0) == 0, e.what());
    ++st.rejected;
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK(what << ": unexpected " << typeid(e).name() << ": " << e.what());
  } catch (...) {
    FAIL_CHECK(what << ": unexpected non-standard exception");
  }
  return "(unexpected exception)";
}

uint64_t payload_bytes(const value& v) {
  switch (v.type) {
    case VALUE_UINT8:
    case VALUE_INT8:
    case VALUE_BOOL: return 1;
    case VALUE_UINT16:
    case VALUE_INT16: return 2;
    case VALUE_UINT32:
    case VALUE_INT32:
    case VALUE_FLOAT32: return 4;
    case VALUE_STRING: return 8 + v.s.size();
    case VALUE_ARRAY: {
      uint64_t n = 4 + 8;
      for (const value& e : v.arr) n += payload_bytes(e);
      return n;
    }
    default: return 8;
  }
}

// Offsets of every u64 length, count, dimension and data offset in the header, metadata and infos.
std::vector<uint64_t> u64_field_offsets(const file& f) {
  std::vector<uint64_t> out = {8, 16};
  uint64_t pos = 24;
  for (const kv& e : f.metadata()) {
    out.push_back(pos);
    uint64_t val = pos + 8 + e.key.size() + 4;
    if (e.val.type == VALUE_STRING) out.push_back(val);
    if (e.val.type == VALUE_ARRAY) out.push_back(val + 4);
    pos = val + payload_bytes(e.val);
  }
  for (const tensor_info& t : f.tensors()) {
    out.push_back(t.info_offset);
    uint64_t dims = t.info_offset + 8 + t.name.size() + 4;
    for (size_t d = 0; d < t.ne.size(); ++d) out.push_back(dims + 8 * d);
    out.push_back(dims + 8 * t.ne.size() + 4);
  }
  return out;
}

}  // namespace

TEST_CASE("gguf: corruption sweep over stories260K") {
  const std::vector<uint8_t> orig = read_all(test::fixture("models/stories260K.gguf"));
  const file ref = file::from_memory(orig, "stories260K");
  uint64_t data_end = ref.data_offset();
  for (const tensor_info& t : ref.tensors()) data_end = std::max(data_end, ref.data_offset() + t.offset + t.n_bytes);
  REQUIRE(data_end <= orig.size());
  std::mt19937_64 rng(0x6767756620737765ull);
  sweep_stats st;

  auto truncate = [&](uint64_t len) {
    std::vector<uint8_t> b(orig.begin(), orig.begin() + static_cast<std::ptrdiff_t>(len));
    std::string what = "truncated at " + std::to_string(len);
    std::string err = try_load(std::move(b), what, st);
    if (len < data_end) CHECK_MESSAGE(!err.empty(), what << " loaded although tensor data ends at " << data_end);
    if (!err.empty()) CHECK_MESSAGE(err.find("unexpected end of file at offset ") != std::string::npos, err);
  };
  for (uint64_t len = 0; len < 2048; ++len) truncate(len);
  for (int k = 0; k < 300; ++k) truncate(rng() % orig.size());
  for (uint64_t len = data_end - 64; len <= orig.size(); ++len) truncate(len);

  for (int k = 0; k < 600; ++k) {
    std::vector<uint8_t> b = orig;
    uint64_t at = rng() % ref.data_offset();
    b[at] ^= static_cast<uint8_t>(1 + rng() % 255);
    try_load(std::move(b), "byte flipped at " + std::to_string(at), st);
  }

  const uint64_t huge[] = {HUGE_COUNT, 1ull << 63, UINT64_MAX, UINT64_MAX - 7, 1ull << 32, 0};
  for (uint64_t at : u64_field_offsets(ref)) {
    for (uint64_t h : huge) {
      std::vector<uint8_t> b = orig;
      std::memcpy(b.data() + at, &h, 8);
      try_load(std::move(b), "u64 at " + std::to_string(at) + " set to " + std::to_string(h), st);
    }
  }
  MESSAGE("corruption sweep: " << st.loaded << " loaded, " << st.rejected << " rejected");
  CHECK(st.rejected > 2000);
}
