#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"
#include "util/error.h"

namespace detaudit::gguf {

namespace {

// llama.cpp refuses tensor names of GGML_MAX_NAME (64) bytes or more.
constexpr size_t MAX_TENSOR_NAME_BYTES = 63;

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

void put_payload(std::vector<uint8_t>& out, const value& v) {
  switch (v.type) {
    case VALUE_UINT8: put<uint8_t>(out, static_cast<uint8_t>(v.u)); break;
    case VALUE_INT8: put<int8_t>(out, static_cast<int8_t>(v.i)); break;
    case VALUE_UINT16: put<uint16_t>(out, static_cast<uint16_t>(v.u)); break;
    case VALUE_INT16: put<int16_t>(out, static_cast<int16_t>(v.i)); break;
    case VALUE_UINT32: put<uint32_t>(out, static_cast<uint32_t>(v.u)); break;
    case VALUE_INT32: put<int32_t>(out, static_cast<int32_t>(v.i)); break;
    case VALUE_UINT64: put<uint64_t>(out, v.u); break;
    case VALUE_INT64: put<int64_t>(out, v.i); break;
    case VALUE_FLOAT32: put<float>(out, static_cast<float>(v.f)); break;
    case VALUE_FLOAT64: put<double>(out, v.f); break;
    case VALUE_BOOL: put<uint8_t>(out, v.u != 0 ? 1 : 0); break;
    case VALUE_STRING: put_string(out, v.s); break;
    case VALUE_ARRAY:
      put<uint32_t>(out, v.elem_type);
      put<uint64_t>(out, v.arr.size());
      for (const value& e : v.arr) put_payload(out, e);
      break;
  }
}

void check_value(const value& v, const std::string& key, int depth) {
  if (!value_type_name(v.type)) throw std::invalid_argument("gguf writer: key '" + key + "': unknown value type");
  if (v.type != VALUE_ARRAY) return;
  if (depth + 1 > detail::MAX_ARRAY_DEPTH) {
    throw std::invalid_argument("gguf writer: key '" + key + "': arrays nested deeper than " +
                                std::to_string(detail::MAX_ARRAY_DEPTH) + " levels");
  }
  if (!value_type_name(v.elem_type)) throw std::invalid_argument("gguf writer: key '" + key + "': unknown element type");
  for (const value& e : v.arr) {
    if (e.type != v.elem_type) {
      throw std::invalid_argument("gguf writer: key '" + key + "': array of " + value_type_name(v.elem_type) +
                                  " holds a " + (value_type_name(e.type) ? value_type_name(e.type) : "?"));
    }
    check_value(e, key, depth + 1);
  }
}

uint64_t align_or_throw(uint64_t x, uint64_t a) {
  uint64_t r = 0;
  if (!detail::gguf_align_up(x, a, &r)) throw std::invalid_argument("gguf writer: file size overflows");
  return r;
}

uint64_t expected_bytes(const std::string& name, dtype type, const std::vector<int64_t>& ne) {
  if (ne.empty() || ne.size() > detail::MAX_DIMS) {
    throw std::invalid_argument("gguf writer: tensor '" + name + "': expected 1 to 4 dimensions, found " +
                                std::to_string(ne.size()));
  }
  for (int64_t d : ne) {
    if (d <= 0) throw std::invalid_argument("gguf writer: tensor '" + name + "': dimension " + std::to_string(d));
  }
  uint64_t bytes = dtype_row_bytes(type, ne[0]);
  for (size_t d = 1; d < ne.size(); ++d) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(ne[d]), &bytes)) {
      throw std::invalid_argument("gguf writer: tensor '" + name + "': byte size overflows 64 bits");
    }
  }
  return bytes;
}

}  // namespace

writer::writer(uint64_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > UINT32_MAX) {
    throw std::invalid_argument("gguf writer: alignment " + std::to_string(alignment) +
                                " is not a power of two that fits in uint32");
  }
}

void writer::set(std::string key, value v) {
  for (const kv& e : kvs_) {
    if (e.key == key) throw std::invalid_argument("gguf writer: duplicate key '" + key + "'");
  }
  check_value(v, key, 0);
  if (key == detail::ALIGNMENT_KEY && (v.type != VALUE_UINT32 || v.u != alignment_)) {
    throw std::invalid_argument("gguf writer: general.alignment must be the uint32 " + std::to_string(alignment_) +
                                " given to the writer");
  }
  kvs_.push_back(kv{std::move(key), std::move(v)});
}

