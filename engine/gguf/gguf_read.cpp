#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "gguf/gguf_internal.h"
#include "util/error.h"

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace detaudit::gguf::detail {

namespace {

// name (8) + n_dims (4) + one dimension (8) + type (4) + offset (8)
constexpr uint64_t MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8;
// key (8) + type (4) + smallest value (1)
constexpr uint64_t MIN_KV_BYTES = 8 + 4 + 1;
// All array elements of one file, nested ones included. An element costs about 100 bytes in memory
// (a gguf::value) however few it takes in the file, so this caps what metadata can make the reader
// allocate beyond the strings' own bytes at about 400 MiB. Real files hold under a million
// (vocabulary, scores, token types, merges).
constexpr uint64_t MAX_ARRAY_ELEMS = uint64_t(1) << 22;

std::string str(uint64_t v) { return std::to_string(v); }

std::string type_label(uint32_t t) {
  const char* n = value_type_name(t);
  return n ? n : "unknown type " + str(t);
}

class parser {
 public:
  explicit parser(image& img) : img_(img) {}
  void run();

 private:
  image& img_;
  uint64_t pos_ = 0;
  uint64_t n_array_elems_ = 0;  // all array elements read so far, nested ones included

  uint64_t remaining() const { return img_.size - pos_; }
  [[noreturn]] void fail(const std::string& msg) const { throw input_error(img_.name + ": " + msg); }
  static std::string describe(const char* what, const std::string& ctx) {
    return ctx.empty() ? std::string(what) : std::string(what) + " of " + ctx;
  }
  void need(uint64_t n, const char* what, const std::string& ctx) const {
    if (n > remaining()) {
      fail("unexpected end of file at offset " + str(pos_) + " while reading " + describe(what, ctx) + " (" +
           str(n) + " bytes needed, " + str(remaining()) + " left)");
    }
  }
  template <class T>
  T read(const char* what, const std::string& ctx) {
    need(sizeof(T), what, ctx);
    T v;
    std::memcpy(&v, img_.base + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what, const std::string& ctx, uint64_t max_len);
  void check_count(uint64_t count, uint64_t min_each, uint64_t count_at, const std::string& what,
                   const std::string& each);

  void read_header(uint64_t* n_tensors, uint64_t* n_kv);
  void read_kvs(uint64_t n_kv);
  value read_value(uint32_t type, uint64_t type_at, const std::string& ctx, int depth);
  value read_array(const std::string& ctx, int depth);
  void apply_alignment(const value& v, uint64_t at);
  void read_tensor_infos(uint64_t n_tensors);
  tensor_info read_tensor_info(uint64_t index);
  void size_tensor(tensor_info& t, const dtype_traits& tr, const std::string& ctx) const;
  void place_data();
  void check_overlaps() const;
};

void parser::run() {
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  read_header(&n_tensors, &n_kv);
  read_kvs(n_kv);
  read_tensor_infos(n_tensors);
  place_data();
  check_overlaps();
}

std::string parser::read_string(const char* what, const std::string& ctx, uint64_t max_len) {
  uint64_t at = pos_;
  uint64_t len = read<uint64_t>(what, ctx);
  if (len > remaining()) {
    fail("unexpected end of file at offset " + str(pos_) + " while reading " + describe(what, ctx) +
         ": a string of " + str(len) + " bytes (length at offset " + str(at) + "), but only " +
         str(remaining()) + " bytes are left");
  }
  if (len > max_len) {
    fail(describe(what, ctx) + " at offset " + str(at) + ": expected at most " + str(max_len) +
         " bytes, found a string of " + str(len) + " bytes");
  }
  std::string s(reinterpret_cast<const char*>(img_.base + pos_), static_cast<size_t>(len));
  pos_ += len;
  return s;
}

void parser::check_count(uint64_t count, uint64_t min_each, uint64_t count_at, const std::string& what,
                         const std::string& each) {
  if (count > remaining() / min_each) {
    fail("unexpected end of file at offset " + str(img_.size) + " while reading the " + each + "s after offset " +
         str(pos_) + ": " + what + " " + str(count) + " at offset " + str(count_at) + " needs at least " +
         str(min_each) + " bytes per " + each + ", but only " + str(remaining()) + " bytes are left");
  }
}

void parser::read_header(uint64_t* n_tensors, uint64_t* n_kv) {
  const std::string none;
  need(4, "the magic", none);
  if (std::memcmp(img_.base, "GGUF", 4) != 0) {
    std::string found(reinterpret_cast<const char*>(img_.base), 4);
    fail("bad magic at offset 0: expected \"GGUF\", found \"" + printable(found) + "\" (not a GGUF file)");
  }
  pos_ = 4;
  img_.version = read<uint32_t>("the version", none);
  if (img_.version != 2 && img_.version != 3) {
    uint32_t swapped = __builtin_bswap32(img_.version);
    std::string hint = img_.version == 1                ? " (GGUF v1 is obsolete; convert the file again)"
                       : (swapped == 2 || swapped == 3) ? " (a big-endian file; only little-endian is supported)"
                                                        : "";
    fail("unsupported version " + str(img_.version) + " at offset 4: expected 2 or 3" + hint);
  }
  *n_tensors = read<uint64_t>("the tensor count", none);
  *n_kv = read<uint64_t>("the metadata count", none);
  check_count(*n_kv, MIN_KV_BYTES, 16, "metadata count", "entry");
  check_count(*n_tensors, MIN_TENSOR_INFO_BYTES, 8, "tensor count", "tensor info");
}

void parser::read_kvs(uint64_t n_kv) {
  img_.kvs.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    uint64_t at = pos_;
    std::string key = read_string("the key", "metadata entry " + str(i), MAX_KEY_BYTES);
    std::string ctx = "key '" + printable(key) + "'";
    auto dup = img_.kv_index.find(key);
    if (dup != img_.kv_index.end()) {
      fail("duplicate key '" + printable(key) + "' at offset " + str(at) + ": expected unique keys, found it again "
           "after metadata entry " + str(dup->second));
    }
    uint64_t type_at = pos_;
    uint32_t type = read<uint32_t>("the value type", ctx);
    value v = read_value(type, type_at, ctx, 0);
    if (key == ALIGNMENT_KEY) apply_alignment(v, at);
    img_.kv_index.emplace(key, img_.kvs.size());
    img_.kvs.push_back(kv{std::move(key), std::move(v)});
  }
}

value parser::read_value(uint32_t type, uint64_t type_at, const std::string& ctx, int depth) {
  value v;
  switch (type) {
    case VALUE_UINT8: v.u = read<uint8_t>("a uint8 value", ctx); break;
    case VALUE_INT8: v.i = read<int8_t>("an int8 value", ctx); break;
    case VALUE_UINT16: v.u = read<uint16_t>("a uint16 value", ctx); break;
    case VALUE_INT16: v.i = read<int16_t>("an int16 value", ctx); break;
    case VALUE_UINT32: v.u = read<uint32_t>("a uint32 value", ctx); break;
    case VALUE_INT32: v.i = read<int32_t>("an int32 value", ctx); break;
    case VALUE_UINT64: v.u = read<uint64_t>("a uint64 value", ctx); break;
    case VALUE_INT64: v.i = read<int64_t>("an int64 value", ctx); break;
    case VALUE_FLOAT32: v.f = read<float>("a float32 value", ctx); break;
    case VALUE_FLOAT64: v.f = read<double>("a float64 value", ctx); break;
    case VALUE_BOOL: v.u = read<uint8_t>("a bool value", ctx) != 0 ? 1 : 0; break;
    case VALUE_STRING: v.s = read_string("a string value", ctx, std::numeric_limits<uint64_t>::max()); break;
    case VALUE_ARRAY: return read_array(ctx, depth + 1);
    default:
      fail("unknown value type " + str(type) + " at offset " + str(type_at) + " in " + ctx + ": expected 0 to 12");
  }
  v.type = static_cast<value_type>(type);
  return v;
}

value parser::read_array(const std::string& ctx, int depth) {
  if (depth > MAX_ARRAY_DEPTH) {
    fail("arrays nested too deep at offset " + str(pos_) + " in " + ctx + ": expected at most " +
         str(MAX_ARRAY_DEPTH) + " levels, found " + str(depth));
  }
  uint64_t type_at = pos_;
  uint32_t elem_type = read<uint32_t>("an array element type", ctx);
  uint64_t min_each = gguf_value_min_bytes(elem_type);
  if (min_each == 0) {
    fail("unknown array element type " + str(elem_type) + " at offset " + str(type_at) + " in " + ctx +
         ": expected 0 to 12");
  }
  uint64_t count_at = pos_;
  uint64_t count = read<uint64_t>("an array count", ctx);
  check_count(count, min_each, count_at, "array count of " + ctx, type_label(elem_type) + " element");
  n_array_elems_ += count;
  if (n_array_elems_ > MAX_ARRAY_ELEMS) {
    fail("too many array elements at offset " + str(count_at) + " in " + ctx + ": expected at most " +
         str(MAX_ARRAY_ELEMS) + " in the whole file, found " + str(n_array_elems_));
  }
  value v;
  v.type = VALUE_ARRAY;
  v.elem_type = static_cast<value_type>(elem_type);
  v.arr.reserve(count);
  for (uint64_t i = 0; i < count; ++i) v.arr.push_back(read_value(elem_type, type_at, ctx, depth));
  return v;
}

void parser::apply_alignment(const value& v, uint64_t at) {
  if (v.type != VALUE_UINT32) {
    fail(std::string(ALIGNMENT_KEY) + " at offset " + str(at) + ": expected a uint32, found " + type_label(v.type));
  }
  if (v.u == 0 || (v.u & (v.u - 1)) != 0) {
    fail(std::string(ALIGNMENT_KEY) + " at offset " + str(at) + ": expected a nonzero power of two, found " +
         str(v.u));
  }
  img_.alignment = v.u;
}

void parser::read_tensor_infos(uint64_t n_tensors) {
  check_count(n_tensors, MIN_TENSOR_INFO_BYTES, 8, "tensor count", "tensor info");
  img_.tensors.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    tensor_info t = read_tensor_info(i);
    img_.tensor_index.emplace(t.name, img_.tensors.size());
    img_.tensors.push_back(std::move(t));
  }
}

tensor_info parser::read_tensor_info(uint64_t index) {
  tensor_info t;
  t.info_offset = pos_;
  t.name = read_string("the name", "tensor " + str(index), MAX_KEY_BYTES);
  std::string ctx = "tensor '" + printable(t.name) + "'";
  auto dup = img_.tensor_index.find(t.name);
  if (dup != img_.tensor_index.end()) {
    fail("duplicate tensor name '" + printable(t.name) + "' at offset " + str(t.info_offset) +
         ": expected unique names, found it again after tensor " + str(dup->second));
  }
  uint64_t dims_at = pos_;
  uint32_t n_dims = read<uint32_t>("n_dims", ctx);
  if (n_dims == 0 || n_dims > MAX_DIMS) {
    fail(ctx + ": n_dims at offset " + str(dims_at) + ": expected 1 to " + str(MAX_DIMS) + ", found " + str(n_dims));
  }
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t at = pos_;
    auto raw = read<uint64_t>("a dimension", ctx);
    if (raw == 0 || raw > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(ctx + ": ne[" + str(d) + "] at offset " + str(at) + ": expected a dimension > 0, found " +
           std::to_string(static_cast<int64_t>(raw)));
    }
    t.ne.push_back(static_cast<int64_t>(raw));
  }
  uint64_t type_at = pos_;
  uint32_t type = read<uint32_t>("the type", ctx);
  const dtype_traits* tr = dtype_find(type);
  if (!tr) fail(ctx + ": unknown tensor type " + str(type) + " at offset " + str(type_at) + ": not a ggml type id");
  t.type = tr->type;
  uint64_t offset_at = pos_;
  t.offset = read<uint64_t>("the data offset", ctx);
  if (t.offset % img_.alignment != 0) {
    fail(ctx + ": data offset " + str(t.offset) + " at offset " + str(offset_at) + ": expected a multiple of the " +
         "alignment " + str(img_.alignment));
  }
  size_tensor(t, *tr, ctx);
  return t;
}

