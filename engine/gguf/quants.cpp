// Half-precision conversions, the plain float row types, and the dispatch of quants.h. Which
// types are handled is gguf/weight_types.h's list (and Q8_K); their block sizes are dtype.cpp's.
#include "gguf/quants_internal.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "gguf/weight_types.h"
#include "util/error.h"

namespace detaudit::gguf {

static_assert(std::endian::native == std::endian::little, "block layouts are little-endian");

namespace {

// Shifts v right by `shift` (1..31) bits, rounding to nearest, ties to even.
uint32_t shift_right_rne(uint32_t v, int shift) {
  const uint32_t kept = v >> shift;
  const uint32_t rest = v & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
}

// The types quants reads and writes: the weight types (gguf/weight_types.h) and Q8_K (llama.cpp's
// activation blocks for the K-quants, which the float numerics compare against). Their layouts
// are gguf/dtype.h's.
const dtype_traits* find_layout(dtype t) {
  if (!weight_type_of(t) && t != DTYPE_Q8_K) return nullptr;
  return &dtype_get(t);
}

// Returns the layout of t after checking that n elements are whole blocks of it.
// Throws input_error naming `op`, the type and n otherwise.
const dtype_traits& checked_layout(const char* op, dtype t, int64_t n) {
  const dtype_traits* l = find_layout(t);
  if (!l) {
    throw input_error(std::string(op) + ": type id " + std::to_string(uint32_t(t)) +
                      " is not supported (expected one of " + weight_type_names(" ") + " q8_K)");
  }
  if (n < 0 || n % l->block_size != 0) {
    throw input_error(std::string(op) + ": type " + l->name + " needs a row length that is a " +
                      "non-negative multiple of " + std::to_string(l->block_size) + ", got " +
                      std::to_string(n));
  }
  return *l;
}

}  // namespace

float fp16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: mant * 2^-24. Normalise so that bit 10 is the implicit one.
    int e = -14;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --e;
    }
    bits = sign | (uint32_t(e + 127) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t exp = (bits >> 23) & 0xffu;
  const uint32_t mant = bits & 0x7fffffu;
  if (exp == 0xff) {
    // NaN stays NaN, quieted, keeping the top payload bits (as x86 F16C does).
    return uint16_t(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  }
  const int e = int(exp) - 127;
  if (e > 15) return uint16_t(sign | 0x7c00u);
  if (e >= -14) {
    // Normal half: put the half exponent where the float one was, round away 13 bits; a carry
    // out of the mantissa bumps the exponent, up to inf.
    return uint16_t(sign | shift_right_rne((uint32_t(e + 15) << 23) | mant, 13));
  }
  // Subnormal half: the value in units of 2^-24 is (mant | 1<<23) >> (-e - 1).
  const int shift = -e - 1;
  if (shift > 24) return sign;
  return uint16_t(sign | shift_right_rne(mant | 0x800000u, shift));
}

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

uint16_t f32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

namespace quants_detail {

int round_clamp(float v, int lo, int hi) {
  if (!(v > float(lo))) return lo;
  if (v >= float(hi)) return hi;
  return int(std::nearbyint(v));
}

uint16_t fp16_scale(float d) {
  constexpr float MAX_HALF = 65504.0f;
  if (d > MAX_HALF) d = MAX_HALF;
  if (d < -MAX_HALF) d = -MAX_HALF;
  return f32_to_fp16(d);
}

}  // namespace quants_detail

bool quants_can_quantize(dtype t) { return find_layout(t) != nullptr; }

bool quants_can_dequantize(dtype t) { return find_layout(t) != nullptr; }

void quants_quantize_row(dtype t, const float* src, void* dst, int64_t n) {
  const dtype_traits& l = checked_layout("quants_quantize_row", t, n);
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t n_blocks = n / l.block_size;
  switch (t) {
    case DTYPE_F32:
      if (n > 0) std::memcpy(out, src, size_t(n) * sizeof(float));
      return;
    case DTYPE_F16:
    case DTYPE_BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = t == DTYPE_F16 ? f32_to_fp16(src[i]) : f32_to_bf16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    default:
      break;
  }
  if (quants_detail::legacy_quantize(t, src, out, n_blocks)) return;
  if (quants_detail::k_quantize(t, src, out, n_blocks)) return;
  throw std::logic_error(std::string("quants_quantize_row: no quantizer for ") + l.name);
}

void quants_dequantize_row(dtype t, const void* src, float* dst, int64_t n) {
  const dtype_traits& l = checked_layout("quants_dequantize_row", t, n);
  const auto* in = static_cast<const uint8_t*>(src);
  const int64_t n_blocks = n / l.block_size;
  switch (t) {
    case DTYPE_F32:
      if (n > 0) std::memcpy(dst, in, size_t(n) * sizeof(float));
      return;
    case DTYPE_F16:
    case DTYPE_BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        dst[i] = t == DTYPE_F16 ? fp16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    default:
      break;
  }
  if (quants_detail::legacy_dequantize(t, in, dst, n_blocks)) return;
  if (quants_detail::k_dequantize(t, in, dst, n_blocks)) return;
  throw std::logic_error(std::string("quants_dequantize_row: no dequantizer for ") + l.name);
}

}  // namespace detaudit::gguf
