// A saved sequence: its tokens and its KV cache bytes, for context::seq_save / seq_restore.
//
// Goals: a restore is bit-identical to the saved state, and a file from another model, another
// numerics mode or another cache layout is refused with a clear input_error, as is any truncated
// or altered header. Non-goals: portability to big-endian hosts; compression.
//
// Layout (little-endian):
//
//   offset  bytes  field
//   0       8      magic "DASEQKV\0"
//   8       4      version (1)
//   12      4      numerics (0 exact, 1 float, 2 reference)
//   16      64     model sha256, lower-case hex
//   80      4      n_layer
//   84      4      reserved (0)
//   88      8      cell_bytes (one position of one layer: K and V of every KV head)
//   96      8      n_tokens
//   104     8      xxh3-64 of everything after the header (tokens and cells)
//   112     4 * n_tokens                      token ids (int32)
//   ...     n_layer * n_tokens * cell_bytes   layer 0's cells by position, then layer 1's, ...
//   (end of file: nothing may follow)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/context.h"
#include "backends/kv_cache.h"

namespace detaudit::runtime {

struct seq_file_header {
  numerics_mode numerics = NUMERICS_EXACT;
  std::string model_sha256;  // 64 hex characters
  int64_t n_layer = 0;
  uint64_t cell_bytes = 0;
};

constexpr uint32_t SEQ_FILE_VERSION = 1;

// Writes a temporary file of a short name of its own in path's folder (so any name that fits the
// file system fits), then renames it to path; on failure the temporary file is removed. Throws
// input_error when the file cannot be written.
void seq_file_write(const std::string& path, const seq_file_header& h, const std::vector<int32_t>& tokens,
                    const backends::kv_cache& cache);

// Reads a file written for `want` (every header field must match); tokens must be fewer than
// n_ctx + 1 and each below n_vocab. Fills tokens and resizes cache (which has want's layout).
// Throws input_error naming the file, the field, what was expected and what was found.
void seq_file_read(const std::string& path, const seq_file_header& want, int64_t n_ctx, int64_t n_vocab,
                   std::vector<int32_t>& tokens, backends::kv_cache& cache);

}  // namespace detaudit::runtime
