#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"
#include "util/error.h"

namespace detaudit::gguf {

struct file::impl : detail::image {
  std::vector<uint8_t> owned;
  void* map = nullptr;
  size_t map_len = 0;

  impl() = default;
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;
  ~impl() {
    if (map) ::munmap(map, map_len);
  }
};

namespace {

struct fd_guard {
  int fd;
  ~fd_guard() { ::close(fd); }
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

file::file(std::unique_ptr<impl> p) : p_(std::move(p)) {}
file::file(file&&) noexcept = default;
file& file::operator=(file&&) noexcept = default;
file::~file() = default;

file file::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw input_error(path + ": cannot open: " + errno_text());
  fd_guard guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw input_error(path + ": cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) throw input_error(path + ": expected a regular file");
  auto p = std::make_unique<impl>();
  p->name = path;
  p->size = static_cast<uint64_t>(st.st_size);
  if (st.st_size > 0) {
    void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) throw input_error(path + ": cannot map " + std::to_string(st.st_size) + " bytes: " + errno_text());
    p->map = m;
    p->map_len = static_cast<size_t>(st.st_size);
    p->base = static_cast<const uint8_t*>(m);
  }
  detail::gguf_parse(*p);
  return file(std::move(p));
}

file file::from_memory(std::vector<uint8_t> bytes, const std::string& name) {
  auto p = std::make_unique<impl>();
  p->name = name;
  p->owned = std::move(bytes);
  p->base = p->owned.data();
  p->size = p->owned.size();
  detail::gguf_parse(*p);
  return file(std::move(p));
}

const std::string& file::path() const { return p_->name; }
uint32_t file::version() const { return p_->version; }
uint64_t file::size() const { return p_->size; }
uint64_t file::alignment() const { return p_->alignment; }
uint64_t file::data_offset() const { return p_->data_offset; }
const uint8_t* file::data() const { return p_->base; }
const std::vector<kv>& file::metadata() const { return p_->kvs; }
const std::vector<tensor_info>& file::tensors() const { return p_->tensors; }

const value* file::find(std::string_view key) const {
  auto it = p_->kv_index.find(key);
  return it == p_->kv_index.end() ? nullptr : &p_->kvs[it->second].val;
}

const tensor_info* file::find_tensor(std::string_view name) const {
  auto it = p_->tensor_index.find(name);
  return it == p_->tensor_index.end() ? nullptr : &p_->tensors[it->second];
}

const uint8_t* file::tensor_data(const tensor_info& t) const { return p_->base + p_->data_offset + t.offset; }

namespace {

std::string found_label(const value& v) {
  if (v.type == VALUE_ARRAY) {
    const char* e = value_type_name(v.elem_type);
    return std::string("array of ") + (e ? e : "?");
  }
  const char* n = value_type_name(v.type);
  return n ? n : "?";
}

[[noreturn]] void wrong_type(const std::string& file, std::string_view key, const char* expected, const value& v) {
  throw input_error(file + ": key '" + std::string(key) + "': expected " + expected + ", found " + found_label(v));
}

std::string key_what(const std::string& file, std::string_view key) {
  return file + ": key '" + std::string(key) + "'";
}

}  // namespace

std::string file::get_string(std::string_view key) const {
  const value* v = find(key);
  if (!v) throw input_error(key_what(p_->name, key) + ": expected a string, found no such key");
  if (v->type != VALUE_STRING) wrong_type(p_->name, key, "a string", *v);
  return v->s;
}

std::string file::get_string(std::string_view key, std::string_view dflt) const {
  return find(key) ? get_string(key) : std::string(dflt);
}

int64_t file::get_int(std::string_view key) const {
  const value* v = find(key);
  if (!v) throw input_error(key_what(p_->name, key) + ": expected an integer, found no such key");
  if (!v->is_integer()) wrong_type(p_->name, key, "an integer", *v);
  return v->as_int(key_what(p_->name, key));
}

int64_t file::get_int(std::string_view key, int64_t dflt) const { return find(key) ? get_int(key) : dflt; }

double file::get_float(std::string_view key) const {
  const value* v = find(key);
  if (!v) throw input_error(key_what(p_->name, key) + ": expected a number, found no such key");
  if (v->type != VALUE_FLOAT32 && v->type != VALUE_FLOAT64 && !v->is_integer()) {
    wrong_type(p_->name, key, "a number", *v);
  }
  return v->as_double(key_what(p_->name, key));
}

double file::get_float(std::string_view key, double dflt) const { return find(key) ? get_float(key) : dflt; }

bool file::get_bool(std::string_view key, bool dflt) const {
  const value* v = find(key);
  if (!v) return dflt;
  if (v->type != VALUE_BOOL) wrong_type(p_->name, key, "a bool", *v);
  return v->u != 0;
}

namespace {

const value& array_of(const detail::image& img, const value* v, std::string_view key, const char* expected,
                      bool (*elem_ok)(value_type)) {
  if (!v) throw input_error(key_what(img.name, key) + ": expected " + expected + ", found no such key");
  if (v->type != VALUE_ARRAY || !elem_ok(v->elem_type)) wrong_type(img.name, key, expected, *v);
  return *v;
}

bool is_int_type(value_type t) {
  value probe;
  probe.type = t;
  return probe.is_integer();
}

}  // namespace

std::vector<std::string> file::get_strings(std::string_view key) const {
  const value& a = array_of(*p_, find(key), key, "an array of string", [](value_type t) { return t == VALUE_STRING; });
  std::vector<std::string> out;
  out.reserve(a.arr.size());
  for (const value& e : a.arr) out.push_back(e.s);
  return out;
}

std::vector<float> file::get_f32s(std::string_view key) const {
  const value& a = array_of(*p_, find(key), key, "an array of float32", [](value_type t) { return t == VALUE_FLOAT32; });
  std::vector<float> out;
  out.reserve(a.arr.size());
  for (const value& e : a.arr) out.push_back(static_cast<float>(e.f));
  return out;
}

std::vector<int32_t> file::get_i32s(std::string_view key) const {
  const value& a = array_of(*p_, find(key), key, "an array of integers", is_int_type);
  std::vector<int32_t> out;
  out.reserve(a.arr.size());
  for (size_t i = 0; i < a.arr.size(); ++i) {
    int64_t x = a.arr[i].as_int(key_what(p_->name, key));
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
      throw input_error(key_what(p_->name, key) + ": element " + std::to_string(i) + ": expected an int32, found " +
                        std::to_string(x));
    }
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

}  // namespace detaudit::gguf
