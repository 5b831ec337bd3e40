// Weight blocks in integer form (engine/numerics/wblock.h) against the float dequantizer
// (gguf/quants.h): on random rows quantized by our quantizer, on random block bytes, and on every
// tensor of the synthetic fixture models.
//
// For the quantized types the integer form evaluated in double (exact: at most 11 + 8 + 6 + 15
// significant bits per product and two products per element) and rounded to float equals ggml's
// float expression bit for bit up to the sign of zero: ggml's products (d * sc) * q are exact in
// float and only its final subtraction rounds; double's 53 bits >= 2 * 24 + 2 make the double
// rounding innocuous. Values are compared with ==, so +0 and -0 (which ggml produces for q = 0
// with d < 0, and the integer form cannot) count as equal.
// F32/F16/BF16 are converted like activations (int16 blocks): not exact, checked against
// quantize_block of the same floats and against half a step of the block grid.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/quants.h"
#include "numerics/wblock.h"
#include "op_cases.h"
#include "test_util.h"
#include "util/error.h"

using namespace detaudit;
using namespace detaudit::numerics;
using gguf::dtype;

namespace {

using rng = detaudit::test::test_rng;

using test::fp16_fields;
using test::is_float_type;

// Decodes every 32-block of a row and compares it with the dequantizer's floats. Returns the
// number of elements checked; reports the first mismatch.
int64_t check_row(dtype t, const uint8_t* row, int64_t n, const std::string& where) {
  std::vector<float> ref(static_cast<size_t>(n));
  gguf::quants_dequantize_row(t, row, ref.data(), n);
  const int64_t nb = (n + QBLOCK - 1) / QBLOCK;
  for (int64_t b = 0; b < nb; ++b) {
    const int n_valid = static_cast<int>(std::min<int64_t>(QBLOCK, n - b * QBLOCK));
    wblock w;
    weight_decode_block(t, row, b, w, n_valid);
    if (is_float_type(t)) {
      int16_t q[QBLOCK];
      const int32_t e = quantize_block(ref.data() + b * QBLOCK, n_valid, q);
      REQUIRE(std::memcmp(q, w.q, sizeof q) == 0);
      REQUIRE(w.d_mant == (e == EXP_ZERO ? 0 : 1));
      if (e != EXP_ZERO) REQUIRE(w.d_exp == e);
      REQUIRE(w.m_mant == 0);
      for (int i = 0; i < n_valid; ++i) {
        const double got = wblock_value(w, i);
        const double want = flush(ref[static_cast<size_t>(b * QBLOCK + i)]);
        const double step = e == EXP_ZERO ? 0.0 : std::ldexp(1.0, e);
        if (std::abs(got - want) > (std::abs(w.q[i]) == QMAX ? step : step / 2)) {
          FAIL_CHECK(where << " block " << b << " element " << i << ": " << got << " vs " << want);
          return 0;
        }
      }
      continue;
    }
    for (int i = 0; i < QBLOCK; ++i) {
      const float got = static_cast<float>(wblock_value(w, i));
      const float want = ref[static_cast<size_t>(b * QBLOCK + i)];
      if (got != want) {
        FAIL_CHECK(where << " block " << b << " element " << i << ": integer form " << got
                         << " vs dequantized " << want);
        return 0;
      }
    }
  }
  return n;
}

}  // namespace

TEST_CASE("wblock: every quantized type agrees with quants_dequantize_row on random rows") {
  rng r{11};
  for (dtype t : test::QUANT_TYPES) {
    const std::string name = gguf::dtype_get(t).name;
    for (int trial = 0; trial < 24; ++trial) {
      const int64_t n = 512;
      std::vector<float> x(static_cast<size_t>(n));
      const float scale = std::ldexp(1.0f, trial % 12 - 8);
      for (auto& v : x) v = scale * r.normal() + (trial % 3 == 0 ? 2.0f * scale : 0.0f);
      if (trial == 5) std::fill(x.begin(), x.end(), 0.0f);
      if (trial == 7) x[3] = 1000.0f * scale;
      std::vector<uint8_t> bytes(gguf::dtype_row_bytes(t, n));
      gguf::quants_quantize_row(t, x.data(), bytes.data(), n);
      CHECK(check_row(t, bytes.data(), n, name + " quantized trial " + std::to_string(trial)) == n);
    }
  }
}

