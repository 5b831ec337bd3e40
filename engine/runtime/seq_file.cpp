#include "runtime/seq_file.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include <xxhash.h>

#include "util/error.h"

namespace detaudit::runtime {
namespace {

constexpr char MAGIC[8] = {'D', 'A', 'S', 'E', 'Q', 'K', 'V', '\0'};
constexpr size_t HEADER_BYTES = 112;

template <class T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}
template <class T>
T get(const std::vector<uint8_t>& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw input_error(path + ": not a usable saved sequence: " + what);
}

void expect(const std::string& path, const char* field, const std::string& want, const std::string& found) {
  if (want != found) fail(path, std::string(field) + ": expected " + want + ", found " + found);
}

// xxh3-64 of the tokens and then each layer's cells, as they are laid out in the file.
uint64_t payload_hash(const std::vector<int32_t>& tokens, const backends::kv_cache& cache) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, tokens.data(), 4 * tokens.size());
  const uint64_t bytes = cache.cell_bytes() * tokens.size();
  for (int64_t l = 0; l < cache.n_layer(); ++l) XXH3_64bits_update(st, cache.layer_bytes(l).data(), bytes);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

}  // namespace

void seq_file_write(const std::string& path, const seq_file_header& h, const std::vector<int32_t>& tokens,
                    const backends::kv_cache& cache) {
  std::vector<uint8_t> head(HEADER_BYTES, 0);
  std::memcpy(head.data(), MAGIC, 8);
  put<uint32_t>(head, 8, SEQ_FILE_VERSION);
  put<uint32_t>(head, 12, static_cast<uint32_t>(h.numerics));
  std::memcpy(head.data() + 16, h.model_sha256.data(), std::min<size_t>(64, h.model_sha256.size()));
  put<uint32_t>(head, 80, static_cast<uint32_t>(h.n_layer));
  put<uint64_t>(head, 88, h.cell_bytes);
  put<uint64_t>(head, 96, tokens.size());
  put<uint64_t>(head, 104, payload_hash(tokens, cache));
  // PATH.tmp would not fit when PATH's name is within 4 bytes of the file system's limit.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::string tmp = (dir.empty() ? std::filesystem::path(".") : dir).string() + "/.detaudit-seq-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw input_error(path + ": cannot create a temporary file beside it: " + std::strerror(errno));
  ::close(fd);
  std::error_code ec;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
    f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(4 * tokens.size()));
    const uint64_t bytes = cache.cell_bytes() * tokens.size();
    for (int64_t l = 0; l < cache.n_layer(); ++l)
      f.write(reinterpret_cast<const char*>(cache.layer_bytes(l).data()), static_cast<std::streamsize>(bytes));
    f.flush();
    if (!f) {
      std::filesystem::remove(tmp, ec);
      throw input_error(path + ": write failed");
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    throw input_error(path + ": cannot write it: " + why);
  }
}

void seq_file_read(const std::string& path, const seq_file_header& want, int64_t n_ctx, int64_t n_vocab,
                   std::vector<int32_t>& tokens, backends::kv_cache& cache) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw input_error(path + ": cannot open saved sequence");
  std::vector<uint8_t> head(HEADER_BYTES);
  f.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  if (f.gcount() != static_cast<std::streamsize>(HEADER_BYTES))
    fail(path, "header: expected " + std::to_string(HEADER_BYTES) + " bytes, found " + std::to_string(f.gcount()));
  if (std::memcmp(head.data(), MAGIC, 8) != 0) fail(path, "magic: expected \"DASEQKV\"");
  expect(path, "version", std::to_string(SEQ_FILE_VERSION), std::to_string(get<uint32_t>(head, 8)));
  const uint32_t num = get<uint32_t>(head, 12);
  expect(path, "numerics", numerics_name(want.numerics),
         num <= NUMERICS_REFERENCE ? numerics_name(static_cast<numerics_mode>(num)) : "id " + std::to_string(num));
  expect(path, "model sha256", want.model_sha256, std::string(reinterpret_cast<const char*>(head.data() + 16), 64));
  expect(path, "n_layer", std::to_string(want.n_layer), std::to_string(get<uint32_t>(head, 80)));
  expect(path, "reserved field", "0", std::to_string(get<uint32_t>(head, 84)));
  expect(path, "cell_bytes", std::to_string(want.cell_bytes), std::to_string(get<uint64_t>(head, 88)));
  const uint64_t n = get<uint64_t>(head, 96);
  if (n > static_cast<uint64_t>(n_ctx))
    fail(path, "n_tokens: expected at most n_ctx " + std::to_string(n_ctx) + ", found " + std::to_string(n));
  const uint64_t want_size = HEADER_BYTES + 4 * n + n * want.cell_bytes * static_cast<uint64_t>(want.n_layer);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec || size != want_size)
    fail(path, "file size: expected " + std::to_string(want_size) + " bytes for " + std::to_string(n) +
                   " tokens, found " + std::to_string(size));
  tokens.resize(n);
  f.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(4 * n));
  for (uint64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      fail(path, "token " + std::to_string(i) + ": id " + std::to_string(tokens[i]) + " is outside the vocabulary of " +
                     std::to_string(n_vocab));
  cache.resize(static_cast<int64_t>(n));
  for (int64_t l = 0; l < cache.n_layer(); ++l)
    f.read(reinterpret_cast<char*>(cache.layer_bytes(l).data()), static_cast<std::streamsize>(n * want.cell_bytes));
  if (!f) fail(path, "read failed");
  if (payload_hash(tokens, cache) != get<uint64_t>(head, 104))
    fail(path, "checksum: the tokens or cache bytes differ from what was saved (the file is corrupted)");
}

}  // namespace detaudit::runtime