void parser::size_tensor(tensor_info& t, const dtype_traits& tr, const std::string& ctx) const {
  std::string shape;
  for (int64_t d : t.ne) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  int64_t n = 1;
  for (int64_t d : t.ne) {
    if (__builtin_mul_overflow(n, d, &n)) fail(ctx + ": shape [" + shape + "]: element count overflows int64");
  }
  if (t.ne[0] % tr.block_size != 0) {
    fail(ctx + ": shape [" + shape + "]: expected ne[0] to be a multiple of the " + tr.name + " block size " +
         std::to_string(tr.block_size) + ", found " + std::to_string(t.ne[0]));
  }
  uint64_t bytes = 0;
  bool overflow = __builtin_mul_overflow(static_cast<uint64_t>(t.ne[0] / tr.block_size), tr.type_size, &bytes);
  for (size_t d = 1; d < t.ne.size() && !overflow; ++d) {
    overflow = __builtin_mul_overflow(bytes, static_cast<uint64_t>(t.ne[d]), &bytes);
  }
  if (overflow) fail(ctx + ": shape [" + shape + "] of " + tr.name + ": byte size overflows 64 bits");
  t.n_elements = static_cast<uint64_t>(n);
  t.n_bytes = bytes;
}

void parser::place_data() {
  if (!gguf_align_up(pos_, img_.alignment, &img_.data_offset)) {
    fail("data section offset overflows: tensor infos end at " + str(pos_) + ", alignment " + str(img_.alignment));
  }
  uint64_t data_size = img_.size > img_.data_offset ? img_.size - img_.data_offset : 0;
  for (const tensor_info& t : img_.tensors) {
    uint64_t end = 0;
    if (__builtin_add_overflow(t.offset, t.n_bytes, &end) || end > data_size) {
      fail("unexpected end of file at offset " + str(img_.size) + " while reading the data of tensor '" +
           printable(t.name) + "' (info at offset " + str(t.info_offset) + "): expected " + str(t.n_bytes) +
           " bytes at data offset " + str(t.offset) + ", found a data section of " + str(data_size) +
           " bytes from offset " + str(img_.data_offset));
    }
  }
}

void parser::check_overlaps() const {
  std::vector<const tensor_info*> order;
  order.reserve(img_.tensors.size());
  for (const tensor_info& t : img_.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const tensor_info* a, const tensor_info* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const tensor_info& prev = *order[i - 1];
    const tensor_info& cur = *order[i];
    if (cur.offset < prev.offset + prev.n_bytes) {
      fail("tensor '" + printable(cur.name) + "' at data offset " + str(cur.offset) + " overlaps tensor '" +
           printable(prev.name) + "' (data offsets " + str(prev.offset) + " to " + str(prev.offset + prev.n_bytes) +
           "): expected disjoint tensor data");
    }
  }
}

}  // namespace

void gguf_parse(image& img) { parser(img).run(); }

}  // namespace detaudit::gguf::detail

namespace detaudit::gguf {

std::string printable(std::string_view s, size_t max_chars) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max_chars) return out + "...";
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace detaudit::gguf
