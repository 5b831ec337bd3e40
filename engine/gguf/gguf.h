// GGUF reader and writer.
//
// Goals: read GGUF v2 and v3 over mmap without trusting a single count in the file; reject every
// malformed file with an input_error naming the file, the byte offset / key / tensor, what was
// expected and what was found; write files llama.cpp loads.
// Non-goals: GGUF v1; interpreting metadata (model/ and tokenizer/ do that).
//
// File layout (all integers little-endian):
//
//   +-----------------+----------------+-----------------+---------------+
//   | magic "GGUF"    | version u32    | n_tensors u64   | n_kv u64      |   (v1 used u32 counts)
//   +-----------------+----------------+-----------------+---------------+
//   | n_kv x  { key: string, type: u32, value }                           |
//   +---------------------------------------------------------------------+
//   | n_tensors x { name: string, n_dims: u32, ne[n_dims]: u64,           |
//   |               type: u32, offset: u64 (relative to data start) }     |
//   +---------------------------------------------------------------------+
//   | padding to general.alignment (default 32)                           |
//   +---------------------------------------------------------------------+
//   | tensor data; each tensor starts at a multiple of the alignment      |
//   +---------------------------------------------------------------------+
//
//   string = { len: u64, bytes[len] } (not NUL-terminated)
//   array  = { elem_type: u32, count: u64, elements... } (arrays may nest)
//
// A file with no tensors may end right after the metadata (vocab-only files are not padded).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/dtype.h"

namespace detaudit::gguf {

enum value_type : uint32_t {
  VALUE_UINT8 = 0,
  VALUE_INT8 = 1,
  VALUE_UINT16 = 2,
  VALUE_INT16 = 3,
  VALUE_UINT32 = 4,
  VALUE_INT32 = 5,
  VALUE_FLOAT32 = 6,
  VALUE_BOOL = 7,
  VALUE_STRING = 8,
  VALUE_ARRAY = 9,
  VALUE_UINT64 = 10,
  VALUE_INT64 = 11,
  VALUE_FLOAT64 = 12,
};

// Returns "uint8", "string", "array", ... or nullptr for an unknown id.
const char* value_type_name(uint32_t t);

// One metadata value. Scalars live in u / i / f (by type), strings in s, arrays in arr.
struct value {
  value_type type = VALUE_UINT8;
  uint64_t u = 0;                      // UINT8/16/32/64 and BOOL (0 or 1)
  int64_t i = 0;                       // INT8/16/32/64
  double f = 0;                        // FLOAT32/64 (FLOAT32 values are exact in a double)
  std::string s;                       // STRING
  value_type elem_type = VALUE_UINT8;  // ARRAY: type of every element
  std::vector<value> arr;              // ARRAY: the elements

  static value of_u32(uint32_t v);
  static value of_i32(int32_t v);
  static value of_u64(uint64_t v);
  static value of_f32(float v);
  static value of_bool(bool v);
  static value of_string(std::string v);
  static value of_array(value_type elem_type, std::vector<value> elems);
  static value of_strings(const std::vector<std::string>& v);
  static value of_f32s(const std::vector<float>& v);
  static value of_i32s(const std::vector<int32_t>& v);

  bool is_integer() const;  // any of the 8 integer types
  // Numeric value as int64/double; throws input_error (naming `what`) if the type is not numeric
  // or the value does not fit.
  int64_t as_int(std::string_view what) const;
  double as_double(std::string_view what) const;
};

struct kv {
  std::string key;
  value val;
};

struct tensor_info {
  std::string name;
  dtype type = DTYPE_F32;
  std::vector<int64_t> ne;   // ggml order: ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;       // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t info_offset = 0;  // byte offset of this tensor's info record in the file
};

class file {
 public:
  // Maps and validates a GGUF file. Throws input_error when the file cannot be opened or mapped and
  // on any malformation. The mapping lives as long as the file object (moves keep it).
  static file open(const std::string& path);
  // Validates a GGUF image held in memory (tests, fuzzing). `name` is used in messages.
  static file from_memory(std::vector<uint8_t> bytes, const std::string& name);

  file(file&&) noexcept;
  file& operator=(file&&) noexcept;
  ~file();

  const std::string& path() const;
  uint32_t version() const;
  uint64_t size() const;            // bytes in the file
  uint64_t alignment() const;       // general.alignment or 32
  uint64_t data_offset() const;     // absolute offset of the data section
  const uint8_t* data() const;      // the whole file

  const std::vector<kv>& metadata() const;  // in file order
  const value* find(std::string_view key) const;
  // Typed getters. Without a default they throw input_error when the key is missing; with one
  // they return it. A key present with the wrong type always throws. get_int accepts any integer
  // type (and throws when a uint64 exceeds int64); get_float accepts floats and integers.
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, std::string_view dflt) const;
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t dflt) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double dflt) const;
  bool get_bool(std::string_view key, bool dflt) const;
  // Array getters: throw when missing or when an element has another type. get_i32s accepts any
  // integer element type whose values fit in int32.
  std::vector<std::string> get_strings(std::string_view key) const;
  std::vector<float> get_f32s(std::string_view key) const;
  std::vector<int32_t> get_i32s(std::string_view key) const;

  const std::vector<tensor_info>& tensors() const;
  const tensor_info* find_tensor(std::string_view name) const;
  // Pointer to a tensor's bytes inside the mapping (n_bytes long, aligned to alignment()).
  const uint8_t* tensor_data(const tensor_info& t) const;

 private:
  struct impl;
  explicit file(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

// Builds a GGUF v3 file. Metadata keys keep insertion order; tensors are written in the order added.
class writer {
 public:
  explicit writer(uint64_t alignment = 32);
  // Throws std::invalid_argument on a duplicate key, a malformed array (element types differ from
  // elem_type, nesting deeper than the reader accepts) or a general.alignment that differs from the
  // writer's. general.alignment is written automatically when the alignment is not 32.
  void set(std::string key, value v);
  // Copies n_bytes (must equal the type's row bytes times the other dims) of tensor data.
  // Throws input_error when ne[0] is not a multiple of the block size; std::invalid_argument for a
  // duplicate or empty name, a name over 63 bytes (llama.cpp's limit), 0 or > 4 dims, a dim <= 0
  // or a wrong n_bytes.
  void add_tensor(std::string name, dtype type, std::vector<int64_t> ne, const void* data, uint64_t n_bytes);
  // Serialises to bytes / to a file (written to PATH.tmp, then renamed). Throws on I/O errors.
  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;

 private:
  struct pending_tensor {
    std::string name;
    dtype type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
  };
  // Header, metadata and tensor infos padded to the alignment; fills each tensor's data offset and
  // the padded size of the data section.
  std::vector<uint8_t> meta_bytes(std::vector<uint64_t>* offsets, uint64_t* data_bytes) const;

  uint64_t alignment_;
  std::vector<kv> kvs_;
  std::vector<pending_tensor> tensors_;
};

// A string from a file for a message or a terminal: printable ASCII kept, every other byte
// (control bytes, backslash, non-ASCII) as \xHH, cut after max_chars characters ("..."). How the
// reader quotes keys and tensor names; what model strings (general.name, the tokenizer model, a
// RoPE scaling type) pass through before they are printed, so a file cannot send the terminal
// escape sequences.
std::string printable(std::string_view s, size_t max_chars = 96);

}  // namespace detaudit::gguf
