// libFuzzer target for the GGUF reader. Properties checked on every input:
//   - file::from_memory either succeeds or throws input_error (any other exception or a crash is a finding);
//   - every byte of every accepted tensor lies inside the input (ASan sees the first and last byte read);
//   - an accepted file, rewritten by the writer, reads back with the same metadata and tensors.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "gguf/gguf.h"
#include "util/error.h"

using namespace detaudit::gguf;

namespace {

uint8_t touch_tensors(const file& f) {
  uint8_t acc = 0;
  for (const tensor_info& t : f.tensors()) {
    const uint8_t* p = f.tensor_data(t);
    acc = static_cast<uint8_t>(acc ^ p[0] ^ p[t.n_bytes - 1]);
    if (f.find_tensor(t.name) != &t) __builtin_trap();
  }
  for (const kv& e : f.metadata()) {
    if (f.find(e.key) != &e.val) __builtin_trap();
  }
  return acc;
}

void check_rewrite(const file& f) {
  // The format pads the metadata to the alignment, so a tensorless file that names an alignment of
  // 2^30 (a power of two in a uint32: accepted, as llama.cpp accepts it) is rewritten as a 1 GiB
  // file. That is the format, not a fault of the reader or the writer, and over the fuzzer's
  // malloc limit: such files are not rewritten.
  if (f.alignment() > (uint64_t(1) << 20)) return;
  std::vector<uint8_t> bytes;
  try {
    writer w(f.alignment());
    for (const kv& e : f.metadata()) w.set(e.key, e.val);
    for (const tensor_info& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.n_bytes);
    bytes = w.to_bytes();
  } catch (const std::invalid_argument&) {
    return;
  }
  file back = file::from_memory(std::move(bytes), "rewritten");
  if (back.metadata().size() != f.metadata().size() || back.tensors().size() != f.tensors().size()) __builtin_trap();
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const tensor_info& a = f.tensors()[i];
    const tensor_info& b = back.tensors()[i];
    if (a.name != b.name || a.ne != b.ne || a.n_bytes != b.n_bytes) __builtin_trap();
    if (std::memcmp(f.tensor_data(a), back.tensor_data(b), a.n_bytes) != 0) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    file f = file::from_memory(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
    volatile uint8_t sink = touch_tensors(f);
    (void)sink;
    check_rewrite(f);
  } catch (const detaudit::input_error&) {
  }
  return 0;
}