void writer::add_tensor(std::string name, dtype type, std::vector<int64_t> ne, const void* data, uint64_t n_bytes) {
  if (!dtype_find(type)) throw std::invalid_argument("gguf writer: tensor '" + name + "': unknown type");
  if (name.empty() || name.size() > MAX_TENSOR_NAME_BYTES) {
    throw std::invalid_argument("gguf writer: tensor name '" + name + "': expected 1 to 63 bytes");
  }
  for (const pending_tensor& t : tensors_) {
    if (t.name == name) throw std::invalid_argument("gguf writer: duplicate tensor name '" + name + "'");
  }
  uint64_t want = expected_bytes(name, type, ne);
  if (want != n_bytes) {
    throw std::invalid_argument("gguf writer: tensor '" + name + "': expected " + std::to_string(want) +
                                " bytes of " + dtype_get(type).name + " data, given " + std::to_string(n_bytes));
  }
  const auto* b = static_cast<const uint8_t*>(data);
  tensors_.push_back(pending_tensor{std::move(name), type, std::move(ne), std::vector<uint8_t>(b, b + n_bytes)});
}

std::vector<uint8_t> writer::meta_bytes(std::vector<uint64_t>* offsets, uint64_t* data_bytes) const {
  bool has_alignment = false;
  for (const kv& e : kvs_) has_alignment = has_alignment || e.key == detail::ALIGNMENT_KEY;
  bool add_alignment = !has_alignment && alignment_ != detail::DEFAULT_ALIGNMENT;
  std::vector<uint8_t> out;
  put_bytes(out, "GGUF", 4);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kvs_.size() + (add_alignment ? 1 : 0));
  for (const kv& e : kvs_) {
    put_string(out, e.key);
    put<uint32_t>(out, e.val.type);
    put_payload(out, e.val);
  }
  if (add_alignment) {
    put_string(out, detail::ALIGNMENT_KEY);
    put<uint32_t>(out, VALUE_UINT32);
    put<uint32_t>(out, static_cast<uint32_t>(alignment_));
  }
  uint64_t off = 0;
  offsets->clear();
  for (const pending_tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, t.type);
    put<uint64_t>(out, off);
    offsets->push_back(off);
    off = align_or_throw(off + t.bytes.size(), alignment_);
  }
  *data_bytes = off;
  out.resize(align_or_throw(out.size(), alignment_), 0);
  return out;
}

std::vector<uint8_t> writer::to_bytes() const {
  std::vector<uint64_t> offsets;
  uint64_t data_bytes = 0;
  std::vector<uint8_t> out = meta_bytes(&offsets, &data_bytes);
  uint64_t data_start = out.size();
  out.reserve(data_start + data_bytes);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(data_start + offsets[i], 0);
    put_bytes(out, tensors_[i].bytes.data(), tensors_[i].bytes.size());
  }
  out.resize(data_start + data_bytes, 0);
  return out;
}

namespace {

bool write_padded(FILE* f, const uint8_t* p, size_t n, size_t padded) {
  static const uint8_t zeros[256] = {};
  if (n > 0 && std::fwrite(p, 1, n, f) != n) return false;
  for (size_t left = padded - n; left > 0;) {
    size_t k = left < sizeof(zeros) ? left : sizeof(zeros);
    if (std::fwrite(zeros, 1, k, f) != k) return false;
    left -= k;
  }
  return true;
}

}  // namespace

void writer::write(const std::string& path) const {
  std::vector<uint64_t> offsets;
  uint64_t data_bytes = 0;
  std::vector<uint8_t> meta = meta_bytes(&offsets, &data_bytes);
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw input_error(tmp + ": cannot create: " + std::strerror(errno));
  bool ok = write_padded(f, meta.data(), meta.size(), meta.size());
  for (size_t i = 0; i < tensors_.size() && ok; ++i) {
    uint64_t end = i + 1 < tensors_.size() ? offsets[i + 1] : data_bytes;
    ok = write_padded(f, tensors_[i].bytes.data(), tensors_[i].bytes.size(), end - offsets[i]);
  }
  ok = (std::fflush(f) == 0) && ok;
  int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    throw input_error(tmp + ": write failed: " + std::strerror(saved));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    saved = errno;
    std::remove(tmp.c_str());
    throw input_error(path + ": cannot rename " + tmp + " into place: " + std::strerror(saved));
  }
}

}  // namespace detaudit::gguf