TEST_CASE("wblock: every quantized type agrees with quants_dequantize_row on random bytes") {
  rng r{12};
  for (dtype t : test::QUANT_TYPES) {
    const std::string name = gguf::dtype_get(t).name;
    const int64_t n = 1024;
    const uint64_t row_bytes = gguf::dtype_row_bytes(t, n);
    const auto& tr = gguf::dtype_get(t);
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<uint8_t> bytes(row_bytes);
      for (auto& b : bytes) b = static_cast<uint8_t>(r.next());
      for (uint64_t blk = 0; blk < row_bytes / tr.type_size; ++blk) {
        for (int off : fp16_fields(t)) {
          uint8_t* p = bytes.data() + blk * tr.type_size + off;
          uint16_t h;
          std::memcpy(&h, p, 2);
          if (((h >> 10) & 31) == 31) h = static_cast<uint16_t>(h & ~0x4000);  // finite
          if (trial % 4 == 1) h = static_cast<uint16_t>(h & 0x83ff);            // subnormal
          std::memcpy(p, &h, 2);
        }
        // mxfp4: a scale byte whose values are finite floats (253..255 are refused: test_gpt_oss.cpp)
        if (t == gguf::DTYPE_MXFP4) bytes[blk * tr.type_size] = static_cast<uint8_t>(bytes[blk * tr.type_size] % 253);
      }
      CHECK(check_row(t, bytes.data(), n, name + " random bytes trial " + std::to_string(trial)) == n);
    }
  }
}

TEST_CASE("wblock: f32 f16 bf16 rows become int16 blocks incl partial blocks") {
  rng r{13};
  for (dtype t : test::FLOAT_TYPES) {
    for (int64_t n : {1, 8, 31, 32, 33, 172, 200, 257, 1024}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(r.normal(), static_cast<int>(i % 7) * 3 - 10);
      if (n > 40) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block
      std::vector<uint8_t> bytes(gguf::dtype_row_bytes(t, n));
      gguf::quants_quantize_row(t, x.data(), bytes.data(), n);
      CHECK(check_row(t, bytes.data(), n, std::string(gguf::dtype_get(t).name) + " n=" + std::to_string(n)) == n);
    }
  }
  // A partial block is read only up to n_valid (a row ending exactly at the buffer's end).
  std::vector<float> x(8, 1.5f);
  wblock w;
  weight_decode_block(gguf::DTYPE_F32, reinterpret_cast<const uint8_t*>(x.data()), 0, w, 8);
  CHECK(w.q[0] == 24576);
  CHECK(w.q[8] == 0);
  CHECK(w.d_exp == -14);
}

TEST_CASE("wblock: fp16 scales decode exactly into mant and exp") {
  std::vector<uint8_t> b(34, 0);
  const auto decode = [&](uint16_t h) {
    std::memcpy(b.data(), &h, 2);
    wblock w;
    weight_decode_block(gguf::DTYPE_Q8_0, b.data(), 0, w);
    return std::pair<int, int>(w.d_mant, w.d_exp);
  };
  CHECK(decode(0x3c00) == std::pair<int, int>(1024, -10));    // 1.0 = 1024 * 2^-10
  CHECK(decode(0xbc00) == std::pair<int, int>(-1024, -10));   // -1.0
  CHECK(decode(0x7bff) == std::pair<int, int>(2047, 5));      // 65504
  CHECK(decode(0x0001) == std::pair<int, int>(1, -24));       // smallest subnormal
  CHECK(decode(0x83ff) == std::pair<int, int>(-1023, -24));
  CHECK(decode(0x0400) == std::pair<int, int>(1024, -24));    // smallest normal 2^-14
  CHECK(decode(0x0000).first == 0);
  uint16_t inf = 0x7c00;
  std::memcpy(b.data(), &inf, 2);
  wblock w;
  CHECK_THROWS_AS(weight_decode_block(gguf::DTYPE_Q8_0, b.data(), 0, w), input_error);
  uint16_t nan = 0xfe01;
  std::memcpy(b.data(), &nan, 2);
  CHECK_THROWS_AS(weight_decode_block(gguf::DTYPE_Q8_0, b.data(), 0, w), input_error);
  try {
    weight_decode_block(gguf::DTYPE_IQ2_XS, b.data(), 0, w);
    FAIL("expected input_error");
  } catch (const input_error& e) {
    CHECK(std::string(e.what()).find("iq2_xs") != std::string::npos);
    CHECK(std::string(e.what()).find("expected f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, "
                                     "q5_K, q6_K or mxfp4") != std::string::npos);
  }
  CHECK_THROWS_AS(weight_decode_block(gguf::DTYPE_Q8_K, b.data(), 0, w), input_error);
  std::vector<float> bad(32, 1.0f);
  bad[5] = NAN;
  CHECK_THROWS_AS(weight_decode_block(gguf::DTYPE_F32, reinterpret_cast<const uint8_t*>(bad.data()), 0, w),
                  input_error);
}

