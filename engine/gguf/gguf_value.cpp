#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"
#include "util/error.h"

namespace detaudit::gguf {

const char* value_type_name(uint32_t t) {
  switch (t) {
    case VALUE_UINT8: return "uint8";
    case VALUE_INT8: return "int8";
    case VALUE_UINT16: return "uint16";
    case VALUE_INT16: return "int16";
    case VALUE_UINT32: return "uint32";
    case VALUE_INT32: return "int32";
    case VALUE_FLOAT32: return "float32";
    case VALUE_BOOL: return "bool";
    case VALUE_STRING: return "string";
    case VALUE_ARRAY: return "array";
    case VALUE_UINT64: return "uint64";
    case VALUE_INT64: return "int64";
    case VALUE_FLOAT64: return "float64";
    default: return nullptr;
  }
}

namespace detail {

uint64_t gguf_value_min_bytes(uint32_t t) {
  switch (t) {
    case VALUE_UINT8:
    case VALUE_INT8:
    case VALUE_BOOL: return 1;
    case VALUE_UINT16:
    case VALUE_INT16: return 2;
    case VALUE_UINT32:
    case VALUE_INT32:
    case VALUE_FLOAT32: return 4;
    case VALUE_UINT64:
    case VALUE_INT64:
    case VALUE_FLOAT64:
    case VALUE_STRING: return 8;
    case VALUE_ARRAY: return 4 + 8;
    default: return 0;
  }
}

}  // namespace detail

value value::of_u32(uint32_t v) {
  value r;
  r.type = VALUE_UINT32;
  r.u = v;
  return r;
}

value value::of_i32(int32_t v) {
  value r;
  r.type = VALUE_INT32;
  r.i = v;
  return r;
}

value value::of_u64(uint64_t v) {
  value r;
  r.type = VALUE_UINT64;
  r.u = v;
  return r;
}

value value::of_f32(float v) {
  value r;
  r.type = VALUE_FLOAT32;
  r.f = v;
  return r;
}

value value::of_bool(bool v) {
  value r;
  r.type = VALUE_BOOL;
  r.u = v ? 1 : 0;
  return r;
}

value value::of_string(std::string v) {
  value r;
  r.type = VALUE_STRING;
  r.s = std::move(v);
  return r;
}

value value::of_array(value_type elem_type, std::vector<value> elems) {
  if (!value_type_name(elem_type)) {
    throw std::invalid_argument("value::of_array: unknown element type " + std::to_string(elem_type));
  }
  for (const value& e : elems) {
    if (e.type != elem_type) {
      throw std::invalid_argument(std::string("value::of_array: element of type ") + value_type_name(e.type) +
                                  " in an array of " + value_type_name(elem_type));
    }
  }
  value r;
  r.type = VALUE_ARRAY;
  r.elem_type = elem_type;
  r.arr = std::move(elems);
  return r;
}

value value::of_strings(const std::vector<std::string>& v) {
  std::vector<value> elems;
  elems.reserve(v.size());
  for (const std::string& s : v) elems.push_back(of_string(s));
  return of_array(VALUE_STRING, std::move(elems));
}

value value::of_f32s(const std::vector<float>& v) {
  std::vector<value> elems;
  elems.reserve(v.size());
  for (float x : v) elems.push_back(of_f32(x));
  return of_array(VALUE_FLOAT32, std::move(elems));
}

value value::of_i32s(const std::vector<int32_t>& v) {
  std::vector<value> elems;
  elems.reserve(v.size());
  for (int32_t x : v) elems.push_back(of_i32(x));
  return of_array(VALUE_INT32, std::move(elems));
}

bool value::is_integer() const {
  switch (type) {
    case VALUE_UINT8:
    case VALUE_INT8:
    case VALUE_UINT16:
    case VALUE_INT16:
    case VALUE_UINT32:
    case VALUE_INT32:
    case VALUE_UINT64:
    case VALUE_INT64: return true;
    default: return false;
  }
}

namespace {

bool is_unsigned(value_type t) {
  return t == VALUE_UINT8 || t == VALUE_UINT16 || t == VALUE_UINT32 || t == VALUE_UINT64;
}

std::string type_label(value_type t) {
  const char* n = value_type_name(t);
  return n ? n : "type " + std::to_string(static_cast<uint32_t>(t));
}

}  // namespace

int64_t value::as_int(std::string_view what) const {
  if (is_integer()) {
    if (is_unsigned(type)) {
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw input_error(std::string(what) + ": value " + std::to_string(u) + " does not fit in int64");
      }
      return static_cast<int64_t>(u);
    }
    return i;
  }
  if (type == VALUE_FLOAT32 || type == VALUE_FLOAT64) {
    if (std::isfinite(f) && std::trunc(f) == f && f >= -0x1p63 && f < 0x1p63) return static_cast<int64_t>(f);
    throw input_error(std::string(what) + ": expected an integer, found " + type_label(type) + " " +
                      std::to_string(f));
  }
  throw input_error(std::string(what) + ": expected an integer, found " + type_label(type));
}

double value::as_double(std::string_view what) const {
  if (type == VALUE_FLOAT32 || type == VALUE_FLOAT64) return f;
  if (is_integer()) return is_unsigned(type) ? static_cast<double>(u) : static_cast<double>(i);
  throw input_error(std::string(what) + ": expected a number, found " + type_label(type));
}

}  // namespace detaudit::gguf