TEST_CASE("wblock: an inf written anywhere in a block is refused exactly when the dequantizer gives a non-finite value") {
  // The decode's table of fp16 scale fields (wblock.cpp) against the dequantizer's own reading of
  // the layout: a 0x7c00 (fp16 inf) written at every byte offset of a block, in turn.
  rng r{13};
  for (dtype t : test::QUANT_TYPES) {
    if (t == gguf::DTYPE_MXFP4) continue;  // no fp16 field: its E8M0 scale is checked in test_gpt_oss.cpp
    const auto& tr = gguf::dtype_get(t);
    const std::string name = tr.name;
    const int64_t n = tr.block_size;
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = r.normal() + 0.5f;
    std::vector<uint8_t> block(tr.type_size);
    gguf::quants_quantize_row(t, x.data(), block.data(), n);
    int refused = 0;
    for (uint64_t off = 0; off + 1 < tr.type_size; ++off) {
      std::vector<uint8_t> b = block;
      b[off] = 0x00;
      b[off + 1] = 0x7c;
      std::vector<float> deq(static_cast<size_t>(n));
      gguf::quants_dequantize_row(t, b.data(), deq.data(), n);
      bool finite = true;
      for (float v : deq) finite = finite && std::isfinite(v);
      for (int64_t s = 0; s < n / QBLOCK; ++s) {
        wblock w;
        bool threw = false;
        try {
          weight_decode_block(t, b.data(), s, w);
        } catch (const input_error& e) {
          threw = true;
          CHECK_MESSAGE(std::string(e.what()).find("non-finite fp16") != std::string::npos, name << ": " << e.what());
        }
        CHECK_MESSAGE(threw == !finite, name << " inf at byte " << off << ", slice " << s);
      }
      refused += finite ? 0 : 1;
    }
    CHECK_MESSAGE(refused >= 1, name);  // every type has a scale: the test saw one
  }
}

TEST_CASE("wblock: every tensor of the synthetic fixture models decodes like the dequantizer") {
  const char* files[] = {"tiny-llama-bf16",   "tiny-llama-f16",   "tiny-llama-q2_k",  "tiny-llama-q3_k_m",
                         "tiny-llama-q4_0",   "tiny-llama-q4_1",  "tiny-llama-q4_k_m", "tiny-llama-q5_0",
                         "tiny-llama-q5_1",   "tiny-llama-q5_k_m", "tiny-llama-q6_k",  "tiny-llama-q8_0",
                         "tiny-qwen2-f16",    "tiny-qwen2-q4_0",  "tiny-qwen2-q4_k_m", "tiny-qwen2-q5_k_m",
                         "tiny-qwen2-q6_k",   "tiny-qwen2-q8_0",  "tiny-phi3-f16",    "tiny-phi3-q8_0",
                         "tiny-phi3-q4_k_m"};
  for (const char* f : files) {
    const std::string path = test::generated(std::string("models/synthetic/") + f + ".gguf");
    const gguf::file file = gguf::file::open(path);
    int64_t n_tensors = 0, n_elems = 0;
    for (const gguf::tensor_info& ti : file.tensors()) {
      if (!weight_type_supported(ti.type)) continue;
      const int64_t n = ti.ne[0];
      const int64_t rows = static_cast<int64_t>(ti.n_elements) / n;
      const uint64_t row_bytes = gguf::dtype_row_bytes(ti.type, n);
      const uint8_t* data = file.tensor_data(ti);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t got = check_row(ti.type, data + r * row_bytes, n, std::string(f) + " " + ti.name + " row " + std::to_string(r));
        REQUIRE(got == n);
        n_elems += n;
      }
      ++n_tensors;
    }
    MESSAGE(std::string(f) << ": " << n_tensors << " tensors, " << n_elems << " elements");
    CHECK(n_tensors > 0);
  }
}
